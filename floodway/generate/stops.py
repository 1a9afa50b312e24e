"""Stop strings over a stream of text deltas.

`StopText` takes the detokenizer's deltas and says what may be sent now: text is cut just
before the first stop string generated (which ends the sequence), and a delta's tail that
could still become a stop string (a suffix of the text that is a prefix of one) is held back
until the next delta settles it, so a streamed client never sees text that the final answer
does not have.
"""

from __future__ import annotations

from collections.abc import Sequence


class StopText:
    def __init__(self, stops: Sequence[str] = ()):
        self.stops = tuple(s for s in stops if s)
        self.text = ""          # everything generated so far (up to a stop, once found)
        self.sent = 0           # text[:sent] was released
        self.stopped = False

    def push(self, delta: str) -> str:
        """Add `delta`; returns the text that may be released now ("" if none)."""
        if self.stopped or not delta:
            return ""
        self.text += delta
        # Every occurrence starts at or after `sent`: what came before was released only
        # once no stop string could start in it.
        hits = [i for i in (self.text.find(s, self.sent) for s in self.stops) if i >= 0]
        if hits:
            self.text = self.text[:min(hits)]
            self.stopped = True
            return self._release(len(self.text))
        return self._release(len(self.text) - self._held())

    def _held(self) -> int:
        """The length of the longest suffix of the unreleased text that is a proper prefix
        of a stop string."""
        tail = self.text[self.sent:]
        best = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(tail)), best, -1):
                if tail.endswith(s[:n]):
                    best = n
                    break
        return best

    def _release(self, upto: int) -> str:
        out = self.text[self.sent:upto]
        self.sent = max(self.sent, upto)
        return out

    def flush(self) -> str:
        """The held-back text, at the end of the sequence (it did not become a stop)."""
        return self._release(len(self.text))


__all__ = ["StopText"]
