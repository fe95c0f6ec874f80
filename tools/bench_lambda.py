"""Benchmark: the Lambda package's cold import against `import boto3` alone, and what polling a
24-hour job costs in Step Functions transitions.

Usage: python tools/bench_lambda.py [--runs 15]

Each import is timed in a fresh interpreter (a cold start imports everything once), alternating
the two sides; medians are reported. The handlers import boto3 themselves, so the ratio is the
whole cold-import cost of a handler relative to the floor any Python Lambda using boto3 pays.
Measured on this machine's Python, not the Lambda runtime: the ratio, not the milliseconds, is
the figure to compare.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "lambda"))

from trainstack.workflow import FIRST_POLL_SECONDS, MAX_POLL_SECONDS, transitions_for  # noqa: E402

HANDLERS = ("validate", "create", "describe", "notify", "stop")
PRICE_PER_TRANSITION = 0.025 / 1000  # Standard workflows, us-east-1 (docs/sagemaker-contract.md §6)
FIXED_TRANSITIONS = 7  # Validate, RunTrials, Create, TrialFinished, Notify, RunOutcome, Completed


def import_seconds(statement: str) -> float:
    code = f"import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT / "lambda")
    return float(result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    sides = {"import boto3": "import boto3", **{f"trainstack.handlers.{h}": f"import trainstack.handlers.{h}" for h in HANDLERS}}
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.runs):
        for name, statement in sides.items():
            samples[name].append(import_seconds(statement))
    floor = statistics.median(samples["import boto3"])
    print(f"cold import, median of {args.runs} fresh interpreters each (Python {sys.version.split()[0]}):")
    for name, values in samples.items():
        median = statistics.median(values)
        print(f"  {name:<34} {median * 1000:7.1f} ms   {median / floor:5.2f} x boto3")
    worst = max(statistics.median(v) for n, v in samples.items() if n != "import boto3")
    print(f"slowest handler / boto3 = {worst / floor:.2f} (target at most 1.5)")
    polls = transitions_for(86400)
    total = polls + FIXED_TRANSITIONS
    policy = f"poll {FIRST_POLL_SECONDS}s doubling to {MAX_POLL_SECONDS}s"
    print(f"a 24-hour job: {policy} -> {polls} in the Wait/Describe/Choice loop + {FIXED_TRANSITIONS} fixed = {total}")
    print(f"  = ${total * PRICE_PER_TRANSITION:.4f} per run at $0.025 per 1,000 (the free tier covers 4,000 a month)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
