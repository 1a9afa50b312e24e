"""``modal_app.py`` deployed through the real modal client against the fake control plane:
what Modal would be told (functions, classes, GPU, autoscaler, concurrency, batching,
volumes, secrets, schedules, the web endpoint)."""

from __future__ import annotations

import sys

import modal
import pytest
from modal_proto import api_pb2

from floodway.modal.app.objects import ROUTER_MAX_INPUTS
from floodway.modal.autoscaler import class_autoscale
from floodway.modal.kv import MemoryKV
from floodway.modal.router.backend import ModalBackend
from floodway.modal.warmers.plan import warmer_plan
from tests.modal.support import APP_NAME, ROUTER_SECRET, deploy_example


def test_deploy_sends_every_function_and_class(fake_modal):
    deploy_example(fake_modal)
    state = fake_modal.state
    assert state.function_tags(APP_NAME) == {
        "Embed.*", "run_job", "router", "warm_cron_0", "warm_cron_1", "build_l4"}
    assert state.class_tags(APP_NAME) == {"Embed"}
    assert state.unimplemented == []
    # Images are answered as built at once; the floodway source travels as a mount.
    assert state.images
    mounted = {path for files in state.mounts.values() for path in files}
    assert "/root/floodway/modal/app/objects.py" in mounted


def test_gpu_class_definition(fake_modal):
    deploy_example(fake_modal)
    d = fake_modal.state.function("Embed.*", app=APP_NAME).definition
    assert d.is_class and set(d.method_definitions) == {"predict"}
    assert d.resources.gpu_config.gpu_type == "L4" and d.resources.gpu_config.count == 1
    a = d.autoscaler_settings
    assert (a.min_containers, a.buffer_containers, a.scaledown_window, a.max_containers) == (
        1, 1, 120, 8)
    assert (d.batch_max_size, d.batch_linger_ms) == (32, 5)
    assert d.checkpointing_enabled                        # enable_memory_snapshot=True
    [vol] = d.volume_mounts
    assert vol.mount_path == "/artifacts" and vol.read_only
    assert vol.volume_id == fake_modal.state.volumes["floodway-artifacts"].volume_id


def test_gpu_class_concurrency_is_what_the_router_models(fake_modal):
    """Bug 2: Modal runs ``max_concurrent_inputs`` batches per container (1 when undeclared);
    the router's snapshot must give each container exactly that many slots."""
    mod = deploy_example(fake_modal)
    declared = fake_modal.state.function("Embed.*", app=APP_NAME).definition.max_concurrent_inputs
    backend = ModalBackend(mod.endpoints, {"embed": mod.Embed}, stats=MemoryKV())
    slots = {c.slots for c in backend.snapshot("embed").containers}
    assert slots == {max(1, declared)}, (
        f"Modal runs {max(1, declared)} batch(es) per Embed container "
        f"(max_concurrent_inputs={declared}) but the router models {slots}")


def test_router_definition(fake_modal):
    deploy_example(fake_modal)
    state = fake_modal.state
    router = state.function("router", app=APP_NAME)
    d = router.definition
    assert d.webhook_config.type == api_pb2.WEBHOOK_TYPE_ASGI_APP
    assert router.handle.web_url.startswith("https://")
    assert not d.resources.gpu_config.gpu_type
    assert d.max_concurrent_inputs == ROUTER_MAX_INPUTS
    assert d.autoscaler_settings.min_containers == 1      # the GPU class keeps one warm
    assert state.function("run_job", app=APP_NAME).definition.max_concurrent_inputs == (
        ROUTER_MAX_INPUTS)


def test_router_gets_the_named_secret(fake_modal):
    """Bug 1: the router must be deployed with the Secret holding FLOODWAY_API_KEYS."""
    deploy_example(fake_modal)
    d = fake_modal.state.function("router", app=APP_NAME).definition
    assert fake_modal.state.secrets[ROUTER_SECRET].secret_id in d.secret_ids


def test_deploy_without_the_router_secret_fails_not_found(fake_modal):
    """Bug 1: with the Secret missing, the deploy stops with Modal's NOT_FOUND (instead of
    deploying a router that refuses every request)."""
    with pytest.raises(modal.exception.NotFoundError, match=ROUTER_SECRET):
        deploy_example(fake_modal, with_secret=False)
    assert fake_modal.state.deployed(APP_NAME) is None


def test_warmer_schedules(fake_modal):
    mod = deploy_example(fake_modal)
    plan = warmer_plan(mod.endpoints)
    assert [s.name for s in plan] == ["warm_cron_0", "warm_cron_1"]
    assert fake_modal.state.schedules(APP_NAME) == {s.name: (s.cron, s.timezone) for s in plan}
    for spec in plan:
        f = fake_modal.state.function(spec.name, app=APP_NAME)
        assert not f.definition.resources.gpu_config.gpu_type
    # The window is 08:55-09:55 on weekdays: its end fires at 09:55, its start earlier.
    crons = sorted(s.cron for s in plan)
    assert "55 9 * * 1-5" in crons and all(c.endswith("* * 1-5") for c in crons)


