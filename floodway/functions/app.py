"""`App` and `@app.endpoint(...)`: the decorator API.

The decorator only records: it validates the definition (raising `ConfigError` with every
problem at once) and returns an `Endpoint`, which stays callable like the function. Nothing runs
at import beyond that: builds, servers and Modal objects are made by whoever consumes the App.
While an app file is loaded (`collecting`), a definition's ConfigError is recorded on its App
instead, so that the file finishes importing; the App raises them all at once when used.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any, Literal

from floodway.config import Batching, Build, Cache, Generation, Recycle, Route, WarmPool
from floodway.errors import ConfigError, Problem
from floodway.functions.endpoint import Endpoint, make_endpoint
from floodway.sources import ModelSource


class App:
    """A named set of endpoints.

    >>> app = App("demo")
    >>> @app.endpoint(model=LocalModel("model/"))
    ... def embed(model, texts: list[str]) -> list[list[float]]: ...
    """

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise ConfigError(str(name), [Problem("App.name", name, "a non-empty string")])
        self.name = name
        self._endpoints: dict[str, Endpoint] = {}
        self._errors: list[ConfigError] = []   # the definitions that failed (`collecting`)

    def _consumed(self) -> None:
        """Raise the recorded definitions' problems, all at once, before the App is used."""
        if self._errors:
            raise ConfigError.combine(self._errors, f"App {self.name!r}")

    def endpoint(self, *, model: ModelSource | None = None, name: str | None = None,
                 build: Build | None = None, gpu: str | None = None,
                 warm: WarmPool | None = None, route: Route | None = None,
                 batching: Batching | None = None, gpu_memory_snapshot: bool = False,
                 load: Callable[[Any], Any] | None = None,
                 generation: Generation | None = None,
                 cache: Cache | Literal[False] | None = None,
                 recycle: Recycle | None = None, **unknown: Any,
                 ) -> Callable[[Callable[..., Any]], Endpoint]:
        """Define an endpoint from a function `fn(model, inputs: list[T]) -> list[R]`.

        `model`: where the model comes from (`fw.HFModel`, `fw.LocalModel`, `fw.TorchModel`);
        floodway builds it into a graph and `fn` receives a `fw.Loaded`. `load`: a function
        ``load(artifacts) -> anything`` for an endpoint that brings its own runtime (vLLM,
        diffusers, plain PyTorch, ...): the build then holds the source's files
        (`floodway.build.artifacts.Artifacts`) and `fn` receives what `load` returned. With
        neither, `fn` receives None. floodway routes, batches, warms and measures every kind
        alike. `gpu`: a Modal GPU type (None: CPU). `gpu_memory_snapshot`: on Modal, snapshot
        the GPU's memory too, so that a restored container starts with its engine, CUDA
        session or `load` result already on the GPU (Modal's GPU Memory Snapshots, an alpha
        feature; needs `gpu`).

        A generator (or async generator) function ``fn(model, item: T)`` makes a streaming
        endpoint: called once per input, it yields chunks (any JSON value), streamed to
        clients that ask (SSE, NDJSON) and combined for those that do not
        (`floodway.functions.streams.combine`). `generation` (`fw.Generation`, default for
        a streaming endpoint; a ConfigError on another): its sequences per container, the
        cap of a request's new tokens, how long a stream may run. `cache`: the response
        cache (`fw.Cache`; None: the default, on except for streaming endpoints; False: off,
        for a function whose outputs are not a function of its inputs). `recycle`: drain and
        replace a container whose worker outgrew a limit (`fw.Recycle`: resident MiB, calls;
        None: never), for a handler that leaks.
        Raises ConfigError naming the endpoint, each bad field, its value and the allowed range
        (a keyword it does not take: the closest one it does). While an app file is loaded
        (`floodway.functions.discover.load_app`) the error is recorded instead, so that the
        problems of every endpoint of the file are reported together.
        """

        def record(fn: Callable[..., Any]) -> Endpoint:
            try:
                ep = make_endpoint(fn, name=name, model=model, build=build or Build(), gpu=gpu,
                                   warm=warm or WarmPool(), route=route or Route(),
                                   batching=batching or Batching(),
                                   gpu_memory_snapshot=gpu_memory_snapshot, load=load,
                                   generation=generation, cache=cache, recycle=recycle,
                                   unknown=unknown)
                if ep.name in self._endpoints:
                    used = Problem("name", ep.name,
                                   f"a name not already used in App {self.name!r}")
                    raise ConfigError(ep.name, [used])
            except ConfigError as e:
                sink = _COLLECTING.get()
                if sink is None:
                    raise
                sink.append(e)   # reported with the file's others (`collecting`)
                self._errors.append(e)
                return fn   # type: ignore[return-value]
            self._endpoints[ep.name] = ep
            return ep

        return record

    @property
    def endpoints(self) -> dict[str, Endpoint]:
        self._consumed()
        return dict(self._endpoints)

    def __getitem__(self, name: str) -> Endpoint:
        self._consumed()
        try:
            return self._endpoints[name]
        except KeyError:
            known = ", ".join(sorted(self._endpoints)) or "(none)"
            raise KeyError(f"App {self.name!r} has no endpoint {name!r}; it has: {known}") from None

    def __iter__(self) -> Iterator[Endpoint]:
        self._consumed()
        return iter(self._endpoints.values())

    def only(self, names: Iterable[str]) -> App:
        """An App of the same name holding only the endpoints `names` (the same objects).
        Raises KeyError, as `app[name]` does, for a name it does not have."""
        sub = App(self.name)
        sub._endpoints = {n: self[n] for n in names}
        return sub


_COLLECTING: ContextVar[list[ConfigError] | None] = ContextVar("floodway_collecting",
                                                               default=None)


@contextlib.contextmanager
def collecting() -> Iterator[list[ConfigError]]:
    """While it is open, `@app.endpoint` records a definition's ConfigError (in the list it
    yields, and on its App, which raises them once used) instead of raising it: loading an
    app file reports the problems of all its endpoints at once."""
    errors: list[ConfigError] = []
    token = _COLLECTING.set(errors)
    try:
        yield errors
    finally:
        _COLLECTING.reset(token)
