"""The async job queue's contract: what the HTTP layer needs of it (``/v1/<endpoint>/jobs``,
``/v1/jobs/<id>``, the deadline hand-off, ``/metrics``). The local runtime
(`floodway.jobs.local.LocalJobs`) and the Modal router (`floodway.modal.jobs`)
implement it in full.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any, Protocol

from floodway.routers.admission import Priority


class Jobs(Protocol):
    """The async job queue behind ``/v1/<endpoint>/jobs`` and ``/v1/jobs/<id>``. Every
    method that may touch storage or the network is a coroutine."""

    async def submit(self, endpoint: str, inputs: list[Any], *, tenant: str,
                     priority: Priority, idempotency_key: str | None
                     ) -> tuple[dict[str, Any], bool]:
        """Persist a job before returning (wire form, created: False for an existing job
        under the same Idempotency-Key). Raises RequestError (409: same key, other body)."""
        ...

    async def adopt(self, endpoint: str, inputs: list[Any], work: Awaitable[list[Any]], *,
                    tenant: str, priority: Priority, idempotency_key: str | None
                    ) -> tuple[dict[str, Any], bool]:
        """As `submit`, for a request whose work is already under way (`Pending.adopt`):
        the job records `work`'s results instead of running the inputs again. A queue that
        cannot adopt submits the inputs as a new job."""
        ...

    async def find(self, endpoint: str, inputs: list[Any], *, tenant: str,
                   idempotency_key: str) -> dict[str, Any] | None:
        """The job stored under `idempotency_key` for this tenant (wire form), None when
        there is none. Raises RequestError (409) when it holds other inputs."""
        ...

    async def get(self, job_id: str, tenant: str) -> dict[str, Any] | None:
        """The job's wire form (``status`` "expired" answers 410), None when unknown or
        another tenant's. Raises Unavailable (503) when the queue cannot be asked now."""
        ...

    def counts(self) -> dict[str, int]:
        """Jobs by state (metrics); cheap and synchronous."""
        ...

    async def refresh(self) -> None:
        """Bring `counts` (and what else the metrics read of the queue) up to date:
        ``/metrics`` awaits it before each scrape. A read of the store, never on the
        event loop."""
        ...


__all__ = ["Jobs"]
