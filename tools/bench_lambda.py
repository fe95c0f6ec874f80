"""Benchmark: each Lambda handler's cold import from the shipped asset under the Lambda runtime's
Python, against `import boto3` alone; and what polling a 24-hour job costs in Step Functions transitions.

Usage: python tools/bench_lambda.py [--runs 11]

What is timed is what Lambda runs: the asset as synth builds it (stacks/lambda_asset.py: the core
package, the contract package, the pinned pydantic and PyYAML as Linux wheels), built
under build/bench-lambda/ (content-addressed, as synth builds its own under build/), imported by the runtime's
Python (LAMBDA_PYTHON, from pyenv or PATH) in a venv cached under build/bench-lambda/ that holds
only what the runtime ships beside the asset: boto3 and botocore at the pinned versions.

Each import is timed in a fresh interpreter (`-I -B`, the asset first on sys.path as /var/task is,
which is read-only: `-B` writes no bytecode either), alternating the sides; medians are reported,
with each side's ratio to `import boto3` from the same run. The asset carries its bytecode, as
shipped. "on first call" adds the modules a handler's functions import when called (read from its
source): what its first invocation imports on top of the cold import.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import shutil
import statistics
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "lambda")]

from stacks.lambda_asset import LAMBDA_PYTHON, PROVIDED_BY_RUNTIME, build_lambda_asset, runtime_python  # noqa: E402
from trainstack.workflow import FIRST_POLL_SECONDS, MAX_POLL_SECONDS, transitions_for  # noqa: E402

BUILD = ROOT / "build" / "bench-lambda"
HANDLERS = ("validate", "create", "describe", "notify", "stop")
BOTO3 = "import boto3"
TARGET = 1.5  # the slowest handler's cold import with its first call, at most this many times `import boto3`'s
PRICE_PER_TRANSITION = 0.025 / 1000  # Standard workflows, us-east-1 (docs/sagemaker-contract.md §6)
FIXED_TRANSITIONS = 7  # Validate, RunTrials, Create, TrialFinished, Notify, RunOutcome, Completed


def runtime_venv() -> Path:
    """A venv of the runtime's Python holding only what the runtime ships (boto3, botocore, as pinned
    in pyproject.toml), made once per set of pins; returns its python."""
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = [d for d in dependencies if d.startswith(PROVIDED_BY_RUNTIME)]
    key = hashlib.sha256("\n".join([LAMBDA_PYTHON, *pins]).encode()).hexdigest()[:16]
    venv = BUILD / f"runtime-{LAMBDA_PYTHON}-{key}"
    python = venv / "bin" / "python"
    if not (venv / ".installed").exists():
        shutil.rmtree(venv, ignore_errors=True)
        interpreter = runtime_python()
        if interpreter is None:
            sys.exit(f"no Python {LAMBDA_PYTHON} (the Lambda runtime's) to time the asset with: `pyenv install {LAMBDA_PYTHON}`")
        subprocess.run([str(interpreter), "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "--quiet", *pins], check=True)
        (venv / ".installed").touch()
    return python


def deferred_imports(handler: str) -> list[str]:
    """The modules the handler's functions import when called, from its source."""
    path = ROOT / "lambda" / "trainstack" / "handlers" / f"{handler}.py"
    functions = [n for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    modules: list[str] = []
    for node in (n for function in functions for n in ast.walk(function)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.append(node.module)
        elif isinstance(node, ast.Import):
            modules.extend(alias.name for alias in node.names)
    return sorted(set(modules))


def import_seconds(python: Path, asset: Path, modules: str) -> float:
    code = (
        f"import sys; sys.path.insert(0, {str(asset)!r}); import time; t = time.perf_counter(); "
        f"import {modules}; print(time.perf_counter() - t)"
    )
    result = subprocess.run([str(python), "-I", "-B", "-c", code], capture_output=True, text=True, check=True)
    return float(result.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=11)
    args = parser.parse_args()
    python = runtime_venv()
    asset = build_lambda_asset(BUILD)
    sides = {BOTO3: "boto3"}
    for name in HANDLERS:
        sides[name] = f"trainstack.handlers.{name}"
        if deferred := deferred_imports(name):
            sides[f"{name} +call"] = ", ".join([sides[name], *deferred])
    samples: dict[str, list[float]] = {side: [] for side in sides}
    order = list(sides)
    for run in range(args.runs):
        for side in order[run % len(order) :] + order[: run % len(order)]:  # each run starts one side later
            samples[side].append(import_seconds(python, asset, sides[side]))
    medians = {side: statistics.median(values) for side, values in samples.items()}
    floor = medians[BOTO3]

    version = subprocess.run([str(python), "-c", "import sys; print(sys.version.split()[0])"], capture_output=True, text=True)
    shipped = f"{asset.relative_to(ROOT)} (with its bytecode, as shipped)"
    print(f"cold import from {shipped}, Python {version.stdout.strip()}, boto3 beside it;")
    print(f"median of {args.runs} fresh interpreters per side:")
    print(f"  {'':<16} {'cold import':>18}   {'+ on first call':>18}")
    print(f"  {BOTO3:<16} {floor * 1000:9.1f} ms {1:5.2f}x")
    for name in HANDLERS:
        line = f"  {name:<16} {medians[name] * 1000:9.1f} ms {medians[name] / floor:5.2f}x"
        if (call := f"{name} +call") in medians:
            line += f"   {medians[call] * 1000:9.1f} ms {medians[call] / floor:5.2f}x   ({sides[call].split(', ', 1)[1]})"
        print(line)
    worst = max((side for side in medians if side != BOTO3), key=medians.__getitem__)  # a first call included
    print(f"slowest: {worst}, {medians[worst] / floor:.2f}x import boto3 (target at most {TARGET})")

    polls = transitions_for(86400)
    total = polls + FIXED_TRANSITIONS
    policy = f"poll {FIRST_POLL_SECONDS}s doubling to {MAX_POLL_SECONDS}s"
    print(f"a 24-hour job: {policy} -> {polls} in the Wait/Describe/Choice loop + {FIXED_TRANSITIONS} fixed = {total}")
    print(f"  = ${total * PRICE_PER_TRANSITION:.4f} per run at $0.025 per 1,000 (the free tier covers 4,000 a month)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
