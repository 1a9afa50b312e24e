"""The response cache over HTTP: the request's ``Cache-Control`` and the answer's header.

    read, write = directives(request)     no-cache: not read; no-store: not written
    noted(request, lookup)                ``X-Floodway-Cache-Hits: <items from the cache>``

``Cache-Control: no-cache`` (RFC 9111 5.2.1.4: a stored response must not be used without
validating it, which this cache cannot do) bypasses the lookup; the fresh outputs are still
stored. ``no-store`` (5.2.1.5) keeps this request's outputs out of the cache; it may still be
answered from it. The header is set on every answer of a request whose endpoint's cache was
used (a 200, or an error answer that carries outputs), 0 when none came from it. The cache
itself is `floodway.cache.ResponseCache`.
"""

from __future__ import annotations

from starlette.requests import Request

from floodway.cache import Lookup
from floodway.http.middleware import notes

CACHE_HITS_HEADER = "X-Floodway-Cache-Hits"


def directives(request: Request) -> tuple[bool, bool]:
    """(read, write) for the request's ``Cache-Control`` lines: ``no-cache`` turns off the
    read, ``no-store`` the write (directive names are case-insensitive, RFC 9111 5.2)."""
    names = {d.split("=", 1)[0].strip().lower()
             for line in request.headers.getlist("cache-control") for d in line.split(",")}
    return "no-cache" not in names, "no-store" not in names


def noted(request: Request, look: Lookup) -> None:
    """Note how many of the request's items the cache answered, for every answer."""
    if look.build is not None:
        notes(request.scope).headers[CACHE_HITS_HEADER] = str(look.hits)


__all__ = ["CACHE_HITS_HEADER", "directives", "noted"]