def test_build_function_writes_the_volume(fake_modal):
    deploy_example(fake_modal)
    d = fake_modal.state.function("build_l4", app=APP_NAME).definition
    assert d.resources.gpu_config.gpu_type == "L4"
    [vol] = d.volume_mounts
    assert vol.mount_path == "/artifacts" and not vol.read_only


def test_redeploy_resets_the_autoscaler_to_the_decorator(fake_modal):
    """A second deploy reuses the function ids and, as on Modal, resets the autoscaler
    settings a warmer changed (why `floodway deploy` re-applies them)."""
    mod = deploy_example(fake_modal)
    embed = fake_modal.state.function("Embed.*", app=APP_NAME)
    class_autoscale({"embed": mod.Embed})("embed", {"min_containers": 3})
    assert embed.autoscaler.min_containers == 3
    mod.app.deploy()
    assert fake_modal.state.function("Embed.*", app=APP_NAME).function_id == embed.function_id
    assert embed.autoscaler.min_containers == 1


# ---------------------------------------------------------------- credentials, from the CLI

def _cli(*args: str):
    from typer.testing import CliRunner

    from floodway import cli
    from tests.conftest import MODAL_APP

    return CliRunner().invoke(cli.cli, [args[0], str(MODAL_APP), *args[1:]])


def _one_error_line(output: str) -> str:
    """The output's only error line (asserting there is one, and no traceback)."""
    assert "Traceback" not in output, output
    [line] = [line for line in output.splitlines() if line.startswith("error:")]
    return line


def _oauth_jwt_env(monkeypatch, key: str) -> None:
    for name in ("MODAL_TOKEN_ID", "MODAL_TOKEN_SECRET", "MODAL_OAUTH_CLIENT_SECRET"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MODAL_OAUTH_REFRESH_TOKEN", "rt-0123456789")
    monkeypatch.setenv("MODAL_OAUTH_CLIENT_ID", "oc-0123456789")
    monkeypatch.setenv("MODAL_OAUTH_JWT_KEY", key)


def test_a_refused_token_is_one_line_and_nothing_is_deployed(fake_modal, monkeypatch):
    fake_modal.state.add_secret(ROUTER_SECRET, {"FLOODWAY_API_KEYS": "k"})
    monkeypatch.setenv("MODAL_TOKEN_SECRET", "as-notthisidssecret")
    r = _cli("deploy")
    assert r.exit_code == 2, r.output
    line = _one_error_line(r.output)
    assert "Modal refused the credentials to deploy: Invalid token ID or secret" in line
    assert "modal token new" in line
    assert fake_modal.state.deployed(APP_NAME) is None and fake_modal.tokens.refused


@pytest.mark.parametrize("missing", ["jwt", "cryptography"])
@pytest.mark.parametrize("command", [("deploy",), ("build", "--on-modal")])
def test_oauth_jwt_key_without_its_libraries_is_one_line_before_contacting_modal(
        fake_modal, monkeypatch, command, missing):
    """The client needs PyJWT and cryptography to sign a JWT key's assertions (modal's
    ``oauth`` extra) and raises ImportError when it opens; floodway says so first."""
    _oauth_jwt_env(monkeypatch, "-----BEGIN PRIVATE KEY-----\\n...\\n-----END PRIVATE KEY-----")
    for name in [m for m in sys.modules if m == missing or m.startswith(f"{missing}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, missing, None)        # as if not installed
    r = _cli(*command)
    assert r.exit_code == 2, r.output
    line = _one_error_line(r.output)
    assert "MODAL_OAUTH_JWT_KEY" in line and "pip install 'floodway[modal]'" in line
    assert "contacting Modal" not in r.output
    assert fake_modal.state.apps == {} and fake_modal.tokens.refused == []


def test_oauth_jwt_key_is_signed_and_sent_with_the_modal_extra(fake_modal, monkeypatch):
    """With the ``modal`` extra installed the client signs the JWT key's assertion and sends
    it; the fake issues no OAuth clients, so it refuses them, in one line."""
    pytest.importorskip("jwt")
    rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")
    from cryptography.hazmat.primitives import serialization

    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()
    _oauth_jwt_env(monkeypatch, pem)
    fake_modal.state.add_secret(ROUTER_SECRET, {"FLOODWAY_API_KEYS": "k"})
    r = _cli("deploy")
    assert r.exit_code == 2, r.output
    assert "OAuth credentials are not accepted" in _one_error_line(r.output)
    assert fake_modal.state.deployed(APP_NAME) is None
