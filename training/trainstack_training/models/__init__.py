"""Named model sizes. `build_model(name)` is the only way the trainer makes a model."""

from __future__ import annotations

from torch import nn

from trainstack_training.models.classifier import Classifier
from trainstack_training.models.gpt import GPT, GPTConfig

BYTE_VOCAB = 256  # the shipped sample data is byte-level
GPT2_VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 64

GPT_SIZES: dict[str, GPTConfig] = {
    "gpt-tiny": GPTConfig(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=BYTE_VOCAB),
    "gpt-small-bytes": GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=128, vocab_size=BYTE_VOCAB),
    "gpt-125m": GPTConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=GPT2_VOCAB),
    "gpt-350m": GPTConfig(n_layer=24, n_head=16, n_embd=1024, block_size=1024, vocab_size=GPT2_VOCAB),
    "gpt-1.3b": GPTConfig(n_layer=24, n_head=32, n_embd=2048, block_size=2048, vocab_size=GPT2_VOCAB),
    "gpt-7b": GPTConfig(n_layer=32, n_head=32, n_embd=4096, block_size=2048, vocab_size=GPT2_VOCAB),
}
CLASSIFIERS = ("mnist-cnn",)
MODEL_NAMES = (*GPT_SIZES, *CLASSIFIERS)


def is_language_model(name: str) -> bool:
    return name in GPT_SIZES


def build_model(name: str) -> nn.Module:
    if name in GPT_SIZES:
        return GPT(GPT_SIZES[name])
    if name in CLASSIFIERS:
        return Classifier()
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)}")
