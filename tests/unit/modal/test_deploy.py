"""`floodway deploy`'s Modal side, offline: the router's keys Secret (and the public flag),
the credential check against both OAuth forms, and the deploy followed by the warm targets
re-applied."""

from __future__ import annotations

import importlib.util
import os
import sys
import types

import modal
import pytest
from modal._utils.async_utils import synchronizer
from modal.exception import NotFoundError

import floodway as fw
from floodway.errors import FloodwayError
from floodway.modal import autoscaler
from floodway.modal import deploy as modal_deploy
from floodway.modal.extra import NO_MODAL_ENV
from floodway.modal.warmers import apply
from tests.conftest import MODAL_APP
from tests.unit.modal.warmers.test_apply import Recorder, _stores, _utc

# Looked up on the module when each test runs, so that one missing name fails one test.
ROUTER_KEYS_SECRET = "floodway-router-keys"


def _impl(obj):
    return synchronizer._translate_in(obj)


def _app(tmp_path) -> fw.App:
    app = fw.App("deploying")

    @app.endpoint(model=fw.LocalModel(tmp_path), gpu="L4", warm=fw.WarmPool(min_containers=1))
    def echo(model, inputs: list[str]) -> list[str]:
        return inputs

    return app


def _deploy_file(folder, name: str, fw_app: fw.App, monkeypatch, args: str = ""):
    """Import a deploy file `name`.py calling `to_modal(fw_app<args>)`, as Modal's CLI does."""
    monkeypatch.delenv(NO_MODAL_ENV, raising=False)
    path = folder / f"{name}.py"
    path.write_text("from floodway.deploy import to_modal\n"
                    f"app = to_modal(fw_app{args})  # noqa: F821\n")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    module.fw_app = fw_app
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def _secret_env(secret) -> dict[str, str]:
    """The variables of a ``Secret.from_dict``, from the loader it closes over."""
    load = _impl(secret)._load
    for cell in load.__closure__ or ():
        if callable(cell.cell_contents) and cell.cell_contents.__name__ == "_load_env_dict":
            return cell.cell_contents()
    raise AssertionError("not a Secret.from_dict")


def _required_keys(secret) -> list[str]:
    """The keys a ``Secret.from_name`` asks the server to check, from its loader's closure."""
    load = _impl(secret)._load
    cells = dict(zip(load.__code__.co_freevars, load.__closure__, strict=True))
    return list(cells["required_keys"].cell_contents)


# ---------------------------------------------------------------- the router's keys

def test_example_router_reads_its_keys_from_the_named_secret():
    import modal_app

    assert modal_app.router.info().secrets == [f"modal.Secret.from_name('{ROUTER_KEYS_SECRET}')"]
    (secret,) = _impl(modal_app.router)._spec.secrets
    assert _required_keys(secret) == ["FLOODWAY_API_KEYS"]   # a deploy without them fails
    assert modal_deploy.router_keys_secret(modal_app.app) == ROUTER_KEYS_SECRET \
        == modal_deploy.ROUTER_KEYS_SECRET
    # Only the router holds the keys.
    assert modal_app.Embed._get_class_service_function().info().secrets == []


def test_public_router_needs_no_secret(tmp_path, monkeypatch):
    module = _deploy_file(tmp_path, "fw_deploy_public", _app(tmp_path), monkeypatch,
                          args=", public_router=True")
    (secret,) = _impl(module.router)._spec.secrets
    assert _secret_env(secret) == {"FLOODWAY_PUBLIC_ROUTER": "1"}
    assert modal_deploy.router_keys_secret(module.app) is None


def test_another_secret_name_and_none(tmp_path, monkeypatch):
    named = _deploy_file(tmp_path, "fw_deploy_named", _app(tmp_path), monkeypatch,
                         args=", router_keys_secret='team-keys'")
    assert named.router.info().secrets == ["modal.Secret.from_name('team-keys')"]
    assert modal_deploy.router_keys_secret(named.app) == "team-keys"
    bare = _deploy_file(tmp_path, "fw_deploy_bare", _app(tmp_path), monkeypatch,
                        args=", router_keys_secret=None")
    assert bare.router.info().secrets == []
    assert modal_deploy.router_keys_secret(bare.app) is None
    assert modal_deploy.router_keys_secret(modal.App("deploying")) is None   # not to_modal's


