"""Admission: priority and deadline headers, token buckets per tenant, API-key tenants, and
serve refusing a public bind without keys. Every time is passed in; nothing sleeps."""

from __future__ import annotations

import pytest

from floodway import Route, Unauthorized
from floodway.errors import FloodwayError, RequestError
from floodway.routers.admission import (
    ANONYMOUS,
    ApiKeys,
    Priority,
    TenantLimiter,
    TokenBucket,
    key_id,
    parse_deadline,
    parse_priority,
    tenant_of,
)

KEY = "sk-test_0123456789abcdef"
OTHER = "sk-other/AbCdEf+xyz=="


# -- X-Priority ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("header", "want"), [
    (None, Priority.NORMAL), ("", Priority.NORMAL), ("  ", Priority.NORMAL),
    ("high", Priority.HIGH), (" HIGH ", Priority.HIGH), ("Normal", Priority.NORMAL),
    ("low", Priority.LOW), ("lOw\t", Priority.LOW),
])
def test_priority_values(header, want):
    assert parse_priority(header) is want


def test_priority_order():
    assert Priority.LOW < Priority.NORMAL < Priority.HIGH and int(Priority.HIGH) == 2


@pytest.mark.parametrize("header", ["urgent", "1", "hi", "high,low", "HIGH!", "x" * 500])
def test_bad_priority_is_a_400_naming_value_and_choices(header):
    with pytest.raises(RequestError) as e:
        parse_priority(header)
    assert e.value.status == 400 and e.value.field == "X-Priority"
    msg = str(e.value)
    assert header[:20] in msg and "high, normal, low" in msg
    assert len(msg) < 200   # a long value is cut, not reflected whole


# -- X-Deadline-Ms ------------------------------------------------------------------------------

@pytest.mark.parametrize(("header", "want"), [
    (None, 2.0), ("", 2.0), ("1", 0.001), ("250", 0.25), (" 1500 ", 1.5), ("0100", 0.1),
    ("3600000", 3600.0),
])
def test_deadline_values(header, want):
    assert parse_deadline(header, default_s=2.0) == want


@pytest.mark.parametrize("header", [
    "0", "000", "-5", "+5", "1.5", "1e3", "abc", "1_000", "3600001", "9" * 5000, "١٢",
])
def test_bad_deadline_is_a_400_naming_value_and_range(header):
    with pytest.raises(RequestError) as e:
        parse_deadline(header, default_s=2.0)
    assert e.value.status == 400 and e.value.field == "X-Deadline-Ms"
    assert header[:10] in str(e.value) and "from 1 to 3600000" in str(e.value)


def test_deadline_max_is_configurable():
    assert parse_deadline("5000", default_s=1, max_s=5) == 5.0
    with pytest.raises(RequestError, match="from 1 to 5000"):
        parse_deadline("5001", default_s=1, max_s=5)


# -- TokenBucket --------------------------------------------------------------------------------

