"""A keyword a config or the decorator does not take (a typo) is a ConfigError naming the
endpoint, the keyword, the closest valid name and every valid one; never a TypeError."""

import dataclasses

import pytest

import floodway as fw
from floodway.checks import Config
from floodway.functions.app import App
from floodway.functions.endpoint import KEYWORDS

# Each config with what it needs, and a field of it to misspell.
CONFIGS = [
    (fw.Build, {}, "max_seq_len"), (fw.WarmPool, {}, "min_containers"),
    (fw.Window, {"cron": "0 9 * * *", "duration_s": 60, "min_containers": 1}, "lead_s"),
    (fw.Route, {}, "timeout_s"), (fw.Batching, {}, "max_batch_rows"),
    (fw.Generation, {}, "max_sequences"), (fw.Cache, {}, "ttl_s"),
    (fw.Lane, {"name": "short"}, "max_tokens"), (fw.Recycle, {}, "max_rss_mib"),
    (fw.HFModel, {"repo_id": "org/m", "revision": "a" * 40}, "task"),
    (fw.LocalModel, {"path": "model/"}, "task"),
    (fw.TensorSpec, {"name": "x"}, "shape"), (fw.TorchModel, {"factory": "m:f"}, "weights"),
]


def test_every_config_is_covered():
    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    assert {c for c in subclasses(Config) if dataclasses.is_dataclass(c)} == \
        {c for c, _, _ in CONFIGS}


@pytest.mark.parametrize(("cls", "needs", "field"), CONFIGS,
                         ids=[c.__name__ for c, _, _ in CONFIGS])
def test_a_misspelt_config_keyword_is_a_problem_naming_the_closest_one(cls, needs, field):
    typo = field[:-1]   # "min_container"
    obj = cls(**needs, **{typo: 7})   # made without it: the file goes on importing
    (problem,) = [p for p in obj.problems("cfg") if p.field == f"cfg.{typo}"]
    text = problem.describe("embed")
    assert text.startswith(f"endpoint 'embed': cfg: fw.{cls.__name__} takes no keyword "
                           f"{typo!r} (given 7); did you mean {field!r}? valid: ")
    assert all(f.name in text for f in dataclasses.fields(cls))
    assert obj == cls(**needs)   # the object itself: as if the typo were not there


def test_the_decorator_reports_config_typos_with_its_other_problems():
    app = App("t")
    with pytest.raises(fw.ConfigError) as info:
        @app.endpoint(warm=fw.WarmPool(min_container=1, max_containers=0),
                      windows=[], route=fw.Route(timout_s=3))
        def embed(model, texts: list[str]) -> list[str]:
            return texts

    err = info.value
    assert err.endpoint == "embed" and len(err.problems) == 4
    text = str(err)
    assert "4 problem(s) in the definition of endpoint 'embed'" in text
    assert "warm: fw.WarmPool takes no keyword 'min_container' (given 1); did you mean " \
        "'min_containers'?" in text
    assert "warm.max_containers = 0 is not allowed" in text
    assert "route: fw.Route takes no keyword 'timout_s' (given 3); did you mean " \
        "'timeout_s'?" in text
    # A keyword of a config given to the decorator itself: where it belongs.
    assert "@app.endpoint takes no keyword 'windows' (given []); did you mean " \
        "warm=fw.WarmPool(windows=...)?" in text


@pytest.mark.parametrize(("typo", "hint"), [
    ("min_container", "did you mean warm=fw.WarmPool(min_containers=...)?"),
    ("wram", "did you mean 'warm'?"),
    ("timeout_s", "did you mean route=fw.Route(timeout_s=...)?"),
    ("max_batch_row", "did you mean batching=fw.Batching(max_batch_rows=...) or "
                      "build=fw.Build(max_batch_rows=...)?"),
    ("zzz", "valid: model, name, build"),
])
def test_a_keyword_the_decorator_does_not_take(typo, hint):
    app = App("t")
    with pytest.raises(fw.ConfigError) as info:
        app.endpoint(**{typo: 1})(lambda model, texts: texts)
    assert f"@app.endpoint takes no keyword {typo!r} (given 1); {hint}" in str(info.value)


def test_the_decorators_keywords_are_its_signature():
    import inspect

    params = inspect.signature(App.endpoint).parameters
    assert tuple(n for n, p in params.items() if p.kind is p.KEYWORD_ONLY) == KEYWORDS


def test_a_typo_for_a_field_without_a_default_cannot_make_the_config():
    with pytest.raises(fw.ConfigError) as info:
        fw.Window(cron="0 9 * * *", duration_s=60, min_container=1)
    text = str(info.value)
    assert "fw.Window takes no keyword 'min_container' (given 1); did you mean " \
        "'min_containers'?" in text and "missing 1 required" in text
