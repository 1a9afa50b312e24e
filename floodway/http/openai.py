"""The OpenAI-compatible routes, beside the native ones (`floodway.http.app`):

    GET  /v1/models             every endpoint, as a model
    GET  /v1/models/{model}     one of them (404 model_not_found for another name)
    POST /v1/embeddings         an embedding endpoint (items str, not streaming)
    POST /v1/completions        a text-generation endpoint (streaming, items fw.Prompt)
    POST /v1/chat/completions   the same, from chat messages

``model`` names the endpoint. Requests pass the same admission as the native route
(API keys as bearer tokens, X-Priority, X-Deadline-Ms, the tenant's rate, the body limits,
per-item validation: `Admission.admit_foreign`) and the same decision (`decide()`, or
`decide_stream()` for a text-generation endpoint); errors are answered in OpenAI's shape
(`floodway.http.errors.use_openai_errors`). What differs: no async spill, no deadline
hand-off and no ``Prefer: respond-async`` (ignored: an OpenAI client cannot follow a 202
job), so a request that cannot meet its deadline is shed or spills to a cold container
(`Handlers.run_sync`, `Handlers.open_stream(..., allow_async=False)`). The wire formats are
`floodway.http.openai_wire` (requests) and `floodway.http.openai_answers` (answers).
"""

from __future__ import annotations

import typing
import uuid
from collections.abc import Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from floodway.core.clock import Clock
from floodway.core.stream_events import ItemFailed
from floodway.errors import EndpointError, RequestError
from floodway.functions.endpoint import Endpoint
from floodway.functions.prompts import Prompt
from floodway.http.admit import Admitted, ForeignParse
from floodway.http.errors import use_openai_errors
from floodway.http.handlers import Handlers
from floodway.http.middleware import notes
from floodway.http.openai_answers import (
    ID_PREFIX,
    Kind,
    StreamAnswer,
    completion_answer,
    embeddings_answer,
    generated,
    model_object,
    models_answer,
    no_embeddings,
    output_type,
)
from floodway.http.openai_params import PROMPT_PARAMS, input_error, item_error
from floodway.http.openai_stream import OpenAIStream
from floodway.http.openai_wire import (
    ChatRequest,
    CompletionRequest,
    EmbeddingsRequest,
    chat_items,
    completion_items,
    embedding_items,
    parse_chat,
    parse_completion,
    parse_embeddings,
)
from floodway.http.responses import JSONResponse, outputs
from floodway.http.streaming import collect_unless_gone
from floodway.routers.decide_stream import PRIORITY_NAMES, most_sequences


def _typename(t: Any) -> str:
    """`t` as written in code (``str``, ``dict[str, str]``)."""
    if isinstance(t, type) and not typing.get_args(t):
        return t.__name__
    return str(t).replace("typing.", "")


def _refuse(ep: Endpoint, wanted: str, route: str) -> RequestError:
    return RequestError(f"model {ep.name!r} is not {wanted} (its items are "
                        f"{getattr(ep.input_type, '__name__', ep.input_type)}"
                        f"{', streamed' if ep.streaming else ''}); POST /v1/{ep.name} serves "
                        f"it, not {route}", status=400, field="model")


def accept_embeddings(ep: Endpoint) -> None:
    """An embedding endpoint takes str items and returns its outputs (not streamed), of a
    type that can be an embedding: one whose ``-> list[R]`` shows that R never is one
    (`no_embeddings`: ``list[str]``, ``list[dict[str, str]]``, ...) is refused before
    anything runs. One whose annotation cannot tell runs, and an output that is not an
    embedding is a 400 then (`floodway.http.openai_answers.embeddings_answer`)."""
    if ep.input_type is not str or ep.streaming:
        raise _refuse(ep, "an embedding model (str items, not streamed)", "/v1/embeddings")
    r = output_type(ep)
    if r is not None and no_embeddings(r):
        raise RequestError(f"model {ep.name!r} is not an embedding model: its function "
                           f"returns list[{_typename(r)}], one per input, and an "
                           "embedding is a list of numbers (or an object with one as "
                           f"\"embedding\"); POST /v1/{ep.name} serves it, not "
                           "/v1/embeddings", status=400, field="model")


