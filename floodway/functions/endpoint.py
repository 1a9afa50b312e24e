"""The Endpoint record: what `@app.endpoint(...)` captured about one decorated function.

An Endpoint is inert: it holds the function and its validated configuration. The App, the
build pipeline, the local runtime and the Modal deployer consume it.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from floodway.checks import unknown_keyword
from floodway.config import Batching, Build, Cache, Generation, Recycle, Route, WarmPool
from floodway.errors import ConfigError, Problem
from floodway.functions.items import (
    ITEM_TYPES,
    ArraySpec,
    ImageSpec,
    ItemTypeError,
    carries,
    check,
    spec_of,
)
from floodway.sources import HFModel, LocalModel, ModelSource, TorchModel

NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
# /v1/jobs/<id> and the OpenAI-compatible routes (floodway.http.openai) are matched first.
RESERVED_NAMES = frozenset({"models", "embeddings", "completions", "chat", "jobs"})
# Modal's GPU type names (modal.gpu docs); an optional ":N" asks for N GPUs.
MODAL_GPUS = ("T4", "L4", "A10", "A10G", "A100", "A100-40GB", "A100-80GB", "L40S",
              "H100", "H100!", "H200", "B200")
_GPU_RE = re.compile(r"^(?P<kind>[A-Za-z0-9!-]+?)(:(?P<count>[1-8]))?$")
# The keywords `@app.endpoint(...)` takes (`floodway.functions.app.App.endpoint`), and the
# config whose fields a keyword it does not take may belong to.
KEYWORDS = ("model", "name", "build", "gpu", "warm", "route", "batching",
            "gpu_memory_snapshot", "load", "generation", "cache", "recycle")
_NESTED = (("warm", WarmPool), ("route", Route), ("batching", Batching), ("build", Build),
           ("generation", Generation), ("cache", Cache), ("recycle", Recycle))


@dataclass(frozen=True)
class Endpoint:
    """One model endpoint.

    `fn(model, inputs: list[T]) -> list[R]` returns one output per input, in order; a
    streaming endpoint's `fn(model, item: T)` (a generator or async generator function) is
    called once per input and yields its output in chunks (`streaming`, `generation`). `model`
    is a `floodway.Loaded` (the built graph, opened by floodway) unless the endpoint brings
    its own runtime (`own_runtime`): then it is what `load(artifacts)` returned, or None
    when there is neither `load` nor a model source. `input_type` is T (from the annotation,
    `Annotated` metadata kept; `Any` if absent) and is what the router validates each item of
    a request's ``inputs`` against. `gpu_memory_snapshot`: on Modal, the GPU's memory is
    snapshotted too (only with `gpu`; see `floodway.modal.worker.gpu_class`). `cache`: its
    response cache (`floodway.cache`), None when off. `recycle`: when a container is drained
    and replaced (`fw.Recycle`: its worker's resident memory, its calls), None: never. `lane`:
    set only on the endpoint one lane of it is served as (`floodway.functions.lanes`), `unit`
    the key it is served under.
    """

    name: str
    fn: Callable[..., list[Any]]
    model: ModelSource | None
    build: Build
    gpu: str | None
    warm: WarmPool
    route: Route
    batching: Batching
    input_type: Any
    gpu_memory_snapshot: bool = False
    load: Callable[[Any], Any] | None = None
    generation: Generation | None = None
    cache: Cache | None = None
    lane: str | None = None
    recycle: Recycle | None = None

    @property
    def unit(self) -> str:
        """The key this endpoint (or lane of one) is served under: ``name`` or
        ``name:lane`` (`floodway.routers.lanes.unit_key`)."""
        return self.name if self.lane is None else f"{self.name}:{self.lane}"

    def __call__(self, model: Any, inputs: list[Any]) -> list[Any]:
        return self.fn(model, inputs)

    @property
    def own_runtime(self) -> bool:
        """Whether the endpoint brings its own runtime: a `load` hook, or no model source
        (floodway then builds and opens no graph)."""
        return self.load is not None or self.model is None

    @property
    def streaming(self) -> bool:
        """Whether `fn` yields chunks (a generator or async generator function): one item
        per call, its output streamed; `generation` is then its fw.Generation."""
        return is_streaming(self.fn)

    @property
    def module_file(self) -> str | None:
        return inspect.getsourcefile(self.fn)


def is_streaming(fn: object) -> bool:
    """Whether `fn` is a generator or async generator function (a streaming endpoint)."""
    return inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn)


def _input_type(fn: Callable[..., Any], out: list[Problem]) -> Any:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        out.append(Problem("function", fn, "a Python function"))
        return Any
    params = [p for p in sig.parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    streams = is_streaming(fn)
    if len(params) != 2 or len(sig.parameters) != 2:
        shape = "(model, item: T), yielding chunks" if streams else "(model, inputs: list[T])"
        out.append(Problem("function", f"{fn.__name__}{sig}",
                           f"a function of exactly two parameters: {shape}"))
        return Any
    try:
        hints = typing.get_type_hints(fn, include_extras=True)   # keep fw.Image's spec
    except ItemTypeError as e:   # e.g. fw.Array[...] misspelled under lazy annotations
        raw = getattr(fn, "__annotations__", {}).get(params[1].name)
        out.append(Problem(f"function.{params[1].name}", raw, str(e)))
        return Any
    except Exception:
        hints = {}
    ann = hints.get(params[1].name, Any)
    if ann is Any:
        return Any
    if streams:
        return _stream_item_type(ann, f"function.{params[1].name}", out)
    if typing.get_origin(ann) is list:
        args = typing.get_args(ann)
        why = check(args[0]) if args else None
        if why is not None:
            out.append(Problem(f"function.{params[1].name}", ann,
                               f"list[T], T an item type: {ITEM_TYPES} ({why})"))
            return Any
        return args[0] if args else Any
    out.append(Problem(f"function.{params[1].name}", ann,
                       "an annotation of the form list[T] (one T per input row)"))
    return Any


def _stream_item_type(ann: Any, field: str, out: list[Problem]) -> Any:
    """T of a streaming function's ``item: T``: one item per call, never a list."""
    if typing.get_origin(ann) is list:
        out.append(Problem(field, ann, "an item type T, not list[T]: a streaming endpoint "
                                       "(a function that yields) is called with one item "
                                       "per call"))
        return Any
    why = check(ann)
    if why is not None:
        out.append(Problem(field, ann, f"an item type: {ITEM_TYPES} ({why})"))
        return Any
    return ann


def _check_generation(fn: Callable[..., Any], model: object, load: object,
                      generation: object, build: object, out: list[Problem]) -> None:
    """fw.Generation only on a streaming endpoint; a graph model of a generation task
    (`floodway.tasks.FAMILIES`) only behind a streaming function."""
    from floodway.tasks import FAMILIES

    streams = is_streaming(fn)
    if generation is not None:
        if not isinstance(generation, Generation):
            out.append(Problem("generation", generation, "None or fw.Generation(...)"))
        elif not streams:
            out.append(Problem("generation", generation,
                               "None on an endpoint whose function returns its outputs: "
                               "fw.Generation is for streaming endpoints (a function that "
                               "yields chunks, one item per call)"))
        else:
            out.extend(generation.problems("generation"))
    task = getattr(model, "task", None)
    family = FAMILIES.get(task) if isinstance(task, str) else None
    if family == "generation" and load is None and not streams:
        out.append(Problem("function", getattr(fn, "__name__", fn),
                           f"a generator function fn(model, item) that yields chunks: task "
                           f"{task!r} generates (a streaming endpoint)"))
    if family == "generation" and load is None and getattr(build, "tensorrt", False) is True:
        # The engine feeds the key/value cache at every length; the TensorRT profile has no
        # shapes for those inputs yet. On a GPU, ONNX Runtime's CUDA provider runs the graph.
        out.append(Problem("build.tensorrt", True, f"False for task {task!r} (no TensorRT "
                           "profile for its key/value-cache inputs; on a GPU ONNX Runtime's "
                           "CUDA provider serves it)"))


def _check_task_items(fn: Callable[..., Any], model: object, input_type: Any,
                      out: list[Problem]) -> None:
    """The items a graph endpoint's task prepares (`floodway.tasks.FAMILIES`) against the
    function's item type: an image task takes fw.Image (its `prepare` wants decoded images,
    which only an fw.Image annotation has the container make), a text task no image or
    array (it tokenizes text)."""
    from floodway.tasks import FAMILIES

    task = getattr(model, "task", None)
    family = FAMILIES.get(task) if isinstance(task, str) else None
    if family == "image":
        ok, allowed = isinstance(spec_of(input_type), ImageSpec), "list[fw.Image]"
    elif family == "text":
        ok = not (carries(input_type, ImageSpec) or carries(input_type, ArraySpec))
        allowed = "list[str], list[tuple[str, str]] or list[Any] (text; no fw.Image, fw.Array)"
    else:
        return
    if not ok:
        params = list(inspect.signature(fn).parameters)
        field = f"function.{params[1] if len(params) > 1 else 'inputs'}"
        shown = "list[Any] (or none)" if input_type is Any else f"list[{input_type}]"
        if is_streaming(fn):
            shown = "Any (or none)" if input_type is Any else str(input_type)
        out.append(Problem(field, _Shown(shown), f"{allowed}: task {task!r} prepares "
                                                 f"{family} items"))


class _Shown(str):
    """An annotation as its text (a Problem's value is shown with repr)."""

    def __repr__(self) -> str:
        return str(self)


def _check_gpu(gpu: object, out: list[Problem]) -> None:
    if gpu is None:
        return
    m = _GPU_RE.match(gpu) if isinstance(gpu, str) else None
    if not m or m.group("kind").upper() not in {g.upper() for g in MODAL_GPUS}:
        out.append(Problem("gpu", gpu, f"None (CPU) or one of {', '.join(MODAL_GPUS)}, "
                                       "optionally with ':N' for N GPUs (1-8)"))


def _check_gpu_snapshot(value: object, gpu: object, out: list[Problem]) -> None:
    if not isinstance(value, bool):
        out.append(Problem("gpu_memory_snapshot", value, "True or False"))
    elif value and gpu is None:
        out.append(Problem("gpu_memory_snapshot", value,
                           "False on a CPU endpoint (GPU memory snapshots need gpu=...)"))


def _check_load(load: object, model: object, build: object, out: list[Problem]) -> None:
    """`load`: None, or a function of one positional parameter (the build's Artifacts); an
    endpoint with its own runtime has no graph for TensorRT to compile."""
    if load is not None:
        try:
            inspect.signature(load).bind(None)  # type: ignore[arg-type]
        except (TypeError, ValueError):   # not callable, or not with one argument
            out.append(Problem("load", load, "None, or a function load(artifacts) -> anything "
                                             "(one positional parameter)"))
    own = load is not None or model is None
    if own and isinstance(build, Build) and build.tensorrt is True:
        why = "a load= hook" if load is not None else "no model source"
        out.append(Problem("build.tensorrt", True, f"False for an endpoint with {why} "
                                                   "(floodway builds no graph for it)"))


def _check_cache(cache: object, fn: Callable[..., Any], out: list[Problem]) -> Cache | None:
    """The endpoint's response cache: `cache` None -> the default (`Cache()`, none for a
    streaming endpoint: its outputs are sampled), False -> none, a `Cache` -> itself (not
    on a streaming endpoint)."""
    streams = is_streaming(fn)
    if cache is None:
        return None if streams else Cache()
    if cache is False:
        return None
    if not isinstance(cache, Cache):
        out.append(Problem("cache", cache, "None (the default), False (off) or "
                                           "fw.Cache(...)"))
        return None
    if streams:
        out.append(Problem("cache", cache, "None or False on a streaming endpoint (a function "
                                           "that yields): its outputs are sampled, so the "
                                           "response cache serves only endpoints that return "
                                           "their outputs"))
        return None
    out.extend(cache.problems("cache"))
    return cache


def _check_lanes(fn: Callable[..., Any], route: object, warm: object,
                 out: list[Problem]) -> None:
    """Lanes only on an endpoint that returns its outputs (a streaming endpoint's sequences
    run side by side: a long one holds up no short one), and each lane's containers within
    bounds once its unset ones come from the warm pool."""
    lanes = getattr(route, "lanes", ())
    if not lanes or not isinstance(lanes, tuple):
        return
    if is_streaming(fn):
        out.append(Problem("route.lanes", lanes, "() on a streaming endpoint (a function that "
                                                 "yields): its sequences run side by side"))
    if not isinstance(warm, WarmPool):
        return
    for i, lane in enumerate(lanes):
        if lane.min_containers is not None and lane.max_containers is not None:
            continue   # the lane's own check names it
        lo = lane.min_containers if lane.min_containers is not None else warm.min_containers
        hi = lane.max_containers if lane.max_containers is not None else warm.max_containers
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            out.append(Problem(f"route.lanes[{i}].min_containers", lo,
                               f"at most the lane's max_containers ({hi}, the warm pool's "
                               "when the lane sets none)"))


def _unknown_keywords(unknown: dict[str, object], out: list[Problem]) -> None:
    """A problem per keyword the decorator does not take: the closest one it does, else the
    config field it looks like (``min_containers`` -> ``warm=fw.WarmPool(...)``)."""
    places: dict[str, list[str]] = {}
    for label, kind in _NESTED:
        for f in dataclasses.fields(kind):
            places.setdefault(f.name, []).append(f"{label}=fw.{kind.__name__}({f.name}=...)")
    elsewhere = {name: " or ".join(where) for name, where in places.items()}
    for key, value in unknown.items():
        out.append(unknown_keyword(key, value, "@app.endpoint", KEYWORDS, elsewhere))


def make_endpoint(fn: Callable[..., Any], *, name: str | None, model: object, build: object,
                  gpu: object, warm: object, route: object, batching: object,
                  gpu_memory_snapshot: object = False, load: object = None,
                  generation: object = None, cache: object = None,
                  recycle: object = None, unknown: dict[str, object] | None = None) -> Endpoint:
    """Validate everything about one definition and return its Endpoint. `unknown`: the
    keywords given to the decorator that it does not take.

    Raises ConfigError listing every problem found (not just the first).
    """
    ep_name = name if name is not None else getattr(fn, "__name__", repr(fn))
    out: list[Problem] = []
    _unknown_keywords(unknown or {}, out)
    if not isinstance(ep_name, str) or not NAME_RE.match(ep_name):
        out.append(Problem("name", ep_name,
                           "lowercase letters, digits, '-' or '_', starting with a letter, "
                           "at most 63 characters"))
    elif ep_name in RESERVED_NAMES:   # /v1/<name> would be another route
        out.append(Problem("name", ep_name, "not one of the router's own paths under /v1/ "
                                            f"({', '.join(sorted(RESERVED_NAMES))})"))
    if not callable(fn):
        out.append(Problem("function", fn, "a callable"))
        raise ConfigError(str(ep_name), out)
    typed = (("model", model, (HFModel, LocalModel, TorchModel, type(None)),
              "None, fw.HFModel(...), fw.LocalModel(...) or fw.TorchModel(...)"),
             ("build", build, (Build,), "fw.Build(...)"),
             ("warm", warm, (WarmPool,), "fw.WarmPool(...)"),
             ("route", route, (Route,), "fw.Route(...)"),
             ("batching", batching, (Batching,), "fw.Batching(...)"))
    for label, obj, kinds, allowed in typed:
        if not isinstance(obj, kinds):
            out.append(Problem(label, obj, allowed))
        elif obj is not None:
            out.extend(obj.problems(label))
    _check_gpu(gpu, out)
    _check_gpu_snapshot(gpu_memory_snapshot, gpu, out)
    _check_load(load, model, build, out)
    _check_generation(fn, model, load, generation, build, out)
    _check_lanes(fn, route, warm, out)
    if isinstance(build, Build):
        out.extend(build.task_problems(getattr(model, "task", None), gpu,
                                       load is not None or model is None))
    response_cache = _check_cache(cache, fn, out)
    if not isinstance(recycle, Recycle | None):
        out.append(Problem("recycle", recycle, "None (never) or fw.Recycle(...)"))
    elif recycle is not None:
        out.extend(recycle.problems("recycle"))
    n_problems = len(out)
    input_type = _input_type(fn, out)
    graph = load is None and model is not None
    if graph and len(out) == n_problems:   # the function's signature itself is fine
        _check_task_items(fn, model, input_type, out)
    if graph and isinstance(build, Build) and isinstance(batching, Batching) \
            and not is_streaming(fn):   # a stream's sequences are never batched here
        b_rows, e_rows = batching.max_batch_rows, build.max_batch_rows
        if isinstance(b_rows, int) and isinstance(e_rows, int) and b_rows > e_rows:
            out.append(Problem("batching.max_batch_rows", b_rows,
                               f"at most build.max_batch_rows ({e_rows}), the largest batch "
                               "the built graph is shaped for"))
    if out:
        raise ConfigError(str(ep_name), out)
    return Endpoint(name=ep_name, fn=fn, model=model, build=build, gpu=gpu, warm=warm,
                    route=route, batching=batching, input_type=input_type,
                    gpu_memory_snapshot=gpu_memory_snapshot, load=load,
                    generation=(generation or Generation()) if is_streaming(fn) else None,
                    cache=response_cache, recycle=recycle)
