"""Small key-value interfaces over a `modal.Dict`, with plain dicts in tests.

    kv = ModalDictKV("floodway-jobs")      # async (the router): or MemoryKV() offline
    await kv.put(key, value, skip_if_exists=True) -> bool (added)
    await kv.get(key, default) -> value

    store = modal.Dict.from_name(...)      # sync (the warmers): or MemoryStore() offline
    store.get(key, default); store.put(key, value); store.pop(key); store.items()
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol


class KV(Protocol):
    """The slice of `modal.Dict` used here (async), so tests can pass a plain dict."""

    async def get(self, key: Any, default: Any = None) -> Any: ...

    async def put(self, key: Any, value: Any, *, skip_if_exists: bool = False) -> bool: ...


class MemoryKV:
    """A `KV` over a dict (tests and offline runs); `data` is the dict, shared if given."""

    def __init__(self, data: dict | None = None):
        self.data = {} if data is None else data

    async def get(self, key: Any, default: Any = None) -> Any:
        return self.data.get(key, default)

    async def put(self, key: Any, value: Any, *, skip_if_exists: bool = False) -> bool:
        if skip_if_exists and key in self.data:
            return False
        self.data[key] = value
        return True


class ModalDictKV:
    """A `KV` over ``modal.Dict.from_name(name, create_if_missing=True)`` (lazy: nothing is
    sent until the first call). Entries live 7 days after their last read or write
    (https://modal.com/docs/reference/modal.Dict); ``put(skip_if_exists=True)`` is one
    conditional update on the server (``DictUpdate`` with ``if_not_exists``)."""

    def __init__(self, name: str):
        self.name = name
        self._dict: Any = None

    def _d(self) -> Any:
        if self._dict is None:
            import modal

            self._dict = modal.Dict.from_name(self.name, create_if_missing=True)
        return self._dict

    async def get(self, key: Any, default: Any = None) -> Any:
        return await self._d().get.aio(key, default)

    async def put(self, key: Any, value: Any, *, skip_if_exists: bool = False) -> bool:
        return await self._d().put.aio(key, value, skip_if_exists=skip_if_exists)


class Store(Protocol):
    """The slice of a synchronous `modal.Dict` the warmers use (a `MemoryStore` in tests)."""

    def get(self, key: Any, default: Any = None) -> Any: ...

    def put(self, key: Any, value: Any) -> Any: ...

    def pop(self, key: Any) -> Any: ...

    def items(self) -> Iterable[tuple[Any, Any]]: ...


class MemoryStore:
    """A `Store` over a dict (tests, offline runs); `data` is the dict, shared if given
    (e.g. with a `MemoryKV` that a recorder writes through)."""

    def __init__(self, data: dict | None = None):
        self.data = {} if data is None else data

    def get(self, key: Any, default: Any = None) -> Any:
        return self.data.get(key, default)

    def put(self, key: Any, value: Any) -> None:
        self.data[key] = value

    def pop(self, key: Any) -> Any:
        return self.data.pop(key)

    def items(self) -> list[tuple[Any, Any]]:
        return list(self.data.items())


__all__ = ["KV", "MemoryKV", "MemoryStore", "ModalDictKV", "Store"]
