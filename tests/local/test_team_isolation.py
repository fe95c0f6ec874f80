"""A team is a boundary the twin enforces (#35): each job runs with its own team's execution role, whose
policies come from the synthesized template, and the twin's S3 refuses what they do not allow, to the
job's own code (through the S3 the containers reach) and to SageMaker's data movement for it. Runs
start as a user starts them (`trainstack submit --team`), on the stack with two teams, research and prod."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from botocore.exceptions import ClientError

from trainstack.layout import TRAINING_JOB_LOG_GROUP
from trainstack.polling import poll_until
from trainstack_cli.run_reading import read_run
from trainstack_cli.runs import RunView
from trainstack_cli.stack import Stack, find_stack
from trainstack_cli.submit import submit
from trainstack_local.emulator import REGION, local_aws, training_files
from trainstack_local.pipeline import upload_sample_data

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

PROBE = "checkpoints/prod/probe/step.txt"  # a checkpoint of prod's, in the artifacts bucket
# The job's own code: it reads prod's checkpoint and/or writes under prod's models folder, with whatever
# credentials its container was given (boto3 finds them, and the S3 to reach, in its environment).
PROBING_SCRIPT = f"""\
import argparse, os
import boto3
parser = argparse.ArgumentParser()
parser.add_argument("--op")
parser.add_argument("--bucket")
args, _ = parser.parse_known_args()
s3 = boto3.client("s3")
if args.op in ("read", "both"):
    body = s3.get_object(Bucket=args.bucket, Key="{PROBE}")["Body"].read().decode()
    print(f"read {{body}}", flush=True)
if args.op in ("write", "both"):
    s3.put_object(Bucket=args.bucket, Key="models/prod/probe/" + os.environ["TRAINING_JOB_NAME"] + ".txt", Body=b"written")
    print("wrote", flush=True)
"""


@pytest.fixture(scope="module")
def teams(queue_stack, tmp_path_factory):
    """The emulated stack with the teams research and prod, each team's sample data and a checkpoint of
    prod's, and the operator CLI's view of it: (stack, CLI stack)."""
    workdir = tmp_path_factory.mktemp("teams")
    with local_aws(queue_stack.json, workdir, files=training_files(workdir)) as (stack, _twin):
        upload_sample_data(stack)
        boto3.client("s3", region_name=REGION).put_object(Bucket=stack.artifacts_bucket, Key=PROBE, Body=b"prod-step-7")
        outputs = workdir / "cdk-outputs.json"
        outputs.write_text(json.dumps({"trainstack-local": stack.outputs}))
        yield stack, find_stack(None, outputs, None, REGION)


def spec(name: str, team: str, **overrides: Any) -> dict[str, Any]:
    return {
        "name": name,
        "instance_type": "ml.g5.xlarge",
        "strategy": "ddp",
        "framework_version": "2.10.0",
        "hyperparameters": {"model": "gpt-tiny", "max_steps": 2, "log_every": 1},
        "inputs": {"train": {"s3_uri": f"s3://trainstack-local-trigger/datasets/{team}/sample/", "mode": "File"}},
        "max_runtime": "1h",
        **overrides,
    }


def start(cli_stack: Stack, tmp_path: Path, job: dict[str, Any], team: str, source: Path | None = None) -> str:
    """`trainstack submit SPEC [--source DIR] --inline --team TEAM`; the run's name."""
    path = tmp_path / f"{job['name']}.yaml"
    path.write_text(yaml.safe_dump(job))
    return submit(cli_stack, path, source_dir=source, inline=True, team=team)


def ended(cli_stack: Stack, run: str) -> RunView:
    return poll_until(
        lambda: read_run(cli_stack, run), lambda view: view.status != "RUNNING", timeout=420, interval=1,
        what=f"the end of run {run}",
    )  # fmt: skip


def job_log(job_name: str) -> str:
    """What the job's hosts printed, from CloudWatch Logs as a user reads it."""
    logs = boto3.client("logs", region_name=REGION)
    streams = logs.describe_log_streams(logGroupName=TRAINING_JOB_LOG_GROUP, logStreamNamePrefix=f"{job_name}/")["logStreams"]
    read = [logs.get_log_events(logGroupName=TRAINING_JOB_LOG_GROUP, logStreamName=s["logStreamName"]) for s in streams]
    return "\n".join(e["message"] for found in read for e in found["events"])


