"""What the GPU classes measure of themselves on Modal, for the router and the warmers.

    record_cold_start(endpoint, load_started, load_ended, gpu_started, gpu_ended)  # in a GPU
    cold = cold_estimator(stats.get("cold:<endpoint>"))    # the router and the warmers

The ``floodway-stats`` `modal.Dict` holds, per endpoint, ``cold:<endpoint>``: the last
`COLD_SAMPLES` container starts (``{"init_s", "at"}``, written by the GPU class's
``@modal.enter(snap=False)`` hook), and ``service:<endpoint>``: the batch time a router
measured (``{"batch_s", "batch_rows", "rows_per_request", "samples"}``, written by
`floodway.deploy.modal_router.ModalBackend`). Both readers turn the cold-start samples into
one estimate the same way (`cold_estimator`: `floodway.core.estimators.ColdStartEstimator`
with `BOOT_S` added, the prior `floodway.core.priors.COLD_START_PRIOR_S` without samples).

Modal is imported only when a sample is written to the real Dict.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

from floodway.core.estimators import ColdStartEstimator

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


def service_key(endpoint: str) -> str:
    return f"service:{endpoint}"


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
           "record_cold_start", "service_key"]
