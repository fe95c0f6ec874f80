"""Stop signals in the twin go where SageMaker sends them: to PID 1 of each host's container.

The framework images' own entry (bash running the toolkit's `train`) is PID 1 and forwards nothing,
so without trainstack's container entry a stop never reaches the training script: it trains on
until SIGKILL, and saves nothing. With the entry (ContainerEntrypoint for framework images, the
ENTRYPOINT of the project image), the script saves at the current step and the job ends Stopped.
"""

from __future__ import annotations

import dataclasses

import boto3
import pytest

from tests.local.twin_runs import checkpoint_keys, job_run, printed_steps, wait_for_status, wait_for_step
from trainstack.identity import Run
from trainstack.request import build_request
from trainstack.rules import check_or_raise
from trainstack.spec import parse_spec
from trainstack_local.emulator import REGION, local_aws, training_files
from trainstack_local.pipeline import upload_sample_data
from trainstack_local.sagemaker_twin import TwinSettings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
GRACE_SECONDS = 4


@pytest.fixture(scope="module")
def twin_stack(default_stack, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("signals")
    settings = TwinSettings(stop_grace_seconds=GRACE_SECONDS)
    with local_aws(default_stack.json, workdir, files=training_files(workdir), settings=settings) as (stack, twin):
        upload_sample_data(stack)
        yield stack, twin


def _create(stack, name: str, *, entry: bool, image: str | None = None) -> str:
    raw = {
        "name": name,
        "instance_type": "ml.g5.12xlarge",
        "strategy": "ddp",
        "framework_version": "2.10.0",
        "hyperparameters": {"model": "gpt-tiny", "max_steps": 5000, "log_every": 1, "checkpoint_every": 10000},
        "inputs": {"train": {"s3_uri": f"s3://{stack.trigger_bucket}/datasets/default/sample/", "mode": "File"}},
        "max_runtime": "1h",
        **({"image": image} if image else {}),
    }
    spec = parse_spec(raw)
    context = stack.context if entry else dataclasses.replace(stack.context, entry_s3_uri="")
    request = build_request(spec, check_or_raise(spec, stack=context), context, trial=Run(f"signals:{name}").trial())
    boto3.client("sagemaker", region_name=REGION).create_training_job(**request)
    return request["TrainingJobName"]


def _stop_at_step(twin, name: str, step: int) -> int:
    run = job_run(twin, name)
    wait_for_step(run, step)
    at_stop = max(printed_steps(run))
    boto3.client("sagemaker", region_name=REGION).stop_training_job(TrainingJobName=name)
    return at_stop


def test_without_the_container_entry_a_stop_never_reaches_the_script_and_nothing_is_saved(twin_stack):
    stack, twin = twin_stack
    name = _create(stack, "no-entry", entry=False)
    at_stop = _stop_at_step(twin, name, 3)
    final = wait_for_status(name, ("Stopped", "Completed", "Failed"), timeout=120)
    assert final["TrainingJobStatus"] == "Stopped"
    log = twin.runs[name].log()
    assert "stop requested" not in log and "container entry" not in log
    assert max(printed_steps(twin.runs[name])) > at_stop + 20  # it trained on through the grace period
    assert not any(key.endswith("manifest.json") for key in checkpoint_keys(name))


@pytest.mark.parametrize(("entry", "image"), [(True, None), (False, "project")], ids=["framework-image", "project-image"])
def test_with_the_container_entry_a_stop_saves_the_current_step_and_ends_the_job_stopped(twin_stack, entry, image):
    stack, twin = twin_stack
    name = _create(stack, "entry" if entry else "project-image", entry=entry, image=image)
    _stop_at_step(twin, name, 3)
    final = wait_for_status(name, ("Stopped", "Completed", "Failed"), timeout=120)
    assert final["TrainingJobStatus"] == "Stopped"
    log = twin.runs[name].log()
    assert "trainstack container entry: SIGTERM received" in log
    saved = max(printed_steps(twin.runs[name]))
    assert f"saved /opt/ml/checkpoints/step_{saved:08d} at step {saved}" in log
    assert f"step_{saved:08d}/manifest.json" in checkpoint_keys(name)
