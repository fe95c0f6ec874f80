"""What is trained, and how: the model's shape and the batch, precision and memory options.

The built-in script's workload comes from its hyperparameters, parsed by the script's own typed
config (trainstack_contract.config, torch-free, shipped in the Lambda asset beside the core), so the
planner and the script can never read a hyperparameter differently. A user's own script describes
its model in the spec's `model:` block.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from trainstack.spec import JobSpec, ModelShape
from trainstack_contract.checkpoint_cadence import AUTO
from trainstack_contract.config import TrainConfig, parse_config
from trainstack_contract.model_sizes import GPT_SIZES, MLP_EXPANSION, is_hf_model

DEFAULT_HEAD_DIM = 128
GATED_MLP_EXPANSION = 8 / 3  # Llama's SwiGLU width for the same parameters as a 4x GELU MLP
GATED_MLP_MULTIPLE = 256
LOOKUPS = ("wte.weight", "wpe.weight")  # embeddings read by index, never multiplied
# How a layer's code saves its activations for backward (memory.py counts each):
GPT_LAYERS = "gpt"  # one fused attention projection and torch's LayerNorm kernel (the built-in GPT, GPT-NeoX, GPT-2)
# transformers' Llama family (Llama, Mistral, Qwen2: what a gated MLP comes with there): RMSNorm as Python
# ops that upcast to fp32, and separate q, k, v and gate, up projections, each casting its input under autocast
LLAMA_LAYERS = "llama"


@dataclass(frozen=True)
class Architecture:
    """A decoder-only transformer's shape. `shapes` lists every distinct parameter when known
    exactly (the built-in family); otherwise the counts are derived from the shape."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    ffn_hidden: int
    gated_mlp: bool
    tied_embeddings: bool
    learned_positions: int  # rows of a learned position embedding (GPT-2's wpe), or 0
    shapes: tuple[tuple[str, tuple[int, ...]], ...]
    layer_style: str = GPT_LAYERS  # GPT_LAYERS or LLAMA_LAYERS

    @property
    def kv_width(self) -> int:
        return self.kv_heads * (self.hidden // self.heads)

    @property
    def parameters(self) -> int:
        return sum(_numel(shape) for _, shape in self.shapes)

    @property
    def tensors(self) -> int:
        return len(self.shapes)

    @property
    def matmul_parameters(self) -> int:
        """Weights that take part in matrix multiplies (what autocast copies to the compute dtype):
        every 2-D weight but the lookups, and the tied output head."""
        weights = sum(_numel(shape) for name, shape in self.shapes if len(shape) == 2 and name not in LOOKUPS)
        return weights + (self.vocab * self.hidden if self.tied_embeddings else 0)

    @property
    def compute_parameters(self) -> int:
        """N of the 6N FLOPs per token: every weight a token's forward pass multiplies by (the
        output projection included, position and input lookups excluded)."""
        lookups = self.learned_positions * self.hidden + (0 if self.tied_embeddings else self.vocab * self.hidden)
        return self.parameters - lookups

    def layer_parameters(self) -> int:
        """The parameters of one transformer layer (the unit FSDP gathers)."""
        return sum(_numel(shape) for name, shape in self.shapes if name.startswith("blocks.0."))

    def root_parameters(self) -> int:
        """Parameters outside the transformer layers (embeddings, final norm, output head)."""
        return sum(_numel(shape) for name, shape in self.shapes if not name.startswith("blocks."))


@dataclass(frozen=True)
class Workload:
    model: str  # a built-in name, or "custom"
    architecture: Architecture
    seq_len: int
    micro_batch_size: int
    grad_accum: int
    precision: str
    activation_checkpointing: bool
    activation_offloading: bool
    optimizer: str
    zero1: bool
    cpu_offload: bool
    reshard_after_forward: bool
    steps: int | None
    reduce_every_micro_step: bool = False  # sharded strategies: reduce-scatter each micro-step
    parameters_stated: int | None = None  # the spec's exact count, when it overrides the shape's
    # torch.compile of each block (the built-in script's `compile`): its graphs save fewer activations of
    # Llama-style layers. A user's own script is planned as not compiled (the larger count).
    compiled: bool = False
    # The built-in script's checkpoint cadence: steps between checkpoints (None: `auto`, which a user's
    # own script is planned as), and the seconds of wall clock that also end an interval (0: none).
    checkpoint_every: int | None = None
    checkpoint_interval_seconds: float = 0.0

    @property
    def parameters(self) -> int:
        return self.parameters_stated or self.architecture.parameters

    @property
    def tokens_per_micro_batch(self) -> int:
        return self.micro_batch_size * self.seq_len


class NotPlannableError(ValueError):
    """The spec says too little to plan (no model block for a user's script, a classifier)."""


def builtin_config(spec: JobSpec, strategy: str, overrides: dict[str, Any] | None = None) -> TrainConfig:
    """The built-in script's config exactly as it will parse it in the container: hyperparameters as
    the toolkit passes them (SM_HPS), the strategy trainstack sets, the channels' distributions
    (SM_INPUT_DATA_CONFIG) and the hosts (SM_HOSTS). Raises the script's own ConfigError."""
    hyperparameters = {**spec.script_hyperparameters, **(overrides or {}), "strategy": strategy}
    channels = {name: {"S3DistributionType": channel.distribution} for name, channel in spec.inputs.items()}
    hosts = [f"algo-{index + 1}" for index in range(spec.instance_count)]
    environ = {"SM_HPS": json.dumps(hyperparameters), "SM_INPUT_DATA_CONFIG": json.dumps(channels), "SM_HOSTS": json.dumps(hosts)}
    if "train" in spec.inputs:
        environ["SM_CHANNEL_TRAIN"] = "/opt/ml/input/data/train"
    return parse_config([], environ)


def workload_of(spec: JobSpec, strategy: str, overrides: dict[str, Any] | None = None) -> Workload:
    if spec.uses_builtin_script:
        config = builtin_config(spec, strategy, overrides)
        if not is_hf_model(config.model):
            return _builtin(config, gpt_architecture(config.model) if config.model in GPT_SIZES else None, 0)
        # The config.json an hf: model names is read in the container only; the spec states its shape.
        if spec.model is None:
            raise NotPlannableError(
                f"model: state the shape of {config.model} (layers, hidden, heads, kv_heads, vocab, ffn_hidden, "
                "gated_mlp, tied_embeddings, seq_len) so the job can be planned; its config.json is read in the container only"
            )
        return _builtin(config, decoder_architecture(spec.model), spec.model.seq_len)
    if spec.model is None:
        raise NotPlannableError("model: describe your script's model (layers, hidden, seq_len, ...) so the job can be planned")
    return _custom(spec.model)


def gpt_architecture(name: str) -> Architecture:
    config = GPT_SIZES[name]
    return Architecture(
        layers=config.n_layer,
        hidden=config.n_embd,
        heads=config.n_head,
        kv_heads=config.n_head,
        vocab=config.vocab_size,
        ffn_hidden=MLP_EXPANSION * config.n_embd,
        gated_mlp=False,
        tied_embeddings=True,
        learned_positions=config.block_size,
        shapes=tuple(config.parameter_shapes()),
    )


def decoder_architecture(shape: ModelShape) -> Architecture:
    """A Llama/GPT-style decoder from its dimensions: attention without biases, norms with a weight."""
    heads = shape.heads or max(1, shape.hidden // DEFAULT_HEAD_DIM)
    kv_heads = shape.kv_heads or heads
    hidden = shape.hidden
    ffn = shape.ffn_hidden or _default_ffn(hidden, shape.gated_mlp)
    kv_width = kv_heads * (hidden // heads)
    layer: list[tuple[str, tuple[int, ...]]] = [
        ("attention_norm.weight", (hidden,)),
        ("attention.q.weight", (hidden, hidden)),
        ("attention.k.weight", (kv_width, hidden)),
        ("attention.v.weight", (kv_width, hidden)),
        ("attention.o.weight", (hidden, hidden)),
        ("mlp_norm.weight", (hidden,)),
        ("mlp.up.weight", (ffn, hidden)),
        ("mlp.down.weight", (hidden, ffn)),
    ]
    if shape.gated_mlp:
        layer.append(("mlp.gate.weight", (ffn, hidden)))
    shapes = [("wte.weight", (shape.vocab, hidden))]
    shapes += [(f"blocks.{index}.{name}", size) for index in range(shape.layers) for name, size in layer]
    shapes.append(("norm.weight", (hidden,)))
    if not shape.tied_embeddings:
        shapes.append(("output.weight", (shape.vocab, hidden)))
    return Architecture(
        layers=shape.layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        vocab=shape.vocab,
        ffn_hidden=ffn,
        gated_mlp=shape.gated_mlp,
        tied_embeddings=shape.tied_embeddings,
        learned_positions=0,
        shapes=tuple(shapes),
        layer_style=LLAMA_LAYERS if shape.gated_mlp else GPT_LAYERS,
    )


def _default_ffn(hidden: int, gated: bool) -> int:
    if not gated:
        return MLP_EXPANSION * hidden
    width = int(GATED_MLP_EXPANSION * hidden)
    return -(-width // GATED_MLP_MULTIPLE) * GATED_MLP_MULTIPLE


def _builtin(config: TrainConfig, architecture: Architecture | None, context_length: int) -> Workload:
    """The built-in script's workload: the model's shape, and the batch and memory options its own
    config parsed; `context_length` is the sequence length when the config leaves it to the model."""
    if architecture is None:
        raise NotPlannableError(f"model {config.model!r} is a small classifier: nothing to plan")
    return Workload(
        model=config.model,
        architecture=architecture,
        seq_len=config.seq_len or context_length or GPT_SIZES[config.model].block_size,
        micro_batch_size=config.micro_batch_size,
        grad_accum=config.grad_accum,
        precision=config.precision,
        activation_checkpointing=config.activation_checkpointing,
        activation_offloading=config.activation_offloading,
        optimizer="adamw",
        zero1=config.zero1,
        cpu_offload=config.cpu_offload,
        reshard_after_forward=config.reshard_after_forward,
        steps=config.max_steps,
        reduce_every_micro_step=config.reduce_every_micro_step,
        compiled=config.compile,
        checkpoint_every=None if config.checkpoint_every == AUTO else config.checkpoint_every,
        checkpoint_interval_seconds=config.checkpoint_interval,
    )


def _custom(shape: ModelShape) -> Workload:
    return Workload(
        model="custom",
        architecture=decoder_architecture(shape),
        seq_len=shape.seq_len,
        micro_batch_size=shape.micro_batch_size,
        grad_accum=shape.grad_accum,
        precision=shape.precision,
        activation_checkpointing=shape.activation_checkpointing,
        activation_offloading=shape.activation_offloading,
        optimizer=shape.optimizer,
        zero1=shape.zero1,
        cpu_offload=False,
        reshard_after_forward=True,
        steps=shape.steps,
        reduce_every_micro_step=shape.reduce_every_micro_step,
        parameters_stated=int(shape.parameters) if shape.parameters else None,
    )


def _numel(shape: tuple[int, ...]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total
