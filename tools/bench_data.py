"""Benchmark: start-up to the first batch against data set size, and the shuffle's memory.

Usage: python tools/bench_data.py [--repeats 5]

Synthetic uint16 token shards of 10^6 ... 10^9 tokens (sparse files: no disk is written). "open"
is what the entry point does before step 1 today (TokenShards + the first batch); "open + scan" adds
the full vocabulary scan it used to do (max over every token), which with FastFile input streams the
whole data set from S3 first. Shuffle memory: tracemalloc's peak for the first indices of an epoch,
per-index (EpochShuffle) against a materialized torch.randperm(...).tolist(). Medians.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "training"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from trainstack_training.data.sampler import EpochShuffle  # noqa: E402
from trainstack_training.data.tokens import TokenShards  # noqa: E402

SEQ_LEN, VOCAB = 1024, 50304


def _open(directory: Path, scan: bool) -> float:
    start = time.perf_counter()
    data = TokenShards(directory, SEQ_LEN, VOCAB)
    data.batch([0, len(data) - 1])
    if scan:
        max(int(np.memmap(p, dtype=np.uint16, mode="r").max()) for p in sorted(directory.glob("*.bin")))
    return time.perf_counter() - start


def _peak(make_order) -> int:
    tracemalloc.start()
    make_order()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print(f"{'tokens':>14}{'open (s)':>12}{'open + scan (s)':>18}{'ratio':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for exponent in range(6, 10):
            directory = Path(tmp) / f"e{exponent}"
            directory.mkdir()
            with (directory / "part-0.uint16.bin").open("wb") as handle:
                handle.truncate(2 * 10**exponent)  # sparse: reads as zeros
            now = statistics.median(_open(directory, scan=False) for _ in range(args.repeats))
            before = statistics.median(_open(directory, scan=True) for _ in range(args.repeats))
            print(f"{10**exponent:>14,}{now:>12.4f}{before:>18.4f}{before / now:>8.0f}")
    print(f"{'examples':>14}{'EpochShuffle peak':>20}{'randperm().tolist() peak':>26}")
    for size in (10**6, 10**7, 10**9):
        shuffle = EpochShuffle(size, seed=0)
        ours = _peak(lambda s=shuffle: [s(p) for p in range(1024)])
        theirs = "—" if size > 10**7 else f"{_peak(lambda n=size: torch.randperm(n).tolist()) / 2**20:,.1f} MiB"
        print(f"{size:>14,}{ours / 1024:>17.1f} KiB{theirs:>26}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
