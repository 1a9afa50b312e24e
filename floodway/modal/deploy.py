"""`floodway deploy` on Modal: the credentials, the router's keys Secret, the deploy itself,
then every unit's warm target applied again.

    check_router_keys("floodway-router-keys")      # FloodwayError saying how to create it
    applied = deploy_and_apply(module_app, fw_app)   # `floodway deploy APP`

**Router keys.** The router refuses to start without API keys
(`floodway.modal.router.backend.router_api_keys`); `to_modal` gives it the named Secret
`ROUTER_KEYS_SECRET` (holding ``FLOODWAY_API_KEYS``) unless told the router is public, and
records the name here (`record_router_keys`), so that `deploy_and_apply` checks that the
Secret exists before deploying (`check_router_keys`).

**Re-applying.** A deploy resets every class's autoscaler to the decorator's static values
(`floodway.modal.autoscaler`), so `deploy_and_apply` applies each unit's current target
(`floodway.modal.warmers.apply.run_warmer`) at once after it. Modal is imported only when
one of these runs.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from floodway.errors import FloodwayError
from floodway.functions.app import App
from floodway.modal import autoscaler
from floodway.modal.extra import MODAL_EXTRA
from floodway.modal.warmers import apply
from floodway.routers.admission import API_KEYS_ENV

# The named Secret holding the router's FLOODWAY_API_KEYS (`to_modal`'s default).
ROUTER_KEYS_SECRET = "floodway-router-keys"


def credentials_problem(get: Callable[[str], Any] | None = None) -> str | None:
    """What is wrong with the configured Modal credentials, or None when they are complete.

    Mirrors how modal 1.6 builds a client (``modal.client._Client.from_env``): either a token
    id and secret, or OAuth (a refresh token, a client id, and exactly one of a client secret
    or a JWT key, ``oauth_jwt_key``), never both kinds; read from ``MODAL_*`` variables or the
    active ``~/.modal.toml`` profile. With a JWT key, also whether the libraries that sign its
    assertions are installed (the client raises ImportError when it opens, otherwise).
    `get`: a config lookup (default Modal's).
    """
    if get is None:
        import modal.config

        get = modal.config.config.get
    token = [bool(get(k)) for k in ("token_id", "token_secret")]
    refresh, client_id, secret, jwt = (bool(get(k)) for k in (
        "oauth_refresh_token", "oauth_client_id", "oauth_client_secret", "oauth_jwt_key"))
    oauth = refresh or client_id or secret or jwt
    if any(token) and oauth:
        return "both a Modal token and OAuth credentials are configured; keep one"
    if oauth:
        if not (refresh and client_id) or secret == jwt:
            return ("incomplete Modal OAuth credentials: need a refresh token, a client id, "
                    "and exactly one of a client secret or a JWT key")
        return jwt_libraries_problem() if jwt else None
    if all(token):
        return None
    if any(token):
        return "incomplete Modal token: need both MODAL_TOKEN_ID and MODAL_TOKEN_SECRET"
    return ("no Modal credentials: run `modal token new`, or set MODAL_TOKEN_ID and "
            "MODAL_TOKEN_SECRET")


def jwt_libraries_problem() -> str | None:
    """What is missing to sign OAuth assertions with a JWT key (modal's ``oauth`` extra:
    PyJWT and cryptography), or None when both import."""
    try:        # cryptography first: PyJWT imported without it keeps no RSA algorithms
        import cryptography.hazmat.primitives.asymmetric.rsa  # noqa: F401
        import jwt.algorithms  # noqa: F401
    except ImportError as e:
        return (f"Modal OAuth with a JWT key (MODAL_OAUTH_JWT_KEY) needs PyJWT and "
                f"cryptography ({e.name or e} is not installed): {MODAL_EXTRA}, which "
                f"includes modal[oauth]")
    return None


def credentials_configured(get: Callable[[str], Any] | None = None) -> bool:
    """Whether complete Modal credentials are configured (`credentials_problem` is None)."""
    return credentials_problem(get) is None


# The modal.App that `to_modal` made -> the router keys Secret's name or None (keyed by the
# App object: a second App of the same name does not hide the first one's entry).
_ROUTER_KEYS: weakref.WeakKeyDictionary[Any, str | None] = weakref.WeakKeyDictionary()


def record_router_keys(modal_app: Any, secret_name: str | None) -> None:
    """Remember which named Secret `modal_app`'s router reads its keys from (None: none)."""
    _ROUTER_KEYS[modal_app] = secret_name


def router_keys_secret(modal_app: Any) -> str | None:
    """The named Secret `modal_app`'s router needs (recorded by `to_modal` in this process);
    None for a public router or an app `to_modal` did not make here."""
    return _ROUTER_KEYS.get(modal_app)


def secret_exists(name: str, required_keys: tuple[str, ...] = ()) -> bool:
    """Whether Modal has a Secret `name` holding `required_keys` (the server checks the keys:
    ``SecretGetOrCreate``'s ``required_keys``). False when Modal answers NOT_FOUND; other
    failures (no network, bad credentials) raise as the client raises them."""
    import modal
    from modal.exception import NotFoundError

    try:
        modal.Secret.from_name(name, required_keys=list(required_keys)).hydrate()
    except NotFoundError:
        return False
    return True


def check_router_keys(name: str, exists: Callable[[str, tuple[str, ...]], bool] | None = None
                      ) -> None:
    """Raise FloodwayError saying how to create Secret `name` when Modal has no Secret `name`
    holding ``FLOODWAY_API_KEYS``. `exists`: the lookup (default `secret_exists`)."""
    exists = exists or secret_exists
    if not exists(name, (API_KEYS_ENV,)):
        raise FloodwayError(
            f"the router reads its API keys from the Modal Secret {name!r}, which does not "
            f"exist or has no {API_KEYS_ENV}; create it first:\n"
            f"  modal secret create {name} {API_KEYS_ENV}=<key1>,<key2>\n"
            f"(comma-separated bearer tokens, e.g. from `python -c \"import secrets; "
            f"print(secrets.token_urlsafe(32))\"`), or pass public_router=True to to_modal to "
            f"serve without authentication")


def modal_deploy(module_app: Any) -> None:
    """Deploy `module_app` as ``modal deploy`` does, with Modal's output shown
    (``App.deploy()``, https://modal.com/docs/reference/modal.App#deploy)."""
    import modal

    with modal.enable_output():
        module_app.deploy()


def deploy_and_apply(module_app: Any, fw_app: App, *, now_s: float | None = None
                     ) -> list[apply.Applied]:
    """`floodway deploy`: deploy `module_app`, then apply every unit's current target (each
    endpoint's, each lane's of one with lanes: a deploy resets every class's autoscaler to
    the decorator's values). Raises FloodwayError before
    deploying when the Modal credentials are missing or incomplete (`credentials_problem`,
    nothing sent), or when the router's keys Secret does not exist (`check_router_keys`,
    which says how to create it). The lookups and the deploy are this module's
    `credentials_problem`, `secret_exists` and `modal_deploy`; the autoscaler calls and the
    stores are `autoscaler.deployed_autoscale` and `apply.modal_stores`; all are looked up
    when called."""
    problem = credentials_problem()
    if problem is not None:
        raise FloodwayError(problem)
    keys = router_keys_secret(module_app)
    if keys is not None:
        check_router_keys(keys, exists=secret_exists)
    modal_deploy(module_app)
    return apply.run_warmer(fw_app, [ep.name for ep in fw_app],
                            autoscale=autoscaler.deployed_autoscale(module_app.name
                                                                    or fw_app.name),
                            stores=apply.modal_stores(), now_s=now_s, force=True)


__all__ = ["ROUTER_KEYS_SECRET", "check_router_keys", "credentials_configured",
           "credentials_problem", "deploy_and_apply", "jwt_libraries_problem", "modal_deploy",
           "record_router_keys", "router_keys_secret", "secret_exists"]