def accept_generation(ep: Endpoint) -> None:
    """A text-generation endpoint streams, and takes fw.Prompt items."""
    if not ep.streaming or ep.input_type is not Prompt:
        raise _refuse(ep, "a text-generation model (fw.Prompt items, streamed)",
                      "/v1/completions or /v1/chat/completions")


class OpenAIRoutes:
    """The OpenAI-compatible routes over the native route's `Handlers` (its app, backend,
    admission, metrics and hand-off). `clock.wall()` dates answers (``created``); the
    models are dated by the router's start."""

    def __init__(self, h: Handlers, clock: Clock):
        self.h, self.clock = h, clock
        self.started = int(clock.wall())

    def _created(self) -> int:
        return int(self.clock.wall())

    @staticmethod
    def new_id(kind: Kind) -> str:
        return ID_PREFIX[kind] + uuid.uuid4().hex

    async def models(self, request: Request) -> Response:
        """``GET /v1/models``: every endpoint (with keys configured, a bearer key needed)."""
        use_openai_errors(request.scope)
        self.h.admission.tenant(request)
        return JSONResponse(models_answer(sorted(self.h.app.endpoints), self.started))

    async def model(self, request: Request) -> Response:
        """``GET /v1/models/{model}`` (the ``openai`` client's ``models.retrieve``): the
        model object; 404 ``model_not_found`` naming the endpoints for another name."""
        use_openai_errors(request.scope)
        self.h.admission.tenant(request)
        ep = self.h.admission.endpoint(request.path_params["model"], field="model")
        return JSONResponse(model_object(ep.name, self.started))

    async def _admit(self, request: Request, parse: ForeignParse, accept: Any,
                     items_field: str, param_of: Any) -> tuple[Endpoint, Admitted]:
        """`Admission.admit_foreign`, an item's error named by OpenAI's parameter."""
        try:
            ep, a = await self.h.admission.admit_foreign(request, parse, accept=accept,
                                                         items_field=items_field)
        except RequestError as e:
            raise item_error(e, param_of) from None
        notes(request.scope).endpoint = ep.name
        return ep, a

    async def embeddings(self, request: Request) -> Response:
        """``POST /v1/embeddings``: one embedding per input, in order."""
        use_openai_errors(request.scope)
        got: list[EmbeddingsRequest] = []

        def parse(body: bytes) -> tuple[str, list[Any]]:
            got.append(parse_embeddings(body, models=self.h.app.endpoints))
            return got[0].model, embedding_items(got[0])

        def param_of(i: int, field: str | None) -> str:
            return "input" if isinstance(got[0].input, str) else f"input[{i}]"

        ep, a = await self._admit(request, parse, accept_embeddings, "input", param_of)
        req = got[0]
        results = await self.h.run_sync(request, ep.name, a)
        return JSONResponse(embeddings_answer(ep.name, results,
                                              encoding_format=req.encoding_format,
                                              dimensions=req.dimensions))

    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions``: n choices per prompt, streamed or not."""
        return await self._generate(request, "completion")

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``: n choices for the conversation, streamed or not."""
        return await self._generate(request, "chat")

    async def _generate(self, request: Request, kind: Kind) -> Response:
        use_openai_errors(request.scope)
        got: list[CompletionRequest | ChatRequest] = []

        def parse(body: bytes) -> tuple[str, list[Any]]:
            if kind == "chat":
                chat = parse_chat(body, models=self.h.app.endpoints)
                got.append(chat)
                return chat.model, chat_items(chat)
            completion = parse_completion(body, models=self.h.app.endpoints)
            got.append(completion)
            return completion.model, completion_items(completion)

        ep, a = await self._admit(request, parse, accept_generation, "n",
                                  lambda i, field: self._param(got[0], i, field))
        req = got[0]
        rename = self._input_errors(req)
        try:
            return await self._answer(request, kind, ep, a, req, rename)
        except (RequestError, EndpointError) as e:
            renamed = rename(e)
            if renamed is e:
                raise
            raise renamed from None

    async def _answer(self, request: Request, kind: Kind, ep: Endpoint, a: Admitted,
                      req: CompletionRequest | ChatRequest,
                      rename: Callable[[Exception], Exception]) -> Response:
        """The admitted completion request's answer, streamed or buffered."""
        self._check_choices(ep, a, req)
        # No async spill, hand-off or job: an OpenAI client cannot follow a 202.
        stream = await self.h.open_stream(request, ep.name, a, allow_async=False)
        if isinstance(stream, Response):   # a job's answer: never without allow_async
            return stream
        answer_id, created = self.new_id(kind), self._created()
        if req.stream:
            answer = StreamAnswer(kind, answer_id=answer_id, created=created, model=ep.name,
                                  n_items=len(a.inputs), n=req.choices_per_prompt,
                                  include_usage=req.include_usage)
            first = await anext(stream, None)
            if isinstance(first, ItemFailed):   # nothing sent yet: answered with its status
                stream.cancel()
                raise first.error
            return OpenAIStream(stream, answer, first, rename=rename)
        results = outputs(ep.name, a.inputs,
                          await collect_unless_gone(request, stream, len(a.inputs)))
        choices = [generated(ep.name, r) for r in results]
        return JSONResponse(completion_answer(
            kind, answer_id=answer_id, created=created, model=ep.name, choices=choices,
            n=req.choices_per_prompt))

    def _check_choices(self, ep: Endpoint, a: Admitted,
                       req: CompletionRequest | ChatRequest) -> None:
        """RequestError 413 naming ``n`` (``prompt`` for a list of prompts at n 1) when the
        request's sequences (n per prompt) are more than the backend can ever admit at its
        priority (`decide_stream.most_sequences`: on every container it may run, or in its
        priority's share of the queue): no wait admits it, so no 503 to retry."""
        snap = self.h.backend.stream_snapshot(ep.name)
        most = most_sequences(snap, int(a.priority))
        count, n = len(a.inputs), req.choices_per_prompt
        if count <= most:
            return
        prompts = count // n
        field = "n" if n > 1 or prompts == 1 else "prompt"
        made = {(False, False): "1 choice", (True, False): f"{n} choices",
                (False, True): f"{prompts} prompts",
                (True, True): f"{prompts} prompts x {n} choices"}[n > 1, prompts > 1]
        fix = "lower n" if prompts == 1 else "send fewer prompts" if n == 1 \
            else "lower n or send fewer prompts"
        raise RequestError(f"{field}: {made} make {count} sequences; model {ep.name!r} "
                           f"admits at most {most} at "
                           f"{PRIORITY_NAMES[max(0, min(2, int(a.priority)))]} priority "
                           f"in one request ({fix})", status=413, field=field)

    def _input_errors(self, req: CompletionRequest | ChatRequest
                      ) -> Callable[[Exception], Exception]:
        """An input's error from the container (or the router's refusal of ``inputs``)
        named by OpenAI's parameter (`input_error`)."""
        whole = "messages" if isinstance(req, ChatRequest) else "prompt"
        return lambda e: input_error(e, lambda i, field: self._param(req, i, field), whole)

    @staticmethod
    def _param(req: CompletionRequest | ChatRequest, i: int, field: str | None) -> str:
        """The OpenAI parameter behind field `field` of item `i` (an engine that names the
        text it was given "prompt" on a chat request means the messages: their rendering)."""
        chat = isinstance(req, ChatRequest)
        if field == "max_new_tokens" and isinstance(req, ChatRequest) \
                and req.max_completion_tokens is not None:
            return "max_completion_tokens"
        if field in (None, "prompt", "messages"):
            if isinstance(req, CompletionRequest) and isinstance(req.prompt, list):
                return f"prompt[{i // req.choices_per_prompt}]"
            return "messages" if chat else "prompt"
        return PROMPT_PARAMS.get(field, "messages" if chat else "prompt")


__all__ = ["OpenAIRoutes", "accept_embeddings", "accept_generation"]
