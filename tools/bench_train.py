"""Benchmark: our entry point against a bare PyTorch loop on the same model and batch (CPU).

Usage: python tools/bench_train.py [--model gpt-small-bytes] [--steps 40] [--repeats 6]

Both sides do the same math per step (forward, backward, grad-norm clip, AdamW); the difference
is what the entry point adds around it: config, data plan and memory-mapped shards, loss
averaging, stop-signal checks, logging, health rules. A third side runs the entry point with every
health rule off, for the rules' own overhead. Runs alternate, and the order rotates each repeat
(the place in the order alone moved a side by 10% on this 2-core machine), so drift on
the machine hits both; each run's first interval is warm-up and dropped; medians are reported, and
the ratio of each repeat's runs (paired: the three ran back to back) with a distribution-free 95%
interval for its median, which is what resolves a small overhead from this machine's noise.
Also reports what one DCP checkpoint stalls the step loop, synchronous against asynchronous saves,
and that stall's share of training time at a 30-minute checkpoint_interval (`--checkpoint-only`: just that),
and what MLflow tracking adds to a log step against a training step, with a real tracking server
(the twin's) receiving the batches (`--tracking-only`: just that).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INTERVAL_SECONDS = 1800  # the checkpoint_interval the stall is compared with
sys.path.insert(0, str(ROOT / "training"))

import torch  # noqa: E402

from trainstack_contract.health_rules import RULES  # noqa: E402
from trainstack_contract.model_sizes import GPT_SIZES  # noqa: E402
from trainstack_training.checkpoint import Checkpointer, Progress, TrainingState  # noqa: E402
from trainstack_training.distributed import DistContext  # noqa: E402
from trainstack_training.models import build_model  # noqa: E402

RATE = re.compile(r"tokens_per_sec=([0-9.]+)")


def ours(model: str, steps: int, interval: int, micro_batch: int, workdir: Path, *extra: str) -> list[float]:
    args = [
        sys.executable, str(ROOT / "training" / "train.py"), "--model", model, "--max_steps", str(steps),
        "--log_every", str(interval), "--micro_batch_size", str(micro_batch), "--checkpoint_every", str(10 * steps),
        "--checkpoint_dir", str(workdir / "ckpt"), "--model_dir", str(workdir / "model"), "--output_dir", str(workdir / "out"),
        *extra,
    ]  # fmt: skip
    result = subprocess.run(args, capture_output=True, text=True, check=True)
    return [float(m[1]) for m in RATE.finditer(result.stdout)][1:]


def bare(model_name: str, steps: int, interval: int, micro_batch: int) -> list[float]:
    """The bare loop in a fresh process too, so both sides start from the same interpreter state."""
    args = [sys.executable, __file__, "--bare-worker", "--model", model_name, "--steps", str(steps), "--interval", str(interval)]
    result = subprocess.run([*args, "--micro_batch", str(micro_batch)], capture_output=True, text=True, check=True)
    return [float(m[1]) for m in RATE.finditer(result.stdout)]


def bare_worker(model_name: str, steps: int, interval: int, micro_batch: int) -> None:
    torch.manual_seed(0)
    model = build_model(model_name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95))
    seq_len = GPT_SIZES[model_name].block_size
    data = torch.randint(0, GPT_SIZES[model_name].vocab_size, (micro_batch * steps, seq_len + 1))
    rates, start = [], time.perf_counter()
    for step in range(steps):
        batch = data[step * micro_batch : (step + 1) * micro_batch]
        loss = model(batch[:, :-1], batch[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if (step + 1) % interval == 0:
            loss.item()  # ours synchronises on the loss at each log interval too
            rates.append(interval * micro_batch * seq_len / (time.perf_counter() - start))
            start = time.perf_counter()
    for rate in rates[1:]:
        print(f"tokens_per_sec={rate:.1f}")


@dataclass(frozen=True)
class CheckpointCost:
    step_seconds: float  # one training step, no checkpoint near
    blocked_seconds: dict[str, float]  # the save call itself, by mode: the loop waits for nothing else
    slowed_seconds: dict[str, float]  # what the steps after it took beyond their time alone (a background write's share)
    save_seconds: dict[str, float]  # from the start of a save to its manifest, by mode


def checkpoint_cost(model_name: str, micro_batch: int, workdir: Path, repeats: int, steps: int) -> CheckpointCost:
    """What one checkpoint costs the step loop, synchronous against asynchronous (DCP's async_save):
    the save call (for the asynchronous one, the copy to host memory), and how much longer the next
    `steps` training steps took than `steps` steps alone (the background write competes for the same
    cores). Alternating, medians."""
    context = DistContext(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend="gloo")
    model = build_model(model_name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    seq_len = GPT_SIZES[model_name].block_size
    batch = torch.randint(0, GPT_SIZES[model_name].vocab_size, (micro_batch, seq_len + 1))

    def train(count: int) -> float:
        start = time.perf_counter()
        for _ in range(count):
            model(batch[:, :-1], batch[:, 1:]).backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return time.perf_counter() - start

    train(3)  # warm-up: allocator, AdamW state
    modes = ("synchronous", "asynchronous")
    checkpointers = {
        mode: Checkpointer(workdir / f"bench-{mode}", keep=1, context=context, asynchronous=mode == "asynchronous")
        for mode in modes
    }
    alone: list[float] = []
    blocked: dict[str, list[float]] = {mode: [] for mode in modes}
    after: dict[str, list[float]] = {mode: [] for mode in modes}
    saves: dict[str, list[float]] = {mode: [] for mode in modes}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):  # the saves' metric lines
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        for repeat in range(repeats + 1):  # the first round warms up DCP and the writer thread, and is dropped
            kept = repeat > 0
            time_alone = train(steps)
            if kept:
                alone.append(time_alone)
            for mode, checkpointer in checkpointers.items():
                state = TrainingState(model, optimizer, scheduler, Progress(step=repeat))
                start = time.perf_counter()
                checkpointer.save(state, wait=False)
                call = time.perf_counter() - start
                time_after = train(steps)
                checkpointer.wait()
                if kept:
                    blocked[mode].append(call)
                    after[mode].append(time_after)
                    saves[mode].append(checkpointer.last_save_seconds or 0.0)
    baseline = statistics.median(alone)
    return CheckpointCost(
        step_seconds=baseline / steps,
        blocked_seconds={mode: statistics.median(values) for mode, values in blocked.items()},
        slowed_seconds={mode: statistics.median(values) - baseline for mode, values in after.items()},
        save_seconds={mode: statistics.median(values) for mode, values in saves.items()},
    )


@dataclass(frozen=True)
class TrackingCost:
    step_seconds: float  # one training step of the model
    line_seconds: float  # the loop's part of tracking one metric line: appending it
    send_seconds: float  # the background thread's: one batch of FLUSH_SECONDS worth of lines at log_every 1
    lines_per_batch: int


def tracking_cost(model_name: str, micro_batch: int, workdir: Path, step_seconds: float, lines: int = 2000) -> TrackingCost:
    """The MLflow tracker against a real server: the loop's cost per metric line (medians of `lines`),
    and what sending one batch of the lines of FLUSH_SECONDS of training at log_every 1 costs the
    sending thread."""
    from trainstack_contract.config import TrainConfig
    from trainstack_contract.tracking import EXPERIMENT_NAME, TRACKING_URI
    from trainstack_local.mlflow_server import tracking_server
    from trainstack_training.tracking import FLUSH_SECONDS, open_tracker

    line = {"step": 0, "loss": 2.5, "lr": 3e-4, "grad_norm": 1.0, "tokens_per_sec": 1.0e4, "step_time": step_seconds, "mfu": 0.4}
    with tracking_server(workdir / "mlflow", region="us-east-1", account="123456789012") as server:
        environ = {TRACKING_URI: server.url, EXPERIMENT_NAME: "bench"}
        tracker = open_tracker(TrainConfig(model=model_name, micro_batch_size=micro_batch), "bench-tracking", environ)
        assert tracker is not None, "the bench's tracking server did not answer"
        tracker.stopping.set()  # the bench sends the batches itself, to time them
        appends = []
        for step in range(1, lines + 1):
            start = time.perf_counter()
            tracker.log_line({**line, "step": step})
            appends.append(time.perf_counter() - start)
        per_batch = max(1, int(FLUSH_SECONDS / step_seconds))
        sends = []
        for _ in range(5):
            for step in range(lines + 1, lines + 1 + per_batch):
                tracker.log_line({**line, "step": step})
            lines += per_batch
            start = time.perf_counter()
            tracker.send_pending()
            sends.append(time.perf_counter() - start)
        tracker.close("FINISHED")
    return TrackingCost(step_seconds, statistics.median(appends), statistics.median(sends), per_batch)


def print_tracking_cost(cost: TrackingCost) -> None:
    share = cost.line_seconds / cost.step_seconds
    print(
        f"MLflow tracking: the loop spends {cost.line_seconds * 1e6:.1f} us per metric line = {100 * share:.3f}% of a "
        f"training step ({cost.step_seconds * 1000:.1f} ms) at log_every 1; the sending thread takes "
        f"{cost.send_seconds * 1000:.1f} ms per batch of {cost.lines_per_batch} lines (every 10 s), medians"
    )


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median: the order statistics whose ranks the binomial
    distribution of "how many values fall below the median" puts outside (1 - confidence) / 2."""
    ordered, n = sorted(values), len(values)
    tail = (1 - confidence) / 2
    below, k = 0.0, 0
    while k < n and below + math.comb(n, k) / 2**n <= tail:
        below += math.comb(n, k) / 2**n
        k += 1
    return (ordered[k - 1], ordered[n - k]) if k else (ordered[0], ordered[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="gpt-small-bytes")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--interval", type=int, default=5)
    parser.add_argument("--micro_batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=6, help="a multiple of 3: each side runs first, second and third alike")
    parser.add_argument("--bare-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint-only", action="store_true", help="only the checkpoint stall, sync against async")
    parser.add_argument("--tracking-only", action="store_true", help="only what MLflow tracking adds to a log step")
    parser.add_argument("--checkpoint-repeats", type=int, default=7, help="saves of each kind (medians)")
    parser.add_argument("--checkpoint-steps", type=int, default=10, help="training steps timed after each save")
    args = parser.parse_args()
    if args.tracking_only:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"model {args.model}, micro batch {args.micro_batch}, CPU threads {torch.get_num_threads()}")
            step_seconds = checkpoint_cost(args.model, args.micro_batch, Path(tmp), 1, args.checkpoint_steps).step_seconds
            print_tracking_cost(tracking_cost(args.model, args.micro_batch, Path(tmp), step_seconds))
        return 0
    if args.checkpoint_only:
        with tempfile.TemporaryDirectory() as tmp:
            print(f"model {args.model}, micro batch {args.micro_batch}, CPU threads {torch.get_num_threads()}")
            cost = checkpoint_cost(args.model, args.micro_batch, Path(tmp), args.checkpoint_repeats, args.checkpoint_steps)
            print_checkpoint_cost(cost, args.checkpoint_steps)
        return 0
    if args.bare_worker:
        bare_worker(args.model, args.steps, args.interval, args.micro_batch)
        return 0
    ours_rates, bare_rates, unwatched_rates = [], [], []
    per_repeat: dict[str, list[float]] = {"ours": [], "bare": [], "unwatched": []}  # each run's median
    no_rules = ("--health", json.dumps(dict.fromkeys(RULES, False)))
    with tempfile.TemporaryDirectory() as tmp:

        def side(kind: str, repeat: int) -> None:
            workdir = Path(tmp) / f"{kind}{repeat}"
            if kind == "ours":
                rates = ours(args.model, args.steps, args.interval, args.micro_batch, workdir)
                ours_rates.extend(rates)
            elif kind == "bare":
                rates = bare(args.model, args.steps, args.interval, args.micro_batch)
                bare_rates.extend(rates)
            else:
                rates = ours(args.model, args.steps, args.interval, args.micro_batch, workdir, *no_rules)
                unwatched_rates.extend(rates)
            per_repeat[kind].append(statistics.median(rates))

        order = ["ours", "bare", "unwatched"]
        for repeat in range(args.repeats):  # each side takes each place in the order equally often
            for kind in order[repeat % 3 :] + order[: repeat % 3]:
                side(kind, repeat)
        cost = checkpoint_cost(args.model, args.micro_batch, Path(tmp), args.checkpoint_repeats, args.checkpoint_steps)
    ours_median, bare_median = statistics.median(ours_rates), statistics.median(bare_rates)
    runs = f"{args.steps} steps x {args.repeats} alternating runs"
    print(f"model {args.model}, micro batch {args.micro_batch}, {runs}, CPU threads {torch.get_num_threads()} per process")
    print(f"{'':<28}{'tokens/s (median)':>20}{'intervals':>11}")
    print(f"{'trainstack entry point':<28}{ours_median:>20.1f}{len(ours_rates):>11}")
    print(f"{'bare PyTorch loop':<28}{bare_median:>20.1f}{len(bare_rates):>11}")
    unwatched_median = statistics.median(unwatched_rates)
    print(f"{'entry point, rules off':<28}{unwatched_median:>20.1f}{len(unwatched_rates):>11}")
    print(f"entry point / bare = {ours_median / bare_median:.3f}  (overhead {100 * (1 - ours_median / bare_median):+.1f}%)")
    health = f"{100 * (1 - ours_median / unwatched_median):+.1f}%"
    print(f"health rules (defaults) / rules off = {ours_median / unwatched_median:.3f}  (overhead {health})")
    for name, other in (("bare", "entry point / bare"), ("unwatched", "rules on / rules off")):
        paired = [a / b for a, b in zip(per_repeat["ours"], per_repeat[name], strict=True)]
        low, high = median_interval(paired)
        print(
            f"{other}, paired by repeat: median {statistics.median(paired):.3f}, "
            f"95% interval of the median {low:.3f}..{high:.3f} ({len(paired)} repeats)"
        )
    print_checkpoint_cost(cost, args.checkpoint_steps)
    with tempfile.TemporaryDirectory() as tmp:
        print_tracking_cost(tracking_cost(args.model, args.micro_batch, Path(tmp), cost.step_seconds))
    return 0


def print_checkpoint_cost(cost: CheckpointCost, steps: int) -> None:
    print(f"one checkpoint against one training step ({cost.step_seconds * 1000:.1f} ms); medians:")
    for mode, blocked in cost.blocked_seconds.items():
        slowed = cost.slowed_seconds[mode]
        share = (blocked + max(slowed, 0.0)) / INTERVAL_SECONDS
        print(
            f"  {mode:<13} save call {blocked * 1000:8.1f} ms ({blocked / cost.step_seconds:5.2f} steps), "
            f"next {steps} steps {slowed * 1000:+8.1f} ms, save to manifest {cost.save_seconds[mode] * 1000:8.1f} ms; "
            f"{100 * share:.4f}% of training time at checkpoint_interval {INTERVAL_SECONDS // 60} min"
        )


if __name__ == "__main__":
    sys.exit(main())
