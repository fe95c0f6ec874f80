"""Run the real entry point as SageMaker would: under torchrun (on one "host" or several), or as one process."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

from trainstack_contract import fault_hooks

ROOT = Path(__file__).resolve().parents[2]
TRAIN = ROOT / "training" / "train.py"
BIN = Path(sys.executable).parent
STEP_LINE = re.compile(r"^step=(\d+) loss=([0-9.]+)")
TIMEOUT = 240  # seconds; a hung collective must fail the test, not the CI run


def environment(bin_dir: Path = BIN, **extra: str) -> dict[str, str]:
    """The launch environment; `bin_dir` is the Python environment that runs the job (this venv, or
    an image's runtime: tests/training/test_image_runtimes.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["OMP_NUM_THREADS"] = "1"  # two ranks on two cores: no oversubscription
    env.update(extra)
    return env


def command(args: list[str], nproc: int, bin_dir: Path = BIN) -> list[str]:
    if nproc == 0:
        return [str(bin_dir / "python"), str(TRAIN), *args]
    return [str(bin_dir / "torchrun"), "--standalone", f"--nproc_per_node={nproc}", str(TRAIN), *args]


def run(
    args: list[str], nproc: int = 2, env: dict[str, str] | None = None, bin_dir: Path = BIN
) -> subprocess.CompletedProcess[str]:
    """nproc=0 runs one plain process; otherwise torchrun with that many."""
    return subprocess.run(
        command(args, nproc, bin_dir),
        env=env or environment(bin_dir),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


def losses(output: str) -> dict[int, float]:
    return {int(m[1]): float(m[2]) for line in output.splitlines() if (m := STEP_LINE.match(line.strip()))}


def trajectory(result: subprocess.CompletedProcess[str]) -> list[float]:
    """The losses of a successful run, one per step from step 1 on (every step logged)."""
    assert result.returncode == 0, result.stderr[-3000:]
    by_step = losses(result.stdout)
    assert sorted(by_step) == list(range(1, len(by_step) + 1))
    return [by_step[step] for step in sorted(by_step)]


def sigkill_at_step(
    args: list[str], step: int, nproc: int = 2, bin_dir: Path = BIN, *, after_checkpoint: int = 0, hold_at: int | None = None
) -> int:
    """Start a job and SIGKILL it and every worker once it logs `step` (or a later one) and, when
    given, `checkpoint step=<after_checkpoint>`: saves are asynchronous, so a checkpoint is complete
    only when that line comes, some steps after the save began. No handler runs anywhere, like a
    reclaimed instance. `hold_at`: rank 0 stops for good before that step (the twin's hang fault), so
    however far this reader lags behind the job's output on a busy machine, the job is killed before
    it gets there. Returns the step it was killed at."""
    held = {fault_hooks.TWIN: "1", fault_hooks.INJECT_HANG: f"0:{hold_at}"} if hold_at else {}
    process = subprocess.Popen(
        command(args, nproc, bin_dir),
        env=environment(bin_dir, **held),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    checkpointed, reached = not after_checkpoint, 0
    for line in process.stdout:  # both, in either order: a held job logs no step after the checkpoint line
        checkpointed = checkpointed or line.strip() == f"checkpoint step={after_checkpoint}"
        if logged := STEP_LINE.match(line.strip()):
            reached = max(reached, int(logged[1]))
        if checkpointed and reached >= step:
            kill_tree(process.pid)
            process.wait(timeout=60)
            return reached
    process.wait(timeout=60)
    raise AssertionError(f"the job ended (exit {process.returncode}) before step {step} and checkpoint {after_checkpoint}")


def newest_complete_checkpoint(directory: Path) -> int:
    """The newest step whose checkpoint has its manifest (0: none), as a resume chooses on one host."""
    return max(
        (int(path.name.removeprefix("step_")) for path in directory.glob("step_*") if (path / "manifest.json").is_file()),
        default=0,
    )


def job_args(tmp: Path, *extra: str, steps: int = 12) -> list[str]:
    return [
        "--model", "gpt-tiny", "--max_steps", str(steps), "--log_every", "1", "--seed", "0", "--lr", "1e-3",
        "--warmup_steps", "2", "--micro_batch_size", "4",
        "--checkpoint_dir", str(tmp / "checkpoints"), "--model_dir", str(tmp / "model"), "--output_dir", str(tmp / "output"),
        *extra,
    ]  # fmt: skip


# A constant learning rate after warm-up: a run's first steps then do not depend on max_steps, so a
# run stopped at step k and resumed to n can be compared step by step with one run of n steps.
STEADY_LR = ("--min_lr", "1e-3")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_hosts(
    node_args: Sequence[list[str]], nproc: int, envs: Sequence[dict[str, str]] | None = None
) -> list[subprocess.CompletedProcess[str]]:
    """One torchrun per emulated host, all at once on this machine, as SageMaker starts them on
    algo-1..N: `--nnodes N --node_rank i` against node 0's rendezvous."""
    port = free_port()
    processes = []
    for node, args in enumerate(node_args):
        launcher = [
            str(BIN / "torchrun"), "--nnodes", str(len(node_args)), "--node_rank", str(node),
            "--master_addr", "127.0.0.1", "--master_port", str(port), f"--nproc_per_node={nproc}",
        ]  # fmt: skip
        env = envs[node] if envs else environment()
        processes.append(
            subprocess.Popen([*launcher, str(TRAIN), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        )
    deadline = time.monotonic() + TIMEOUT  # one host failing early leaves the others waiting at a collective
    results: list[subprocess.CompletedProcess[str]] = []
    try:
        for process in processes:
            stdout, stderr = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            results.append(subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr))
    except subprocess.TimeoutExpired:
        raise TimeoutError(_hung(processes, results)) from None
    finally:
        for process in processes:
            if process.poll() is None:
                kill_tree(process.pid)
    return results


def _hung(processes: list[subprocess.Popen[str]], ended: list[subprocess.CompletedProcess[str]]) -> str:
    """Which hosts were still running at the deadline, and the end of every host's stderr (where each
    stood): a hang here is rare and intermittent, so the message is the evidence."""
    hung = [node for node, process in enumerate(processes) if process.poll() is None]
    for node in hung:
        kill_tree(processes[node].pid)
    tails = []
    for node, process in enumerate(processes):
        stderr = ended[node].stderr if node < len(ended) else process.communicate()[1]
        how = "killed at the deadline" if node in hung else f"exit {process.returncode}"
        tails.append(f"--- host {node} ({how}), stderr's end:\n{stderr[-3000:]}")
    return f"hosts {hung} still running after {TIMEOUT} s\n" + "\n".join(tails)


def kill_tree(pid: int) -> None:
    """SIGKILL a launcher and every worker: torchrun starts workers in sessions of their own."""
    root = psutil.Process(pid)
    processes = [root, *root.children(recursive=True)]
    for process in processes:
        process.send_signal(signal.SIGKILL)
    psutil.wait_procs(processes, timeout=30)


def restore_checkpoints(hosts: Sequence[Path], into: Sequence[Path]) -> None:
    """SageMaker's sync and restore: every host's checkpoint files go to one S3 prefix, and each
    (re)started host receives the whole prefix (the union; a file every host wrote, such as the
    manifest, exists once)."""
    for destination in into:
        destination.mkdir(parents=True)
        for source in hosts:
            shutil.copytree(source, destination, dirs_exist_ok=True)
