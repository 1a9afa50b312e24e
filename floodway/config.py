"""Endpoint configuration: frozen dataclasses with units in their names.

Constructing one never raises: `@app.endpoint(...)` collects the problems of every config
object (and of the combination) and raises one `ConfigError` naming the endpoint, each field,
its bad value and the allowed range. That way a definition reports all its mistakes at once.
Here: `Build`; the warm pool (`Window`, `WarmPool`); routing (`Lane`, `Route`, `Batching`);
`Generation`; the response cache (`Cache`); container recycling (`Recycle`). The model
sources (`HFModel`, `LocalModel`, `TorchModel`, `TensorSpec`) are defined in
`floodway.sources` and re-exported here; the field checks in `floodway.checks`.

Ranges that mirror Modal come from Modal's own client checks (modal 1.x): `scaledown_window`
2..3600 s, `@modal.batched` `max_batch_size` 1..1000 and `wait_ms` 0..600000.

Where ``FLOODWAY_DEFINITION_VALIDATED`` is set, a `Window`'s cron expression and time zone are
not checked: the local pool sets it for its worker processes, whose router already validated
the same definition, because the check imports croniter and zoneinfo (~30 ms of every cold
start). Do not set it by hand.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from floodway.build.precision import DEVICE, PRECISIONS, REDUCED
from floodway.checks import Config as _Config
from floodway.checks import check_bool, check_int, check_num, is_int, is_num  # noqa: F401
from floodway.errors import Problem
from floodway.routers.decide import SPILLS
from floodway.sources import HFModel, LocalModel, ModelSource, TensorSpec, TorchModel

MODAL_SCALEDOWN_MIN_S = 2
MODAL_SCALEDOWN_MAX_S = 3600
MODAL_MAX_BATCH_SIZE = 1000
MODAL_MAX_BATCH_WAIT_MS = 600_000
MAX_CONTAINERS_LIMIT = 1000
# Route.spill names: exactly the spill strategies `decide()` knows (its SPILLS table).
SPILL_TARGETS = tuple(SPILLS)
DTYPES = ("float32", "float16", "bfloat16")

VALIDATED_ENV = "FLOODWAY_DEFINITION_VALIDATED"

_is_int = is_int


# ---------------------------------------------------------------- build

@dataclass(frozen=True)
class Build(_Config):
    """What `floodway build` produces for an endpoint.

    `max_batch_rows` and `max_seq_len` bound the exported graph's dynamic axes and the
    TensorRT optimization profile; inputs longer than `max_seq_len` tokens are truncated.
    `parity_atol` is the largest absolute difference allowed between PyTorch and ONNX Runtime
    outputs at build time, on the task's own outputs (None: the task's tolerance, see
    `floodway.tasks`). `dtype` is the weights snapshot's dtype (the ONNX graph stays
    float32).

    `precision` names the precisions built besides float32 (always built: the reference and
    the fallback): "int8" (ONNX Runtime dynamic quantization, served on CPUs), "fp16" (a
    float16 graph for ONNX Runtime CUDA, and fp16 TensorRT engines), "bf16" (bf16 TensorRT
    engines; needs tensorrt=True). Each reduced artifact passes an accuracy gate against
    float32 on the task's parity cases or fails the build (`floodway.build.precision_gate`):
    embeddings by the smallest row cosine (>= `precision_min_cosine`), logits by top-1
    agreement (>= `precision_min_top1`) and the largest logit error relative to the largest
    logit (<= `precision_max_rel_err`); None takes the per-precision defaults of
    `floodway.build.precision`. `task_problems` checks the combination with the endpoint.
    """

    onnx: bool = True
    tensorrt: bool = False
    max_batch_rows: int = 64
    max_seq_len: int = 256
    opset: int = 17
    parity_atol: float | None = None
    dtype: str = "float32"
    precision: tuple[str, ...] = ("fp32",)
    precision_min_cosine: float | None = None
    precision_min_top1: float | None = None
    precision_max_rel_err: float | None = None

    def __post_init__(self) -> None:
        # Accept a list or one name for `precision`; store a tuple (hashable).
        if isinstance(self.precision, list):
            object.__setattr__(self, "precision", tuple(self.precision))
        elif isinstance(self.precision, str):
            object.__setattr__(self, "precision", (self.precision,))

    def _check(self, out: list[Problem], p: str) -> None:
        check_bool(out, f"{p}.onnx", self.onnx)
        self._check_precision(out, p)
        if self.dtype not in DTYPES:
            out.append(Problem(f"{p}.dtype", self.dtype, f"one of {', '.join(DTYPES)}"))
        check_bool(out, f"{p}.tensorrt", self.tensorrt)
        check_int(out, f"{p}.max_batch_rows", self.max_batch_rows, 1, 4096)
        check_int(out, f"{p}.max_seq_len", self.max_seq_len, 1, 8192)
        check_int(out, f"{p}.opset", self.opset, 14, 21)
        if self.parity_atol is not None:
            check_num(out, f"{p}.parity_atol", self.parity_atol, 0.0, 1.0, lo_open=True)
        if self.tensorrt is True and self.onnx is False:
            out.append(Problem(f"{p}.onnx", self.onnx,
                               "True when tensorrt=True (engines are compiled from the "
                               "ONNX graph)"))

    def _check_precision(self, out: list[Problem], p: str) -> None:
        ok = isinstance(self.precision, tuple) and len(self.precision) > 0 and all(
            v in PRECISIONS for v in self.precision) and len(set(self.precision)) == len(
            self.precision)
        if not ok:
            out.append(Problem(f"{p}.precision", self.precision,
                               f"a non-empty tuple of distinct values from {PRECISIONS}"))
            return
        for name in ("precision_min_cosine", "precision_min_top1"):
            if getattr(self, name) is not None:
                check_num(out, f"{p}.{name}", getattr(self, name), 0.0, 1.0, lo_open=True)
        if self.precision_max_rel_err is not None:
            check_num(out, f"{p}.precision_max_rel_err", self.precision_max_rel_err, 0.0,
                      10.0, lo_open=True)
        if self.onnx is False and any(v in REDUCED for v in self.precision):
            out.append(Problem(f"{p}.precision", self.precision,
                               "('fp32',) when onnx=False (reduced precisions are made from "
                               "the ONNX graph)"))
        if "fp16" in self.precision and "bf16" in self.precision:
            out.append(Problem(f"{p}.precision", self.precision,
                               "'fp16' or 'bf16', not both (a build compiles one TensorRT "
                               "engine per GPU)"))
        if "bf16" in self.precision and self.tensorrt is not True:
            out.append(Problem(f"{p}.precision", self.precision,
                               "no 'bf16' unless tensorrt=True (bf16 is a TensorRT engine "
                               "precision; ONNX Runtime's CUDA provider lacks bfloat16 "
                               "kernels for most operators)"))

    def task_problems(self, task: object, gpu: object, own_runtime: bool,
                      p: str = "build") -> list[Problem]:
        """What is wrong with `precision` for an endpoint of `task` (a task name, None for
        no model source) on `gpu` (None: CPU), with or without its own runtime."""
        from floodway.tasks import PRECISION_METRICS

        asked = [v for v in REDUCED if isinstance(self.precision, tuple)
                 and v in self.precision]
        if not asked:
            return []
        if own_runtime:
            return [Problem(f"{p}.precision", self.precision,
                            "('fp32',) for an endpoint with its own runtime (load= or no "
                            "model source): floodway builds no graph for it to reduce")]
        if task not in PRECISION_METRICS:
            return [Problem(f"{p}.precision", self.precision,
                            f"('fp32',) for task {task!r}: reduced precision is gated for "
                            f"{', '.join(PRECISION_METRICS)} only (a user's module's outputs "
                            "have no known metric; text generation keeps its cache in "
                            "float32)")]
        gpu_only = [v for v in asked if DEVICE[v] == "gpu"]
        if gpu is None and gpu_only:
            return [Problem(f"{p}.precision", self.precision,
                            f"no {', '.join(map(repr, gpu_only))} on a CPU endpoint (gpu=None):"
                            " those serve on GPUs only; 'int8' is the CPU precision")]
        return []


# ---------------------------------------------------------------- warm pools

@dataclass(frozen=True)
class Window(_Config):
    """A scheduled warm window: from each `cron` match, for `duration_s`, keep at least
    `min_containers` warm. Warming starts `lead_s` plus the measured cold start earlier, so
    the containers are ready when the window opens. `cron` is a 5-field crontab expression
    evaluated in `timezone` (IANA name)."""

    cron: str
    duration_s: float
    min_containers: int
    timezone: str = "UTC"
    lead_s: float = 60.0

    def _check(self, out: list[Problem], p: str) -> None:
        # The parent process checked cron and time zone; their imports cost a cold start.
        full = not os.environ.get(VALIDATED_ENV)
        if full:
            from croniter import croniter

            if not isinstance(self.cron, str) or len(self.cron.split()) != 5 \
                    or not croniter.is_valid(self.cron):
                out.append(Problem(f"{p}.cron", self.cron,
                                   "a 5-field crontab expression such as '55 8 * * 1-5'"))
        check_num(out, f"{p}.duration_s", self.duration_s, 0, 7 * 86400, lo_open=True)
        check_int(out, f"{p}.min_containers", self.min_containers, 0, MAX_CONTAINERS_LIMIT)
        check_num(out, f"{p}.lead_s", self.lead_s, 0, 3600)
        if full:
            try:
                from zoneinfo import ZoneInfo

                ZoneInfo(self.timezone)
            except Exception:
                out.append(Problem(f"{p}.timezone", self.timezone,
                                   "an IANA time zone such as 'UTC'"))


@dataclass(frozen=True)
class WarmPool(_Config):
    """The warm pool, with Modal's autoscaler names and meanings.

    `min_containers` stay warm even when idle; `buffer_containers` extra idle containers are kept
    on top of the busy ones while the endpoint is active (`WarmTarget.keep`); an idle container
    is stopped after `scaledown_window_s`; never more than `max_containers` (None:
    `MAX_CONTAINERS_LIMIT`). `windows` raise the floor on a schedule; `predictive` enables the
    history-based policy.
    """

    min_containers: int = 0
    buffer_containers: int = 0
    scaledown_window_s: float = 60
    max_containers: int | None = None
    windows: tuple[Window, ...] = ()
    predictive: bool = False

    def __post_init__(self) -> None:
        # Accept a list for `windows` but store a tuple so the config stays hashable.
        if isinstance(self.windows, list):
            object.__setattr__(self, "windows", tuple(self.windows))

    def _check(self, out: list[Problem], p: str) -> None:
        check_int(out, f"{p}.min_containers", self.min_containers, 0, MAX_CONTAINERS_LIMIT)
        check_int(out, f"{p}.buffer_containers", self.buffer_containers, 0, MAX_CONTAINERS_LIMIT)
        check_num(out, f"{p}.scaledown_window_s", self.scaledown_window_s,
                  MODAL_SCALEDOWN_MIN_S, MODAL_SCALEDOWN_MAX_S)
        if self.max_containers is not None:
            check_int(out, f"{p}.max_containers", self.max_containers, 1, MAX_CONTAINERS_LIMIT)
        check_bool(out, f"{p}.predictive", self.predictive)
        windows_ok = isinstance(self.windows, tuple) and all(
            isinstance(w, Window) for w in self.windows)
        if not windows_ok:
            out.append(Problem(f"{p}.windows", self.windows, "a list of fw.Window"))
            return
        for i, w in enumerate(self.windows):
            w._check(out, f"{p}.windows[{i}]")
        cap = self.max_containers
        if _is_int(cap) and cap >= 1:
            if _is_int(self.min_containers) and self.min_containers > cap:
                out.append(Problem(f"{p}.min_containers", self.min_containers,
                                   f"at most max_containers ({cap})"))
            for i, w in enumerate(self.windows):
                if _is_int(w.min_containers) and w.min_containers > cap:
                    out.append(Problem(f"{p}.windows[{i}].min_containers", w.min_containers,
                                       f"at most max_containers ({cap})"))

    @property
    def container_cap(self) -> int:
        return self.max_containers if self.max_containers is not None else MAX_CONTAINERS_LIMIT


# ---------------------------------------------------------------- request lanes

# Request lanes (`Lane`, `Route.lanes`): an endpoint's traffic split by request cost, so
# that a few expensive requests cannot hold up the cheap ones (no head-of-line blocking).
#
# A request goes to the first lane whose bounds it fits: at most `max_tokens` estimated tokens
# summed over its inputs (`floodway.routers.tokens`: UTF-8 bytes / 4 plus specials, capped at
# the build's `max_seq_len`; 1 per input that is not text) and at most `max_rows` inputs. The
# last lane has no bound: it takes the rest. Each lane is served by containers of its own
# (at least `min_containers`, at most `max_containers`; unset: the endpoint's `WarmPool`) with
# its own queue (`queue_share` of `Route.max_queue`), batcher, estimators and warm target, so
# `decide()` plans a short request against the short lane's queue and containers only: the
# fast path / slow path split of serving practice, since a batch is as slow as its longest
# input (`floodway.routers.service`: batch seconds grow with padded tokens).

LANE_NAME_RE = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")
MAX_LANES = 8


@dataclass(frozen=True)
class Lane(_Config):
    """One lane of an endpoint (see the comment above). `name`: lowercase, shown in the
    ``X-Floodway-Lane`` answer header, `/metrics` (label ``lane``) and `/readyz`.
    `max_tokens`, `max_rows`: the most a request of this lane costs (None: no bound; the
    last lane has neither). `queue_share`: its share of `Route.max_queue`, in (0, 1] (None:
    an equal part of what the lanes with a share leave). `min_containers`,
    `max_containers`: its own containers (None: the endpoint's `WarmPool` values)."""

    name: str
    max_tokens: int | None = None
    max_rows: int | None = None
    queue_share: float | None = None
    min_containers: int | None = None
    max_containers: int | None = None

    @property
    def bounded(self) -> bool:
        return self.max_tokens is not None or self.max_rows is not None

    def fits(self, tokens: int, rows: int) -> bool:
        """Whether a request of `tokens` estimated tokens and `rows` inputs is this lane's."""
        return (self.max_tokens is None or tokens <= self.max_tokens) and \
            (self.max_rows is None or rows <= self.max_rows)

    def _check(self, out: list[Problem], p: str) -> None:
        if not isinstance(self.name, str) or not LANE_NAME_RE.match(self.name):
            out.append(Problem(f"{p}.name", self.name,
                               "1-31 characters: a lowercase letter, then lowercase letters, "
                               "digits, '-' or '_'"))
        if self.max_tokens is not None:
            check_int(out, f"{p}.max_tokens", self.max_tokens, 1, 1 << 30)
        if self.max_rows is not None:
            check_int(out, f"{p}.max_rows", self.max_rows, 1, 1_000_000)
        if self.queue_share is not None:
            check_num(out, f"{p}.queue_share", self.queue_share, 0, 1, lo_open=True)
        for field in ("min_containers", "max_containers"):
            if (v := getattr(self, field)) is not None:
                check_int(out, f"{p}.{field}", v, 0 if field == "min_containers" else 1,
                          MAX_CONTAINERS_LIMIT)
        lo, hi = self.min_containers, self.max_containers
        if isinstance(lo, int) and isinstance(hi, int) and lo > hi:
            out.append(Problem(f"{p}.min_containers", lo,
                               f"at most {p}.max_containers ({hi})"))


def check_lanes(out: list[Problem], p: str, lanes: object) -> None:
    """The problems of `Route.lanes` (field path `p`): none, or 2..MAX_LANES `Lane`s with
    distinct names, every one but the last bounded, the last unbounded, queue shares that
    sum to at most 1."""
    if not isinstance(lanes, tuple) or not all(isinstance(x, Lane) for x in lanes):
        out.append(Problem(p, lanes, "a tuple of fw.Lane"))
        return
    if not lanes:
        return
    if not 2 <= len(lanes) <= MAX_LANES:
        out.append(Problem(p, lanes, f"no lanes, or 2..{MAX_LANES} of them (one lane is the "
                                     "endpoint itself)"))
    names = [lane.name for lane in lanes]
    if len(set(names)) != len(names):
        out.append(Problem(p, names, "lanes with distinct names"))
    for i, lane in enumerate(lanes):
        lane._check(out, f"{p}[{i}]")
        last = i == len(lanes) - 1
        if last and lane.bounded:
            out.append(Problem(f"{p}[{i}]", lane, "the last lane without max_tokens or "
                                                  "max_rows: it takes every other request"))
        elif not last and not lane.bounded:
            out.append(Problem(f"{p}[{i}]", lane, "a bound (max_tokens or max_rows): only "
                                                  "the last lane takes every request"))
    for i, lane in enumerate(lanes[:-1]):
        earlier = next((e for e in lanes[:i] if _covers(e, lane)), None)
        if earlier is not None:
            out.append(Problem(f"{p}[{i}]", lane, f"a lane some request can take: every "
                                                  f"request it would take fits lane "
                                                  f"{earlier.name!r} first (order lanes "
                                                  "from the tightest bounds to the widest)"))
    shares = [lane.queue_share for lane in lanes if isinstance(lane.queue_share, int | float)]
    if sum(shares) > 1 + 1e-9:
        out.append(Problem(f"{p}.queue_share", shares, "shares that sum to at most 1"))


def _covers(first: Lane, later: Lane) -> bool:
    """Whether every request `later` would take fits `first` (so `later` is never chosen)."""
    def wider(a: int | None, b: int | None) -> bool:
        return a is None or (isinstance(a, int) and isinstance(b, int) and b <= a)
    return wider(first.max_tokens, later.max_tokens) and wider(first.max_rows, later.max_rows)


def queue_shares(lanes: tuple[Lane, ...]) -> tuple[float, ...]:
    """Each lane's share of `Route.max_queue`: its own, or an equal part of what the lanes
    with a share leave (at least 0)."""
    given = sum(lane.queue_share or 0.0 for lane in lanes)
    unset = sum(1 for lane in lanes if lane.queue_share is None)
    rest = max(0.0, 1.0 - given) / unset if unset else 0.0
    return tuple(lane.queue_share if lane.queue_share is not None else rest for lane in lanes)


# ---------------------------------------------------------------- routing and batching

@dataclass(frozen=True)
class Route(_Config):
    """How the router admits a request.

    A container holds at most `max_inflight_per_container` batches at once, capped at two
    (`floodway.core.snapshot.pipeline_slots`): locally a worker runs one batch at a time and
    the router keeps at most two in its pipe, the rest queued where they can still be
    batched or dropped; on Modal that number is the class's input concurrency
    (``@modal.concurrent(max_inputs=...)``, the batches Modal runs at once per container); at
    most `max_queue` requests wait for a slot; `timeout_s` is the default deadline of a sync
    request; `spill` lists where a request goes when warm capacity cannot serve it in time,
    tried in this order (`floodway.routers.decide.SPILLS`): "cold" starts another container
    when its measured cold start meets the deadline, "async" makes the request a job (202).
    The default ("cold", "async") prefers a cold start; ("async", "cold") prefers a job and
    starts a container only for requests that cannot become one; () sheds (503).
    A request holds at most `max_inputs` items and `max_body_bytes` bytes (413 beyond).
    Each tenant (API key) may send `tenant_rate_per_s` requests per second on average with
    bursts of `tenant_burst` (token bucket; None: unlimited; 429 beyond). A container with
    work in flight and no completion for `stuck_after_s` is declared stuck and replaced; one
    not ready `start_timeout_s` after it was started (a load hook that hangs, a download that
    stalls) is killed as a failed start (on Modal: the class's ``startup_timeout``; 300 s is
    Modal's default, a function's ``timeout``).
    """

    max_inflight_per_container: int = 8
    max_queue: int = 64
    timeout_s: float = 2.0
    spill: tuple[str, ...] = ("cold", "async")
    max_inputs: int = 256
    max_body_bytes: int = 4 * 1024 * 1024
    tenant_rate_per_s: float | None = None
    tenant_burst: int = 10
    stuck_after_s: float = 60.0
    start_timeout_s: float = 300.0
    lanes: tuple[Lane, ...] = ()

    def __post_init__(self) -> None:
        for field in ("spill", "lanes"):
            if isinstance(getattr(self, field), list):
                object.__setattr__(self, field, tuple(getattr(self, field)))

    def _check(self, out: list[Problem], p: str) -> None:
        check_int(out, f"{p}.max_inflight_per_container", self.max_inflight_per_container, 1, 1024)
        check_int(out, f"{p}.max_queue", self.max_queue, 0, 1_000_000)
        check_num(out, f"{p}.timeout_s", self.timeout_s, 0, 3600, lo_open=True)
        check_int(out, f"{p}.max_inputs", self.max_inputs, 1, 1_000_000)
        check_int(out, f"{p}.max_body_bytes", self.max_body_bytes, 1024, 1 << 30)
        if self.tenant_rate_per_s is not None:
            check_num(out, f"{p}.tenant_rate_per_s", self.tenant_rate_per_s, 0, 1e6,
                      lo_open=True)
        check_int(out, f"{p}.tenant_burst", self.tenant_burst, 1, 1_000_000)
        check_num(out, f"{p}.stuck_after_s", self.stuck_after_s, 0, 86400, lo_open=True)
        check_num(out, f"{p}.start_timeout_s", self.start_timeout_s, 1, 86400)
        ok = isinstance(self.spill, tuple) and all(s in SPILL_TARGETS for s in self.spill) \
            and len(set(self.spill)) == len(self.spill)
        if not ok:
            out.append(Problem(f"{p}.spill", self.spill,
                               f"a tuple of distinct values from {SPILL_TARGETS}"))
        check_lanes(out, f"{p}.lanes", self.lanes)


@dataclass(frozen=True)
class Batching(_Config):
    """Dynamic batching: a batch holds at most `max_batch_rows` input rows and waits at most
    `wait_ms` for more after its first row arrives (mapped to `@modal.batched` on Modal).
    A text endpoint's batch also holds at most `max_batch_tokens` padded tokens (rows x the
    longest input's estimated tokens; None: `max_batch_rows` x 128, so texts of up to 128
    tokens batch by rows; the router's batcher only): `floodway.routers.tokens`.
    `token_aware` False turns that off for a text endpoint: batches cut by rows only, no
    length grouping, and the service time and `decide()` counted in rows (as for items that
    are not text; for comparisons such as benchmarks/goodput.py)."""

    max_batch_rows: int = 32
    wait_ms: float = 5
    max_batch_tokens: int | None = None   # at most 2**24 (16M tokens: no device holds more)
    token_aware: bool = True

    def _check(self, out: list[Problem], p: str) -> None:
        check_int(out, f"{p}.max_batch_rows", self.max_batch_rows, 1, MODAL_MAX_BATCH_SIZE)
        check_num(out, f"{p}.wait_ms", self.wait_ms, 0, MODAL_MAX_BATCH_WAIT_MS)
        if self.max_batch_tokens is not None:
            check_int(out, f"{p}.max_batch_tokens", self.max_batch_tokens, 1, 1 << 24)
        check_bool(out, f"{p}.token_aware", self.token_aware)


# ---------------------------------------------------------------- generation

MAX_SEQUENCES_LIMIT = 1024
MAX_NEW_TOKENS_LIMIT = 32768


@dataclass(frozen=True)
class Generation(_Config):
    """A streaming endpoint's sequences (an endpoint function that yields chunks).

    A container runs at most `max_sequences` sequences at once (its slots: each request
    input is one sequence, sent to a container on its own). `kv_cache_tokens`: the built-in
    engine's KV-cache budget in tokens (None: `max_sequences` x `Build.max_seq_len`).
    `max_new_tokens`: the default, and the cap, of a request's ``max_new_tokens``.
    The request deadline (``X-Deadline-Ms``, else `Route.timeout_s`) bounds the time to a
    sequence's first chunk; from then on it runs until it ends, at most `max_stream_s`.
    """

    max_sequences: int = 8
    kv_cache_tokens: int | None = None
    max_new_tokens: int = 256
    max_stream_s: float = 600

    def _check(self, out: list[Problem], p: str) -> None:
        check_int(out, f"{p}.max_sequences", self.max_sequences, 1, MAX_SEQUENCES_LIMIT)
        if self.kv_cache_tokens is not None:
            check_int(out, f"{p}.kv_cache_tokens", self.kv_cache_tokens, 1, 1 << 30)
        check_int(out, f"{p}.max_new_tokens", self.max_new_tokens, 1, MAX_NEW_TOKENS_LIMIT)
        check_num(out, f"{p}.max_stream_s", self.max_stream_s, 0, 86400, lo_open=True)



# ---------------------------------------------------------------- the response cache

MAX_CACHE_BYTES = 1 << 40
MAX_CACHE_TTL_S = 30 * 86400
# modal.Dict holds values of up to 100 MiB (https://modal.com/docs/reference/modal.Dict);
# a cached output is far smaller, and a large one costs more to fetch than a model may.
MAX_SHARED_ITEM_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Cache(_Config):
    """The response cache of an endpoint (`floodway.cache`): exact match per item, keyed
    by the endpoint, the key of the build serving it and the item's canonical JSON bytes.

    The router keeps at most `max_bytes` bytes of outputs (and their keys) per endpoint,
    least recently used first out, each for at most `ttl_s` seconds after it was stored.
    `shared`: on Modal, also a `modal.Dict` shared by every router container (keys hashed,
    values of at most `shared_max_item_bytes` bytes, entries older than `ttl_s` ignored);
    locally it has no effect. With API keys configured, each tenant (API key) has entries
    of its own, in both tiers: a hit, or how fast it came, would otherwise tell one tenant
    what another asked. `shared_across_tenants`: every tenant reads and writes the same
    entries, for an endpoint whose inputs are no secret (public text, a fixed catalogue);
    off by default. Passed as ``@app.endpoint(cache=fw.Cache(...))``, or
    ``cache=False`` for an endpoint whose outputs are not a function of its input (it
    samples); on by default except on streaming endpoints.
    """

    max_bytes: int = 64 * 1024 * 1024
    ttl_s: float = 3600.0
    shared: bool = False
    shared_max_item_bytes: int = 256 * 1024
    shared_across_tenants: bool = False

    def _check(self, out: list[Problem], p: str) -> None:
        check_int(out, f"{p}.max_bytes", self.max_bytes, 1024, MAX_CACHE_BYTES)
        check_num(out, f"{p}.ttl_s", self.ttl_s, 0, MAX_CACHE_TTL_S, lo_open=True)
        check_bool(out, f"{p}.shared", self.shared)
        check_bool(out, f"{p}.shared_across_tenants", self.shared_across_tenants)
        check_int(out, f"{p}.shared_max_item_bytes", self.shared_max_item_bytes, 1,
                  MAX_SHARED_ITEM_BYTES)


# ---------------------------------------------------------------- recycling

# Container recycling (`Recycle`): a container whose worker has grown past a limit is
# replaced before the machine kills it.
#
# A handler, or a library under it, that leaks (a cache that never evicts, a tokenizer's
# growing state, fragmentation of the allocator) grows its process with every call until the
# operating system's out-of-memory killer ends it, mid-batch, failing every input in flight
# (a Kubernetes container past its `resources.limits.memory` is killed the same way:
# OOMKilled). Process managers recycle such workers before that: Gunicorn's `max_requests`
# ("a simple method to help limit the damage of memory leaks") restarts a worker after so
# many requests, uWSGI's `reload-on-rss` (MiB) and Celery's `worker_max_memory_per_child`
# (KiB; the task running completes, then the worker is replaced) once its resident memory
# passes a limit. floodway does both, gracefully: the container takes no new work, its
# in-flight work finishes, and a replacement is warmed first whenever the warm pool's floor
# needs it (`floodway.runtime.recycle` decides, and its `Recycler` carries it out).

# A Python worker with floodway imported resides in tens of MiB before any model: a lower
# limit would recycle every container the moment it served.
MIN_RSS_MIB = 32.0
MAX_RSS_MIB = float(1 << 20)      # 1 TiB
MAX_REQUESTS_LIMIT = 1_000_000_000


@dataclass(frozen=True)
class Recycle(_Config):
    """When a container is recycled (drained and replaced; see the comment above).

    `max_rss_mib`: the most resident memory (RSS, MiB = 2**20 bytes) its worker process may
    hold; measured by the router every pool tick (0.5 s) from Linux's ``/proc/<pid>/statm``
    (on other systems it is not measured and only `max_requests` applies).
    `max_requests`: the most calls of the endpoint function it may answer: a batch is one
    call however many inputs it holds; a streaming endpoint's sequence is one call.
    None: no such limit; at least one is set. Passed as
    ``@app.endpoint(recycle=fw.Recycle(max_rss_mib=2048))``. A container is marked once
    its memory, or its memory projected over a cold start at its measured growth rate, is
    past `max_rss_mib`, and serves on until its replacement is ready when the floor needs
    one; it can grow past the limit by its growth during that cold start (and the calls
    already sent to it), so set `max_rss_mib` that much growth below where the machine
    would kill it. Local containers only (`floodway serve`); on Modal it has no effect yet.
    """

    max_rss_mib: float | None = None
    max_requests: int | None = None

    def _check(self, out: list[Problem], p: str) -> None:
        if self.max_rss_mib is None and self.max_requests is None:
            out.append(Problem(p, self, "at least one of max_rss_mib, max_requests set"))
        if self.max_rss_mib is not None:
            check_num(out, f"{p}.max_rss_mib", self.max_rss_mib, MIN_RSS_MIB, MAX_RSS_MIB)
        if self.max_requests is not None:
            check_int(out, f"{p}.max_requests", self.max_requests, 1, MAX_REQUESTS_LIMIT)


__all__ = [
    "VALIDATED_ENV", "Batching", "Build", "Cache", "Generation", "HFModel", "Lane",
    "LocalModel", "ModelSource", "Recycle",
    "Route", "TensorSpec", "TorchModel", "WarmPool", "Window",
]