def test_bucket_starts_full_then_refuses_with_the_wait():
    b = TokenBucket(rate_per_s=2, burst=3)
    assert [b.take(100.0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert b.take(100.0) == pytest.approx(0.5)    # one token at 2/s
    assert b.take(100.0, 2) == pytest.approx(1.0)
    assert b.level(100.0) == pytest.approx(0.0)   # refusals take nothing


def test_bucket_refills_over_time_and_never_beyond_burst():
    b = TokenBucket(rate_per_s=10, burst=5)
    for _ in range(5):
        assert b.take(0.0) == 0.0
    assert b.take(0.05) == pytest.approx(0.05)    # half a token there
    assert b.take(0.1) == 0.0                     # a whole one, despite float rounding
    assert b.take(0.1) > 0
    assert b.level(1000.0) == 5.0                 # a long rest refills to burst, no further
    assert [b.take(1000.0) for _ in range(6)][-1] == pytest.approx(0.1)


def test_bucket_average_rate_matches():
    b = TokenBucket(rate_per_s=4, burst=1)
    admitted = sum(b.take(t / 100) == 0.0 for t in range(1001))   # 0 to 10 s, every 10 ms
    assert admitted == 1 + 40   # the one it started with, then 4/s for 10 s


def test_bucket_clock_stepping_back_does_not_refill_or_drain():
    b = TokenBucket(rate_per_s=1, burst=2)
    b.take(10.0)
    b.take(10.0)
    assert b.take(5.0) == pytest.approx(1.0)
    assert b.take(10.5) == pytest.approx(0.5)


def test_bucket_argument_checks():
    for rate, burst in [(0, 1), (-1, 1), (float("inf"), 1), (1, 0)]:
        with pytest.raises(ValueError):
            TokenBucket(rate, burst)
    b = TokenBucket(1, 2)
    for n in (0, 3):
        with pytest.raises(ValueError, match=r"\(0, 2\]"):
            b.take(0.0, n)


# -- TenantLimiter ------------------------------------------------------------------------------

def test_limiter_isolates_tenants():
    lim = TenantLimiter(rate_per_s=1, burst=2)
    assert lim.check("a", 0.0) == 0.0 and lim.check("a", 0.0) == 0.0
    assert lim.check("a", 0.0) == pytest.approx(1.0)
    assert lim.check("b", 0.0) == 0.0 and lim.check("b", 0.0) == 0.0
    assert lim.check("a", 1.0) == 0.0


def test_limiter_unlimited_stores_nothing():
    lim = TenantLimiter(rate_per_s=None, burst=1)
    assert all(lim.check(f"t{i}", 0.0) == 0.0 for i in range(1000))
    assert all(lim.check("t", 0.0) == 0.0 for _ in range(1000))
    assert len(lim) == 0


def test_limiter_evicts_least_recently_used_beyond_max_tenants():
    lim = TenantLimiter(rate_per_s=1, burst=1, max_tenants=3)
    for t in "abc":
        lim.check(t, 0.0)
    assert lim.check("a", 0.0) > 0     # a is now the most recently used, and empty
    lim.check("d", 0.0)                # evicts b, the least recently used
    assert len(lim) == 3
    assert lim.check("a", 0.0) > 0     # kept: still limited
    assert lim.check("c", 0.0) > 0     # kept
    assert lim.check("b", 0.0) == 0.0  # evicted, so back with a full bucket
    assert len(lim) == 3


def test_limiter_for_route():
    assert TenantLimiter.for_route(Route()).rate_per_s is None
    lim = TenantLimiter.for_route(Route(tenant_rate_per_s=5, tenant_burst=2))
    assert lim.check("t", 0.0) == 0.0 and lim.check("t", 0.0) == 0.0
    assert lim.check("t", 0.0) == pytest.approx(0.2)
    with pytest.raises(ValueError):
        TenantLimiter(0, 1)
    with pytest.raises(ValueError):
        TenantLimiter(1, 1, max_tenants=0)


# -- API keys and tenants -----------------------------------------------------------------------

def test_api_keys_from_env_ignores_blanks_and_adds_extra():
    keys = ApiKeys.from_env(environ={"FLOODWAY_API_KEYS": f" {KEY} ,, ,{OTHER},"})
    assert keys.keys == {KEY, OTHER} and len(keys) == 2 and keys
    keys = ApiKeys.from_env(["k3", " "], environ={"FLOODWAY_API_KEYS": KEY})
    assert keys.keys == {KEY, "k3"}
    assert not ApiKeys.from_env(environ={}) and not ApiKeys.from_env(
        environ={"FLOODWAY_API_KEYS": " , "})
    assert ApiKeys([KEY, " ", KEY]).keys == {KEY}


def test_api_keys_from_env_reads_the_process_environment(monkeypatch):
    monkeypatch.setenv("FLOODWAY_API_KEYS", f"{KEY},{OTHER}")
    assert ApiKeys.from_env().keys == {KEY, OTHER}


def test_api_keys_refuse_unsendable_keys_without_showing_them():
    with pytest.raises(FloodwayError, match="FLOODWAY_API_KEYS entry #2") as e:
        ApiKeys.from_env(environ={"FLOODWAY_API_KEYS": "good,bad key"})
    assert "bad key" not in str(e.value)
    with pytest.raises(FloodwayError, match="--api-key #1"):
        ApiKeys.from_env(["ключ"], environ={})
    with pytest.raises(TypeError):
        ApiKeys(KEY)


def test_api_keys_repr_hides_keys():
    r = repr(ApiKeys([KEY]))
    assert KEY not in r and key_id(KEY) in r


def test_tenant_of_with_keys():
    keys = ApiKeys([KEY, OTHER])
    assert tenant_of(f"Bearer {KEY}", keys) == key_id(KEY)
    assert tenant_of(f"  bearer   {KEY} ", keys) == key_id(KEY)   # scheme is case-insensitive
    assert tenant_of(f"Bearer {OTHER}", keys) == key_id(OTHER) != key_id(KEY)
    assert key_id(KEY).startswith("key-") and len(key_id(KEY)) == 16
    assert KEY not in key_id(KEY)


@pytest.mark.parametrize(("header", "says", "error"), [
    (None, "missing Authorization", None),
    ("", "missing Authorization", None),
    ("Bearer", "not of the form", None),
    (f"Basic {KEY}", "not of the form", None),
    (KEY, "not of the form", None),
    (f"Bearer {KEY}x", "not an accepted API key", "invalid_token"),
    (f"Bearer {KEY[:-1]}", "not an accepted API key", "invalid_token"),
    ("Bearer ключ", "not an accepted API key", "invalid_token"),
])
def test_tenant_of_refuses_with_401_without_echoing_the_token(header, says, error):
    with pytest.raises(Unauthorized) as e:
        tenant_of(header, ApiKeys([KEY]))
    err = e.value
    assert isinstance(err, RequestError)
    assert err.status == 401 and err.field == "Authorization" and says in str(err)
    assert err.error == error
    assert err.challenge.startswith("Bearer ")
    assert (f'error="{error}"' in err.challenge) == bool(error)
    assert KEY[:-1] not in str(err) and "ключ" not in str(err)


def test_tenant_of_without_keys():
    none = ApiKeys()
    assert tenant_of(None, none) == ANONYMOUS == "anonymous"
    assert tenant_of("", none) == ANONYMOUS
    assert tenant_of("Basic abc", none) == ANONYMOUS
    assert tenant_of("Bearer", none) == ANONYMOUS
    assert tenant_of("Bearer anything", none) == key_id("anything")   # not checked
    assert tenant_of("Bearer a", none) != tenant_of("Bearer b", none)


# -- serve: no public bind without keys ---------------------------------------------------------

def test_serve_refuses_non_loopback_without_keys(monkeypatch, tmp_path):
    from floodway import server

    monkeypatch.delenv("FLOODWAY_API_KEYS", raising=False)
    # The app spec does not exist: the refusal comes before anything is loaded or started.
    missing = str(tmp_path / "absent.py")
    for keys in (None, ApiKeys()):
        with pytest.raises(FloodwayError, match="not a loopback address") as e:
            server.serve(missing, host="0.0.0.0", api_keys=keys)
        assert "FLOODWAY_API_KEYS" in str(e.value) and "--api-key" in str(e.value)


def test_serve_allows_non_loopback_with_keys(monkeypatch, tmp_path):
    from floodway import server

    seen = {}

    class Stop(Exception):
        pass

    def fake_build_server(app_spec, **kw):
        seen.update(kw)
        raise Stop   # got past the bind check; start nothing

    monkeypatch.setattr(server, "build_server", fake_build_server)
    with pytest.raises(Stop):
        server.serve("x.py", host="0.0.0.0", api_keys=ApiKeys([KEY]))
    assert seen["api_keys"].keys == {KEY}
    monkeypatch.setenv("FLOODWAY_API_KEYS", OTHER)
    with pytest.raises(Stop):
        server.serve("x.py", host="0.0.0.0")
    assert seen["api_keys"].keys == {OTHER}


def test_make_asgi_app_keeps_the_keys():
    from floodway import App
    from floodway.core.clock import ManualClock
    from floodway.http.app import make_asgi_app
    from tests.app.scripted import ScriptedBackend

    app = App("t")
    backend = ScriptedBackend(app, ManualClock())
    assert make_asgi_app(app, backend, api_keys=ApiKeys([KEY])).state.api_keys.keys == {KEY}
    assert not make_asgi_app(app, backend).state.api_keys


def test_cli_serve_has_api_key_option():
    from typer.testing import CliRunner

    from floodway import cli

    r = CliRunner().invoke(cli.cli, ["serve", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "--api-key" in r.output and "FLOODWAY_API_KEYS" in r.output
