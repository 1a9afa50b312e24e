"""What accelerator this machine has, read without importing torch.

`detect()` asks `nvidia-smi` (name and compute capability of GPU 0, from the first
``nvidia-smi`` on ``PATH``) and, lazily, the installed TensorRT and ONNX Runtime providers. The
result stamps engines at build time and is compared with those stamps at load time
(`engine_usable`). It is cached for the process; `fresh_detect()` asks again, for a process
whose device changed since (a Modal container restored from a memory snapshot taken without
its GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class HardwareInfo:
    gpu_name: str | None = None            # e.g. "NVIDIA L4"
    compute_capability: str | None = None  # e.g. "8.9"
    tensorrt_version: str | None = None    # e.g. "10.13.0" (None: not installed)
    ort_providers: tuple[str, ...] = ("CPUExecutionProvider",)

    @property
    def has_cuda(self) -> bool:
        return self.gpu_name is not None and "CUDAExecutionProvider" in self.ort_providers

    @property
    def sm(self) -> str | None:
        """Compute capability as TensorRT's folder name: "8.9" -> "sm89"."""
        return f"sm{self.compute_capability.replace('.', '')}" if self.compute_capability else None

    @property
    def hardware_class(self) -> str:
        return f"{self.gpu_name} ({self.sm})" if self.gpu_name else "cpu"


def _nvidia_smi() -> tuple[str | None, str | None]:
    from floodway.build.prefetch import which

    exe = which("nvidia-smi")
    if not exe:
        return None, None
    import subprocess  # only here: ~5-10 ms a CPU container's cold start need not pay

    try:
        out = subprocess.run([exe, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    first = out.strip().splitlines()[0] if out.strip() else ""
    if "," not in first:
        return None, None
    name, cc = (p.strip() for p in first.rsplit(",", 1))
    return name, cc


def tensorrt_version() -> str | None:
    try:
        import tensorrt  # noqa: PLC0415 - optional, GPU machines only
    except ImportError:
        return None
    return str(tensorrt.__version__)


@lru_cache(maxsize=1)
def detect() -> HardwareInfo:
    """This machine's accelerator (see the module doc), cached for the process."""
    import onnxruntime as ort

    name, cc = _nvidia_smi()
    return HardwareInfo(gpu_name=name, compute_capability=cc,
                        tensorrt_version=tensorrt_version() if name else None,
                        ort_providers=tuple(ort.get_available_providers()))


def fresh_detect() -> HardwareInfo:
    """`detect()` asked again now, replacing the cached answer: after a memory-snapshot
    restore, the answer cached before the snapshot describes a machine without the GPU."""
    detect.cache_clear()
    return detect()


@dataclass(frozen=True)
class EngineStamp:
    """What a TensorRT engine was built for: it only runs on that TensorRT version and that
    GPU compute capability (TensorRT developer guide, "Engine compatibility")."""

    tensorrt_version: str
    compute_capability: str
    gpu_name: str


def engine_usable(stamp: EngineStamp, hw: HardwareInfo) -> tuple[bool, str]:
    """Whether an engine with `stamp` can be deserialized on `hw`, and why not.

    Pure: compares the stamp with the detected hardware; never touches the engine file.
    """
    if hw.gpu_name is None:
        return False, "no CUDA GPU on this machine"
    if hw.tensorrt_version is None:
        return False, "tensorrt is not installed"
    if stamp.tensorrt_version != hw.tensorrt_version:
        return False, (f"engine built with TensorRT {stamp.tensorrt_version}, this machine has "
                       f"{hw.tensorrt_version}")
    if stamp.compute_capability != hw.compute_capability:
        return False, (f"engine built for compute capability {stamp.compute_capability} "
                       f"({stamp.gpu_name}), this GPU is {hw.compute_capability} ({hw.gpu_name})")
    return True, "stamp matches"
