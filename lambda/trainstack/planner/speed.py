"""Step time: compute at an MFU that grows with the model's FLOPs per token (measured on one H200), a
floor of FSDP2's per-layer host work, plus the part of each strategy's collectives that does not
hide behind compute, from an alpha-beta model of NCCL's hierarchical collectives over NVLink and EFA.

A collective over ranks on N nodes with p GPUs each runs in two pipelined phases: inside each node
over NVLink (or PCIe), where every GPU moves 2(p-1)/p of the payload for an all-reduce and (p-1)/p
for an all-gather or reduce-scatter; and across nodes through the node's NICs, which all its GPUs
share, moving 2(N-1)/N (or (N-1)/N) of the payload per node. The slower phase sets the time, plus a
latency per ring step. One efficiency for both links calibrates line rates to what nccl-tests
reaches: tests/planner/test_collectives.py checks the published all-reduce bus bandwidth of 2 x p4de
and 2 x p5 (aws-samples/awsome-distributed-training, micro-benchmarks/nccl-tests) within 20%.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainstack.planner.memory import DTYPE_BYTES, FP32
from trainstack.planner.parallelism import Layout
from trainstack.planner.workload import Workload

# The share of dense peak a step's compute reaches (MFU), measured with tools/gpu_check.py on one H200
# (2026-11-26, torch 2.11): the built-in script's DDP on one GPU (no collective), bf16, compiled blocks, the
# fused AdamW, health rules at their defaults: 32.3% at gpt-125m (0.85 GFLOP per token), 42.8% at gpt-350m
# (2.42), 47.9% at the 1.1B Llama (7.31): they ran at 0.81x to 1.20x of what a constant 40% planned.
# Small models' matmuls do not fill the GPU, and the work that is no matmul (norms, activation functions,
# the loss over the vocabulary, the optimizer's pass over the weights) takes a time per token that grows
# more slowly than their FLOPs. A step is then its FLOPs at a ceiling efficiency plus that time, so
#     MFU = MFU_CEILING x F / (F + MFU_HALF_FLOPS)
# with F the model's FLOPs per token per GPU; MFU_HALF_FLOPS is what that time is worth at the ceiling.
# Fitted to the three runs: each within 1.3%. The ceiling bounds it: above the largest run it adds at
# most 3 points (a 70B model is planned at 51%, before collectives). Unverified on other GPUs (an H100 has
# the H200's bf16 peak with 30% less memory bandwidth, so its small models likely reach less), with
# collectives (added below, separately), with compile off (gpt-125m: 7% slower) and for other scripts.
MFU_CEILING = 0.51
MFU_HALF_FLOPS = 0.5e9
# FSDP2 runs its hooks on the host for every layer, every micro-step (issuing the all-gather and its copies,
# DTensor bookkeeping, the reduce-scatter with its casts, stream waits), and the GPU waits for them when its
# own work per layer is shorter. Measured on one H200 (above), FSDP2 steps took 5.18 ms per layer at
# gpt-125m and 5.13 at gpt-350m, though the larger model's layers gather 1.8x the bytes and do 1.8x the FLOPs:
# the time is per layer, not per byte or FLOP (unwrapped DDP took 3.7 and 3.9 ms per layer there). The
# Llama's 5.7 ms of compute per layer hid it (its FSDP2 run: 0.95 of its DDP run, on another machine).
# A floor per layer and micro-step; the host's speed and torch's version move it, and it is unverified
# on several GPUs, where each rank runs the same hooks and its collectives besides.
FSDP2_HOST_SECONDS_PER_LAYER = 5.15e-3
LINK_EFFICIENCY = 0.85  # the share of NVLink and EFA line rates NCCL's large messages reach
NVLINK_LATENCY_S = 5e-6  # per ring step inside a node
NETWORK_LATENCY_S = 20e-6  # per ring step across nodes
# The share of compute a strategy's gradient/parameter collectives hide behind: DDP overlaps its
# bucketed all-reduce with backward (about 2/3 of a step's FLOPs); FSDP prefetches its all-gathers
# in forward and backward; tensor parallelism's all-reduces sit on the critical path.
OVERLAP = {"ddp": 2 / 3, "smddp": 2 / 3, "fsdp": 1.0, "smp": 1.0}
PRECISION_PEAK = {"fp32": "tf32", "bf16": "bf16", "fp16": "fp16"}  # the peak a precision's matmuls run at
RECOMPUTE_FACTOR = 4 / 3  # activation checkpointing repeats the forward pass: 8N instead of 6N FLOPs


@dataclass(frozen=True)
class Speed:
    step_seconds: float
    compute_seconds: float  # the GPU's, or FSDP2's host floor where that is longer
    communication_seconds: float  # every collective of a step, before overlap
    exposed_communication_seconds: float
    tokens_per_step: int
    tokens_per_second: float
    mfu: float  # model FLOPs achieved / peak, after communication
    peak_tflops: float  # per GPU, in the run's precision
    world: int

    @property
    def tokens_per_second_per_gpu(self) -> float:
        return self.tokens_per_second / self.world


def peak_flops(layout: Layout, precision: str) -> float:
    """Dense tensor-core peak per GPU in the precision's matmul type (fp32 runs as TF32)."""
    return layout.instance.peak_tflops.get(PRECISION_PEAK[precision], 0.0) * 1e12


def flops_per_token(workload: Workload) -> float:
    """Model FLOPs per trained token: 6N plus attention's 12 x layers x width x sequence (PaLM, app. B)."""
    architecture = workload.architecture
    parameters = architecture.compute_parameters
    if workload.parameters_stated:
        parameters = round(parameters * workload.parameters_stated / architecture.parameters)
    return 6 * parameters + 12 * architecture.layers * architecture.hidden * workload.seq_len


