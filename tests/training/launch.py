"""Run the real entry point as SageMaker would: under torchrun, or as one process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "training" / "train.py"
BIN = Path(sys.executable).parent
STEP_LINE = re.compile(r"^step=(\d+) loss=([0-9.]+)")
TIMEOUT = 240  # seconds; a hung collective must fail the test, not the CI run


def environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"  # two ranks on two cores: no oversubscription
    env.update(extra)
    return env


def command(args: list[str], nproc: int) -> list[str]:
    if nproc == 0:
        return [sys.executable, str(TRAIN), *args]
    return [str(BIN / "torchrun"), "--standalone", f"--nproc_per_node={nproc}", str(TRAIN), *args]


def run(args: list[str], nproc: int = 2, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """nproc=0 runs one plain process; otherwise torchrun with that many."""
    return subprocess.run(
        command(args, nproc), env=env or environment(), capture_output=True, text=True, timeout=TIMEOUT, check=False
    )


def losses(output: str) -> dict[int, float]:
    return {int(m[1]): float(m[2]) for line in output.splitlines() if (m := STEP_LINE.match(line.strip()))}


def job_args(tmp: Path, *extra: str, steps: int = 12) -> list[str]:
    return [
        "--model", "gpt-tiny", "--max_steps", str(steps), "--log_every", "1", "--seed", "0", "--lr", "1e-3",
        "--warmup_steps", "2", "--micro_batch_size", "4",
        "--checkpoint_dir", str(tmp / "checkpoints"), "--model_dir", str(tmp / "model"), "--output_dir", str(tmp / "output"),
        *extra,
    ]  # fmt: skip
