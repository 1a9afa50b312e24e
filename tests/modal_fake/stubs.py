"""Plumbing of the fake servicer: unary handlers, UNIMPLEMENTED stubs, ids.

    class Part:
        @unary
        async def AppCreate(self, req: api_pb2.AppCreateRequest) -> api_pb2.AppCreateResponse: ...

    FakeModal = complete(type("FakeModal", (Part, ..., ModalClientBase), {}))

`unary` turns ``async def Rpc(self, request) -> response`` into grpclib's stream form.
`complete` gives every abstract method of ``modal_proto.api_grpc.ModalClientBase`` that no
part implements a body answering ``GRPCError(Status.UNIMPLEMENTED, "<Rpc> not in the fake")``
(and recording the name in ``self.state.unimplemented``), so that the class can be
instantiated and a missing RPC fails loudly, by name.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

from grpclib import GRPCError, Status
from modal_proto.api_grpc import ModalClientBase

_ids = itertools.count(1)


def new_id(prefix: str) -> str:
    """A fresh object id with Modal's type prefix (``fu-``, ``cs-``, ``ap-``, ``im-``...):
    the client checks some of them (``_Function._is_id_type``)."""
    return f"{prefix}-{next(_ids):06d}"


def unary(fn: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[None]]:
    """``async def Rpc(self, request) -> response`` as a grpclib unary-unary handler."""

    @functools.wraps(fn)
    async def handler(self: Any, stream: Any) -> None:
        request = await stream.recv_message()
        await stream.send_message(await fn(self, request))

    return handler


def _unimplemented(name: str) -> Callable[[Any, Any], Awaitable[None]]:
    async def handler(self: Any, stream: Any) -> None:
        self.state.unimplemented.append(name)
        raise GRPCError(Status.UNIMPLEMENTED, f"{name} not in the fake")

    handler.__name__ = handler.__qualname__ = name
    return handler


def complete(cls: type) -> type:
    """`cls` with an UNIMPLEMENTED body for every RPC it leaves abstract (see the module doc).
    Returns `cls` itself, modified."""
    for name in sorted(getattr(cls, "__abstractmethods__", ())):
        if hasattr(ModalClientBase, name):
            setattr(cls, name, _unimplemented(name))
    cls.__abstractmethods__ = frozenset()
    return cls