def test_missing_secret_says_how_to_create_it():
    asked: list = []
    with pytest.raises(FloodwayError) as info:
        modal_deploy.check_router_keys("floodway-router-keys",
                          exists=lambda name, keys: asked.append((name, keys)) and False)
    assert asked == [("floodway-router-keys", ("FLOODWAY_API_KEYS",))]
    text = str(info.value)
    assert "modal secret create floodway-router-keys FLOODWAY_API_KEYS=<key1>,<key2>" in text
    assert "public_router=True" in text
    modal_deploy.check_router_keys("floodway-router-keys", exists=lambda name, keys: True)


def test_secret_lookup_maps_not_found_to_false(monkeypatch):
    """The default lookup: ``Secret.from_name(name, required_keys=...).hydrate()``; Modal's
    NOT_FOUND (no such Secret, or keys missing) is False, other errors are raised."""
    seen: list = []

    def from_name(name, required_keys=()):
        seen.append((name, list(required_keys)))
        outcome = {"absent": NotFoundError("Secret 'absent' not found"),
                   "down": modal.exception.ConnectionError("no route")}.get(name)

        def hydrate():
            if outcome is not None:
                raise outcome
        return types.SimpleNamespace(hydrate=hydrate)

    monkeypatch.setattr(modal.Secret, "from_name", from_name)
    assert modal_deploy.secret_exists("there", ("FLOODWAY_API_KEYS",)) is True
    assert modal_deploy.secret_exists("absent", ("FLOODWAY_API_KEYS",)) is False
    with pytest.raises(modal.exception.ConnectionError):
        modal_deploy.secret_exists("down")
    assert seen[0] == ("there", ["FLOODWAY_API_KEYS"])


def test_floodway_deploy_stops_before_deploying_without_the_secret(monkeypatch):
    import modal_app

    sent: list = []
    monkeypatch.setattr(modal_deploy, "credentials_problem", lambda: None)
    monkeypatch.setattr(modal_deploy, "secret_exists", lambda name, keys: False)
    monkeypatch.setattr(modal_deploy, "modal_deploy", lambda app: sent.append(app))
    with pytest.raises(FloodwayError, match="modal secret create floodway-router-keys"):
        modal_deploy.deploy_and_apply(modal_app.app, modal_app.endpoints)
    assert sent == []
    from typer.testing import CliRunner

    from floodway import cli
    from tests.conftest import MODAL_APP

    r = CliRunner().invoke(cli.cli, ["deploy", str(MODAL_APP)])
    assert r.exit_code == 2 and sent == []
    assert "modal secret create floodway-router-keys FLOODWAY_API_KEYS=<key1>,<key2>" in r.output


def test_floodway_deploy_of_a_public_router_looks_up_no_secret(tmp_path, monkeypatch):
    module = _deploy_file(tmp_path, "fw_deploy_public_cli", _app(tmp_path), monkeypatch,
                          args=", public_router=True")
    sent: list = []
    monkeypatch.setattr(modal_deploy, "credentials_problem", lambda: None)
    monkeypatch.setattr(modal_deploy, "secret_exists",
                        lambda name, keys: pytest.fail("looked up a Secret"))
    monkeypatch.setattr(modal_deploy, "modal_deploy", lambda app: sent.append(app))
    monkeypatch.setattr(apply, "run_warmer", lambda *a, **k: [])
    monkeypatch.setattr(apply, "modal_stores", lambda: None)
    assert modal_deploy.deploy_and_apply(module.app, module.fw_app) == []
    assert sent == [module.app]


# ---------------------------------------------------------------- credentials

