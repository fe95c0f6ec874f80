"""How often to checkpoint: one home for the built-in script's `checkpoint_every: auto` and the
planner's goodput, so the interval a job uses and the one its plan assumes are one formula.

A checkpoint costs its save time every time it is taken; a failure costs the work done since the
last one. Young's first-order optimum between the two ("A first order approximation to the optimum
checkpoint interval", CACM 17(9), 1974; Daly, "A higher order estimate of the optimum checkpoint
interval for restart dumps", FGCS 22(3), 2006, shows it holds while the save is short against the
mean time to failure) is

    interval = sqrt(2 x save time x MTTF)

of training between checkpoints. It is never shorter than what keeps the saves within
SAVE_OVERHEAD_BOUND of training time (save time / interval), whatever the MTTF.
"""

from __future__ import annotations

import math

AUTO = "auto"  # checkpoint_every's word for this interval

# Failures of the job's hardware and infrastructure, per GPU: Kokolis et al., "Revisiting Reliability
# in Large-Scale Machine Learning Research Clusters" (Meta's RSC-1 and RSC-2, 11 months, 150 million
# A100 GPU-hours; arXiv 2410.21680, HPCA 2025) project a mean time to failure of 7.9 hours for a job
# of 1,024 GPUs (and about 47 days for one of 8, the same rate within 12%). A job's failures add up
# over its GPUs, so its MTTF is this over its GPU count.
GPU_HOURS_BETWEEN_FAILURES = 7.9 * 1024

# Saves may take at most this share of training time, however rarely the job fails.
SAVE_OVERHEAD_BOUND = 0.05


def job_mttf_seconds(gpus: int) -> float:
    """The mean time to failure of a job on this many GPUs, at the published per-GPU rate."""
    return GPU_HOURS_BETWEEN_FAILURES * 3600 / max(1, gpus)


def young_daly_seconds(save_seconds: float, mttf_seconds: float) -> float:
    """Young's optimum interval between checkpoints, in seconds of training."""
    return math.sqrt(2 * save_seconds * mttf_seconds)


def overhead_bound_seconds(save_seconds: float) -> float:
    """The shortest interval whose saves stay within SAVE_OVERHEAD_BOUND of training time."""
    return save_seconds / SAVE_OVERHEAD_BOUND


def checkpoint_interval_seconds(save_seconds: float, mttf_seconds: float) -> float:
    """`auto`'s interval: Young's optimum, or the overhead bound where that is longer."""
    return max(young_daly_seconds(save_seconds, mttf_seconds), overhead_bound_seconds(save_seconds))


def interval_steps(interval_seconds: float, step_seconds: float) -> int:
    """The interval as optimizer steps of this length, at least one."""
    return max(1, round(interval_seconds / step_seconds))
