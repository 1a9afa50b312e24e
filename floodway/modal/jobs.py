"""Async jobs on Modal: Modal's own queue, with the FunctionCall id as the job id.

    jobs = ModalJobs(run_job)     # run_job: the Modal function ``run_job(endpoint, inputs)``
    outputs = await run_job_rows(backend, endpoint, inputs)   # the body of ``run_job``
    await jobs.submit("embed", ["a", "b"], tenant=..., priority=..., idempotency_key=None)
        -> ({"id": "fc-...", "endpoint", "status": "queued", "created_at"}, True)
    await jobs.get("fc-...", tenant) -> wire form | None

The GPU class cannot take a whole job: its one method is ``@modal.batched`` (one row per
call) and Modal refuses any other method on a class with a batched one. So a job is spawned
on ``run_job``, a CPU function that sends the job's rows to the class with
``predict.remote.aio`` (`run_job_rows`, over a `ModalBackend`) and fails the job
when a row fails, as a local job does. ``.spawn.aio`` returns once Modal has taken the input
(https://modal.com/docs/guide/job-queue); ``FunctionCall.get(timeout=0)`` polls it: builtin
TimeoutError while it runs, the function's exception when it failed, and
``modal.exception.OutputExpiredError`` once its result is gone, 7 days after it finished
(same page; https://modal.com/docs/sdk/py/latest/modal.FunctionCall).

Job rows wait in Modal's FIFO input queue with the sync rows: unlike local jobs they do not
go through `decide()` at low priority. What Modal does not keep is in a `modal.Dict`
(``floodway-jobs``; entries live 7 days after their last use, like the results):
``("job", id)`` -> ``{"tenant", "endpoint", "created_s"}``, so that `get` answers None for
an id this router never issued or another tenant's job; ``("idem", tenant, endpoint, key)``
-> ``{"id", "body"}`` (sha256 of endpoint and inputs) for the Idempotency-Key, as in
`floodway.jobs.store`: the same key and body give the same job, another body a 409.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from floodway.errors import EndpointError, RequestError, Unavailable, failed_input
from floodway.jobs.job import body_sha256, check_key, iso_utc
from floodway.modal.kv import KV, ModalDictKV
from floodway.routers.admission import Priority

JOBS_DICT = "floodway-jobs"
# A job's rows wait in Modal's queue with no client waiting; Modal's function timeout is
# the hard stop (JOB_TIMEOUT_S, set in to_modal), this the router-side one just below it.
JOB_TIMEOUT_S = 3600
JOB_ROWS_TIMEOUT_S = JOB_TIMEOUT_S - 60
# FunctionCall ids look like "fc-01J...": anything else is answered 404 without asking Modal.
_CALL_ID_RE = re.compile(r"fc-[0-9A-Za-z]{1,64}")


def _modal_call(job_id: str) -> Any:
    import modal

    return modal.FunctionCall.from_id(job_id)


class ModalJobs:
    """The http `Jobs` on Modal (see the module doc); its methods are coroutines.

    `run_job`: the Modal function spawned per job, ``run_job(endpoint, inputs) -> outputs``.
    `dict_factory`: name -> `KV` (default: a `modal.Dict` by that name). `call_from_id`:
    job id -> FunctionCall (default ``modal.FunctionCall.from_id``). `clock`: epoch seconds.
    """

    def __init__(self, run_job: Any, *, dict_factory: Callable[[str], KV] = ModalDictKV,
                 dict_name: str = JOBS_DICT, call_from_id: Callable[[str], Any] = _modal_call,
                 clock: Callable[[], float] = time.time):
        self.run_job, self.call_from_id, self.clock = run_job, call_from_id, clock
        self._factory, self._name = dict_factory, dict_name
        self._kv: KV | None = None
        self._submitted = 0

    @property
    def kv(self) -> KV:
        if self._kv is None:       # made on first use: building the router needs no network
            self._kv = self._factory(self._name)
        return self._kv

    def _wire(self, job_id: str, record: dict[str, Any], status: str) -> dict[str, Any]:
        return {"id": job_id, "endpoint": record.get("endpoint"), "status": status,
                "created_at": iso_utc(record.get("created_s"))}

    async def submit(self, endpoint: str, inputs: list[Any], *, tenant: str,
                     priority: Priority, idempotency_key: str | None,
                     ) -> tuple[dict[str, Any], bool]:
        """Spawn the job on Modal -> (wire form, created). Raises RequestError: 400 for a
        malformed Idempotency-Key, 409 when it was used for another body. `priority` is
        not used (Modal's queue is FIFO)."""
        if idempotency_key is not None:
            check_key(idempotency_key)
        body = body_sha256(endpoint, inputs)
        scope = None if idempotency_key is None else ("idem", tenant, endpoint, idempotency_key)
        if scope is not None:
            found = await self._same_job(scope, body, tenant)
            if found is not None:
                return found, False
        call = await self.run_job.spawn.aio(endpoint, inputs)
        job_id = call.object_id
        record = {"tenant": tenant, "endpoint": endpoint, "created_s": self.clock()}
        await self.kv.put(("job", job_id), record)
        if scope is not None and not await self.kv.put(scope, {"id": job_id, "body": body},
                                                       skip_if_exists=True):
            # A concurrent submit with the same key won the race: keep its job, drop ours.
            await call.cancel.aio()
            found = await self._same_job(scope, body, tenant)
            if found is not None:
                return found, False
        self._submitted += 1
        return self._wire(job_id, record, "queued"), True

    async def adopt(self, endpoint: str, inputs: list[Any], work: Awaitable[list[Any]], *,
                    tenant: str, priority: Priority, idempotency_key: str | None
                    ) -> tuple[dict[str, Any], bool]:
        """A job cannot take over calls already under way on Modal: `work` is withdrawn
        (cancelled) and the inputs are submitted as a new job, as `submit`."""
        asyncio.ensure_future(work).cancel()
        return await self.submit(endpoint, inputs, tenant=tenant, priority=priority,
                                 idempotency_key=idempotency_key)

    async def find(self, endpoint: str, inputs: list[Any], *, tenant: str,
                   idempotency_key: str) -> dict[str, Any] | None:
        """None: a sync request's Idempotency-Key is not looked up on Modal (a retry runs
        again; ``/jobs`` still answers a repeated key with its job)."""
        return None

    async def _same_job(self, scope: tuple, body: str, tenant: str) -> dict[str, Any] | None:
        """The job already made for this Idempotency-Key scope (None: none); 409 when it
        was made for another body."""
        prior = await self.kv.get(scope)
        if prior is None:
            return None
        if prior["body"] != body:
            raise RequestError(f"Idempotency-Key {scope[-1]!r} was already used for a "
                               "different request (other inputs); use a new key for a new "
                               "request", status=409, field="Idempotency-Key")
        wire = await self.get(prior["id"], tenant)
        return wire or {"id": prior["id"], "endpoint": scope[2], "status": "expired"}

    async def get(self, job_id: str, tenant: str) -> dict[str, Any] | None:
        """The job's wire form: status ``running`` (queued or running: Modal does not tell
        them apart), ``succeeded`` with ``outputs``, ``failed`` with ``error``, or
        ``expired`` (its result is gone; the router answers 410). None for an id this
        router did not issue, or another tenant's job. Raises Unavailable when Modal
        cannot be asked now."""
        import modal

        if not _CALL_ID_RE.fullmatch(job_id):
            return None
        record = await self.kv.get(("job", job_id))
        if record is None or record.get("tenant") != tenant:
            return None
        try:
            outputs = await self.call_from_id(job_id).get.aio(timeout=0)
        except (modal.exception.OutputExpiredError, modal.exception.NotFoundError):
            return self._wire(job_id, record, "expired")
        except TimeoutError:
            return self._wire(job_id, record, "running")
        except (modal.exception.ConnectionError, modal.exception.ServiceError,
                modal.exception.InternalError, modal.exception.AuthError) as e:
            raise Unavailable(f"cannot reach Modal for job {job_id}: {type(e).__name__}: {e}",
                              retry_after_s=1.0) from e
        except Exception as e:  # noqa: BLE001 - the job's own failure, re-raised by Modal
            return {**self._wire(job_id, record, "failed"), "error": str(e)}
        return {**self._wire(job_id, record, "succeeded"), "outputs": outputs}

    def counts(self) -> dict[str, int]:
        """Jobs submitted through this router container since it started (Modal has no
        cheap count by state)."""
        return {"submitted": self._submitted}

    async def refresh(self) -> None:
        """Nothing to read: `counts` is this container's own tally."""


async def run_job_rows(backend: Any, endpoint: str, inputs: list[Any]) -> list[Any]:
    """The body of the ``run_job`` Modal function: every row through `backend` -> outputs.

    Raises EndpointError naming the first failed row when any failed (the job fails as a
    whole, as a local job does), TimeoutError past `JOB_ROWS_TIMEOUT_S`.
    """
    results = await backend.run(endpoint, inputs, timeout_s=JOB_ROWS_TIMEOUT_S, priority=0,
                                tenant="jobs")
    failed = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
    if failed:
        i, err = failed[0]
        raise EndpointError(f"{len(failed)} of {len(results)} inputs failed; first: "
                            f"{failed_input(i, err)}")
    return results


__all__ = ["JOBS_DICT", "JOB_ROWS_TIMEOUT_S", "JOB_TIMEOUT_S", "ModalJobs", "run_job_rows"]
