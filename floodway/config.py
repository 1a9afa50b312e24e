"""Endpoint configuration: frozen dataclasses with units in their names.

Constructing one never raises: `@app.endpoint(...)` collects the problems of every config
object (and of the combination) and raises one `ConfigError` naming the endpoint, each field,
its bad value and the allowed range. That way a definition reports all its mistakes at once.
The model sources (`HFModel`, `LocalModel`, `TorchModel`, `TensorSpec`) are defined in
`floodway.sources` and re-exported here, as are `Cache` (`floodway.config_cache`), `Lane`
(`floodway.config_lanes`) and `Recycle` (`floodway.config_recycle`); the field checks in
`floodway.checks`.

Ranges that mirror Modal come from Modal's own client checks (modal 1.x): `scaledown_window`
2..3600 s, `@modal.batched` `max_batch_size` 1..1000 and `wait_ms` 0..600000.

Where ``FLOODWAY_DEFINITION_VALIDATED`` is set, a `Window`'s cron expression and time zone are
not checked: the local pool sets it for its worker processes, whose router already validated
the same definition, because the check imports croniter and zoneinfo (~30 ms of every cold
start). Do not set it by hand.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from floodway.build.precision import DEVICE, PRECISIONS, REDUCED
from floodway.checks import Config as _Config
from floodway.checks import check_bool, check_int, check_num, is_int, is_num  # noqa: F401
from floodway.config_cache import Cache
from floodway.config_lanes import Lane, check_lanes
from floodway.config_recycle import Recycle
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


__all__ = [
    "VALIDATED_ENV", "Batching", "Build", "Cache", "Generation", "HFModel", "Lane",
    "LocalModel", "ModelSource", "Recycle",
    "Route", "TensorSpec", "TorchModel", "WarmPool", "Window",
]
