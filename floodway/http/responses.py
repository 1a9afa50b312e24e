"""The router's successful answers, and the per-input results they are made of.

    outputs(endpoint, inputs, results) -> list      raises EndpointError / Unavailable
    job_answer(request, wire, created)  -> 202 (new job) or 200 (existing) + Location
    prefers(request)                    -> the request's `Prefer` tokens (RFC 7240)
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse as StarletteJSONResponse

from floodway.codec import dumps
from floodway.errors import EndpointError, Unavailable, failed_input


class JSONResponse(StarletteJSONResponse):
    """Rendered with `floodway.codec.dumps` (orjson): outputs are long lists of floats."""

    def render(self, content: Any) -> bytes:
        return dumps(content)


def prefers(request: Request) -> set[str]:
    """The request's `Prefer` preferences (RFC 7240), lower-case names without their values
    or parameters, from every `Prefer` header line: ``respond-async; wait=5`` and
    ``wait=10, respond-async`` both hold ``respond-async``."""
    return {p.split(";", 1)[0].split("=", 1)[0].strip().lower()
            for line in request.headers.getlist("prefer") for p in line.split(",")}


def outputs(endpoint: str, inputs: list[Any], results: list[Any]) -> list[Any]:
    """`results` (one per input: its output or the exception that failed it alone) as the
    outputs of a 200. A bad item fails alone: raises EndpointError naming the failed items,
    with the other outputs (`outputs`, None per failed item; `item_errors`): 500, or the
    client error every failed item shares (422 "input_error" when each failed on its input,
    e.g. a prompt too long for the model; its `field` the first one's); Unavailable (503)
    when every failed item found no capacity; TimeoutError (504) when every input ran past
    its deadline. Raises EndpointError when the count of results does not match the
    inputs."""
    if len(results) != len(inputs):
        raise EndpointError(f"endpoint {endpoint!r} returned {len(results)} outputs for "
                            f"{len(inputs)} inputs")
    failed = [(i, r) for i, r in enumerate(results) if isinstance(r, BaseException)]
    if not failed:
        return results
    if all(isinstance(r, Unavailable) for _, r in failed):
        raise failed[0][1]
    if len(failed) == len(results) and all(isinstance(r, TimeoutError) for _, r in failed):
        # Every input past its deadline (a stream's first chunk, or max_stream_s): the
        # request's deadline answer (504), as a one-input request gets, not the endpoint's.
        raise failed[0][1]
    first_i, first = failed[0]
    status, kind = _client_error([r for _, r in failed])
    raise EndpointError(
        f"{len(failed)} of {len(inputs)} inputs failed; first: {failed_input(first_i, first)}",
        outputs=[None if isinstance(r, BaseException) else r for r in results],
        item_errors=[{"index": i, "message": str(r)} for i, r in failed],
        status=status, kind=kind,
        field=getattr(first, "field", None) if status < 500 else None)


def _client_error(errors: list[BaseException]) -> tuple[int, str | None]:
    """(status, kind) of a request whose items failed with `errors`: the 4xx status and
    type they all share (each an EndpointError the input was to blame for), else 500."""
    shared = {(getattr(e, "status", 500), getattr(e, "kind", None)) if
              isinstance(e, EndpointError) else (500, None) for e in errors}
    if len(shared) == 1:
        status, kind = shared.pop()
        if 400 <= status < 500:
            return status, kind
    return 500, None


def job_answer(request: Request, wire: dict[str, Any], created: bool) -> JSONResponse:
    """202 + Location for a new job, 200 for one that already existed (Idempotency-Key);
    ``Preference-Applied: respond-async`` only when the client asked for it (RFC 7240)."""
    location = f"/v1/jobs/{wire['id']}"
    headers = {"Location": location}
    if "respond-async" in prefers(request):
        headers["Preference-Applied"] = "respond-async"
    return JSONResponse({**wire, "location": location}, status_code=202 if created else 200,
                        headers=headers)


__all__ = ["JSONResponse", "job_answer", "outputs", "prefers"]
