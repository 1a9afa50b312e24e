"""What bench sends: trace times scaled and cut to the duration, texts sized by the trace's
ContextTokens (unique per request), prompts with their max_new_tokens, or a given item."""

import numpy as np
import pytest

from floodway.bench.plan import TOKENS_PER_WORD, Inputs, plan_requests, text_of
from floodway.errors import FloodwayError
from floodway.sim.trace import Trace, read_trace


def _trace(times, ctx=None, gen=None):
    return Trace.from_times(np.asarray(times, dtype=float) + 1.7e9,
                            prompt_tokens=None if ctx is None else np.asarray(ctx),
                            generated_tokens=None if gen is None else np.asarray(gen))


def test_times_are_scaled_from_the_first_arrival_and_cut_at_the_duration():
    tr = _trace([0.0, 1.0, 2.0, 4.0, 8.0])
    plan = plan_requests(tr, Inputs(), time_scale=2.0)
    assert [p.send_s for p in plan] == pytest.approx([0.0, 0.5, 1.0, 2.0, 4.0])
    assert [p.index for p in plan] == [0, 1, 2, 3, 4]
    short = plan_requests(tr, Inputs(), time_scale=2.0, duration_s=2.0)
    assert [p.send_s for p in short] == pytest.approx([0.0, 0.5, 1.0])
    slow = plan_requests(tr, Inputs(), time_scale=0.5, duration_s=5.0)
    assert [p.send_s for p in slow] == pytest.approx([0.0, 2.0, 4.0])


@pytest.mark.parametrize(("scale", "dur"), [(0.0, None), (-1.0, None), (float("nan"), None),
                                            (1.0, 0.0)])
def test_bad_scale_or_duration_is_refused(scale, dur):
    with pytest.raises(FloodwayError, match="--time-scale|--duration-s"):
        plan_requests(_trace([0.0, 1.0]), Inputs(), scale, dur)


def test_texts_follow_context_tokens_capped_and_unique():
    plan = plan_requests(_trace([0, 1, 2, 3], ctx=[13, 130, 1, 100_000]), Inputs(max_words=50))
    words = [len(p.inputs[0].split()) for p in plan]
    # ceil(tokens / 1.3) words in all, 1..50, the first "#<index>"
    assert words[0] == 10 == round(13 / TOKENS_PER_WORD)
    assert words[1] == 50 and words[3] == 50
    assert words[2] == 1 and plan[2].inputs[0] == "#2"
    assert len({p.inputs[0] for p in plan}) == 4
    assert [p.tokens for p in plan] == [13, 130, 1, 100_000]
    assert all(p.inputs[0].split()[0] == f"#{p.index}" for p in plan)


def test_without_token_columns_a_short_text():
    plan = plan_requests(_trace([0, 1]), Inputs())
    assert plan[0].tokens is None
    assert 3 <= len(plan[0].inputs[0].split()) <= 10
    assert text_of(5, None) != text_of(6, None)


def test_prompts_take_generated_tokens_capped_and_json_items_are_sent_as_is():
    tr = _trace([0, 1], ctx=[10, 10], gen=[5, 900])
    plan = plan_requests(tr, Inputs("prompt", max_new_tokens=256))
    assert [p.inputs[0]["max_new_tokens"] for p in plan] == [5, 256]
    assert plan[0].inputs[0]["prompt"].startswith("#0 ")
    item = {"image": "data:..."}
    assert all(p.inputs == [item] for p in plan_requests(tr, Inputs("json", item)))
    with pytest.raises(FloodwayError, match="input kind"):
        Inputs("bytes")


def test_reads_the_simulators_trace_csv(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:17:03.50,26,3\n2023-11-16 18:17:04.00,260,9\n")
    plan = plan_requests(read_trace(p), Inputs())
    assert [p.send_s for p in plan] == pytest.approx([0.0, 0.5])
    assert [p.tokens for p in plan] == [26, 260]
