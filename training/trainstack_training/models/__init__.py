"""`build_model(name)` is the only way the trainer makes a model, and `save_model` the only way it
writes one; the named sizes live in model_sizes.py (torch-free, shared with the planner)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from trainstack_contract.model_sizes import CLASSIFIERS, GPT_SIZES, MODEL_NAMES, is_hf_model
from trainstack_training.models.classifier import Classifier
from trainstack_training.models.gpt import GPT
from trainstack_training.models.hf import HFCausalLM


def build_model(name: str, on_meta: bool = False) -> nn.Module:
    """`on_meta`: shapes only, no storage, no weights read (a rank that receives its shards)."""
    with torch.device("meta") if on_meta else contextlib.nullcontext():
        if name in GPT_SIZES:
            return GPT(GPT_SIZES[name])
        if name in CLASSIFIERS:
            return Classifier()
        if is_hf_model(name):
            return HFCausalLM(name, read_weights=not on_meta)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODEL_NAMES)}")


def save_model(model: nn.Module, state: dict[str, torch.Tensor], directory: Path, description: dict[str, Any]) -> None:
    """A Hugging Face model exports as `save_pretrained` lays it out. The built-in GPT and the
    classifier export their state dict as model.pt with the config that rebuilds them: no
    `transformers` architecture computes what the GPT does (GPT-2's layers carry biases and the tanh
    GELU; these carry no biases and the exact GELU), so a conversion would change the model."""
    directory.mkdir(parents=True, exist_ok=True)
    if isinstance(model, HFCausalLM):
        model.export(state, directory, description)
        return
    torch.save(state, directory / "model.pt")
    (directory / "config.json").write_text(json.dumps(description, indent=2, sort_keys=True))
