"""A small Modal app for the streaming tests: two streaming endpoints that bring their own
runtime (no model), deployed against the fake control plane only.

``talk`` (async generator) yields one chunk per word of its prompt, then a last chunk with
``finish_reason``: the text-generation chunk shape. A word ``boom`` raises there; a word
``wait`` waits until the sequence is cancelled; a prompt of more than `MAX_WORDS` words is
refused before any chunk with a `fw.RequestError` naming the field, as the built-in engine
refuses a prompt too long for its context. As its generator closes it writes
``ended '<prompt>'`` (it ran to its end) or ``stopped '<prompt>'`` to the file named by
``STREAM_STOPPED_FILE``, when set. ``count`` (sync generator)
yields 0..n-1.
"""

import asyncio
import os

import floodway as fw
from floodway.deploy import to_modal

endpoints = fw.App("floodway-stream")
STOPPED_ENV = "STREAM_STOPPED_FILE"
MAX_WORDS = 6


@endpoints.endpoint(generation=fw.Generation(max_sequences=4),
                    warm=fw.WarmPool(min_containers=1, buffer_containers=0,
                                     scaledown_window_s=60, max_containers=2))
async def talk(model, prompt: str):
    words, ended = prompt.split(), False
    try:
        if len(words) > MAX_WORDS:
            raise fw.RequestError(f"prompt: {len(words)} words is more than this model "
                                  f"takes ({MAX_WORDS})", status=422, field="prompt")
        for i, word in enumerate(words):
            if word == "boom":
                raise ValueError(f"boom after {i} words")
            if word == "wait":
                await asyncio.Event().wait()        # until the sequence is cancelled
            yield {"text": word + " ", "tokens": 1}
        yield {"text": "", "tokens": 0, "finish_reason": "stop",
               "usage": {"prompt_tokens": len(words), "completion_tokens": len(words)}}
        ended = True
    finally:
        path = os.environ.get(STOPPED_ENV)
        if path:
            with open(path, "a") as f:
                f.write(f"{'ended' if ended else 'stopped'} {prompt!r}\n")


@endpoints.endpoint()
def count(model, n: int):
    yield from range(n)


app = to_modal(endpoints)
