"""Memory per GPU, by category, for each strategy.

Model states (parameters, gradients, optimizer state) are counted exactly, as the strategies shard
them: DDP keeps everything; ZeRO-1 (torch's ZeroRedundancyOptimizer) partitions optimizer state
greedily by size; FSDP2 splits every parameter along dim 0 (rank 0 holds the largest chunk); SMP's
FSDP1 flattens each wrapped layer and pads it to the shard degree. tests/training compares these
counts with the real modules built on the meta device.

Activations are what a forward pass keeps for backward, counted per tensor the layers save (the
flash/memory-efficient attention kernels keep no sequence-squared scores), as the layers' code saves
them: the built-in GPT's and transformers' Llama family differ (workload.py's layer styles), and so
do their compiled blocks; tests/planner measures them on CPU with the profiler. The peak is at the
start of backward: every activation, the loss's gradients and autocast's weight copies, and the
gradients when something holds them between steps (DDP's buckets, FSDP2's reduce-scatter stream,
accumulation); tests/planner measures a whole step's peak on CPU. Framework overhead is a stated
assumption.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from trainstack.planner.parallelism import Layout
from trainstack.planner.workload import LLAMA_LAYERS, Architecture, Workload

GIB = 1024**3
FP32 = 4
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}
# CUDA context, cuBLAS and NCCL workspaces, the caching allocator's own blocks: measured on H100s
# with NCCL 2.2x as 1.5-2.5 GiB per process; the planner assumes the high end.
FRAMEWORK_OVERHEAD_BYTES = 2 * GIB
# What is kept free for fragmentation: a plan that needs more than 90% of a GPU does not "fit".
HEADROOM = 0.10
# Host memory the training processes may use for offloaded state (the rest: OS, data loaders, page cache).
HOST_USABLE = 0.8
TOKEN_INDEX_BYTES = 16  # int64 inputs and targets per token


@dataclass(frozen=True)
class MemoryBreakdown:
    """What one GPU holds at its peak, by category; `total` is their sum. Where nothing holds the
    gradients between steps (`gradients_between_steps`), the peak is the larger of the start of
    backward (no gradient yet) and its end (every gradient, no activation): the other phase's
    categories are 0 here."""

    parameters: int
    gradients: int
    optimizer: int
    activations: int
    temporary: int
    overhead: int
    capacity: int  # the GPU's memory
    host_offloaded: int = 0  # per GPU, on the host (FSDP2 CPU offload)
    host_capacity: int = 0  # per GPU's share of usable host memory
    gradients_between_steps: bool = True  # False: backward writes them and zero_grad frees them (one DDP process)

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer + self.activations + self.temporary + self.overhead

    @property
    def usable(self) -> int:
        return int(self.capacity * (1 - HEADROOM))

    @property
    def fits(self) -> bool:
        return self.total <= self.usable and self.host_offloaded <= self.host_capacity

    def categories(self) -> dict[str, int]:
        return {
            "parameters": self.parameters,
            "gradients": self.gradients,
            "optimizer": self.optimizer,
            "activations": self.activations,
            "temporary": self.temporary,
            "overhead": self.overhead,
        }


@dataclass(frozen=True)
class ModelStates:
    """Bytes of parameters, gradients and optimizer state one GPU holds (the most loaded rank)."""

    parameters: int
    gradients: int
    optimizer: int


def model_states(workload: Workload, layout: Layout) -> ModelStates:
    architecture = workload.architecture
    local = local_parameters(architecture, layout)
    if workload.parameters_stated:  # the stated count scales the shape's
        local = round(local * workload.parameters_stated / architecture.parameters)
    gradients = local * FP32
    if workload.grad_accum > 1 and layout.shards_parameters and not workload.reduce_every_micro_step:
        # Accumulating without reduce-scatter keeps every layer's unsharded gradient between micro-steps:
        # FSDP2 in its reduce dtype (fp32 in strategies/fsdp.py, whatever the compute dtype; measured in
        # tests/planner), SMP's FSDP1 in the compute dtype.
        unsharded = FP32 if layout.strategy == "fsdp" else DTYPE_BYTES[workload.precision]
        gradients += (workload.parameters // layout.tensor) * unsharded
    return ModelStates(local * FP32, gradients, optimizer_bytes(workload, layout, local))


def checkpoint_bytes(workload: Workload) -> int:
    """What one checkpoint writes across all hosts: the fp32 parameters and the optimizer's state,
    each once whatever the strategy (DCP writes a replicated tensor once, a sharded one shard by shard;
    ZeRO-1's partitions add up to the whole state). DCP's metadata and the data position are noise."""
    architecture = workload.architecture
    parameters = workload.parameters_stated or architecture.parameters
    per_element, per_tensor = _optimizer_widths(workload)
    # A tied output head is a second name for the embedding in the state dict, and written again
    # (measured: tests/training/test_checkpoint.py); the optimizer holds its state once.
    tied_copy = architecture.vocab * architecture.hidden * FP32 if architecture.tied_embeddings else 0
    return parameters * (FP32 + per_element) + architecture.tensors * per_tensor + tied_copy


def local_parameters(architecture: Architecture, layout: Layout) -> int:
    """Parameters on the most loaded GPU (element count)."""
    if layout.strategy == "fsdp":
        return sum(_dim0_chunk(shape, layout.shard) for _, shape in architecture.shapes)
    if layout.strategy == "smp":
        # FSDP1 flattens a tied weight once per module that holds it: the output head is a second copy.
        root = architecture.root_parameters() + (architecture.vocab * architecture.hidden if architecture.tied_embeddings else 0)
        units = [architecture.layer_parameters()] * architecture.layers + [root]
        return sum(math.ceil(unit / layout.tensor / layout.shard) for unit in units)
    return architecture.parameters


def _optimizer_widths(workload: Workload) -> tuple[int, int]:
    """The optimizer's state in bytes per parameter element and per parameter tensor."""
    if workload.optimizer == "sgd":  # momentum buffers only
        return FP32, 0
    return 2 * FP32, FP32  # AdamW: exp_avg and exp_avg_sq in fp32, and a float32 `step` tensor per parameter


def optimizer_bytes(workload: Workload, layout: Layout, local: int) -> int:
    architecture = workload.architecture
    per_element, per_tensor = _optimizer_widths(workload)
    if layout.strategy in ("ddp", "smddp") and workload.zero1 and layout.world > 1:
        scale = (workload.parameters_stated or architecture.parameters) / architecture.parameters
        partition = zero1_partition(architecture.shapes, layout.world)
        return max(round(elements * scale) * per_element + tensors * per_tensor for elements, tensors in partition)
    return local * per_element + architecture.tensors * per_tensor


def zero1_partition(shapes: tuple[tuple[str, tuple[int, ...]], ...], world: int) -> list[tuple[int, int]]:
    """Elements and tensors of each rank under ZeroRedundancyOptimizer's partition: per
    parameter group (the trainer's: weights with decay, then biases and norms without), largest
    first, each to the rank with the fewest elements so far (the first such rank on ties)."""
    ranks = [(0, rank) for rank in range(world)]  # a heap of (elements, rank): the fewest, then the first
    counts = [0] * world
    decay = [_numel(shape) for _, shape in shapes if len(shape) >= 2]
    no_decay = [_numel(shape) for _, shape in shapes if len(shape) < 2]
    for group in (decay, no_decay):
        for numel in sorted(group, reverse=True):
            elements, rank = heapq.heappop(ranks)
            heapq.heappush(ranks, (elements + numel, rank))
            counts[rank] += 1
    return [(elements, counts[rank]) for elements, rank in sorted(ranks, key=lambda item: item[1])]


def activation_dtypes(workload: Workload, layout: Layout) -> tuple[int, int]:
    """Bytes per element of (the residual stream, everything else a layer saves). Autocast (DDP,
    SMDDP) keeps the residual stream and norms in fp32 and casts matmul inputs; FSDP's
    mixed-precision policy casts the parameters, so every activation is in the compute dtype."""
    compute = DTYPE_BYTES[workload.precision]
    if layout.strategy in ("ddp", "smddp"):
        return FP32, compute
    return compute, compute


def _autocast(workload: Workload, layout: Layout) -> bool:
    return layout.strategy in ("ddp", "smddp") and workload.precision != "fp32"


def layer_activation_bytes(workload: Workload, layout: Layout) -> int:
    """Bytes per token one layer saves for backward without checkpointing (tests/planner measures
    them on CPU with the profiler)."""
    architecture = workload.architecture
    h, kv, ffn, tensor = architecture.hidden, architecture.kv_width, architecture.ffn_hidden, layout.tensor
    residual, compute = activation_dtypes(workload, layout)
    if architecture.layer_style != LLAMA_LAYERS:
        # The two norm inputs (residual stream); the norm outputs, q, k, v, the attention output, the
        # output projection's input and the MLP's inner activations (2 x ffn for GELU: its input and
        # output; 4 x ffn for a gated MLP). Compiled blocks save about as much (2 x hidden less, measured).
        mlp = (4 if architecture.gated_mlp else 2) * ffn
        return 2 * h * residual + (2 * h + (3 * h + 2 * kv + mlp) // tensor) * compute
    # transformers' Llama layers, measured per tensor on CPU (tests/planner): under autocast each
    # RMSNorm keeps its fp32 input and its fp32 normalized output (its weight's gradient needs it),
    # which q, k, v (or gate, up) each cast to bf16 again: 5 x hidden of casts. Without autocast
    # (FSDP's bf16 parameters) a norm keeps its input upcast to fp32 and its normalized and scaled
    # outputs in bf16. Then q, the attention output (the output projection's input), k, v, and the gated MLP's
    # gate, up, SiLU and product; and the norms' fp32 statistics and attention's fp32 log-sum-exp per
    # head. A compiled block's graph saves less: one fp32 stream (none without autocast) and one cast
    # per norm, and it recomputes the SiLU (measured with inductor on CPU).
    # (fp32 elements, compute elements kept whole on each tensor-parallel rank, compute elements split)
    autocast = _autocast(workload, layout)
    if workload.compiled:
        fp32, whole, split = (h if autocast else 0), (2 if autocast else 3) * h, 3 * h + 2 * kv + 3 * ffn
    else:
        fp32, whole, split = (4 if autocast else 2) * h, (5 if autocast else 4) * h, 2 * h + 2 * kv + 4 * ffn
    statistics = (2 + architecture.heads // tensor) * FP32
    return fp32 * FP32 + (whole + split // tensor) * compute + statistics


def _head_bytes_per_token(workload: Workload, layout: Layout) -> int:
    """The final norm (never compiled) and the output head's input, and the loss's saved fp32 log-probs;
    Llama's rotary cos and sin, which every layer shares, in the residual stream's dtype."""
    architecture = workload.architecture
    h = architecture.hidden
    residual, compute = activation_dtypes(workload, layout)
    if architecture.layer_style == LLAMA_LAYERS:
        norm = (2 * h * FP32 + h * compute) if _autocast(workload, layout) else (h * FP32 + 2 * h * compute)
        norm += FP32 + 2 * (h // architecture.heads) * residual
    else:
        norm = h * (residual + compute)
    return norm + architecture.vocab * FP32 + TOKEN_INDEX_BYTES


def activation_bytes(workload: Workload, layout: Layout) -> int:
    architecture = workload.architecture
    residual, _ = activation_dtypes(workload, layout)
    tokens = workload.tokens_per_micro_batch
    full_layer = tokens * layer_activation_bytes(workload, layout)
    # With checkpointing, only each layer's input is kept.
    per_layer = tokens * architecture.hidden * residual if workload.activation_checkpointing else full_layer
    layers = per_layer * architecture.layers
    if workload.activation_offloading:  # saved tensors wait on the host; one layer's are on the GPU
        layers = per_layer
    return layers + tokens * _head_bytes_per_token(workload, layout)


def autocast_weight_bytes(workload: Workload, layout: Layout) -> int:
    """Autocast's bf16/fp16 copies of the weights, cached (or, in a compiled block, saved) until backward."""
    if not _autocast(workload, layout):
        return 0
    return workload.architecture.matmul_parameters * DTYPE_BYTES[workload.precision]


def temporary_bytes(workload: Workload, layout: Layout) -> int:
    architecture = workload.architecture
    _, compute = activation_dtypes(workload, layout)
    tokens = workload.tokens_per_micro_batch
    # The loss's backward begins with the gradient of the log-probs and then of the logits, both fp32,
    # beside the saved log-probs (the forward held at most the logits, their fp32 copy and the log-probs).
    buffers = tokens * architecture.vocab * 2 * FP32
    if workload.activation_checkpointing:  # backward recomputes one layer's activations at a time
        buffers += tokens * layer_activation_bytes(workload, layout)
    buffers += autocast_weight_bytes(workload, layout)
    if layout.shards_parameters:
        layer = architecture.layer_parameters() // layout.tensor
        if workload.reshard_after_forward or layout.strategy == "smp":
            # the gathered layer and the prefetched next one, the root's gathered embeddings, and a
            # layer's unsharded gradient with its fp32 reduce-scatter buffer
            buffers += (2 * layer + architecture.root_parameters()) * compute + layer * (compute + FP32)
        else:  # every layer stays gathered from forward to backward
            buffers += (architecture.parameters // layout.tensor) * compute + layer * (compute + FP32)
    return buffers


def gradients_between_steps(workload: Workload, layout: Layout) -> bool:
    """Whether something holds the gradients from one step into the next's forward. It does but for one
    process of DDP or SMDDP without accumulation: the script wraps nothing for one rank, so backward
    writes each layer's gradients after freeing activations larger than them, and zero_grad(set_to_none)
    frees them before the next forward (measured: a whole step's peak on CPU, tests/planner, and the 1.1B
    Llama on one H200). DDP's buckets (several ranks, gradient_as_bucket_view) hold them throughout;
    accumulation keeps them between micro-steps; FSDP2 on one H200 held them as well (its reduce-scatter
    writes them on its own stream, and the caching allocator gives a freed block back to that stream
    only); SMP is not measured."""
    return not (layout.strategy in ("ddp", "smddp") and layout.world == 1 and workload.grad_accum == 1)


def memory_per_gpu(workload: Workload, layout: Layout) -> MemoryBreakdown:
    states = model_states(workload, layout)
    instance = layout.instance
    offloaded = 0
    parameters, gradients, optimizer = states.parameters, states.gradients, states.optimizer
    if workload.cpu_offload and layout.strategy == "fsdp":  # FSDP2 CPUOffloadPolicy: states live on the host
        offloaded, parameters, gradients, optimizer = parameters + gradients + optimizer, 0, 0, 0
    host_share = int(instance.host_memory_gib * GIB * HOST_USABLE / layout.gpus_per_node) if instance.host_memory_gib else 0
    activations, temporary = activation_bytes(workload, layout), temporary_bytes(workload, layout)
    held = gradients_between_steps(workload, layout)
    if not held:
        # The start of backward (no gradient yet), or its end: every gradient, autocast's weight copies
        # (cached until autocast exits, after backward), no activation.
        weights = autocast_weight_bytes(workload, layout)
        if gradients + weights > activations + temporary:
            activations, temporary = 0, weights
        else:
            gradients = 0
    return MemoryBreakdown(
        parameters=parameters,
        gradients=gradients,
        optimizer=optimizer,
        activations=activations,
        temporary=temporary,
        overhead=FRAMEWORK_OVERHEAD_BYTES,
        capacity=int(instance.accelerator_memory_gib * GIB),
        host_offloaded=offloaded,
        host_capacity=host_share if offloaded else 0,
        gradients_between_steps=held,
    )


def _dim0_chunk(shape: tuple[int, ...], shards: int) -> int:
    """Elements of rank 0's FSDP2 shard: torch.chunk along dim 0 gives it ceil(rows / shards) rows."""
    rows = shape[0]
    return min(rows, math.ceil(rows / shards)) * _numel(shape[1:])


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
