"""Streaming endpoints on Modal, with the real modal client against the fake control plane.

- the fake serves generator calls as Modal does for ``remote_gen`` (items in order on the
  call's data_out, an error raised mid-stream reaches the caller, a cancel stops the
  generator);
- the GPU class of a streaming endpoint, run by Modal's own container entrypoint: one input
  per sequence, its chunks on data_out, a failure as the last item, a cancelled input's
  generator closed;
- the router side (`floodway.modal.router.streams.remote_chunks`): closing the stream cancels
  the Modal call, and the container side's chunks come through unchanged.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
from modal_proto import api_pb2

# Imported here, on the main thread: the handlers below import them lazily on the fake's
# thread otherwise, and CPython 3.11 breaks when two threads compile modules at once.
import floodway.functions.items  # noqa: F401
import floodway.runtime.pending  # noqa: F401
import floodway.runtime.worker  # noqa: F401
from floodway.errors import EndpointError
from floodway.modal.contract import CALL_HEADER, ITEM_ERROR
from floodway.modal.router.streams import remote_chunks
from floodway.modal.worker.stream import container_chunks
from tests.modal.support import asgi_post, deploy_example, run_async, sse_events
from tests.modal_fake.entrypoint import Container, Failed

STREAM_APP = Path(__file__).with_name("stream_app.py")
APP = "floodway-stream"
WORDS = "the quick brown fox"


def _deploy(fake_modal) -> Any:
    return deploy_example(fake_modal, path=STREAM_APP)


# ------------------------------------------------------------ the fake's generator calls



def _serve_talk(fake_modal, talk) -> threading.Event:
    """Serve ``Talk.stream`` on the fake with the class's own stream body (the container
    side, in-process); the event is set when a stream is stopped before its end."""
    stopped = threading.Event()

    async def stream(prompt: str):
        ended = False
        try:
            async for chunk in container_chunks(talk.fn, None, prompt):
                yield chunk
            ended = True
        finally:
            if not ended:
                stopped.set()

    fake_modal.handle("Talk.stream", stream)
    return stopped

def test_remote_gen_yields_the_items_in_order_and_raises_a_failure(fake_modal):
    mod = _deploy(fake_modal)

    async def stream(prompt: str):
        for i, word in enumerate(prompt.split()):
            if word == "boom":
                raise ValueError(f"boom at {i}")
            yield {"i": i, "word": word}

    fake_modal.handle("Talk.stream", stream)
    method = mod.Talk().stream

    async def go() -> tuple[list, list, BaseException | None]:
        whole = [x async for x in method.remote_gen.aio(WORDS)]
        got, err = [], None
        try:
            async for x in method.remote_gen.aio("a b boom c"):
                got.append(x)
        except ValueError as e:
            err = e
        return whole, got, err

    whole, got, err = run_async(go())
    assert whole == [{"i": i, "word": w} for i, w in enumerate(WORDS.split())]
    assert isinstance(err, ValueError) and "boom at 2" in str(err)
    assert got == [{"i": 0, "word": "a"}, {"i": 1, "word": "b"}][:len(got)]
    # Declared as a generator method; each call is one SYNC_LEGACY input, its items on
    # data_out and GeneratorDone(4) as the finished one's output.
    talk = fake_modal.state.function("Talk.*", app=APP).definition
    assert talk.method_definitions["stream"].function_type == \
        api_pb2.Function.FUNCTION_TYPE_GENERATOR
    calls = sorted(fake_modal.state.calls.values(), key=lambda c: c.function_call_id)
    assert [c.invocation_type for c in calls] == \
        [api_pb2.FUNCTION_CALL_INVOCATION_TYPE_SYNC_LEGACY] * 2
    assert [len(c.data_out) for c in calls] == [4, 2]
    assert calls[0].inputs[0].data_format == api_pb2.DATA_FORMAT_GENERATOR_DONE


def test_closing_the_stream_cancels_the_call_and_stops_the_generator(fake_modal):
    """`remote_chunks` over the fake, with the class's own ``stream`` body as the handler
    (the container side, in-process): chunks arrive as yielded; closing the stream early
    cancels the Modal call, which stops the generator (its ``finally`` runs)."""
    mod = _deploy(fake_modal)
    talk = mod.endpoints["talk"]
    stopped = _serve_talk(fake_modal, talk)
    method = mod.Talk().stream
    seen_ids: list[str] = []

    async def go() -> tuple[list, list]:
        whole = [c async for c in remote_chunks("talk", method, WORDS)]
        first = []
        chunks = remote_chunks("talk", method, "one wait never", on_call=seen_ids.append)
        async for c in chunks:
            first.append(c)
            break
        await chunks.aclose()
        return whole, first

    whole, first = run_async(go())
    assert [c["text"] for c in whole] == [w + " " for w in WORDS.split()] + [""]
    assert whole[-1]["finish_reason"] == "stop"
    assert first == [{"text": "one ", "tokens": 1}]
    assert stopped.wait(10), "the generator was not stopped"
    calls = {c.function_call_id: c for c in fake_modal.state.calls.values()}
    [call_id] = seen_ids
    call = calls[call_id]
    assert fake_modal.run(fake_modal.servicer.until_stopped(call_id)) and call.cancelled
    assert call.inputs[0].result.status == api_pb2.GenericResult.GENERIC_STATUS_TERMINATED
    # The header carried this call's own id (modal.current_function_call_id()).
    assert len([c for c in calls.values() if not c.cancelled]) == 1


def test_a_failed_sequence_is_an_endpoint_error(fake_modal):
    mod = _deploy(fake_modal)
    talk = mod.endpoints["talk"]
    fake_modal.handle("Talk.stream", lambda prompt: container_chunks(talk.fn, None, prompt))
    method = mod.Talk().stream

    async def go() -> tuple[list, BaseException | None]:
        got: list = []
        try:
            async for c in remote_chunks("talk", method, "a b boom"):
                got.append(c)
        except EndpointError as e:
            return got, e
        return got, None

    got, err = run_async(go())
    assert [c["text"] for c in got] == ["a ", "b "]
    assert err is not None and "ValueError: boom after 2 words" in str(err)
    assert "talk" in str(err)


# ------------------------------------------------------------ the GPU class in a container


@pytest.fixture(scope="module")
def stream_store(tmp_path_factory) -> Path:
    """A store with both streaming endpoints of the stream app built (own runtime)."""
    from floodway.build.pipeline import build_endpoint
    from floodway.build.store import ArtifactStore
    from floodway.functions.discover import load_app

    root = tmp_path_factory.mktemp("stream-store")
    _, eps = load_app(str(STREAM_APP))
    for ep in eps:
        build_endpoint(ep, ArtifactStore(root))
    return root


def _stream_container(fake_modal, store: Path, tag: str, stopped: Path) -> Container:
    return Container.deployed(
        fake_modal, APP, tag, heartbeat_interval_s=0.5,
        env={"FLOODWAY_STORE": str(store), "STREAM_STOPPED_FILE": str(stopped)})


def test_the_class_streams_one_sequence_per_input(fake_modal, stream_store, tmp_path):
    """Through Modal's container entrypoint: each input's chunks go to its call's data_out
    after the call header, GeneratorDone counts them; a failing sequence ends with its
    error and fails alone; the container runs max_sequences inputs at once, unbatched; a
    cancelled input's task is cancelled, which closes the endpoint's generator."""
    _deploy(fake_modal)
    board = fake_modal.servicer.containers
    stopped = tmp_path / "stopped.txt"
    box = _stream_container(fake_modal, stream_store, "Talk.*", stopped)
    ids = box.send("stream", [(WORDS,), ("x boom y",), ("hang wait",)])
    with box:
        done = box.results(ids[:2], timeout_s=60)
        assert board.wait_until(lambda b: len(box.items(ids[2])) >= 2, 30), box.log()
        board.cancel([ids[2]])
        [cancelled] = box.results([ids[2]], timeout_s=30)
    assert box.returncode == 0 and board.task_results == [], box.log()

    assert [d.items_total for d in done] == [6, 3]
    header, *chunks = box.items(ids[0])
    assert header == {CALL_HEADER: box.call_ids[ids[0]]}
    assert [c["text"] for c in chunks] == [w + " " for w in WORDS.split()] + [""]
    assert box.items(ids[1])[1:] == [{"text": "x ", "tokens": 1},
                                     {ITEM_ERROR: "ValueError: boom after 1 words"}]
    assert cancelled == Failed("TERMINATED", "") and board.cancels_sent == [ids[2]]
    assert box.items(ids[2])[1:] == [{"text": "hang ", "tokens": 1}]
    assert "stopped 'hang wait'" in stopped.read_text()
    asks = [r for n, r, _ in board.calls if n == "FunctionGetInputs"]
    assert {(r.input_concurrency, r.batch_max_size) for r in asks} == {(4, 0)}
    assert len(board.batches) == 3 and {len(b) for b in board.batches} == {1}


def test_a_sync_generator_endpoint_streams_from_a_thread(fake_modal, stream_store, tmp_path):
    _deploy(fake_modal)
    box = _stream_container(fake_modal, stream_store, "Count.*", tmp_path / "s.txt")
    ids = box.send("stream", [(5,), (0,), ("five",)])
    with box:
        done = box.results(ids, timeout_s=60)
    assert [d.items_total for d in done] == [6, 1, 2], box.log()
    assert box.items(ids[0])[1:] == [0, 1, 2, 3, 4]
    [bad] = box.items(ids[2])[1:]        # an item that does not decode as `n: int`
    assert bad[ITEM_ERROR].startswith("InputError"), bad
    asks = [r for n, r, _ in fake_modal.servicer.containers.calls if n == "FunctionGetInputs"]
    assert {r.input_concurrency for r in asks} == {8}      # fw.Generation's default



# ------------------------------------------------------------ the router's backend


def _backend(mod: Any) -> Any:
    from floodway.modal.kv import MemoryKV
    from floodway.modal.router.backend import ModalBackend

    return ModalBackend(mod.endpoints, {"talk": mod.Talk, "count": mod.Count}, stats=MemoryKV())


def test_the_backend_streams_events_and_combines_buffered_answers(fake_modal):
    """`ModalBackend.enqueue` of a streaming endpoint: the same StreamPending as the local
    pool's. Read as events, chunks per input in order, each input's end with its combined
    output, a failure as its own event; awaited, the combined outputs (what a spilled job
    returns); cancelled, the Modal calls still running are cancelled and their generators
    stopped."""
    from floodway.core.stream_events import ChunkEvent, ItemEnd, ItemFailed
    from floodway.functions.streams import combine

    mod = _deploy(fake_modal)
    talk = mod.endpoints["talk"]
    stopped = _serve_talk(fake_modal, talk)
    backend = _backend(mod)

    async def go() -> tuple[list, list, int, list]:
        pending = backend.enqueue("talk", [WORDS, "a boom", "x y"], timeout_s=30)
        events = []
        while (ev := await pending.next_event()) is not None:
            events.append(ev)
        buffered = await backend.enqueue("talk", [WORDS, "x y"], timeout_s=30)
        hanging = backend.enqueue("talk", ["one wait"], timeout_s=30)
        first = await hanging.next_event()
        assert backend.readiness()["sequences"]["talk"]["active"] == 1
        snap = backend.stream_snapshot("talk")     # the warm container holds the sequence
        assert snap.max_sequences == 4 and [c.active for c in snap.containers] == [1]
        n = hanging.cancel()
        await asyncio.wait(hanging.futures)    # the task ends once Modal was told
        return events, buffered, n, [first]

    events, buffered, n, first = run_async(go())
    chunks = {i: [e.data for e in events if isinstance(e, ChunkEvent) and e.index == i]
              for i in range(3)}
    ends = {e.index: e for e in events if not isinstance(e, ChunkEvent)}
    assert [c["text"] for c in chunks[0]] == [w + " " for w in WORDS.split()] + [""]
    assert isinstance(ends[0], ItemEnd) and ends[0].output == combine(chunks[0])
    assert ends[0].output["text"] == WORDS + " " and ends[0].output["finish_reason"] == "stop"
    assert isinstance(ends[1], ItemFailed) and "boom after 1 words" in str(ends[1].error)
    assert chunks[1] == [{"text": "a ", "tokens": 1}]
    for i in range(3):      # an input's end comes after its chunks
        assert events.index(ends[i]) > max((events.index(e) for e in events
                                             if isinstance(e, ChunkEvent) and e.index == i),
                                            default=-1)
    assert buffered == [ends[0].output, ends[2].output]
    # The router measured the streams: its generation model is no longer the priors'.
    est = backend._eps["talk"].generation
    assert est.prefills and est.steps and len(est.requests) == 4      # two inputs, twice
    assert backend.stream_snapshot("talk").model.lengths == tuple(sorted(
        g for _, g in est.requests))

    assert first[0].data == {"text": "one ", "tokens": 1} and n == 1
    assert stopped.wait(10), "the cancelled sequence's generator was not stopped"
    [hung] = [c for c in fake_modal.state.calls.values() if c.cancelled]
    assert fake_modal.run(fake_modal.servicer.until_stopped(hung.function_call_id))
    assert backend.readiness()["modal"]["talk"]["inflight_rows"] == 0


# ------------------------------------------------------------ through the deployed router


def test_sse_through_the_router_matches_the_buffered_answer_and_a_disconnect_cancels(
        fake_modal, monkeypatch):
    """The deployed router app (what ``router()`` builds) in-process, the class's own
    ``stream`` body answering in the fake: a streamed request's SSE events carry each
    input's chunks and then its combined output, which is the buffered answer's; a client
    that disconnects mid-stream cancels its Modal input, whose generator stops."""
    import json

    from floodway.functions.streams import combine
    from tests.modal.support import API_KEY

    monkeypatch.setenv("FLOODWAY_API_KEYS", API_KEY)
    mod = _deploy(fake_modal)
    talk = mod.endpoints["talk"]
    stopped = _serve_talk(fake_modal, talk)
    asgi = mod.router.local()
    auth = {"authorization": f"Bearer {API_KEY}"}
    inputs = [WORDS, "x y z"]

    async def go() -> tuple[Any, Any, Any]:
        streamed = await asgi_post(asgi, "/v1/talk", {"inputs": inputs},
                                    {**auth, "accept": "text/event-stream"})
        buffered = await asgi_post(asgi, "/v1/talk", {"inputs": inputs}, auth)
        gone = asyncio.Event()
        left = await asgi_post(asgi, "/v1/talk", {"inputs": ["one wait"]},
                                {**auth, "accept": "text/event-stream"}, gone,
                                on_body=lambda b: b'"chunk"' in b and gone.set())
        return streamed, buffered, left

    streamed, buffered, left = run_async(go())
    assert streamed[0] == 200 and buffered[0] == 200, (streamed, buffered)
    events = sse_events(streamed[1])
    chunks = {i: [e["chunk"] for e in events if e.get("index") == i and "chunk" in e]
              for i in range(2)}
    ends = {e["index"]: e["output"] for e in events if "output" in e}
    assert [c["text"] for c in chunks[1]] == ["x ", "y ", "z ", ""]
    assert ends == {i: combine(chunks[i]) for i in range(2)}
    assert json.loads(buffered[1])["outputs"] == [ends[0], ends[1]]
    assert ends[0]["text"] == WORDS + " " and ends[0]["usage"]["completion_tokens"] == 4

    assert left[0] == 200 and b'"chunk"' in left[1] and b"[DONE]" not in left[1]
    assert stopped.wait(10), "the disconnected client's sequence was not stopped"
    [cancelled] = [c for c in fake_modal.state.calls.values() if c.cancelled]
    assert fake_modal.run(fake_modal.servicer.until_stopped(cancelled.function_call_id))


def test_a_refused_input_is_a_422_naming_its_field(fake_modal, monkeypatch):
    """An input the endpoint refuses (a `fw.RequestError` before its first chunk, as the
    engine refuses a prompt too long for its context), run by the class's own ``stream``
    body in the fake: the container names it "InputError: ...", and the router answers it
    as the local router does. Alone in its request: a 422 "input_error" naming
    ``inputs[0].prompt``, streamed or not; beside an input that streams: that input's
    ``error`` event with the type and field, and a buffered 422 with the other output."""
    import json

    from tests.modal.support import API_KEY

    monkeypatch.setenv("FLOODWAY_API_KEYS", API_KEY)
    mod = _deploy(fake_modal)
    talk = mod.endpoints["talk"]
    fake_modal.handle("Talk.stream", lambda prompt: container_chunks(talk.fn, None, prompt))
    asgi = mod.router.local()
    auth = {"authorization": f"Bearer {API_KEY}"}
    sse = {**auth, "accept": "text/event-stream"}
    long = "w " * 9

    async def go() -> list[tuple[int, bytes]]:
        return [await asgi_post(asgi, "/v1/talk", {"inputs": inputs}, headers)
                for inputs, headers in (([long], sse), ([long], auth),
                                        (["a b", long], sse), (["a b", long], auth))]

    alone_sse, alone, beside_sse, beside = run_async(go())
    for status, body in (alone_sse, alone):
        assert status == 422, body
        error = json.loads(body)["error"]
        assert (error["type"], error["field"]) == ("input_error", "inputs[0].prompt"), error
        assert "9 words is more than this model takes" in error["message"]
        assert "raised" not in error["message"]
    assert beside_sse[0] == 200, beside_sse
    events = sse_events(beside_sse[1])
    [failed] = [e for e in events if "error" in e]
    assert failed["index"] == 1 and failed["error"]["type"] == "input_error"
    assert failed["error"]["field"] == "inputs[1].prompt"
    [done] = [e for e in events if "output" in e]
    assert done["index"] == 0 and done["output"]["text"] == "a b "
    assert beside[0] == 422, beside
    answer = json.loads(beside[1])
    assert answer["error"]["field"] == "inputs[1].prompt"
    assert answer["outputs"] == [done["output"], None]