def collective_seconds(layout: Layout, ranks: int, payload: float, all_reduce: bool) -> float:
    """An all-reduce (or an all-gather / reduce-scatter) of a `payload`-byte whole over `ranks`
    consecutive ranks of the job."""
    if ranks <= 1:
        return 0.0
    per_node = min(ranks, layout.gpus_per_node)
    nodes = math.ceil(ranks / per_node)
    factor = 2 if all_reduce else 1
    instance = layout.instance
    inside = factor * (per_node - 1) / per_node * payload / (instance.gpu_link_gbytes * 1e9 * LINK_EFFICIENCY)
    across = 0.0
    if nodes > 1:
        across = factor * (nodes - 1) / nodes * payload / (instance.network_gbits / 8 * 1e9 * LINK_EFFICIENCY)
    latency = factor * ((per_node - 1) * NVLINK_LATENCY_S + (nodes - 1) * NETWORK_LATENCY_S)
    return max(inside, across) + latency


def bus_bandwidth(layout: Layout, ranks: int, payload: float) -> float:
    """nccl-tests' all_reduce_perf "busbw" (bytes/s) this model predicts: 2(n-1)/n x payload / time."""
    return 2 * (ranks - 1) / ranks * payload / collective_seconds(layout, ranks, payload, all_reduce=True)


def communication_seconds(workload: Workload, layout: Layout) -> tuple[float, float]:
    """(collectives that can overlap compute, collectives on the critical path) per optimizer step."""
    parameters = workload.parameters / layout.tensor
    compute_bytes = DTYPE_BYTES[workload.precision]
    overlappable = 0.0
    if layout.strategy in ("ddp", "smddp"):
        overlappable += collective_seconds(layout, layout.data_parallel, parameters * FP32, all_reduce=True)
        if workload.zero1:  # each rank broadcasts its updated partition: an all-gather of the weights
            overlappable += collective_seconds(layout, layout.data_parallel, parameters * FP32, all_reduce=False)
    else:
        shard_ranks = layout.shard * layout.tensor
        gathers = 2 if (workload.reshard_after_forward or layout.strategy == "smp") else 1
        gather = collective_seconds(layout, shard_ranks, parameters * compute_bytes, all_reduce=False)
        overlappable += workload.grad_accum * gathers * gather
        reduce_scatters = workload.grad_accum if workload.reduce_every_micro_step else 1
        overlappable += reduce_scatters * collective_seconds(layout, shard_ranks, parameters * FP32, all_reduce=False)
        if layout.replicas > 1:  # hybrid sharding: replicas all-reduce their shards
            overlappable += collective_seconds(layout, layout.world, parameters / layout.shard * FP32, all_reduce=True)
    critical = 0.0
    if layout.tensor > 1:  # two all-reduces of the layer's output forward, two backward, per layer
        activations = workload.tokens_per_micro_batch * workload.architecture.hidden * compute_bytes
        per_layer = 4 * collective_seconds(layout, layout.tensor, activations, all_reduce=True)
        critical += workload.grad_accum * workload.architecture.layers * per_layer
    return overlappable, critical


def expected_mfu(workload: Workload, layout: Layout) -> float:
    """The share of dense peak the compute reaches (before collectives): MFU_CEILING x F / (F +
    MFU_HALF_FLOPS), F the model's FLOPs per token on one GPU (a tensor-parallel rank's share)."""
    flops = flops_per_token(workload) / layout.tensor
    return MFU_CEILING * flops / (flops + MFU_HALF_FLOPS)


def host_floor_seconds(workload: Workload, layout: Layout) -> float:
    """The shortest a step can be, whatever its compute: FSDP2's per-layer host work, every micro-step."""
    if layout.strategy != "fsdp":
        return 0.0
    return workload.grad_accum * workload.architecture.layers * FSDP2_HOST_SECONDS_PER_LAYER


def speed(workload: Workload, layout: Layout, mfu: float | None = None) -> Speed:
    """`mfu`: the compute's efficiency, expected_mfu's unless given."""
    peak = peak_flops(layout, workload.precision)
    model_flops = flops_per_token(workload)
    hardware_flops = model_flops * (RECOMPUTE_FACTOR if workload.activation_checkpointing else 1.0)
    efficiency = expected_mfu(workload, layout) if mfu is None else mfu
    # A tensor-parallel group shares each micro-batch: every GPU does 1/tensor of its FLOPs.
    tokens_per_group = workload.tokens_per_micro_batch * workload.grad_accum
    compute = tokens_per_group * hardware_flops / layout.tensor / (peak * efficiency) if peak else float("inf")
    compute = max(compute, host_floor_seconds(workload, layout))
    overlappable, critical = communication_seconds(workload, layout)
    exposed = max(0.0, overlappable - OVERLAP[layout.strategy] * compute) + critical
    step = compute + exposed
    tokens = workload.tokens_per_micro_batch * workload.grad_accum * layout.data_parallel
    tokens_per_second = tokens / step if step else 0.0
    achieved = tokens_per_second * model_flops / (peak * layout.world) if peak else 0.0
    return Speed(
        step_seconds=step,
        compute_seconds=compute,
        communication_seconds=overlappable + critical,
        exposed_communication_seconds=exposed,
        tokens_per_step=tokens,
        tokens_per_second=tokens_per_second,
        mfu=achieved,
        peak_tflops=peak / 1e12,
        world=layout.world,
    )
