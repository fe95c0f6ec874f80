"""The Lambda asset: the core package, the training script's torch-free contract, and the pinned
dependencies as Linux wheels, without Docker.

pip installs the wheels for the Lambda platform (`--platform manylinux2014_x86_64
--only-binary=:all:`), once per set of requirements (cached under build/), and the core package
is copied beside them on every synth. The requirements are read from pyproject.toml, so the
Lambda runs exactly the versions the tests run.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The newest Lambda Python runtime whose interpreter these machines have (pyenv's 3.13), so the
# asset as shipped — compiled pydantic_core included — is imported and run in the tests
# (tests/infra/test_shipped_lambda.py). 3.14 exists on Lambda, but nothing here could run its wheels.
LAMBDA_PYTHON = "3.13"
PLATFORM = "manylinux2014_x86_64"
PROVIDED_BY_RUNTIME = ("boto3", "botocore")  # the Lambda Python runtime ships these
# The built-in training script's torch-free contract, which Validate parses hyperparameters and
# plans models with (trainstack.builtin_script, trainstack.planner): the same files the job runs.
SCRIPT_CONTRACT = ("__init__.py", "config.py", "health_rules.py", "model_sizes.py", "runtime_requirements.py")


def lambda_requirements() -> list[str]:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [d for d in dependencies if not d.startswith(PROVIDED_BY_RUNTIME)]


def build_lambda_asset(build_dir: Path = ROOT / "build") -> Path:
    requirements = lambda_requirements()
    key = hashlib.sha256("\n".join([LAMBDA_PYTHON, PLATFORM, *requirements]).encode()).hexdigest()[:16]
    dependencies = build_dir / f"lambda-deps-{key}"
    if not dependencies.is_dir():
        staging = build_dir / f"lambda-deps-{key}.partial"
        shutil.rmtree(staging, ignore_errors=True)
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(staging), "--platform", PLATFORM,
             "--only-binary=:all:", "--implementation", "cp", "--python-version", LAMBDA_PYTHON, *requirements],
            check=True,
        )  # fmt: skip
        staging.rename(dependencies)
    asset = build_dir / "lambda-asset"
    shutil.rmtree(asset, ignore_errors=True)
    shutil.copytree(dependencies, asset, ignore=shutil.ignore_patterns("__pycache__", "RECORD"))
    shutil.copytree(ROOT / "lambda" / "trainstack", asset / "trainstack", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (asset / "trainstack_training").mkdir()
    for name in SCRIPT_CONTRACT:
        shutil.copy2(ROOT / "training" / "trainstack_training" / name, asset / "trainstack_training" / name)
    return asset
