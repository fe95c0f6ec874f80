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
Also reports the time to save a DCP checkpoint as a multiple of one training step.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
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


def checkpoint_cost(model_name: str, micro_batch: int, workdir: Path) -> tuple[float, float]:
    context = DistContext(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend="gloo")
    model = build_model(model_name)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0)
    seq_len = GPT_SIZES[model_name].block_size
    batch = torch.randint(0, GPT_SIZES[model_name].vocab_size, (micro_batch, seq_len + 1))
    step_times, save_times = [], []
    for _ in range(5):
        start = time.perf_counter()
        model(batch[:, :-1], batch[:, 1:]).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step_times.append(time.perf_counter() - start)
    checkpointer = Checkpointer(workdir / "bench-ckpt", keep=1, context=context)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        for step in range(1, 6):
            state = TrainingState(model, optimizer, scheduler, Progress(step=step))
            start = time.perf_counter()
            checkpointer.save(state)
            save_times.append(time.perf_counter() - start)
    return statistics.median(step_times), statistics.median(save_times)


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
    args = parser.parse_args()
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
        step_time, save_time = checkpoint_cost(args.model, args.micro_batch, Path(tmp))
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
    step = f"one training step ({step_time * 1000:.1f} ms)"
    print(f"checkpoint save {save_time * 1000:.1f} ms = {save_time / step_time:.2f} x {step}, medians of 5")
    return 0


if __name__ == "__main__":
    sys.exit(main())