def exists(bucket: str, key: str) -> bool:
    try:
        boto3.client("s3", region_name=REGION).head_object(Bucket=bucket, Key=key)
    except ClientError:
        return False
    return True


def test_a_teams_job_cannot_read_another_teams_checkpoints_or_write_its_models_and_that_teams_job_can(teams, tmp_path):
    stack, cli_stack = teams
    code = tmp_path / "code"
    code.mkdir()
    (code / "probe.py").write_text(PROBING_SCRIPT)

    def probing(name: str, team: str, op: str) -> str:
        hyperparameters = {"op": op, "bucket": stack.artifacts_bucket}
        return start(cli_stack, tmp_path, spec(name, team, entry_point="probe.py", hyperparameters=hyperparameters), team, code)

    runs = {
        "read": probing("reads-prod", "research", "read"),
        "write": probing("writes-prod", "research", "write"),
        "both": probing("prods-own", "prod", "both"),
    }
    views = {op: ended(cli_stack, run) for op, run in runs.items()}

    for op in ("read", "write"):  # research's role: S3 refuses its job's own requests
        (trial,) = views[op].trials
        assert (views[op].status, trial.status) == ("FAILED", "Failed"), trial.failure_reason
        assert "AccessDenied" in job_log(trial.training_job_name)
        assert not exists(stack.artifacts_bucket, f"models/prod/probe/{trial.training_job_name}.txt")
    (trial,) = views["both"].trials  # the same code under prod's role
    assert views["both"].status == "SUCCEEDED", trial.failure_reason
    assert "read prod-step-7" in job_log(trial.training_job_name)
    assert exists(stack.artifacts_bucket, f"models/prod/probe/{trial.training_job_name}.txt")


def test_sagemakers_download_of_another_teams_dataset_fails_the_job_with_a_client_error(teams, tmp_path):
    _, cli_stack = teams
    prods_data = {"train": {"s3_uri": "s3://trainstack-local-trigger/datasets/prod/sample/", "mode": "File"}}
    refused = start(cli_stack, tmp_path, spec("borrows-data", "research", inputs=prods_data), "research")
    allowed = start(cli_stack, tmp_path, spec("own-data", "prod", inputs=prods_data), "prod")

    view = ended(cli_stack, refused)
    (trial,) = view.trials
    assert (view.status, trial.status) == ("FAILED", "Failed")
    assert trial.failure_reason.startswith("ClientError: Data download failed:Unable to download object s3://")
    assert "datasets/prod/sample/" in trial.failure_reason and "(AccessDenied: Access Denied)" in trial.failure_reason
    assert ended(cli_stack, allowed).status == "SUCCEEDED"


def test_a_principal_with_a_teams_access_policy_uploads_under_its_folders_and_not_another_teams(teams):
    stack, _ = teams
    iam = boto3.client("iam", region_name=REGION)
    ci = iam.create_role(RoleName="research-ci", AssumeRolePolicyDocument="{}")["Role"]["Arn"]
    iam.attach_role_policy(RoleName="research-ci", PolicyArn=stack.outputs["TeamAccessPolicyResearch"])
    issued = boto3.client("sts", region_name=REGION).assume_role(RoleArn=ci, RoleSessionName="ci")["Credentials"]
    s3 = boto3.client(
        "s3",
        region_name=REGION,
        aws_access_key_id=issued["AccessKeyId"],
        aws_secret_access_key=issued["SecretAccessKey"],
        aws_session_token=issued["SessionToken"],
    )

    s3.put_object(Bucket=stack.trigger_bucket, Key="datasets/research/notes/readme.txt", Body=b"ours")
    for key in ("jobs/prod/llama.yaml", "datasets/prod/notes/readme.txt"):
        with pytest.raises(ClientError) as refused:
            s3.put_object(Bucket=stack.trigger_bucket, Key=key, Body=b"theirs")
        assert refused.value.response["Error"]["Code"] == "AccessDenied"
        assert not exists(stack.trigger_bucket, key)
