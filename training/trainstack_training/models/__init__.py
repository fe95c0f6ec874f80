"""`build_model(name)` is the only way the trainer makes a model; the named sizes live in
model_sizes.py (torch-free, shared with the planner)."""

from __future__ import annotations

from torch import nn

from trainstack_training.model_sizes import CLASSIFIERS, GPT_SIZES, MODEL_NAMES
from trainstack_training.models.classifier import Classifier
from trainstack_training.models.gpt import GPT


def build_model(name: str) -> nn.Module:
    if name in GPT_SIZES:
        return GPT(GPT_SIZES[name])
    if name in CLASSIFIERS:
        return Classifier()
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)}")
