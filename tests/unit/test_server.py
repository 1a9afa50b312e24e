"""`floodway serve APP::ENDPOINT` (build_server): only that endpoint is served; the app's
others are not started, their builds are not needed and their routes answer 404. A port in
use fails `serve` in one line before anything loads."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from floodway import server
from floodway.errors import ArtifactError, FloodwayError
from floodway.server import build_server

APP = '''
import floodway as fw

app = fw.App("two")


@app.endpoint()
def upper(model, texts: list[str]) -> list[str]:
    return [t.upper() for t in texts]


@app.endpoint()
def lower(model, texts: list[str]) -> list[str]:
    return [t.lower() for t in texts]
'''


@pytest.fixture
def app_file(tmp_path):
    path = tmp_path / "two_app.py"
    path.write_text(APP)
    # A published build of `upper` only (the store's LATEST pointer and its folder).
    store = tmp_path / "store"
    (store / "upper" / "k1").mkdir(parents=True)
    (store / "upper" / "LATEST").write_text("k1")
    return path, store


def _get(asgi, method: str, url: str, **kw) -> httpx.Response:
    async def go() -> httpx.Response:
        transport = httpx.ASGITransport(app=asgi)     # no lifespan: nothing starts
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await client.request(method, url, **kw)

    return asyncio.run(go())


def test_serve_app_endpoint_serves_only_that_endpoint(app_file, tmp_path):
    path, store = app_file
    asgi, pool = build_server(f"{path}::upper", store=store, jobs_db=tmp_path / "j.sqlite3")
    assert set(pool.endpoints) == {"upper"} and set(pool.containers) == {"upper"}
    assert [ep.name for ep in pool.app] == ["upper"]
    r = _get(asgi, "POST", "/v1/lower", json={"inputs": ["A"]})
    assert r.status_code == 404 and "lower" in r.json()["error"]["message"]
    models = _get(asgi, "GET", "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["upper"]


def test_serve_of_the_whole_app_needs_every_build(app_file, tmp_path):
    path, store = app_file
    with pytest.raises(ArtifactError, match="lower"):
        build_server(str(path), store=store, jobs_db=tmp_path / "j.sqlite3")
    with pytest.raises(ArtifactError, match="lower"):
        build_server(f"{path}::lower", store=store, jobs_db=tmp_path / "j.sqlite3")


def test_a_port_in_use_fails_in_one_line_before_anything_loads(monkeypatch):
    monkeypatch.setattr(server, "build_server",
                        lambda *a, **k: pytest.fail("the app loaded with its port in use"))
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        with pytest.raises(FloodwayError) as e:
            server.serve("app.py", port=port, api_keys=server.ApiKeys(()))
    assert str(e.value) == (f"port {port} on 127.0.0.1 is in use: stop the other server or "
                            "pass --port N")

