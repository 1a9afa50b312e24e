"""The GPU class's side of a stream, offline: what ``stream(item)`` yields when the endpoint
fails."""

from __future__ import annotations

import asyncio

from floodway.modal.contract import ITEM_ERROR


def test_the_container_names_a_refused_input_as_the_local_worker_does():
    """A `RequestError` raised in the endpoint (the engine refusing a prompt too long for
    its context) ends the stream with "InputError: ...", as the local worker names it
    (`floodway.runtime.worker.error_text`); any other exception keeps its type."""
    from floodway.errors import RequestError
    from floodway.modal.worker.stream import container_chunks

    async def talk(model, prompt: str):
        yield {"text": "a", "tokens": 1}
        if prompt == "long":
            raise RequestError("prompt: 900 tokens is over the context of 512", status=422)
        raise ValueError("boom")

    async def run(prompt):
        return [c async for c in container_chunks(talk, None, prompt)]

    refused, raised = asyncio.run(run("long")), asyncio.run(run("other"))
    assert refused[1:] == [{"text": "a", "tokens": 1},
                           {ITEM_ERROR: "InputError: prompt: 900 tokens is over the context "
                                        "of 512"}]
    assert raised[-1] == {ITEM_ERROR: "ValueError: boom"}
