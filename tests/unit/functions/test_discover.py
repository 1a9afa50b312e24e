"""Loading an app file: the problems of every endpoint it defines wrongly, at once."""

from __future__ import annotations

import pytest

import floodway as fw
from floodway.functions.app import App, collecting
from floodway.functions.discover import load_app

TYPOS = '''
import floodway as fw

app = fw.App("typos")


@app.endpoint(min_container=1)
def embed(model, texts: list[str]) -> list[str]:
    return texts


@app.endpoint(warm=fw.WarmPool(min_container=1), route=fw.Route(timeout_s=-1))
def rank(model, texts: list[str]) -> list[str]:
    return texts


@app.endpoint()
def fine(model, texts: list[str]) -> list[str]:
    return texts


LOADED = True   # the file ran to its end
'''


def test_the_problems_of_every_endpoint_of_a_file_are_reported_together(tmp_path):
    path = tmp_path / "typos_app.py"
    path.write_text(TYPOS)
    with pytest.raises(fw.ConfigError) as info:
        load_app(str(path))
    err = info.value
    assert [e.endpoint for e in err.errors] == ["embed", "rank"] and len(err.problems) == 3
    lines = str(err).splitlines()
    assert lines[0] == f"3 problem(s) in 2 endpoint definitions of {path}:"
    assert lines[1].startswith("  endpoint 'embed': @app.endpoint takes no keyword "
                               "'min_container' (given 1); did you mean "
                               "warm=fw.WarmPool(min_containers=...)?")
    assert lines[2].startswith("  endpoint 'rank': warm: fw.WarmPool takes no keyword "
                               "'min_container' (given 1); did you mean 'min_containers'?")
    assert lines[3] == ("  endpoint 'rank': route.timeout_s = -1 is not allowed; allowed: a "
                        "number in (0, 3600]")
    import sys

    module = sys.modules["typos_app"]
    assert module.LOADED and "fine" in module.app._endpoints
    with pytest.raises(fw.ConfigError) as again:   # the App, once used, raises them too
        list(module.app)
    assert str(again.value) == str(err).replace(str(path), "App 'typos'")


def test_outside_a_file_load_the_decorator_raises_at_once():
    app = App("t")
    with pytest.raises(fw.ConfigError, match="min_container"):
        app.endpoint(min_container=1)(lambda model, texts: texts)
    with collecting() as errors:
        fn = app.endpoint(min_container=1)(lambda model, texts: texts)
    assert len(errors) == 1 and callable(fn)
    with pytest.raises(fw.ConfigError):
        app["x"]
    # Closed: raising again.
    with pytest.raises(fw.ConfigError):
        App("u").endpoint(min_container=1)(lambda model, texts: texts)
