"""Closing the twin: a job created from then on is refused and never starts. An execution still
running when the twin closed (a restart on its way) once started a job that trained on, unstopped,
into later tests, its log sync calling AWS's own endpoints."""

from __future__ import annotations

from pathlib import Path

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError

from trainstack.identity import Run
from trainstack.request import build_request
from trainstack.rules import check_or_raise
from trainstack.spec import parse_spec
from trainstack_local.emulator import REGION, local_aws, training_files
from trainstack_local.pipeline import DEFAULT_JOB

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_job_created_after_the_twin_closed_is_refused_and_leaves_no_job(default_stack, tmp_path: Path):
    spec = parse_spec(yaml.safe_load(DEFAULT_JOB.read_text()))
    with local_aws(default_stack.json, tmp_path, files=training_files(tmp_path)) as (stack, twin):
        request = build_request(
            spec, check_or_raise(spec, stack=stack.context), stack.context, trial=Run("late").trial(), execution="late"
        )
        sagemaker = boto3.client("sagemaker", region_name=REGION)
        twin.close()

        with pytest.raises(ClientError) as refused:
            sagemaker.create_training_job(**request)
        with pytest.raises(ClientError) as described:
            sagemaker.describe_training_job(TrainingJobName=request["TrainingJobName"])

    assert refused.value.response["Error"]["Code"] == "ValidationException"
    assert "the SageMaker twin has closed" in refused.value.response["Error"]["Message"]
    assert described.value.response["Error"]["Code"] == "ValidationException"  # as SageMaker answers a job it lacks
    assert "Could not find training job" in described.value.response["Error"]["Message"]
    assert twin.runs == {}
