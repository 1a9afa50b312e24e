"""The cold-start loader: built artifacts -> a `Loaded` model, without importing torch.

Order of preference (first that is present, stamped for this machine and intact):
ONNX Runtime with the CUDA provider when this machine has one, then ONNX Runtime CPU.
Before anything is deserialized the manifest is validated and every artifact's size is
checked against it (`verify="sha256"` also re-hashes); the graph's inputs must match the
manifest's io signature. Problems raise ArtifactError naming the file and what differs.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from floodway.build.fetch import sha256_file
from floodway.build.manifest import Manifest
from floodway.errors import ArtifactError
from floodway.functions.loaded import Loaded

log = logging.getLogger("floodway.loader")
ONNX_FILE = "model.onnx"
TOKENIZER_DIR = "tokenizer"


def make_tokenizer(folder: Path, max_seq_len: int):  # -> tokenizers.Tokenizer
    """A fast tokenizer from ``tokenizer.json`` that truncates at `max_seq_len` and pads."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.enable_truncation(max_length=max_seq_len)
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=pad_id if pad_id is not None else 0,
                       pad_token="[PAD]" if pad_id is not None else "<pad>")
    return tok


def read_manifest(artifact_dir: Path) -> Manifest:
    try:
        return Manifest.read(artifact_dir)
    except FileNotFoundError:
        raise ArtifactError(f"{artifact_dir} has no manifest.json (incomplete build)") from None
    except ValueError as e:
        raise ArtifactError(f"{artifact_dir}/manifest.json is invalid: {e}") from e


def verify_files(artifact_dir: Path, manifest: Manifest, *, verify: str = "size") -> None:
    """Check each artifact named by the manifest exists with its recorded size (and hash)."""
    for rel, entry in manifest.artifacts.items():
        path = artifact_dir / rel
        if not path.is_file():
            raise ArtifactError(f"{path} is missing (listed in the manifest)")
        size = path.stat().st_size
        if size != entry.bytes:
            raise ArtifactError(f"{path} has {size} bytes, the manifest says {entry.bytes} "
                                "(truncated or altered)")
        if verify == "sha256" and sha256_file(path) != entry.sha256:
            raise ArtifactError(f"{path} does not match its manifest sha256 (altered)")


def _providers() -> list[str]:
    import onnxruntime as ort

    have = ort.get_available_providers()
    return [p for p in ("CUDAExecutionProvider", "CPUExecutionProvider") if p in have]


def load(artifact_dir: str | Path, *, verify: str = "size", threads: int | None = None) -> Loaded:
    """Load a published build into a `Loaded` model. Raises ArtifactError on any mismatch.

    `threads` caps ONNX Runtime's intra-op threads (None: ``FLOODWAY_ORT_THREADS`` or ORT's
    default), so several containers on one machine do not oversubscribe its cores.
    """
    t0 = time.perf_counter()
    folder = Path(artifact_dir)
    manifest = read_manifest(folder)
    verify_files(folder, manifest, verify=verify)
    import onnxruntime as ort

    opts = ort.SessionOptions()
    threads = threads or int(os.environ.get("FLOODWAY_ORT_THREADS", "0") or 0)
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    providers = _providers()
    session = ort.InferenceSession(str(folder / ONNX_FILE), sess_options=opts,
                                   providers=providers)
    names = tuple(i.name for i in session.get_inputs())
    expected = tuple(i.name for i in manifest.io.inputs)
    if names != expected:
        raise ArtifactError(f"{folder / ONNX_FILE} takes inputs {names}, the manifest says "
                            f"{expected}")
    backend = ("onnxruntime-cuda" if session.get_providers()[0] == "CUDAExecutionProvider"
               else "onnxruntime-cpu")
    out_names = [o.name for o in session.get_outputs()]
    log.info("loaded %s from %s with %s", manifest.endpoint, folder, backend)

    def runner(feeds):
        return dict(zip(out_names, session.run(out_names, dict(feeds)), strict=True))

    tokenizer = make_tokenizer(folder / TOKENIZER_DIR, manifest.max_seq_len)
    return Loaded(backend=backend, tokenizer=tokenizer, runner=runner, input_names=names,
                  max_seq_len=manifest.max_seq_len, artifact_dir=folder, manifest=manifest,
                  timings_s={"artifact_load": time.perf_counter() - t0})