@pytest.mark.parametrize(("config", "ok", "why"), [
    ({}, False, "no Modal credentials"),
    ({"token_id": "ak-1", "token_secret": "as-1"}, True, None),
    ({"token_id": "ak-1"}, False, "incomplete Modal token"),
    ({"oauth_refresh_token": "r", "oauth_client_id": "oc-1", "oauth_client_secret": "ov-1"},
     True, None),
    ({"oauth_refresh_token": "r", "oauth_client_id": "oc-1", "oauth_jwt_key": "-----BEGIN"},
     True, None),
    ({"oauth_refresh_token": "r", "oauth_client_id": "oc-1", "oauth_client_secret": "ov-1",
      "oauth_jwt_key": "-----BEGIN"}, False, "exactly one of a client secret or a JWT key"),
    ({"oauth_refresh_token": "r", "oauth_jwt_key": "-----BEGIN"}, False,
     "incomplete Modal OAuth"),
    ({"oauth_client_id": "oc-1", "oauth_client_secret": "ov-1"}, False, "incomplete Modal OAuth"),
    ({"token_id": "ak-1", "token_secret": "as-1", "oauth_refresh_token": "r",
      "oauth_client_id": "oc-1", "oauth_jwt_key": "k"}, False, "both a Modal token and OAuth"),
])
def test_credentials_as_the_modal_client_accepts_them(config, ok, why, monkeypatch):
    """The combinations modal 1.6's ``Client.from_env`` accepts, and no others."""
    monkeypatch.setattr(modal_deploy, "jwt_libraries_problem", lambda: None)  # installed
    assert modal_deploy.credentials_configured(config.get) is ok
    problem = modal_deploy.credentials_problem(config.get)
    assert (problem is None) if ok else (why in problem)


def test_credentials_read_from_modal_config(monkeypatch):
    """The default lookup is Modal's own config: MODAL_* variables are seen."""
    for key in ("TOKEN_ID", "TOKEN_SECRET", "OAUTH_CLIENT_SECRET", "PROFILE"):
        monkeypatch.delenv(f"MODAL_{key}", raising=False)
    monkeypatch.setenv("MODAL_OAUTH_REFRESH_TOKEN", "r")
    monkeypatch.setenv("MODAL_OAUTH_CLIENT_ID", "oc-1")
    monkeypatch.setenv("MODAL_OAUTH_JWT_KEY", "-----BEGIN PRIVATE KEY-----")
    assert modal_deploy.credentials_configured()


def _without(monkeypatch, package: str) -> None:
    """`package` (and its submodules) as if not installed, for this test."""
    for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, package, None)


@pytest.mark.parametrize("missing", ["jwt", "cryptography"])
def test_a_jwt_key_needs_the_libraries_that_sign_it(monkeypatch, missing):
    """modal's client imports PyJWT and cryptography (its ``oauth`` extra) only when it opens
    with a JWT key, and raises ImportError then: the check names the extra first."""
    jwt_config = {"oauth_refresh_token": "r", "oauth_client_id": "oc-1",
                  "oauth_jwt_key": "-----BEGIN"}
    secret_config = {**jwt_config, "oauth_jwt_key": None, "oauth_client_secret": "ov-1"}
    _without(monkeypatch, missing)
    problem = modal_deploy.credentials_problem(jwt_config.get)
    assert problem is not None and "MODAL_OAUTH_JWT_KEY" in problem
    assert "pip install 'floodway[modal]'" in problem
    assert modal_deploy.credentials_problem(secret_config.get) is None     # no key to sign


def test_deploy_without_credentials_says_so_before_contacting_modal(monkeypatch):
    """`floodway deploy` checks the credentials first: no "contacting Modal" line before
    the refusal."""
    from typer.testing import CliRunner

    from floodway import cli
    from tests.conftest import MODAL_APP

    for key in ("TOKEN_ID", "TOKEN_SECRET", "PROFILE", "OAUTH_REFRESH_TOKEN",
                "OAUTH_CLIENT_ID", "OAUTH_CLIENT_SECRET", "OAUTH_JWT_KEY"):
        monkeypatch.delenv(f"MODAL_{key}", raising=False)
    monkeypatch.setenv("MODAL_CONFIG_PATH", os.devnull)
    monkeypatch.setattr(modal_deploy, "modal_deploy", lambda app: pytest.fail("deployed"))
    r = CliRunner().invoke(cli.cli, ["deploy", str(MODAL_APP)])
    assert r.exit_code == 2, r.output
    assert "no Modal credentials" in r.output and "contacting Modal" not in r.output


