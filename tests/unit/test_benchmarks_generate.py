"""benchmarks/generate_parts.py: the trace slice and its scaling, the prompts, the summary
of a replay and the one-at-a-time service fit (what benchmarks/generate.py computes without
a server; tests/e2e/test_benchmark_generate.py runs the benchmark itself)."""

from __future__ import annotations

import math

import pytest

from benchmarks.generate_parts import (
    GEN_MAX,
    GEN_MIN,
    PROMPT_MAX,
    PROMPT_MIN,
    Outcome,
    Row,
    fit_service,
    load_trace,
    prompt_texts,
    scale_tokens,
    slice_trace,
    summarize,
    write_app,
)
from tests.conftest import ROOT

CORPUS = ROOT / "examples" / "data" / "tiny_gpt2_corpus.txt"


def test_tokens_scale_into_what_the_small_model_runs():
    assert scale_tokens(7437, 1899) == (PROMPT_MAX, GEN_MAX)     # the trace's largest
    assert scale_tokens(3, 1) == (PROMPT_MIN, GEN_MIN)
    assert scale_tokens(1469, 13) == (40, 13)                    # its medians: 1469/37
    assert scale_tokens(1000, 30, prompt_scale=0.1, gen_scale=0.5) == (100, 15)


def test_load_trace_reads_seconds_and_tokens_in_time_order(tmp_path):
    f = tmp_path / "t.csv"
    f.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2023-11-16 18:17:04.5000000,20,3\n"
                 "2023-11-16 18:17:03.9799600,4808,10\n"
                 "2023-11-16 18:17:05.0000000,7,1\n")
    rows = load_trace(f)
    assert [(round(t, 4), c, g) for t, c, g in rows] == [
        (0.0, 4808, 10), (0.5200, 20, 3), (1.0200, 7, 1)]


def test_slice_keeps_the_gaps_and_arrives_at_the_asked_rate():
    trace = [(0.0, 100, 5), (10.0, 200, 6), (11.0, 300, 7), (12.0, 400, 8), (20.0, 50, 9)]
    rows, factor = slice_trace(trace, 10.0, 3)
    assert factor == 1.0 and [r.at_s for r in rows] == [0.0, 1.0, 2.0]
    rows, factor = slice_trace(trace, 10.0, 4, rate_per_s=1.5)
    # 4 rows over 10 s: 3 gaps in 2 s at 1.5/s -> factor 0.2
    assert factor == pytest.approx(0.2)
    assert [r.at_s for r in rows] == pytest.approx([0.0, 0.2, 0.4, 2.0])
    assert [(r.context_tokens, r.generated_tokens) for r in rows] == [
        (200, 6), (300, 7), (400, 8), (50, 9)]
    assert rows[0].prompt_tokens == PROMPT_MIN and rows[-1].max_new_tokens == 9
    with pytest.raises(ValueError, match="2 rows from 12"):
        slice_trace(trace, 12.0, 3)


def test_prompts_have_the_asked_token_counts_and_differ(tmp_path):
    from tokenizers import Tokenizer

    from examples.tiny_gpt2 import train_tokenizer

    train_tokenizer(tmp_path)
    lengths = [8, 40, 200, 8, 40, 200]
    texts = prompt_texts(tmp_path / "tokenizer.json", lengths, CORPUS)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    got = [len(tok.encode(t).ids) for t in texts]
    # Re-tokenizing may merge a token at a window's edge; never more than a couple.
    assert all(abs(g - n) <= 2 for g, n in zip(got, lengths, strict=True)), got
    assert len(set(texts)) == len(texts)


def _out(sent, first, end, kind="finished", tokens=4, asked=4):
    return Outcome(Row(sent, 100, asked, 8, asked), sent, kind, first, end, tokens)


def test_summary_counts_outcomes_deadlines_and_tokens_per_second():
    outs = [_out(0.0, 0.1, 1.0), _out(0.5, 0.6, 2.0, tokens=10, asked=10),
            _out(1.0, 3.5, 4.0),                       # finished, first token 2.5 s late
            _out(1.0, None, 1.01, kind="shed", tokens=0),
            _out(2.0, 2.2, 3.0, kind="error", tokens=2),   # failed mid-stream
            _out(2.5, None, 2.6, kind="spilled", tokens=0)]
    s = summarize(outs, deadline_s=2.0)
    assert s.counts == {"finished": 3, "shed": 1, "spilled": 1, "timeout": 0, "error": 1}
    assert s.within_deadline == 2
    assert s.tokens == 4 + 10 + 4 + 2 and s.asked_tokens == 18
    assert s.span_s == pytest.approx(4.0) and s.tokens_per_s == pytest.approx(20 / 4.0)
    assert s.ttft_p50_s == pytest.approx(0.15)         # of 0.1, 0.1, 0.2, 2.5
    assert 2.0 < s.ttft_p99_s <= 2.5
    # per token after the first: 0.9/3, 1.4/9, 0.5/3
    assert s.tpot_p50_s == pytest.approx(0.5 / 3)


def test_summary_of_nothing_served_has_no_quantiles():
    s = summarize([_out(0.0, None, 0.01, kind="shed", tokens=0)], deadline_s=1.0)
    assert s.within_deadline == 0 and s.tokens_per_s == 0.0
    assert math.isnan(s.ttft_p99_s) and math.isnan(s.tpot_p50_s)


def test_service_fit_recovers_a_line_and_falls_back_without_one():
    a, b = fit_service([4, 10, 20, 40], [0.03 + 0.005 * g for g in (4, 10, 20, 40)])
    assert a == pytest.approx(0.03) and b == pytest.approx(0.005)
    assert fit_service([10, 10], [0.2, 0.4]) == (0.0, pytest.approx(0.03))
    a, b = fit_service([4, 40], [0.5, 0.1])            # slower for fewer tokens: noise
    assert (a, b) == (pytest.approx(0.3), 0.0)


def test_app_file_defines_one_streaming_endpoint_with_its_settings(tmp_path):
    from floodway.functions.discover import load_app

    path = write_app(tmp_path, "one_at_a_time", tmp_path / "model", max_sequences=1,
                     deadline_s=2.0)
    text = path.read_text()
    compile(text, str(path), "exec")
    assert "max_sequences=1" in text and "spill=()" in text and "timeout_s=2.0" in text
    (tmp_path / "model").mkdir()
    _, (ep,) = load_app(f"{path}::one_at_a_time")
    assert ep.streaming and ep.generation.max_sequences == 1
    assert ep.route.spill == () and ep.warm.max_containers == 1
