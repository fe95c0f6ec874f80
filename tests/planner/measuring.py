"""What the built-in script's models really hold on CPU, for the planner's tests: the memory a forward
pass leaves allocated (what backward will read), and the peak of a whole training step, from
torch.profiler's memory events; and the planner's workload for the same job."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from trainstack.instances import CATALOG
from trainstack.planner.parallelism import Layout
from trainstack.planner.workload import Architecture, Workload, decoder_architecture, gpt_architecture
from trainstack.spec import ModelShape
from trainstack_contract.config import parse_config
from trainstack_contract.model_sizes import GPT_SIZES
from trainstack_training.models import build_model
from trainstack_training.strategies.memory import apply_block_wrappers

ROOT = Path(__file__).resolve().parents[2]
INSTANCE = CATALOG["ml.p4d.24xlarge"]  # any GPU type: the layout's strategy and world matter, not its memory
# The 1.1B Llama's layer (training/hf_configs/llama-1b: hidden 2048, 32 heads of 64, 4 key/value heads,
# SwiGLU 5632) scaled down a quarter, head size kept: a CPU runs it in seconds.
SMALL_LLAMA = {"hidden_size": 512, "num_attention_heads": 8, "head_dim": 64, "num_key_value_heads": 1,
               "intermediate_size": 1408, "num_hidden_layers": 2, "vocab_size": 4096, "max_position_embeddings": 256}  # fmt: skip
LLAMA = "small-llama"


@dataclasses.dataclass(frozen=True)
class Job:
    """One micro-batch of one model, as a strategy runs it on one GPU: DDP under autocast (bf16
    matmuls, fp32 weights), or FSDP2's bf16 parameters (`bf16_parameters`), or fp32 throughout."""

    model: str  # a built-in GPT size, or LLAMA
    micro_batch: int
    precision: str = "bf16"
    bf16_parameters: bool = False  # FSDP2's MixedPrecisionPolicy: the blocks compute on bf16 copies
    compiled: bool = False
    checkpointing: bool = False

    @property
    def strategy(self) -> str:
        return "fsdp" if self.bf16_parameters else "ddp"


def build(job: Job, folder: Path) -> tuple[torch.nn.Module, int, int]:
    """The model as the script builds it, its block wrappers applied; (model, vocabulary, sequence)."""
    torch.manual_seed(0)
    flags = ["--activation_checkpointing", str(job.checkpointing).lower(), "--compile", str(job.compiled).lower()]
    if job.model == LLAMA:
        config = {**json.loads((ROOT / "training/hf_configs/llama-1b/config.json").read_text()), **SMALL_LLAMA}
        (folder / "config.json").write_text(json.dumps(config))
        model = build_model(f"hf:{folder}")
        vocab, seq = config["vocab_size"], config["max_position_embeddings"]
    else:
        model = build_model(job.model)
        vocab, seq = GPT_SIZES[job.model].vocab_size, GPT_SIZES[job.model].block_size
    if job.bf16_parameters:
        model.to(torch.bfloat16)
    apply_block_wrappers(model, parse_config(flags, {}))
    return model, vocab, seq


def _autocast(job: Job) -> contextlib.AbstractContextManager[None]:
    if job.precision == "fp32" or job.bf16_parameters:
        return contextlib.nullcontext()
    return torch.autocast("cpu", dtype=torch.bfloat16)


def _batch(vocab: int, seq: int, micro_batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = torch.randint(0, vocab, (micro_batch, seq + 1))
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def forward_bytes(job: Job, folder: Path) -> int:
    """The allocator's net allocation over a forward pass with its loss: what backward will read (and,
    under autocast, the weights' bf16 copies, which it reads too). Compiled blocks are compiled first."""
    model, vocab, seq = build(job, folder)
    if job.compiled:
        with _autocast(job):
            model(*_batch(vocab, seq, job.micro_batch)).backward()
        model.zero_grad(set_to_none=True)
    inputs, targets = _batch(vocab, seq, job.micro_batch)
    with _autocast(job), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as profiler:
        loss = model(inputs, targets)
    assert loss.requires_grad  # the graph, and what it saved, is alive while we count
    return sum(event.self_cpu_memory_usage for event in profiler.events())


def step_peak_bytes(job: Job, folder: Path) -> int:
    """The most one training step holds, as the trainer runs it for one DDP process (nothing wraps the
    model): forward and backward under autocast, the gradient norm's clip, the fused AdamW's step and
    zero_grad(set_to_none=True); the second step, measured from the allocator's events in time order, plus
    the parameters and optimizer state alive throughout."""
    model, vocab, seq = build(job, folder)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay}, {"params": no_decay, "weight_decay": 0.0}], lr=1e-4, fused=True)

    def step() -> None:
        inputs, targets = _batch(vocab, seq, job.micro_batch)
        with _autocast(job):
            model(inputs, targets).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # the optimizer's state exists from the first step on
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True) as profiler:
        step()
    events = profiler.profiler.kineto_results.events()
    held = peak = 0
    for _, change in sorted((event.start_ns(), event.nbytes()) for event in events if event.name() == "[memory]"):
        held += change
        peak = max(peak, held)
    states = sum(p.numel() * p.element_size() for p in model.parameters())
    states += sum(value.numel() * value.element_size() for state in optimizer.state.values() for value in state.values())
    return states + peak


def architecture_of(model: str) -> Architecture:
    if model != LLAMA:
        return gpt_architecture(model)
    shape = ModelShape(
        layers=SMALL_LLAMA["num_hidden_layers"],
        hidden=SMALL_LLAMA["hidden_size"],
        heads=SMALL_LLAMA["num_attention_heads"],
        kv_heads=SMALL_LLAMA["num_key_value_heads"],
        vocab=SMALL_LLAMA["vocab_size"],
        ffn_hidden=SMALL_LLAMA["intermediate_size"],
        gated_mlp=True,
        seq_len=SMALL_LLAMA["max_position_embeddings"],
    )
    return decoder_architecture(shape)


def planned(job: Job) -> tuple[Workload, Layout]:
    """The planner's workload and one-GPU layout for the job."""
    architecture = architecture_of(job.model)
    seq = SMALL_LLAMA["max_position_embeddings"] if job.model == LLAMA else GPT_SIZES[job.model].block_size
    workload = Workload(
        model=job.model,
        architecture=architecture,
        seq_len=seq,
        micro_batch_size=job.micro_batch,
        grad_accum=1,
        precision=job.precision,
        activation_checkpointing=job.checkpointing,
        activation_offloading=False,
        optimizer="adamw",
        zero1=False,
        cpu_offload=False,
        reshard_after_forward=True,
        steps=None,
        compiled=job.compiled,
    )
    return workload, Layout(job.strategy, INSTANCE, nodes=1, gpus_per_node=1, shard=1)
