"""Small local models for the task tests, made offline and seeded (their heads are untrained:
parity compares ONNX Runtime with PyTorch on the same weights, so training does not matter).

- `text_classifier`: the real all-MiniLM-L6-v2 backbone with a seeded 3-label
  classification head (BertForSequenceClassification), as a cross-encoder is shaped;
- `token_classifier`: a tiny BERT (2 layers, hidden 32) with MiniLM's tokenizer and a
  seeded 5-label token-classification head;
- `image_classifier`: a tiny randomly initialised ViTForImageClassification (32x32 images,
  patches of 8) with a ViT preprocessor_config.json;
- `tiny_resnet`: a tiny randomly initialised ResNetForImageClassification with a ConvNeXT
  preprocessor_config.json (ResNet checkpoints use that processor).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.txt")
TEXT_LABELS = {0: "contradiction", 1: "neutral", 2: "entailment"}
TOKEN_LABELS = {0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"}
IMAGE_LABELS = {0: "cat", 1: "dog", 2: "bird", 3: "fish"}


def _copy_tokenizer(src: Path, dst: Path) -> None:
    for name in TOKENIZER_FILES:
        shutil.copyfile(src / name, dst / name)


def text_classifier(minilm: Path, dst: Path) -> Path:
    import torch
    from transformers import BertForSequenceClassification

    torch.manual_seed(0)
    model = BertForSequenceClassification.from_pretrained(
        str(minilm), num_labels=3, id2label=TEXT_LABELS,
        label2id={v: k for k, v in TEXT_LABELS.items()})
    model.save_pretrained(str(dst))
    _copy_tokenizer(minilm, dst)
    return dst


def token_classifier(minilm: Path, dst: Path) -> Path:
    import torch
    from transformers import BertConfig, BertForTokenClassification

    torch.manual_seed(1)
    config = BertConfig(vocab_size=30522, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64,
                        max_position_embeddings=128, num_labels=5, id2label=TOKEN_LABELS,
                        label2id={v: k for k, v in TOKEN_LABELS.items()})
    BertForTokenClassification(config).save_pretrained(str(dst))
    _copy_tokenizer(minilm, dst)
    return dst


VIT_PREPROCESSOR = {
    "image_processor_type": "ViTImageProcessor", "do_resize": True,
    "size": {"height": 32, "width": 32}, "resample": 2, "do_rescale": True,
    "rescale_factor": 1 / 255, "do_normalize": True, "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5]}
CONVNEXT_PREPROCESSOR = {
    "image_processor_type": "ConvNextImageProcessor", "do_resize": True,
    "size": {"shortest_edge": 40}, "crop_pct": 0.875, "resample": 3, "do_rescale": True,
    "rescale_factor": 1 / 255, "do_normalize": True,
    "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}


def image_classifier(dst: Path) -> Path:
    import torch
    from transformers import ViTConfig, ViTForImageClassification

    torch.manual_seed(2)
    config = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=32,
                       num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                       num_labels=4, id2label=IMAGE_LABELS,
                       label2id={v: k for k, v in IMAGE_LABELS.items()})
    ViTForImageClassification(config).save_pretrained(str(dst))
    (dst / "preprocessor_config.json").write_text(json.dumps(VIT_PREPROCESSOR))
    return dst


def tiny_resnet(dst: Path) -> Path:
    import torch
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(3)
    config = ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16],
                          depths=[1, 1], layer_type="basic", num_labels=4,
                          id2label=IMAGE_LABELS, label2id={v: k for k, v in IMAGE_LABELS.items()})
    ResNetForImageClassification(config).save_pretrained(str(dst))
    (dst / "preprocessor_config.json").write_text(json.dumps(CONVNEXT_PREPROCESSOR))
    return dst
