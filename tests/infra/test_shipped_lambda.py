"""The Lambda as shipped: the built asset (its compiled pydantic_core included) imported by the
runtime's own Python with only boto3 beside it, every handler invoked against moto."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from stacks import lambda_asset
from stacks.lambda_asset import LAMBDA_PYTHON, ROOT, build_lambda_asset
from tests.core.specs import DDP, STACK
from trainstack.handlers.environment import lambda_variables

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
DRIVER = Path(__file__).with_name("shipped_lambda_driver.py")


def _interpreter() -> str:
    """The runtime's Python. Missing is a failure that says how to get it, never a skip."""
    python = lambda_asset.runtime_python()
    if python is None:
        pytest.fail(f"no Python {LAMBDA_PYTHON} to run the Lambda asset with: `pyenv install {LAMBDA_PYTHON}`")
    return str(python)


def _pins(*names: str) -> list[str]:
    """The pinned requirements of these packages, as the main venv pins them (pyproject.toml)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    every = project["dependencies"] + [d for group in project["optional-dependencies"].values() for d in group]
    return [d for d in every if re.split(r"[\[=]", d)[0] in names]


@pytest.fixture(scope="module")
def runtime_python(tmp_path_factory) -> Path:
    """A venv of the runtime's Python holding only boto3 (the runtime ships it) and moto."""
    venv = tmp_path_factory.mktemp("lambda-runtime") / "venv"
    subprocess.run([_interpreter(), "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *_pins("boto3", "moto")], check=True)
    return python


@pytest.fixture(scope="module")
def shipped(runtime_python) -> dict:
    asset = build_lambda_asset()
    payload = {"environment": lambda_variables(STACK, topic_arn="set-by-the-driver"), "spec": {**DDP, "inputs": {}}}
    result = subprocess.run(
        [str(runtime_python), str(DRIVER), str(asset)], input=json.dumps(payload), capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_shipped_asset_runs_on_the_lambda_runtimes_python(shipped):
    assert shipped["python"] == LAMBDA_PYTHON != f"{sys.version_info.major}.{sys.version_info.minor}"


def test_the_shipped_asset_uses_its_own_compiled_pydantic_core(shipped):
    assert Path(shipped["pydantic_core"]).is_relative_to(build_lambda_asset())


def test_every_handler_of_the_shipped_asset_runs_against_moto(shipped):
    assert (shipped["trials"], shipped["created"]) == (1, True)
    assert shipped["described"] == shipped["job_name"]
    assert shipped["notified"] == {"status": "Completed", "reason": "all trials completed", "notified": True}
    assert shipped["stopped"] == []  # moto's job is not InProgress: nothing to stop


def test_the_shipped_asset_carries_unchecked_bytecode_for_the_runtimes_python(shipped):
    asset = build_lambda_asset()
    tag = f"cpython-{LAMBDA_PYTHON.replace('.', '')}"
    sources = [
        p for package in ("trainstack", "trainstack_contract", "pydantic", "yaml") for p in (asset / package).rglob("*.py")
    ]
    for source in sources:
        compiled = source.parent / "__pycache__" / f"{source.stem}.{tag}.pyc"
        flags = int.from_bytes(compiled.read_bytes()[4:8], "little")  # PEP 552: 0b01, hash-based and never checked
        assert flags == 1, compiled
