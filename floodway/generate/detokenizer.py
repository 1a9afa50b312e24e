"""Incremental detokenization: token ids in, text deltas out, never a broken character.

Byte-level BPE tokens (GPT-2's scheme) may end in the middle of a UTF-8 character, and some
tokenizers join tokens with spaces or merge them with their neighbours when decoded, so a
token cannot be decoded alone. `Detokenizer` decodes a short window of the latest tokens
(from `prefix` on) and emits what the window's text added beyond what it already held; a
window whose text ends in U+FFFD (the replacement character for an incomplete byte
sequence) is held back until the character completes. The approach of Hugging Face's
text-generation-inference (``decode_token``: prefix and read offsets).
"""

from __future__ import annotations

from typing import Any

REPLACEMENT = "\ufffd"


class Detokenizer:
    """Feed ids with `push`; each call returns the new text (maybe "")."""

    def __init__(self, tokenizer: Any, context: list[int] | None = None):
        self.tokenizer = tokenizer
        # The last prompt tokens give the first generated one its context (a leading space).
        self.ids: list[int] = list(context[-4:]) if context else []
        self.prefix = 0                # the window starts here ...
        self.read = len(self.ids)      # ... and its text up to here was emitted already

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def push(self, token: int) -> str:
        self.ids.append(int(token))
        before = self._decode(self.ids[self.prefix:self.read])
        text = self._decode(self.ids[self.prefix:])
        if len(text) > len(before) and not text.endswith(REPLACEMENT):
            self.prefix, self.read = self.read, len(self.ids)
            return text[len(before):]
        return ""

    def flush(self) -> str:
        """What is still held back (an incomplete character at the very end, as U+FFFD)."""
        before = self._decode(self.ids[self.prefix:self.read])
        text = self._decode(self.ids[self.prefix:])
        self.prefix = self.read = len(self.ids)
        return text[len(before):] if len(text) > len(before) else ""


__all__ = ["REPLACEMENT", "Detokenizer"]
