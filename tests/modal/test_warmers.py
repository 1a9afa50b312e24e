"""Warmers against the fake control plane: the generated cron body, `run_warmer` at a fixed
time, and `floodway deploy`'s `deploy_and_apply`, each changing the GPU class's autoscaler
through the real client (and keeping their state in real modal.Dicts)."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime

from floodway.modal.autoscaler import class_autoscale
from floodway.modal.deploy import deploy_and_apply
from floodway.modal.warmers.apply import WARM_DICT, modal_stores, run_warmer
from tests.modal.support import APP_NAME, ROUTER_SECRET, deploy_example
from tests.modal_fake import FakeModalServer

# Monday 2024-01-01: inside the example's weekday window (08:55-09:55 UTC, 4 containers)
# and well outside it.
IN_WINDOW_S = datetime(2024, 1, 1, 9, 30, tzinfo=UTC).timestamp()
OFF_WINDOW_S = datetime(2024, 1, 1, 14, 0, tzinfo=UTC).timestamp()


def _embed_updates(server: FakeModalServer) -> list[dict]:
    return server.state.updates_for("Embed.*")


def test_run_warmer_applies_the_window_then_leaves_it(fake_modal):
    mod = deploy_example(fake_modal)
    autoscale = class_autoscale({"embed": mod.Embed})

    def warm(now_s: float):
        [applied] = run_warmer(mod.endpoints, ["embed"], autoscale=autoscale,
                               stores=modal_stores(), now_s=now_s)
        assert applied.error is None, applied.error
        return applied

    inside = warm(IN_WINDOW_S)
    again = warm(IN_WINDOW_S + 30)          # unchanged: read back from the floodway-warm Dict
    outside = warm(OFF_WINDOW_S)
    assert (inside.called, again.called, outside.called) == (True, False, True)
    assert _embed_updates(fake_modal) == [inside.settings, outside.settings]
    assert inside.settings == {"min_containers": 4, "buffer_containers": 1,
                               "scaledown_window": 120}
    assert outside.settings["min_containers"] == 1
    embed = fake_modal.state.function("Embed.*", app=APP_NAME)
    assert embed.autoscaler.min_containers == 1 and embed.autoscaler.max_containers == 8
    stored = fake_modal.state.dict_items(WARM_DICT)[("applied", APP_NAME, "embed")]
    assert stored["settings"] == outside.settings


def test_generated_cron_body_changes_the_autoscaler(fake_modal):
    """``warm_cron_0`` as Modal runs it on schedule (its body, in-process): whatever the
    time, it applies the endpoint's current target once, through the class."""
    mod = deploy_example(fake_modal)
    [result] = mod.warm_cron_0.local()
    assert result["error"] is None and result["called"]
    assert _embed_updates(fake_modal) == [result["settings"]]
    assert result["settings"]["min_containers"] in (1, 4)


def test_floodway_deploy_reapplies_after_deploying(fake_modal):
    """`floodway deploy`: the deploy resets the autoscaler, then every target is applied
    again, through the class looked up by name in the deployed app."""
    fake_modal.state.add_secret(ROUTER_SECRET, {"FLOODWAY_API_KEYS": "k"})
    from tests.modal.conftest import load_modal_app

    mod = load_modal_app()
    [applied] = deploy_and_apply(mod.app, mod.endpoints, now_s=IN_WINDOW_S)
    assert fake_modal.state.deployed(APP_NAME) is not None
    assert applied.called and applied.settings["min_containers"] == 4
    assert _embed_updates(fake_modal) == [applied.settings]
    assert fake_modal.state.function("Embed.*", app=APP_NAME).autoscaler.min_containers == 4


def test_warmer_uses_the_current_autoscaler_api(fake_modal):
    """Bug 4: ``update_autoscaler`` is deprecated in modal 1.6 (it warns, pointing to
    ``Function.autoscaler.update()``); the warmers must not use it."""
    mod = deploy_example(fake_modal)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_warmer(mod.endpoints, ["embed"], autoscale=class_autoscale({"embed": mod.Embed}),
                   stores=modal_stores(), now_s=IN_WINDOW_S)
    assert _embed_updates(fake_modal), "no autoscaler update reached Modal"
    deprecated = [str(w.message) for w in caught if "deprecated" in str(w.message)]
    assert deprecated == []


def test_a_streaming_endpoint_is_sized_from_what_the_router_published(fake_modal):
    """The router's generation fits of a streaming endpoint reach the warmers through the
    real ``floodway-stats`` Dict (``generation:<endpoint>``): the warmer's measurements are
    the local pool's `measured_generation` of the router's own estimator."""
    from floodway.core.generation import measured_generation
    from floodway.modal.contract import max_sequences
    from floodway.modal.router.backend import ModalBackend
    from floodway.modal.stats import STATS_DICT, cold_estimator, generation_record
    from floodway.modal.warmers.apply import measured_of
    from floodway.modal.worker.stream import container_chunks
    from tests.modal.support import run_async
    from tests.modal.test_streaming import STREAM_APP, WORDS

    mod = deploy_example(fake_modal, path=STREAM_APP)
    talk = mod.endpoints["talk"]
    fake_modal.handle("Talk.stream", lambda prompt: container_chunks(talk.fn, None, prompt))
    backend = ModalBackend(mod.endpoints, {"talk": mod.Talk})       # the real stats Dict

    async def go() -> None:
        await backend.run("talk", [WORDS, "x y"], timeout_s=30)
        await backend.refresh("talk")

    run_async(go())
    est = backend._eps["talk"].generation
    published = fake_modal.state.dict_items(STATS_DICT)["generation:talk"]
    assert published == generation_record(est) and published["samples"]["requests"] == 2
    assert measured_of(talk, modal_stores().stats) == \
        measured_generation(cold_estimator(), est, max_sequences(talk))
    [applied] = run_warmer(mod.endpoints, ["talk"], stores=modal_stores(), now_s=OFF_WINDOW_S,
                           autoscale=class_autoscale({"talk": mod.Talk}))
    assert applied.error is None and applied.settings["min_containers"] == 1
