"""The Accept rule of a streaming endpoint (`stream_mode`): q-values (q=0 is "not
acceptable"), the most specific range, wildcards (``text/*`` is SSE), and the buffered JSON
answer by default."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from floodway.errors import RequestError
from floodway.http.streaming import NDJSON, SSE, stream_mode


def mode(*accept: str) -> str | None:
    headers = [(b"accept", a.encode()) for a in accept]
    return stream_mode(Request({"type": "http", "headers": headers}))


@pytest.mark.parametrize("accept", [(), ("",), ("*/*",), ("application/json",),
                                    ("application/*",), ("application/json; charset=utf-8",)])
def test_the_default_is_the_buffered_json_answer(accept):
    assert mode(*accept) is None


@pytest.mark.parametrize(("accept", "expected"), [
    ("text/event-stream", SSE),
    ("application/x-ndjson", NDJSON),
    ("text/event-stream, application/json", SSE),      # a stream named outright
    ("text/*", SSE),
    ("text/*, */*", SSE),                              # the more specific match
    ("application/json;q=1, application/x-ndjson;q=0.1", None),
    ("application/x-ndjson, text/event-stream;q=0.9", NDJSON),
    ("text/event-stream;q=0.5, */*", None),            # JSON at q=1 beats SSE at 0.5
    ("application/json;q=0, text/event-stream", SSE),
    ("text/event-stream;q=0, */*", None),              # q=0: SSE is refused, JSON remains
    ("application/json;q=0.2, application/*;q=0.9", NDJSON),
    ("text/event-stream;q=oops", SSE),                 # a malformed q counts as 1
])
def test_the_highest_q_wins(accept, expected):
    assert mode(accept) == expected


def test_headers_given_twice_are_one_list():
    assert mode("application/json;q=0.1", "application/x-ndjson") == NDJSON


@pytest.mark.parametrize("accept", ["text/event-stream;q=0", "*/*;q=0", "text/html",
                                    "application/json;q=0, application/x-ndjson;q=0"])
def test_nothing_acceptable_is_a_406_naming_accept(accept):
    with pytest.raises(RequestError) as e:
        mode(accept)
    assert (e.value.status, e.value.field) == (406, "Accept")
