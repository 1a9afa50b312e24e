"""The exception tree: every error survives a pickle round trip (an error raised in a Modal
container, e.g. a build on Modal, reaches the caller pickled)."""

from __future__ import annotations

import pickle

import pytest

from floodway.errors import (
    ArtifactError,
    BuildError,
    ConfigError,
    EndpointError,
    FloodwayError,
    Problem,
    ProtocolError,
    RequestError,
    StartFailing,
    Unauthorized,
    Unavailable,
)

ERRORS = [
    FloodwayError("plain"),
    ConfigError("embed", [Problem("route.timeout_s", -1, "> 0")]),
    BuildError("verify", "parity failed: max abs error 0.2 > 1e-3"),
    ArtifactError("no build of 'embed'"),
    RequestError("inputs[3]: not a string", status=422, field="inputs[3]"),
    Unauthorized("wrong key", error="invalid_token"),
    Unavailable("no container", retry_after_s=2.5),
    StartFailing("endpoint 'embed' cannot start: ...; the last: ValueError: x",
                 retry_after_s=5.0),
    EndpointError("item 1 failed", outputs=[[0.0], None],
                  item_errors=[{"index": 1, "message": "ValueError: x"}]),
    ProtocolError("not JSON"),
]


@pytest.mark.parametrize("err", ERRORS, ids=lambda e: type(e).__name__)
def test_every_error_pickles_to_an_equal_error(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err) and back.args == err.args
    assert vars(back) == vars(err)


def test_the_subclasses_are_all_covered():
    def leaves(cls):
        return {cls} | {c for sub in cls.__subclasses__() for c in leaves(sub)}

    import floodway.errors as errors

    ours = {c for c in leaves(FloodwayError) if c.__module__ == errors.__name__}
    assert ours == {type(e) for e in ERRORS}
