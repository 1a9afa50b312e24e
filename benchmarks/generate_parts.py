"""The parts of `generate.py` that touch no server: the trace slice and its scaling, the
prompts, the benchmark's model and app file, and the summary of one replay.

Scaling (why: a production LLM trace asks for thousands of prompt tokens per request, which a
small model on two CPU cores cannot prefill at trace speed):

- prompt tokens = ContextTokens x `prompt_scale` (default 1/37, which maps the trace's
  largest context, 7,437 tokens, to 200), rounded, clipped to [PROMPT_MIN, PROMPT_MAX] = 8..200;
- max_new_tokens = GeneratedTokens x `gen_scale` (default 1: the trace's own lengths, median
  13, p90 55), rounded, clipped to [GEN_MIN, GEN_MAX] = 4..128 (the cap clips 1.5 % of rows);
- arrival times keep their gaps, multiplied by one factor chosen by the caller (`slice_trace`
  takes the rate the slice should arrive at on average).
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROMPT_MIN, PROMPT_MAX = 8, 200
GEN_MIN, GEN_MAX = 4, 128
PROMPT_SCALE = 1 / 37
CONTEXT_LEN = 512          # the model's positions and the build's max_seq_len
# A wide spread of next-token scores gives greedy decoding clear winners (no near-ties for
# float rounding to flip between PyTorch and ONNX Runtime); examples/tiny_gpt2.py uses 0.3 at
# 64 wide. Scaled by 1/sqrt(width) so the scores keep that spread at any width: the logits'
# standard deviation grows with sqrt(width) x the initializer range.
INIT_RANGE_AT_64 = 0.3


@dataclass(frozen=True)
class Row:
    """One request of the replay: `at_s` after the first send; its trace row's tokens and
    what they were scaled to."""

    at_s: float
    context_tokens: int
    generated_tokens: int
    prompt_tokens: int
    max_new_tokens: int


def load_trace(path: Path) -> list[tuple[float, int, int]]:
    """(seconds since the first request, ContextTokens, GeneratedTokens) per row, in time
    order."""
    with open(path, newline="") as f:
        rows = [(datetime.fromisoformat(r["TIMESTAMP"][:26]), int(r["ContextTokens"]),
                 int(r["GeneratedTokens"])) for r in csv.DictReader(f)]
    t0 = min(r[0] for r in rows)
    return sorted(((t - t0).total_seconds(), c, g) for t, c, g in rows)


def scale_tokens(context: int, generated: int, prompt_scale: float = PROMPT_SCALE,
                 gen_scale: float = 1.0) -> tuple[int, int]:
    """A trace row's (ContextTokens, GeneratedTokens) -> (prompt tokens, max_new_tokens)
    for the small model (see the module doc)."""
    p = int(np.clip(round(context * prompt_scale), PROMPT_MIN, PROMPT_MAX))
    g = int(np.clip(round(generated * gen_scale), GEN_MIN, GEN_MAX))
    return p, g


def slice_trace(trace: list[tuple[float, int, int]], start_s: float, requests: int,
                rate_per_s: float | None = None, prompt_scale: float = PROMPT_SCALE,
                gen_scale: float = 1.0) -> tuple[list[Row], float]:
    """The `requests` rows from `start_s` on (seconds into the trace), their times from the
    first one multiplied by one factor so they arrive at `rate_per_s` on average (None:
    the trace's own pace) -> (rows, the time factor). Raises ValueError when the trace
    has fewer rows from there."""
    rows = [r for r in trace if r[0] >= start_s][:requests]
    if len(rows) < max(requests, 1):
        raise ValueError(f"the trace has {len(rows)} rows from {start_s} s, not {requests}")
    t0 = rows[0][0]
    span = rows[-1][0] - t0
    factor = 1.0
    if rate_per_s is not None and span > 0 and len(rows) > 1:
        factor = (len(rows) - 1) / rate_per_s / span
    out = []
    for t, c, g in rows:
        p, n = scale_tokens(c, g, prompt_scale, gen_scale)
        out.append(Row((t - t0) * factor, c, g, p, n))
    return out, factor


def prompt_texts(tokenizer_file: Path, lengths: list[int], corpus: Path) -> list[str]:
    """One text per length in `lengths`: a window of that many tokens of `corpus` (tiled),
    each starting elsewhere so that no two prompts are alike, decoded back to text. The
    engine re-tokenizes the text, which can merge a few tokens at the window's edges: its
    answer's `usage.prompt_tokens` is what was prefilled."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tokenizer_file))
    ids = tok.encode(corpus.read_text(encoding="utf-8")).ids
    need = max(lengths, default=0) + len(ids)
    ids = ids * (need // len(ids) + 2)
    texts = []
    for i, n in enumerate(lengths):
        at = (i * 97) % (len(ids) - need)
        texts.append(tok.decode(ids[at:at + n]))
    return texts


def make_model(folder: Path, layers: int, width: int, heads: int) -> Path:
    """A GPT-2-architecture model with untrained weights from seed 0 (examples/tiny_gpt2.py's
    recipe and tokenizer, `layers` x `width`, `heads` heads) in `folder`, unless one is there.

    Its end-of-sequence token's embedding row is zero: the embeddings are tied to the output
    layer, so that token's score is always 0 while the best of the other 399 is well above
    it, and greedy decoding never ends early. Every answer then runs to its max_new_tokens,
    the trace's length (what `ignore_eos` does in vLLM's serving benchmark)."""
    if (folder / "config.json").is_file():
        return folder
    import torch
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    from examples.tiny_gpt2 import EOS, SEED, train_tokenizer

    folder.mkdir(parents=True, exist_ok=True)
    vocab = train_tokenizer(folder)
    eos_id = 0
    config = GPT2Config(vocab_size=vocab, bos_token_id=eos_id, eos_token_id=eos_id,
                        n_layer=layers, n_head=heads, n_embd=width, n_positions=CONTEXT_LEN,
                        initializer_range=INIT_RANGE_AT_64 * math.sqrt(64 / width))
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(config).eval()
    with torch.no_grad():
        model.transformer.wte.weight[eos_id].zero_()
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id,
                                               pad_token_id=eos_id)
    model.save_pretrained(str(folder))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOS, "eos_token": EOS,
        "pad_token": EOS, "model_max_length": CONTEXT_LEN}, indent=2))
    return folder


