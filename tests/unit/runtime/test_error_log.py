"""The server log's record of the user's code failing: each error in full once, repeats of
the same one counted and summarised (a fake clock: no waits)."""

from __future__ import annotations

import logging

from floodway.runtime.error_log import ErrorLog


def trace(line: int, message: str = "ValueError: bad input 3") -> str:
    return ("Traceback (most recent call last):\n"
            f'  File "app.py", line {line}, in embed\n    raise ValueError(...)\n{message}\n')


def test_an_error_is_logged_in_full_with_its_endpoint_and_container(caplog):
    caplog.set_level(logging.ERROR, "floodway.endpoint")
    assert ErrorLog().report("embed", 3, "the function", trace(7), now=0.0)
    (rec,) = caplog.records
    text = rec.getMessage()
    assert text.startswith("endpoint 'embed', container 3: the function raised:\nTraceback")
    assert 'File "app.py", line 7, in embed' in text and rec.levelno == logging.ERROR


def test_repeats_of_one_error_are_counted_then_summarised_once_per_interval(caplog):
    caplog.set_level(logging.ERROR, "floodway.endpoint")
    errors = ErrorLog(every_s=60)
    logged = [errors.report("embed", 1, "the function", trace(7, f"ValueError: bad input {i}"),
                            now=float(i)) for i in range(50)]   # a hot loop: one a second
    assert logged == [True] + [False] * 49 and len(caplog.records) == 1
    # Another line, or another endpoint, is another error: logged at once.
    assert errors.report("embed", 1, "the function", trace(9), now=50.0)
    assert errors.report("rank", 2, "the function", trace(7), now=50.0)
    # Past the interval the same error is logged again, saying how many were left out.
    assert errors.report("embed", 2, "the function", trace(7), now=61.0)
    assert "the same error 49 more time(s) since it was last logged 61 s ago" in \
        caplog.records[-1].getMessage()
    assert not errors.report("embed", 2, "the function", trace(7), now=62.0)


def test_it_forgets_errors_beyond_its_bound_rather_than_growing():
    errors = ErrorLog(max_kinds=4)
    for line in range(10):
        errors.report("embed", 1, "the function", trace(line), now=0.0)
    assert len(errors._seen) <= 4
