"""``floodway build APP --on-modal`` against the fake control plane: an ephemeral run of the
build functions alone (bug 6: running the whole app would start the GPU class, kept warm by
its ``min_containers``, before the first build exists)."""

from __future__ import annotations

from modal_proto import api_pb2

from floodway.modal.app.build import run_builds_on_modal
from tests.modal.conftest import load_modal_app


def test_build_on_modal_runs_only_the_build_functions(fake_modal):
    mod = load_modal_app()
    asked: list[dict] = []

    def build_l4(endpoint=None, force=False) -> list[dict]:
        asked.append({"endpoint": endpoint, "force": force})
        return [{"endpoint": "embed", "key": "k", "cached": False}]

    fake_modal.handle("build_l4", build_l4)
    assert run_builds_on_modal(mod.app, mod.endpoints) == [
        {"endpoint": "embed", "key": "k", "cached": False}]
    assert asked == [{"endpoint": None, "force": False}]
    [run] = fake_modal.state.apps.values()
    assert run.state != api_pb2.APP_STATE_DEPLOYED           # ephemeral, not a deploy
    assert set(run.function_ids) == {"build_l4"} and not run.class_ids
    # Nothing that Modal would keep warm (the GPU class, the router) was created.
    assert [f.tag for f in fake_modal.state.functions.values()] == ["build_l4"]
