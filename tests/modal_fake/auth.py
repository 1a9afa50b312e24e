"""Credentials, checked on every RPC as Modal's server checks them.

    tokens = Tokens()
    token_id, token_secret = tokens.issue()         # ("ak-...", "as-..."), as `modal token new`
    tokens.check(metadata)                          # GRPCError(UNAUTHENTICATED) when refused
    listen(server, RecvRequest, tokens.on_request)  # every RPC of a grpclib Server

The client sends its credentials as request metadata (modal 1.6.4:
``modal.client._get_metadata``): a client outside Modal (``x-modal-client-type`` 1) sends
``x-modal-token-id`` and ``x-modal-token-secret``; a container (type 3) sends none, Modal
knows it by its task. A client request is answered only when it carries a pair the server
issued (ids start with ``ak-``, secrets with ``as-``); anything else (no token, a malformed
one, an unknown id, a secret that is not the id's, OAuth credentials, which the fake does not
issue) answers ``UNAUTHENTICATED``, which the client raises as ``modal.exception.AuthError``.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping

from grpclib import GRPCError, Status
from grpclib.events import RecvRequest
from modal_proto import api_pb2

_ID = re.compile(r"ak-[A-Za-z0-9]+")
_SECRET = re.compile(r"as-[A-Za-z0-9]+")


def _token(prefix: str) -> str:
    return prefix + secrets.token_hex(11)


class Tokens:
    """The token pairs the fake issued: id -> secret."""

    def __init__(self) -> None:
        self.pairs: dict[str, str] = {}
        self.refused: list[str] = []          # why each refused request was refused, in order

    def issue(self) -> tuple[str, str]:
        """A fresh (token id, token secret) pair the fake accepts from now on."""
        token_id, token_secret = _token("ak-"), _token("as-")
        self.pairs[token_id] = token_secret
        return token_id, token_secret

    def check(self, metadata: Mapping[str, str]) -> None:
        """Raise GRPCError(UNAUTHENTICATED) unless `metadata` is a container's or carries an
        issued pair (see the module doc)."""
        if metadata.get("x-modal-client-type") == str(api_pb2.CLIENT_TYPE_CONTAINER):
            return
        token_id = metadata.get("x-modal-token-id", "")
        token_secret = metadata.get("x-modal-token-secret", "")
        if not token_id or not token_secret:
            why = ("OAuth credentials are not accepted by this server"
                   if metadata.get("x-modal-oauth-client-id") else
                   "Token missing. Could not authenticate client.")
        elif not _ID.fullmatch(token_id):
            why = "Token ID is malformed (a token id starts with 'ak-')"
        elif not _SECRET.fullmatch(token_secret):
            why = "Token secret is malformed (a token secret starts with 'as-')"
        elif self.pairs.get(token_id) != token_secret:
            why = "Invalid token ID or secret"
        else:
            return
        self.refused.append(why)
        raise GRPCError(Status.UNAUTHENTICATED, why)

    async def on_request(self, event: RecvRequest) -> None:
        """A grpclib ``RecvRequest`` listener: `check` before the RPC's handler runs."""
        self.check(event.metadata)


__all__ = ["RecvRequest", "Tokens"]
