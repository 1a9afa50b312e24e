"""The fake control plane itself, through the real modal client: credentials, named objects,
Dicts, function calls (results, raised exceptions, spawn, map), and RPCs it does not
implement."""

from __future__ import annotations

import modal
import pytest

from tests.modal.conftest import reset_modal_client
from tests.modal.support import deploy_example, run_async


def _lookup_with(monkeypatch, token_id: str, token_secret: str) -> None:
    """A Secret lookup by a fresh client sending `token_id` and `token_secret`."""
    monkeypatch.setenv("MODAL_TOKEN_ID", token_id)
    monkeypatch.setenv("MODAL_TOKEN_SECRET", token_secret)
    reset_modal_client()
    modal.Secret.from_name("present").hydrate()


def test_only_the_token_pairs_the_server_issued_are_answered(fake_modal, monkeypatch):
    """As Modal's server does: a request without an issued token id and its own secret is
    refused (UNAUTHENTICATED: the client's AuthError), whatever it asks for."""
    fake_modal.state.add_secret("present", {"A": "1"})
    other_id, other_secret = fake_modal.tokens.issue()
    _lookup_with(monkeypatch, other_id, other_secret)            # any issued pair works
    refused = [
        ("ak-fake", "as-fake", "Invalid token ID or secret"),    # well-formed, never issued
        (fake_modal.token_id, other_secret, "Invalid token ID or secret"),  # another's secret
        ("tk-" + fake_modal.token_id[3:], fake_modal.token_secret, "Token ID is malformed"),
        (fake_modal.token_id, "secret", "Token secret is malformed"),
    ]
    for token_id, token_secret, why in refused:
        with pytest.raises(modal.exception.AuthError, match=why):
            _lookup_with(monkeypatch, token_id, token_secret)
    assert len(fake_modal.tokens.refused) == len(refused)
    assert all(got.startswith(why) for got, (_, _, why) in zip(
        fake_modal.tokens.refused, refused, strict=True))


def test_secret_lookups_answer_like_modal(fake_modal):
    fake_modal.state.add_secret("present", {"A": "1"})
    modal.Secret.from_name("present").hydrate()
    modal.Secret.from_name("present", required_keys=["A"]).hydrate()
    with pytest.raises(modal.exception.NotFoundError, match="'absent' not found"):
        modal.Secret.from_name("absent").hydrate()
    with pytest.raises(modal.exception.NotFoundError, match="missing required keys: B"):
        modal.Secret.from_name("present", required_keys=["A", "B"]).hydrate()
    made = modal.Secret.from_dict({"X": "y"}).hydrate()
    assert fake_modal.state.secrets[made.object_id].env == {"X": "y"}


def test_dict_has_key_value_semantics(fake_modal):
    d = modal.Dict.from_name("kv", create_if_missing=True)
    d[("job", "fc-1")] = {"tenant": "t"}
    d.put("n", 1)
    assert d.put("n", 2, skip_if_exists=True) is False
    assert d.get("n") == 1 and d.get("missing", "dflt") == "dflt"
    assert ("job", "fc-1") in d and "other" not in d and d.len() == 2
    assert dict(d.items()) == {("job", "fc-1"): {"tenant": "t"}, "n": 1}
    assert d.pop("n") == 1 and d.len() == 1
    assert fake_modal.state.dict_items("kv") == {("job", "fc-1"): {"tenant": "t"}}
    with pytest.raises(modal.exception.NotFoundError):
        modal.Dict.from_name("never-made").hydrate()


def test_calls_return_raise_spawn_and_map(fake_modal):
    mod = deploy_example(fake_modal)

    def run_job(endpoint: str, inputs: list) -> list:
        if inputs == ["boom"]:
            raise ValueError("bad row")
        return [f"{endpoint}:{x}" for x in inputs]

    fake_modal.handle("run_job", run_job)
    assert mod.run_job.remote("embed", ["a"]) == ["embed:a"]
    with pytest.raises(ValueError, match="bad row"):
        mod.run_job.remote("embed", ["boom"])
    call = mod.run_job.spawn("embed", ["b"])
    assert modal.FunctionCall.from_id(call.object_id).get(timeout=10) == ["embed:b"]
    assert list(mod.run_job.map(["e1", "e2", "e3"], [["x"], ["y"], ["z"]])) == [
        ["e1:x"], ["e2:y"], ["e3:z"]]

    async def polled() -> object:
        return await modal.FunctionCall.from_id(call.object_id).get.aio(timeout=0)

    assert run_async(polled()) == ["embed:b"]


def test_a_missing_handler_fails_the_call_by_name(fake_modal):
    mod = deploy_example(fake_modal)
    with pytest.raises(Exception, match="no handler registered in the fake for 'run_job'"):
        mod.run_job.remote("embed", ["a"])


def test_unimplemented_rpcs_fail_loudly(fake_modal):
    with pytest.raises(modal.exception.UnimplementedError,
                       match="QueueGetOrCreate not in the fake"):
        modal.Queue.from_name("q", create_if_missing=True).hydrate()
    assert fake_modal.state.unimplemented == ["QueueGetOrCreate"]
