"""The planner against the built-in script's runs measured on one NVIDIA H200 (tools/gpu_check.py,
2026-11-26; docs/benchmarks.md, "GPU check"): every row within 15% of its plan, memory and tokens/s, but the
one that page names (FSDP2 with the unfused AdamW, which the planner does not model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.gpu_check import GPU_PROTOCOL, VARIANTS, Run, hyperparameters, planned
from trainstack import facts
from trainstack.planner.memory import GIB

H200 = "ml.p5e.48xlarge"
LLAMA = "hf:hf_configs/llama-1b"
# (model, run, tokens/s, peak GiB in use): the medians and peaks gpu-check.json recorded
MEASURED = [
    ("gpt-125m", "ddp", 373324.1, 17.183),
    ("gpt-125m", "fsdp", 263281.3, 17.741),
    ("gpt-125m", "ddp compile off", 346756.7, 17.464),
    ("gpt-125m", "ddp fused off", 334096.9, 17.183),
    ("gpt-125m", "fsdp compile off", 253207.9, 17.718),
    ("gpt-125m", "fsdp fused off", 205558.5, 17.718),
    ("gpt-125m", "ddp rules off", 383436.9, 17.183),
    ("gpt-350m", "ddp", 174712.0, 29.556),
    ("gpt-350m", "fsdp", 132943.7, 30.128),
    (LLAMA, "ddp", 64817.6, 29.985),
    (LLAMA, "fsdp", 61536.7, 31.800),
]
NOT_MODELLED = {("gpt-125m", "fsdp fused off")}  # the unfused AdamW's host time over DTensors
WITHIN = 0.15


def _plan(model: str, variant_name: str):
    variant = next(variant for variant in VARIANTS if variant.name == variant_name)
    run = Run(model, variant, hyperparameters(model, variant, GPU_PROTOCOL, Path("/unused"), dry_run=False, broken=False))
    return planned(run, facts.instance(H200))


@pytest.mark.parametrize(("model", "run", "tokens_per_sec", "peak_gib"), MEASURED, ids=[f"{m}-{r}" for m, r, _, _ in MEASURED])
def test_each_measured_run_is_within_15_percent_of_its_plan(model, run, tokens_per_sec, peak_gib):
    plan = _plan(model, run)
    assert abs(peak_gib / (plan.memory_bytes / GIB) - 1) <= WITHIN
    speed_ratio = tokens_per_sec / plan.tokens_per_sec
    if (model, run) in NOT_MODELLED:
        assert speed_ratio < 1 - WITHIN  # docs/benchmarks.md says why; a planner that models it should drop this
    else:
        assert abs(speed_ratio - 1) <= WITHIN, speed_ratio


def test_the_mfu_the_plan_expects_grows_with_the_model_and_is_bounded():
    mfus = [_plan(model, "ddp").mfu for model in ("gpt-125m", "gpt-350m", LLAMA)]
    assert mfus == sorted(mfus) and mfus[0] > 0.30 and mfus[-1] < 0.51