def test_without_the_modal_client_deploying_names_the_extra(tmp_path, monkeypatch):
    """The Modal client is the ``modal`` extra: `to_modal` and `floodway deploy` say what to
    install instead of failing on ``import modal``."""
    from typer.testing import CliRunner

    from floodway import cli
    from floodway.deploy import to_modal
    from tests.conftest import MODAL_APP

    monkeypatch.delenv(NO_MODAL_ENV, raising=False)
    _without(monkeypatch, "modal")
    with pytest.raises(FloodwayError, match=r"to_modal needs the Modal client.*floodway\[modal\]"):
        to_modal(_app(tmp_path))
    r = CliRunner().invoke(cli.cli, ["deploy", str(MODAL_APP)])
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert "deploy needs the Modal client" in r.output and "floodway[modal]" in r.output
    monkeypatch.setenv(NO_MODAL_ENV, "1")          # serving: no Modal objects, none needed
    assert to_modal(_app(tmp_path)) is None


# ---------------------------------------------------------------- floodway deploy, end to end

def test_credentials_check():
    assert not modal_deploy.credentials_configured(lambda key: None)
    assert modal_deploy.credentials_configured({"token_id": "ak-1", "token_secret": "as-1"}.get)
    assert not modal_deploy.credentials_configured({"token_id": "ak-1"}.get)
    oauth = {"oauth_refresh_token": "r", "oauth_client_id": "c", "oauth_client_secret": "s"}
    assert modal_deploy.credentials_configured(oauth.get)


def _cli_stand_ins(monkeypatch, configured=True):
    from floodway import cli
    log: list = []
    stores = _stores()
    monkeypatch.delenv("FLOODWAY_NO_MODAL", raising=False)
    creds = {"token_id": "ak-1", "token_secret": "as-1"} if configured else {}
    problem = modal_deploy.credentials_problem
    monkeypatch.setattr(modal_deploy, "credentials_problem", lambda: problem(creds.get))
    monkeypatch.setattr(modal_deploy, "secret_exists",
                        lambda name, keys: log.append(("secret", name, keys)) is None)
    monkeypatch.setattr(modal_deploy, "modal_deploy",
                        lambda module_app: log.append(("deploy", module_app.name)))
    monkeypatch.setattr(autoscaler, "deployed_autoscale",
                        lambda app_name: Recorder(log))
    monkeypatch.setattr(apply, "modal_stores", lambda: stores)
    sunday = _utc(2025, 1, 5, 12)
    monkeypatch.setattr(apply, "time", types.SimpleNamespace(time=lambda: sunday))
    return cli, log, stores


def test_deploy_then_reapplies_the_current_target(monkeypatch):
    from typer.testing import CliRunner

    cli, log, stores = _cli_stand_ins(monkeypatch)
    # The last applied settings equal the target: a deploy reset them, so apply anyway.
    stores.warm.put(("applied", "floodway-demo", "embed"), {
        "settings": {"min_containers": 1, "buffer_containers": 1, "scaledown_window": 120},
        "at": _utc(2025, 1, 5, 11, 59)})
    r = CliRunner().invoke(cli.cli, ["deploy", str(MODAL_APP)])
    assert r.exit_code == 0, r.output
    assert log == [("secret", "floodway-router-keys", ("FLOODWAY_API_KEYS",)),
                   ("deploy", "floodway-demo"), ("update_autoscaler", "embed", {
                       "min_containers": 1, "buffer_containers": 1, "scaledown_window": 120})]
    assert "deployed floodway-demo" in r.output
    assert "embed: applied min_containers=1 buffer_containers=1 scaledown_window=120s" \
        in r.output
    assert "config min_containers 1" in r.output


def test_deploy_without_credentials_sends_nothing(monkeypatch):
    from typer.testing import CliRunner

    cli, log, _ = _cli_stand_ins(monkeypatch, configured=False)
    r = CliRunner().invoke(cli.cli, ["deploy", str(MODAL_APP)])
    assert r.exit_code == 2
    assert "no Modal credentials" in r.output and "modal token new" in r.output
    assert log == []
    r = CliRunner().invoke(cli.cli, ["deploy", f"{MODAL_APP}::embed"])
    assert r.exit_code == 2 and "whole app" in r.output
