"""What the GPU classes measure of themselves on Modal, for the router and the warmers.

    record_cold_start(endpoint, load_started, load_ended, gpu_started, gpu_ended)  # in a GPU
    cold = cold_estimator(stats.get("cold:<endpoint>"))    # the router and the warmers

The ``floodway-stats`` `modal.Dict` holds, per endpoint, ``cold:<endpoint>``: the last
`COLD_SAMPLES` container starts (``{"init_s", "at"}``, written by the GPU class's
``@modal.enter(snap=False)`` hook; the lanes of an endpoint with `Route.lanes`, each a class
of its own, run one build and share these samples), and what a router measured
(`measured_record`, written by `floodway.modal.router.backend.ModalBackend` when it re-reads
the cold starts): for a batch endpoint ``service:<unit>`` (per lane: ``service:embed:short``),
its batch time (``{"batch_s", "batch_rows",
"rows_per_request", "samples"}``); for a streaming endpoint ``generation:<endpoint>``, its
`GenerationEstimator`'s fits (`generation_record`, read back by `generation_estimator`), from
which the warmers size its warm pool in tokens/s as the local pool does
(`floodway.core.generation.measured_generation`). Both readers turn the cold-start samples into
one estimate the same way (`cold_estimator`: `floodway.core.estimators.ColdStartEstimator`
with `BOOT_S` added, the prior `floodway.core.priors.COLD_START_PRIOR_S` without samples).

Modal is imported only when a sample is written to the real Dict.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from floodway.core.estimators import ColdStartEstimator
from floodway.core.generation import GenerationEstimator
from floodway.routers.decide import ServiceTime

log = logging.getLogger(__name__)

STATS_DICT = "floodway-stats"
# Scheduling and snapshot restore, which a container cannot time itself: added to the
# slowest measured start.
BOOT_S = 5.0
COLD_SAMPLES = 20             # cold-start samples kept per endpoint
# A gap this long between the snap=True and snap=False hooks means a snapshot restore.
RESTORE_GAP_S = 2.0


def cold_key(endpoint: str) -> str:
    return f"cold:{endpoint}"


def service_key(unit: str) -> str:
    """The batch time a router measured of `unit` (an endpoint, or one lane of it: a lane's
    batches are its own, ``service:embed:short``)."""
    return f"service:{unit}"


def generation_key(endpoint: str) -> str:
    return f"generation:{endpoint}"


def _line(fit: ServiceTime) -> dict[str, float]:
    return {"per_row_s": fit.per_row_s, "per_batch_s": fit.per_batch_s}


def generation_record(gen: GenerationEstimator) -> dict[str, Any] | None:
    """What a router publishes of a streaming endpoint (``generation:<endpoint>``), None
    before its first sample: the prefill fit (s per prompt token, s per prompt) and the
    decode-step fit (s per active sequence, s per step) as ``{"per_row_s",
    "per_batch_s"}``, the mean generated and prompt tokens per request, and the samples
    behind each (``{"prefill", "step", "requests"}``). The finished sequences' lengths are
    left out: the warm-pool sizing reads only the mean (`measured_generation`)."""
    if not (gen.prefills or gen.steps or gen.requests):
        return None
    model = gen.model
    return {"prefill": _line(model.prefill), "step": _line(model.step),
            "tokens_per_request": gen.tokens_per_request(),
            "prompt_tokens_per_request": gen.prompt_tokens_per_request(),
            "samples": {"prefill": len(gen.prefills), "step": len(gen.steps),
                        "requests": len(gen.requests)}}


def generation_estimator(record: Mapping[str, Any] | None = None) -> GenerationEstimator:
    """A `GenerationEstimator` that answers as the one `record` was published from (its fits
    and means, as priors with no samples of its own); None, or a field missing: the priors of
    `floodway.core.priors` for it. Raises ValueError/TypeError on a field that is not a
    number."""
    record = record or {}
    prior = GenerationEstimator()

    def line(name: str, default: ServiceTime) -> ServiceTime:
        got = record.get(name) or {}
        return ServiceTime(float(got.get("per_row_s", default.per_row_s)),
                           float(got.get("per_batch_s", default.per_batch_s)))

    return GenerationEstimator(
        line("prefill", prior.prefill_prior), line("step", prior.step_prior),
        float(record.get("tokens_per_request", prior.generated_prior)),
        float(record.get("prompt_tokens_per_request", prior.prompt_prior)))


def measured_record(ep: Any, state: Any, streaming: bool) -> tuple[str, dict[str, Any] | None]:
    """What a router publishes of endpoint `ep` for the warmers, as (key, record); the record
    is None before the first sample. `state`: the router's measurements of it (``service``, a
    `ServiceEstimator` of its batches; ``mean_rows()``, rows per request; ``generation``, a
    `GenerationEstimator` of its streams). A streaming endpoint: ``generation:<name>``,
    `generation_record`; another: ``service:<unit>`` (`ep.unit`: the endpoint, or the lane
    it serves, ``service:embed:short``), its fitted seconds per batch of ``max_batch_rows``
    rows."""
    if streaming:
        return generation_key(ep.name), generation_record(state.generation)
    svc, mbr = state.service, ep.batching.max_batch_rows
    return service_key(ep.unit), None if not svc.samples else {
        "batch_s": svc.fit.seconds(mbr), "batch_rows": mbr,
        "rows_per_request": state.mean_rows(), "samples": len(svc.samples)}


def cold_estimator(samples: Iterable[Mapping[str, Any]] | None = None) -> ColdStartEstimator:
    """The cold-start estimate of an endpoint on Modal from its ``cold:<endpoint>`` samples
    (None or empty: the prior): `BOOT_S` + the slowest of the last `COLD_SAMPLES`."""
    cold = ColdStartEstimator(boot_s=BOOT_S, samples=COLD_SAMPLES)
    cold.replace(float(s["init_s"]) for s in samples or ())
    return cold


def record_cold_start(endpoint: str, load_started: float, load_ended: float,
                      gpu_started: float, gpu_ended: float, *, kv: Any = None) -> float:
    """In a GPU container, from ``@modal.enter(snap=False)``: append this start to the
    endpoint's samples in the ``floodway-stats`` Dict (key ``cold:<endpoint>``, the last
    `COLD_SAMPLES` of ``{"init_s", "at"}``). Arguments are ``time.time()`` stamps of both
    enter hooks. Returns the init seconds recorded.

    A start restored from a memory snapshot ran only the snap=False hook now (the snap=True
    one ran at deploy time: a long gap between them); otherwise both count. `kv`: a sync
    mapping-like with ``get``/``put`` (default: the Modal Dict). Never raises: the samples
    are advisory and must not fail a container start.
    """
    restored = gpu_started - load_ended > RESTORE_GAP_S
    init_s = (gpu_ended - gpu_started) if restored else (gpu_ended - load_started)
    try:
        if kv is None:
            import modal

            kv = modal.Dict.from_name(STATS_DICT, create_if_missing=True)
        key = cold_key(endpoint)
        # Read-modify-write: two containers starting together may drop one sample; fine.
        samples = list(kv.get(key) or [])[-(COLD_SAMPLES - 1):]
        kv.put(key, [*samples, {"init_s": round(init_s, 3), "at": gpu_ended}])
    except Exception as e:  # noqa: BLE001 - see docstring
        log.warning("could not record the cold start of %s: %s: %s", endpoint,
                    type(e).__name__, e)
    return init_s


__all__ = ["BOOT_S", "COLD_SAMPLES", "STATS_DICT", "cold_estimator", "cold_key",
           "generation_estimator", "generation_key", "generation_record", "measured_record",
           "record_cold_start", "service_key"]
