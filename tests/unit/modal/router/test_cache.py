"""The response cache on Modal, offline: the router's build keys from the artifact Volume,
the shared `modal.Dict` tier (a MemoryKV in its place) across two routers over the same
fake Modal classes, and the router function's Volume mount."""

from __future__ import annotations

import asyncio
import json

import httpx

import floodway as fw
from floodway.build.store import ArtifactStore
from floodway.http.app import make_asgi_app
from floodway.modal.kv import MemoryKV, ModalDictKV
from floodway.modal.router.backend import ModalBackend
from floodway.modal.router.cache import CACHE_DICT, RETRY_S, DeployedBuilds, shared_cache
from floodway.routers.admission import ApiKeys
from tests.unit.modal.app.test_objects import _impl, modal_app  # noqa: F401
from tests.unit.modal.router.test_backend import AUTH_A, KEY_A, FakeModal, _clock

app = fw.App("mc")


@app.endpoint(model=fw.HFModel("org/m", revision="b" * 40),
              warm=fw.WarmPool(min_containers=1), cache=fw.Cache(shared=True))
def upper(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


def _publish(root, endpoint, key):
    store = ArtifactStore(root)
    staging = store.staging_dir(endpoint)
    (staging / "manifest.json").write_text("{}")
    store.publish(endpoint, key, staging)


def test_a_router_keeps_the_build_it_first_read_and_retries_a_missing_one(tmp_path):
    now = [0.0]
    builds = DeployedBuilds(tmp_path, monotonic=lambda: now[0])
    assert builds.key("upper") is None            # nothing published yet
    _publish(tmp_path, "upper", "k1")
    assert builds.key("upper") is None            # not read again before RETRY_S
    now[0] += RETRY_S
    assert builds.key("upper") == "k1"
    _publish(tmp_path, "upper", "k2")             # reaches the classes only on a deploy,
    assert builds.key("upper") == "k1"            # which starts new routers


def test_the_shared_tier_is_the_cache_dict_only_when_an_endpoint_asks():
    kv = shared_cache(app)
    assert isinstance(kv, ModalDictKV) and kv.name == CACHE_DICT
    plain = fw.App("plain")
    plain.endpoint(model=fw.HFModel("org/m", revision="b" * 40), name="e")(lambda m, xs: xs)
    assert shared_cache(plain) is None


def test_a_second_router_answers_from_the_shared_tier_without_calling_the_class():
    fake, data = FakeModal(), {}

    def router():
        backend = ModalBackend(app, {"upper": fake.cls()}, stats=MemoryKV(), clock=_clock())
        return make_asgi_app(app, backend, api_keys=ApiKeys([KEY_A]), clock=_clock(),
                             build_key=lambda e: "k1", shared_cache=MemoryKV(data))

    async def ask(asgi, inputs):
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi),
                                     base_url="http://t") as c:
            return await c.post("/v1/upper", content=json.dumps({"inputs": inputs}),
                                headers={"Content-Type": "application/json", **AUTH_A})

    async def go():
        first = router()
        await ask(first, ["a", "b"])
        await first.state.cache.shared.drain()
        return await ask(router(), ["b", "c", "a"])

    r = asyncio.run(go())
    assert r.status_code == 200 and r.json() == {"outputs": ["B", "C", "A"]}
    assert r.headers["x-floodway-cache-hits"] == "2"
    rows = [args[0] for name, args in fake.calls if name == "predict.remote.aio"]
    assert rows == ["a", "b", "c"]                 # the second router ran only "c"
    assert len(data) == 3 and all(len(k) == 64 for k in data)   # hashed keys


def test_the_router_mounts_the_artifact_volume_read_only(modal_app):  # noqa: F811
    mount = modal_app.router.info().volumes["/artifacts"]
    assert mount.name == "floodway-artifacts" and mount.read_only is True
