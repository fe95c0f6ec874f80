"""The Lambda as shipped: the built asset (its compiled pydantic_core included) imported by the
runtime's own Python with only boto3 beside it, every handler invoked against moto."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

from stacks import lambda_asset
from stacks.lambda_asset import LAMBDA_PYTHON, ROOT, build_lambda_asset
from tests.core.specs import DDP, STACK
from trainstack.handlers.environment import LAMBDA_TASK_ROOT, lambda_variables
from trainstack.identity import Run
from trainstack.request import build_request
from trainstack.rules import checked
from trainstack.service_jobs import submit_arguments
from trainstack.spec import parse_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
DRIVER = Path(__file__).with_name("shipped_lambda_driver.py")
OLDER_SDK_DRIVER = Path(__file__).with_name("older_sdk_driver.py")


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
    environment = {**lambda_variables(STACK, topic_arn="set-by-the-driver"), **_unpacked_at(asset)}
    payload = {"environment": environment, "spec": {**DDP, "inputs": {}}}
    result = subprocess.run(
        [str(runtime_python), str(DRIVER), str(asset)], input=json.dumps(payload), capture_output=True, text=True,
        env={"PATH": os.environ["PATH"]},  # the function's variables come in the payload, never from this process
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _unpacked_at(asset: Path) -> dict[str, str]:
    """The functions' AWS_DATA_PATH with the asset where Lambda unpacks it (/var/task)."""
    variables = lambda_variables(STACK, topic_arn="")
    return {"AWS_DATA_PATH": variables["AWS_DATA_PATH"].replace(LAMBDA_TASK_ROOT, str(asset))}


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


# An SDK older than the APIs the queue and tracking use (Batch's service jobs and CreateTrainingJob's
# MlflowConfig came in 2025): the Lambda runtime's own SDK may be this old, its version unstated.
OLDER_SDK = ("boto3==1.35.36", "botocore==1.35.36")
QUEUE_OPERATIONS = {"SubmitServiceJob", "DescribeServiceJob", "TerminateServiceJob", "ListServiceJobs"}


QUEUE_ARN = "arn:aws:batch:us-east-1:123456789012:job-queue/trainstack-training"
TRACKED_STACK = dataclasses.replace(
    STACK, mlflow_tracking_server_arn="arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/research"
)


def tracked_request() -> dict:
    """The CreateTrainingJob request Create sends for a spec tracked in the stack's MLflow server."""
    spec = parse_spec({**DDP, "tracking": {"mlflow": "stack"}})
    found, resolution = checked(spec, lambda uri: 64, None, TRACKED_STACK)
    assert found == [] and resolution is not None
    return build_request(spec, resolution, TRACKED_STACK, trial=Run("s3://trainstack-trigger/jobs/x.yaml#v1").trial())


@pytest.fixture(scope="module")
def older_sdk(tmp_path_factory) -> Callable[[dict[str, str]], dict]:
    """Runs OLDER_SDK_DRIVER on the runtime's Python with OLDER_SDK and the environment given, over
    the requests the handlers send for a tracked spec submitted to the team queue."""
    venv = tmp_path_factory.mktemp("older-sdk") / "venv"
    subprocess.run([_interpreter(), "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", *OLDER_SDK], check=True)
    request = tracked_request()
    requests = {"CreateTrainingJob": request, "SubmitServiceJob": submit_arguments(request, QUEUE_ARN, "research", 9000)}

    def run(environment: dict[str, str]) -> dict:
        result = subprocess.run(
            [str(venv / "bin" / "python"), str(OLDER_SDK_DRIVER)], input=json.dumps(requests), capture_output=True, text=True,
            env={"PATH": os.environ["PATH"], **environment},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-4000:]
        return json.loads(result.stdout)

    return run


def test_an_older_runtime_sdk_sends_the_queue_and_tracking_requests_through_the_shipped_models(older_sdk):
    shipped = older_sdk(_unpacked_at(build_lambda_asset()))
    assert shipped["botocore"] == OLDER_SDK[1].split("==")[1]
    assert set(shipped["batch_operations"]) >= QUEUE_OPERATIONS and "ListServiceJobs" in shipped["batch_paginators"]
    assert shipped["problems"] == {"CreateTrainingJob": "", "SubmitServiceJob": ""}


def test_without_the_shipped_models_that_sdk_knows_neither_service_jobs_nor_mlflow_config(older_sdk):
    own = older_sdk({})
    assert not QUEUE_OPERATIONS & set(own["batch_operations"])
    assert "MlflowConfig" in own["problems"]["CreateTrainingJob"]
    assert own["problems"]["SubmitServiceJob"] == "batch has no SubmitServiceJob"
