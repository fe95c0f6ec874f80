"""Precision names to dtypes, and the autocast/scaler pair a strategy without native mixed
precision (DDP) needs."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def compute_dtype(precision: str) -> torch.dtype:
    return DTYPES[precision]


def autocast(precision: str, device: torch.device, strategy_casts_itself: bool) -> AbstractContextManager[None]:
    """Autocast for DDP-style strategies; FSDP casts parameters itself through its policy."""
    if precision == "fp32" or strategy_casts_itself:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=compute_dtype(precision))


def grad_scaler(precision: str, device: torch.device, sharded: bool) -> torch.amp.GradScaler | None:
    """fp16 needs loss scaling; bf16 and fp32 do not."""
    if precision != "fp16":
        return None
    if sharded:
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        return ShardedGradScaler(device=device.type)
    return torch.amp.GradScaler(device.type)
