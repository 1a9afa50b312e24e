"""A small async key-value interface: a `modal.Dict` on Modal, a plain dict in tests.

    kv = ModalDictKV("floodway-jobs")      # or MemoryKV() offline
    await kv.put(key, value, skip_if_exists=True) -> bool (added)
    await kv.get(key, default) -> value
"""

from __future__ import annotations

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
