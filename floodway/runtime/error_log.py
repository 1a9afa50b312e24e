"""The server log's record of the user's code failing: the traceback a worker sends with an
item's ItemError (the endpoint function raised) or with Failed (its import or `load=` hook
raised), logged with the endpoint and the container.

Each error is logged in full the first time; the same error again (same endpoint, same
exception type raised at the same line) within `every_s` is only counted, and the next one
logged after that says how many were left out: a function failing on every item does not
flood the log. Clients never see a traceback (their answer keeps the one-line message).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

log = logging.getLogger("floodway.endpoint")

# How often one error is logged in full at most (seconds); repeats between are counted.
EVERY_S = 60.0
# The most distinct errors remembered (then forgotten all at once: each is logged again).
MAX_KINDS = 256


@dataclass
class _Seen:
    logged_s: float
    repeats: int = 0


class ErrorLog:
    """Logs tracebacks from workers, each distinct error at most once per `every_s`."""

    def __init__(self, every_s: float = EVERY_S, max_kinds: int = MAX_KINDS):
        self.every_s, self.max_kinds = every_s, max_kinds
        self._seen: dict[tuple[str, str, str], _Seen] = {}

    def report(self, endpoint: str, container: int, what: str, trace: str,
               now: float) -> bool:
        """Log `trace` (a traceback, or a one-line message) of `what` failing (``"the
        function"``, ``"its start"``) on `container` of `endpoint` at `now` (monotonic
        seconds) -> whether it was logged (False: a repeat, counted)."""
        key = (endpoint, _kind(trace), _where(trace))
        seen = self._seen.get(key)
        if seen is not None and now - seen.logged_s < self.every_s:
            seen.repeats += 1
            return False
        if seen is None and len(self._seen) >= self.max_kinds:
            self._seen.clear()
        again = ""
        if seen is not None and seen.repeats:
            again = (f"\n(the same error {seen.repeats} more time(s) since it was last logged "
                     f"{now - seen.logged_s:.0f} s ago)")
        self._seen[key] = _Seen(now)
        log.error("endpoint %r, container %s: %s raised:\n%s%s", endpoint, container, what,
                  trace.rstrip(), again)
        return True


def _kind(trace: str) -> str:
    """The exception type: the last line's text before its colon."""
    last = trace.rstrip().rpartition("\n")[2]
    return last.partition(":")[0]


def _where(trace: str) -> str:
    """Where it raised: the traceback's last ``File ..., line N`` line ("" for none)."""
    for line in reversed(trace.splitlines()):
        if line.lstrip().startswith("File "):
            return line.strip()
    return ""


# The log every container reports to (a crash-looping start is a new container each time).
ERRORS = ErrorLog()

__all__ = ["ERRORS", "EVERY_S", "MAX_KINDS", "ErrorLog"]