APP = '''"""Written by benchmarks/generate.py: the benchmark's model behind one streaming
endpoint with Generation(max_sequences={max_sequences})."""
import floodway as fw

app = fw.App("bench-generate-{name}")


@app.endpoint(model=fw.LocalModel({model!r}, task="text-generation"),
              build=fw.Build(max_seq_len={context}, max_batch_rows=8),
              batching=fw.Batching(max_batch_rows=8),
              warm=fw.WarmPool(min_containers=1, max_containers=1),
              route=fw.Route(timeout_s={deadline_s!r}, max_queue={max_queue}, spill=()),
              generation=fw.Generation(max_sequences={max_sequences}, max_new_tokens={gen_max}))
async def {name}(model: fw.Loaded, prompt: fw.Prompt):
    async for chunk in model.generate(prompt):
        yield chunk
'''


def write_app(folder: Path, name: str, model: Path, *, max_sequences: int, deadline_s: float,
              max_queue: int = 64) -> Path:
    """FOLDER/bench_NAME.py: one endpoint `name` on `model` with `max_sequences`, one
    container, no spill (a request that cannot get its first token by its deadline is shed,
    503). One app per endpoint, each served alone."""
    path = folder / f"bench_{name}.py"
    path.write_text(APP.format(name=name, model=str(model), context=CONTEXT_LEN,
                               deadline_s=deadline_s, max_queue=max_queue,
                               max_sequences=max_sequences, gen_max=GEN_MAX))
    return path


# ---------------------------------------------------------------- one replay's figures

OUTCOMES = ("finished", "shed", "spilled", "timeout", "error")


@dataclass
class Outcome:
    """One request as the client saw it (seconds on the client's clock, from the replay's
    start). `kind`: one of OUTCOMES (shed: 503/429, spilled: 202, timeout: 504 or the
    client's own limit before a first token, error: anything else, a stream that failed
    included); `first_s`/`end_s`: its first chunk and its end (None if never);
    `tokens`: generated tokens received; `prompt_tokens`: from its usage."""

    row: Row
    sent_s: float
    kind: str = "error"
    first_s: float | None = None
    end_s: float | None = None
    tokens: int = 0
    prompt_tokens: int | None = None
    detail: str = ""

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_s is None else self.first_s - self.sent_s


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1, linear) of `values`; nan when empty."""
    return float(np.quantile(values, q)) if values else math.nan


@dataclass(frozen=True)
class Summary:
    """One replay's figures (see `summarize`)."""

    requests: int
    counts: dict[str, int]
    within_deadline: int
    ttft_p50_s: float
    ttft_p99_s: float
    tpot_p50_s: float
    tokens: int
    asked_tokens: int
    span_s: float

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.span_s if self.span_s > 0 else 0.0


def summarize(outs: list[Outcome], deadline_s: float) -> Summary:
    """Figures of one replay: counts per outcome; finished within the deadline (a first
    chunk at most `deadline_s` after the send, and the answer finished); TTFT p50/p99 over
    every request that got a first chunk; the median time per output token after the first
    (finished answers of more than one token); generated tokens received (all requests) and
    asked for (the finished ones); the wall span from the first send to the last end."""
    counts = {k: sum(o.kind == k for o in outs) for k in OUTCOMES}
    ttft = [o.ttft_s for o in outs if o.ttft_s is not None]
    fin = [o for o in outs if o.kind == "finished"]
    within = sum(1 for o in fin if o.ttft_s is not None and o.ttft_s <= deadline_s)
    tpot = [(o.end_s - o.first_s) / (o.tokens - 1) for o in fin
            if o.end_s is not None and o.first_s is not None and o.tokens > 1]
    ends = [o.end_s for o in outs if o.end_s is not None]
    span = max(ends) - min(o.sent_s for o in outs) if ends else 0.0
    return Summary(len(outs), counts, within, pct(ttft, 0.5), pct(ttft, 0.99), pct(tpot, 0.5),
                   sum(o.tokens for o in outs), sum(o.row.max_new_tokens for o in fin), span)


def fit_service(gen: list[int], seconds: list[float]) -> tuple[float, float]:
    """Least-squares line seconds = a + b x generated tokens over one-at-a-time requests
    -> (a, b), both clipped at 0 (with one point, or all of one length: a = 0)."""
    g, s = np.asarray(gen, float), np.asarray(seconds, float)
    if len(set(gen)) < 2:
        return 0.0, float(s.sum() / max(g.sum(), 1.0))
    b, a = np.polyfit(g, s, 1)
    if a < 0:
        return 0.0, float(s.sum() / g.sum())
    if b < 0:
        return float(s.mean()), 0.0
    return float(a), float(b)
