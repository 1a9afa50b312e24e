"""The exception tree: one base, a few leaves.

    FloodwayError
    ├── ConfigError      an endpoint definition is invalid (raised when the decorator runs)
    ├── BuildError       a build stage failed (fetch, snapshot, export, parity, publish)
    ├── ArtifactError    built artifacts are missing, incomplete or do not match their manifest
    ├── RequestError     a client request is invalid (maps to a 4xx answer)
    │   └── Unauthorized no or wrong API key (401 with WWW-Authenticate: Bearer)
    ├── Unavailable      no container can take the work now (503 with Retry-After)
    │   └── StartFailing an endpoint's containers keep failing to start (its load error)
    ├── EndpointError    the endpoint function raised or broke its contract (500; 422 when
    │                    the item failed on its input)
    └── ProtocolError    a message between the router and a worker process is malformed
"""

from __future__ import annotations

from dataclasses import dataclass


class FloodwayError(Exception):
    """Base of every error floodway raises on purpose.

    Every one pickles and unpickles to an equal error (same type, message and attributes),
    whatever its ``__init__`` takes: an error raised in a Modal container (a build on Modal)
    is pickled back to the caller, and `pickle` would otherwise call ``__init__`` with the
    message alone.
    """

    def __reduce__(self) -> tuple:
        return _rebuild, (type(self), self.args, dict(self.__dict__))


def _rebuild(cls: type[FloodwayError], args: tuple, state: dict) -> FloodwayError:
    """Unpickle a FloodwayError without calling its ``__init__`` (see `FloodwayError`)."""
    err = cls.__new__(cls)
    Exception.__init__(err, *args)
    err.__dict__.update(state)
    return err


@dataclass(frozen=True)
class Problem:
    """One thing wrong with an endpoint definition.

    `field` is dotted from the endpoint (``route.timeout_s``), `value` is what was given and
    `allowed` says what would be accepted (a range, a set, a shape).
    """

    field: str
    value: object
    allowed: str

    def describe(self, endpoint: str | None) -> str:
        return (f"{_where(endpoint)}{self.field} = {self.value!r} is not allowed; "
                f"allowed: {self.allowed}")


@dataclass(frozen=True)
class UnknownKeyword(Problem):
    """A keyword that `owner` (``fw.WarmPool``, ``@app.endpoint``) does not take, a typo:
    `field` is dotted from the endpoint (``warm.min_container``), `value` what was given,
    `allowed` the closest valid name and every valid one (`floodway.checks.unknown_keyword`)."""

    owner: str = ""

    def describe(self, endpoint: str | None) -> str:
        where, _, name = self.field.rpartition(".")
        return (f"{_where(endpoint)}{where + ': ' if where else ''}{self.owner} takes no "
                f"keyword {name!r} (given {self.value!r}); {self.allowed}")


def _where(endpoint: str | None) -> str:
    return "" if endpoint is None else f"endpoint {endpoint!r}: "


class ConfigError(FloodwayError):
    """An endpoint definition has one or more problems; all of them are listed at once.
    `endpoint` None: a config object that could not be made at all (its owner is named in
    each problem). `errors`: each endpoint's own ConfigError when this one lists several
    (`combine`: an app file's)."""

    def __init__(self, endpoint: str | None, problems: list[Problem]):
        self.endpoint = endpoint
        self.problems = list(problems)
        lines = [p.describe(endpoint) for p in self.problems]
        what = "a floodway config" if endpoint is None else f"the definition of endpoint " \
            f"{endpoint!r}"
        super().__init__("\n  ".join([f"{len(lines)} problem(s) in {what}:", *lines]))

    @property
    def errors(self) -> list[ConfigError]:
        return self.__dict__.get("_parts") or [self]

    @classmethod
    def combine(cls, errors: list[ConfigError], where: str) -> ConfigError:
        """One error listing the problems of every endpoint of `errors` (non-empty), each
        line naming its endpoint; `where`: what defines them (``app.py``)."""
        if len(errors) == 1:
            return errors[0]
        err = cls.__new__(cls)
        err.endpoint = errors[0].endpoint
        err.problems = [p for e in errors for p in e.problems]
        err._parts = list(errors)
        lines = [p.describe(e.endpoint) for e in errors for p in e.problems]
        head = f"{len(lines)} problem(s) in {len(errors)} endpoint definitions of {where}:"
        FloodwayError.__init__(err, "\n  ".join([head, *lines]))
        return err


class BuildError(FloodwayError):
    """A build stage failed; the message names the stage and what to do."""

    def __init__(self, stage: str, message: str):
        self.stage = stage
        super().__init__(f"build stage {stage!r} failed: {message}")


class ArtifactError(FloodwayError):
    """Built artifacts are missing, incomplete, or do not match their manifest."""


class RequestError(FloodwayError):
    """A client request is invalid; `status` is the HTTP status to answer with (4xx)."""

    def __init__(self, message: str, *, status: int = 400, field: str | None = None):
        self.status = status
        self.field = field
        super().__init__(message)


class Unauthorized(RequestError):
    """The request lacks an accepted API key (401).

    `error` is the RFC 6750 (section 3.1) error code, "invalid_token" when a token was sent
    but not accepted, None when none was sent. `challenge` is the WWW-Authenticate value to
    answer with. The message never repeats the credential.
    """

    def __init__(self, message: str, *, error: str | None = None):
        self.error = error
        super().__init__(message, status=401, field="Authorization")

    @property
    def challenge(self) -> str:
        extra = f', error="{self.error}"' if self.error else ""
        return f'Bearer realm="floodway"{extra}'


class Unavailable(FloodwayError):
    """No container can take the work now; retry after `retry_after_s` seconds (503)."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0):
        self.retry_after_s = retry_after_s
        super().__init__(message)


class StartFailing(Unavailable):
    """An endpoint cannot serve: its containers keep failing to start (a `load` hook that
    raises); the message names the endpoint and the last start's error. A request gets a
    503 with Retry-After (a later start may succeed); a job of it fails."""


class EndpointError(FloodwayError):
    """The endpoint function raised, or returned the wrong number of outputs (500).

    `status`: the HTTP status to answer with, 500 unless the input was to blame: 422 for an
    item that failed on its input (it did not decode, or the model refused it, e.g. a prompt
    too long for its context), 413 for output over a router limit. `field`: the input field
    to blame (``inputs[0].prompt``), when known. `kind`: the wire error type, when it is
    not the one its status gives (`floodway.http.streaming.error_kind`).
    `outputs` / `item_errors`, when set: the request's partial result (None for each failed
    item; ``{"index", "message"}`` per failed item), as a sync error answers it."""

    def __init__(self, message: str, *, outputs: list | None = None,
                 item_errors: list[dict] | None = None, status: int = 500,
                 field: str | None = None, kind: str | None = None):
        super().__init__(message)
        self.outputs, self.item_errors = outputs, item_errors
        self.status, self.field, self.kind = status, field, kind


def failed_input(index: int, error: BaseException) -> str:
    """``inputs[<index>]: <error>`` for the first failed input of a request's message; the
    error's text alone when it already names that input (an input error does)."""
    text, where = str(error), f"inputs[{index}]"
    return text if where in text else f"{where}: {text}"


class ProtocolError(FloodwayError):
    """A line between the router and a worker process is not a valid message: not JSON, not
    an object, an unknown or unexpected type, or a field missing, extra or of the wrong type.
    The message says which (`floodway.runtime.protocol`)."""
