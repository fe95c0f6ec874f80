"""The emulated account (account_twin.py): Service Quotas lists SageMaker's quotas as it lists a real
account's, an increase request changes them, CreateTrainingJob refuses a job past one as SageMaker
does, and the pipeline's Validate reads all of it before anything launches."""

from __future__ import annotations

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.local.twin_runs import start_inline
from trainstack.account import read_account
from trainstack.polling import poll_until
from trainstack_local.account_twin import AccountSettings
from trainstack_local.emulator import REGION, local_aws, training_files
from trainstack_local.pipeline import finish
from trainstack_local.sagemaker_twin import TwinSettings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

P5 = "ml.p5.48xlarge"  # 0, as on a new account: the twin's account holds no increase for it


@pytest.fixture(scope="module")
def twin(default_stack, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("account")
    settings = TwinSettings(account=AccountSettings(quotas={"ml.g5.12xlarge for training job usage": 1}))
    with local_aws(default_stack.json, workdir, files=training_files(workdir), settings=settings) as (stack, twin):
        yield stack, twin


def quota(name: str) -> dict:
    pages = boto3.client("service-quotas", region_name=REGION).get_paginator("list_service_quotas")
    return next(q for page in pages.paginate(ServiceCode="sagemaker") for q in page["Quotas"] if q["QuotaName"] == name)


def spec(name: str, instance_type: str, count: int = 1, steps: int = 4) -> dict:
    return {
        "name": name,
        "instance_type": instance_type,
        "instance_count": count,
        "strategy": "ddp",
        "hyperparameters": {"model": "gpt-tiny", "max_steps": steps, "log_every": 1},
        "inputs": {"train": {"s3_uri": "s3://trainstack-local-trigger/datasets/default/sample/", "mode": "File"}},
        "max_runtime": "1h",
    }


def test_service_quotas_lists_a_new_accounts_zero_for_a_gpu_type_and_the_value_set_for_another(twin):
    assert quota(f"{P5} for training job usage")["Value"] == 0
    assert quota("ml.g5.12xlarge for training job usage")["Value"] == 1
    assert quota("ml.m5.xlarge for training job usage")["Value"] > 0


def test_validate_refuses_a_spec_beyond_the_quota_naming_the_increase_command(twin):
    stack, _ = twin
    run = finish(start_inline(stack, spec("beyond", P5), "beyond"))
    code = quota(f"{P5} for training job usage")["QuotaCode"]
    assert run.status == "FAILED"
    assert f"quota '{P5} for training job usage' is 0 in us-east-1" in run.cause
    assert f"--quota-code {code} --desired-value 1 --region us-east-1" in run.cause


def test_the_increase_the_refusal_names_is_granted_and_the_account_reads_it(twin):
    name = "ml.p5e.48xlarge for training job usage"
    sq = boto3.client("service-quotas", region_name=REGION)
    sq.request_service_quota_increase(ServiceCode="sagemaker", QuotaCode=quota(name)["QuotaCode"], DesiredValue=2)
    view = read_account(lambda service: boto3.client(service, region_name=REGION), REGION, ["ml.p5e.48xlarge"], [])
    assert view.quota("ml.p5e.48xlarge", "training job usage").value == 2


def test_create_training_job_past_the_quota_is_refused_as_sagemaker_refuses_it(twin):
    stack, twin_ = twin
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    execution = start_inline(stack, spec("holds", "ml.g5.12xlarge", steps=100000), "holds")
    held = poll_training(twin_, "holds")
    request = sagemaker.describe_training_job(TrainingJobName=held)
    with pytest.raises(ClientError) as refused:
        sagemaker.create_training_job(
            TrainingJobName="second-on-the-same-quota",
            AlgorithmSpecification=request["AlgorithmSpecification"],
            RoleArn=request["RoleArn"],
            OutputDataConfig=request["OutputDataConfig"],
            ResourceConfig={"InstanceType": "ml.g5.12xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
            StoppingCondition={"MaxRuntimeInSeconds": 3600},
        )
    error = refused.value.response["Error"]
    assert error["Code"] == "ResourceLimitExceeded"
    assert error["Message"].startswith(
        "The account-level service limit 'ml.g5.12xlarge for training job usage' is 1 Instances, with current utilization "
        "of 1 Instances and a request delta of 1 Instances."
    )
    boto3.client("stepfunctions", region_name=REGION).stop_execution(executionArn=execution)


def poll_training(twin_, name_part: str) -> str:
    (found,) = poll_until(
        lambda: [n for n, r in twin_.runs.items() if name_part in n and r.job.secondary_status == "Training"],
        bool,
        timeout=300,
        what=f"a {name_part} job training",
    )
    return found
