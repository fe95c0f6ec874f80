"""Hugging Face causal LMs (`model: hf:<path>`) behind the same interface as the built-in GPT.

The wrapper exposes the decoder layers as `blocks`, so the strategies shard, checkpoint, offload
and compile them layer by layer exactly as they do GPT blocks, and it computes the loss from the
logits against targets the data already shifted (the model's own `labels` path would shift again).
Only local files are read: `from_pretrained(..., local_files_only=True)` for a folder holding
safetensors weights, `from_config` (random init from the run's seed) for a config alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from trainstack_contract.config import ConfigError
from trainstack_contract.model_sizes import SMP_TENSOR_PARALLEL_MODEL_TYPES, hf_source

# Weights load from safetensors only: a pickled checkpoint runs code when loaded, and silently
# ignoring one would train from random weights.
PICKLED_WEIGHTS = "pytorch_model*.bin"
SAFETENSORS_WEIGHTS = ("model.safetensors", "model.safetensors.index.json")  # what from_pretrained reads, sharded or not
SCRIPT_DIR = Path(__file__).resolve().parents[2]  # where train.py lives: /opt/ml/code in the container


def resolve(name: str) -> Path:
    """The folder or config file an `hf:` name points at: absolute, or relative to the working
    directory, then to the script's own folder (the source dir SageMaker unpacks)."""
    source = Path(hf_source(name))
    candidates = [source] if source.is_absolute() else [Path.cwd() / source, SCRIPT_DIR / source]
    for candidate in candidates:
        if (candidate / "config.json").is_file() or (candidate.suffix == ".json" and candidate.is_file()):
            return candidate
    where = " or ".join(str(c) for c in candidates)
    raise ConfigError(
        f"hyperparameter 'model' = {name!r}: no config.json at {where}; give a folder with config.json "
        "(and *.safetensors to start from weights) in the source dir or an input channel, or a config .json file"
    )


def _transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # read before the import: a run never reaches the hub
    try:
        import transformers
    except ImportError as error:
        raise ConfigError(
            "hyperparameter 'model' names a Hugging Face model, but this image has no `transformers`: "
            "use the project image (training/Dockerfile installs image-requirements.txt), a Hugging Face "
            "PyTorch training image (image_uri), or add transformers to your image"
        ) from error
    transformers.utils.logging.disable_progress_bar()
    return transformers


def decoder_layers_path(hf: nn.Module) -> str:
    """Where a `transformers` model keeps its decoder layers: the outermost ModuleList with one
    entry per hidden layer. Architectures name it differently (layers, h, decoder.layers)."""
    count = hf.config.num_hidden_layers
    for name, module in hf.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == count:
            return name
    raise ConfigError(
        f"hyperparameter 'model': found no list of {count} decoder layers in {type(hf).__name__}, so it cannot be "
        "sharded or checkpointed per layer; use a decoder-only causal LM (Llama, Mistral, Mixtral, GPT-NeoX, GPT-2...)"
    )


class HFCausalLM(nn.Module):
    """A `transformers` causal LM with the trainer's interface: blocks, loss, FLOPs, export."""

    def __init__(self, name: str, read_weights: bool = True) -> None:
        super().__init__()
        transformers = _transformers()
        path = resolve(name)
        options = {"dtype": torch.float32, "attn_implementation": "sdpa"}  # fp32 master weights; autocast computes
        has_weights = path.is_dir() and any((path / weights).is_file() for weights in SAFETENSORS_WEIGHTS)
        if path.is_dir() and not has_weights and (stray := sorted(p.name for p in path.glob("*.safetensors"))):
            raise ConfigError(
                f"hyperparameter 'model' = {name!r}: {path} holds {', '.join(stray)} but no {' or '.join(SAFETENSORS_WEIGHTS)}, "
                "the weights from_pretrained reads; save them with save_pretrained(folder) and give that folder"
            )
        if path.is_dir() and not has_weights and any(path.glob(PICKLED_WEIGHTS)):
            raise ConfigError(
                f"hyperparameter 'model' = {name!r}: {path} holds {PICKLED_WEIGHTS} weights (pickles) but no *.safetensors; "
                "convert them once with save_pretrained(folder) (safetensors is its default) and give that folder"
            )
        if read_weights and has_weights:
            # use_safetensors: never the pickles beside them. transformers 4.37 (the torch 2.2 image's) heeds it
            # only after looking for pytorch_model.bin, hence the check for the safetensors files above.
            self.hf = transformers.AutoModelForCausalLM.from_pretrained(
                path, local_files_only=True, use_safetensors=True, **options
            )
            self.source = f"weights from {path}"
        else:
            config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
            self.hf = transformers.AutoModelForCausalLM.from_config(config, **options)
            self.source = f"random init from {path}"
        self.layers_path = decoder_layers_path(self.hf)

    @property
    def config(self) -> Any:
        return self.hf.config

    @property
    def blocks(self) -> nn.ModuleList:
        """The decoder layers (Llama's model.layers, GPT-NeoX's gpt_neox.layers, GPT-2's
        transformer.h): the unit of sharding and checkpointing. A property, so the layers are
        registered once, under `hf`."""
        return self.hf.get_submodule(self.layers_path)

    @property
    def context_length(self) -> int:
        return int(self.config.max_position_embeddings)

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        """Logits, or the mean cross-entropy loss when `targets` is given."""
        logits = self.hf(input_ids=tokens, use_cache=False).logits
        if targets is None:
            return logits
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), targets.reshape(-1))

    def num_parameters(self, exclude_embeddings: bool = True) -> int:
        """Excluding the input embedding (a lookup, no matmul), unless the output head shares it."""
        total = sum(p.numel() for p in self.parameters())
        embedding = self.hf.get_input_embeddings().weight
        tied = embedding is self.hf.get_output_embeddings().weight
        return total - embedding.numel() if exclude_embeddings and not tied else total

    def flops_per_token(self, seq_len: int) -> float:
        """6N for the matmuls (the output head included, the input embedding is a lookup) plus
        attention's 12 * layers * hidden * seq_len (PaLM appendix B)."""
        c = self.config
        return 6 * self.num_parameters() + 12 * c.num_hidden_layers * c.hidden_size * seq_len

    def tensor_parallel(self, transform: Any) -> None:
        """SMP v2's tsm.transform replaces the Hugging Face model with its tensor-parallel version."""
        model_type = self.config.model_type
        if model_type not in SMP_TENSOR_PARALLEL_MODEL_TYPES:
            raise ConfigError(
                f"mp_parameters tensor_parallel_degree > 1: SMP v2 has no tensor parallelism for model_type {model_type!r} "
                f"(it has for {', '.join(SMP_TENSOR_PARALLEL_MODEL_TYPES)}); set tensor_parallel_degree 1"
            )
        self.hf = transform(self.hf)
        self.layers_path = decoder_layers_path(self.hf)

    def export(self, state: dict[str, torch.Tensor], directory: Path, description: dict[str, Any]) -> None:
        """`save_pretrained`: config.json, generation_config.json and model.safetensors, which
        `transformers` (and serving stacks that read that layout) load as they are."""
        weights = {name.removeprefix("hf."): tensor for name, tensor in state.items()}
        self.hf.save_pretrained(directory, state_dict=weights)
        (directory / "trainstack.json").write_text(json.dumps(description, indent=2, sort_keys=True))
