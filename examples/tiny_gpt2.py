"""A tiny GPT-2-architecture model with **untrained (random, seeded) weights**, written as a
Hugging Face folder, for `generate_app.py` and the tests. No Hub access is needed.

    python examples/tiny_gpt2.py <folder>       # or: make_tiny_gpt2(Path(<folder>))

What it writes, deterministically (the same bytes on every run with the same library
versions):

- ``config.json`` + ``model.safetensors``: `transformers.GPT2Config` with 2 layers, 4 heads,
  64-wide embeddings and 512 positions; weights drawn by `torch.manual_seed(0)`, with a
  wider initializer range than GPT-2's (0.02) so that the next-token scores are spread out
  and greedy decoding has clear winners (no near-ties for float rounding to flip);
- ``tokenizer.json``: a byte-level BPE tokenizer (the scheme GPT-2 uses) trained with the
  `tokenizers` library on ``data/tiny_gpt2_corpus.txt`` (shipped beside this file), with
  ``<|endoftext|>`` as its end-of-sequence token;
- ``tokenizer_config.json`` (with a simple chat template: ``role: content`` lines, then
  ``assistant:``) and ``generation_config.json``.

The weights were never trained: the text it generates is gibberish, but it is the same
gibberish every time for the same prompt and seed, and it matches `transformers`'
`generate()` token for token, which is what the tests check.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "data" / "tiny_gpt2_corpus.txt"
EOS = "<|endoftext|>"
VOCAB_SIZE = 400
SEED = 0
CHAT_TEMPLATE = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}assistant:{% endif %}")
CONFIG = {"n_layer": 2, "n_head": 4, "n_embd": 64, "n_positions": 512,
          "initializer_range": 0.3}


def train_tokenizer(folder: Path) -> int:
    """Train the byte-level BPE tokenizer on the shipped corpus, save ``tokenizer.json``
    in `folder`; returns the vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, min_frequency=2, show_progress=False,
                                  special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS.read_text(encoding="utf-8").splitlines(), trainer)
    tok.save(str(folder / "tokenizer.json"))
    return tok.get_vocab_size()


def make_tiny_gpt2(folder: Path) -> Path:
    """Write the tiny model's folder (see the module doc) and return it. Needs torch and
    transformers (the `build` extra)."""
    import torch
    from transformers import GenerationConfig, GPT2Config, GPT2LMHeadModel

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = train_tokenizer(folder)
    eos_id = 0     # the first special token takes id 0
    config = GPT2Config(vocab_size=vocab, bos_token_id=eos_id, eos_token_id=eos_id, **CONFIG)
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(config).eval()
    model.generation_config = GenerationConfig(bos_token_id=eos_id, eos_token_id=eos_id,
                                               pad_token_id=eos_id)
    model.save_pretrained(str(folder))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOS, "eos_token": EOS,
        "pad_token": EOS, "model_max_length": CONFIG["n_positions"],
        "chat_template": CHAT_TEMPLATE}, indent=2))
    return folder


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python examples/tiny_gpt2.py <folder>")
    print(make_tiny_gpt2(Path(sys.argv[1])))
