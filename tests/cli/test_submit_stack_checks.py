"""`trainstack submit` checks a spec against the stack it submits to before uploading anything: what
only the stack knows (its tracking server, its team queue, the queue's shares and instance cap)
refuses the spec here in one line, and the trigger bucket and the state machine see nothing of it."""

from __future__ import annotations

import json
from pathlib import Path

import boto3
import pytest
import yaml

from tests.cli.outputs import STACK_OUTPUTS
from trainstack_cli.main import main
from trainstack_cli.stack import EXIT_BAD_INPUT
from trainstack_local.emulator import REGION, local_aws, training_files

pytestmark = [pytest.mark.timeout(300)]

SPEC = {
    "name": "checked",
    "instance_type": "ml.g5.12xlarge",
    "strategy": "ddp",
    "hyperparameters": {"model": "gpt-tiny", "max_steps": 6},
    "max_runtime": "1h",
}


@pytest.fixture(scope="module")
def bare_stack(default_stack, tmp_path_factory):
    """The emulated default stack, deployed without a tracking server or a team queue: its outputs file."""
    workdir = tmp_path_factory.mktemp("bare")
    with local_aws(default_stack.json, workdir / "twin", files=training_files(workdir)) as (stack, _twin):
        outputs = workdir / "cdk-outputs.json"
        outputs.write_text(json.dumps({"trainstack-local": stack.outputs}))
        yield stack, outputs


def what_the_stack_holds(stack) -> tuple[list, list]:
    """Every version of every object in the trigger bucket, and every execution of the state machine."""
    versions = boto3.client("s3", region_name=REGION).list_object_versions(Bucket=stack.trigger_bucket).get("Versions", [])
    executions = boto3.client("stepfunctions", region_name=REGION).list_executions(stateMachineArn=stack.state_machine_arn)
    return [(v["Key"], v["VersionId"]) for v in versions], [e["executionArn"] for e in executions["executions"]]


def submitted(spec: dict, tmp_path: Path, outputs: Path, capsys, *options: str) -> tuple[int, list[str]]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(spec))
    code = main(["submit", str(path), "--outputs", str(outputs), "--region", REGION, *options])
    return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("inline", [False, True], ids=["upload", "inline"])
@pytest.mark.parametrize(
    ("addition", "words"),
    [
        ({"tracking": {"mlflow": "stack"}}, "tracking.mlflow"),
        ({"queue": {"share": "research"}}, "the stack has no team queue"),
    ],
    ids=["tracking", "queue"],
)
def test_a_spec_the_stack_cannot_run_is_refused_in_one_line_and_nothing_is_uploaded_or_started(
    bare_stack, addition, words, inline, tmp_path, capsys
):
    stack, outputs = bare_stack
    before = what_the_stack_holds(stack)

    code, lines = submitted({**SPEC, **addition}, tmp_path, outputs, capsys, *(["--inline"] if inline else []))

    assert code == EXIT_BAD_INPUT and len(lines) == 1, lines
    assert words in lines[0] and "nothing was submitted" in lines[0]
    assert what_the_stack_holds(stack) == before


def queue_stack_outputs(folder: Path) -> Path:
    """The outputs of a stack with a team queue of two shares and a cap of 2 instances, which no
    request reaches: a submit that got past its checks would fail to reach AWS, not exit 2."""
    values = {
        **STACK_OUTPUTS,
        "JobQueueArn": "arn:aws:batch:us-east-1:123456789012:job-queue/trainstack-queue",
        "QueueShares": "research,prod",
        "QueueDefaultShare": "research",
        "QueueMaxInstances": "2",
    }
    (folder / "cdk-outputs.json").write_text(json.dumps({"trainstack": values}))
    return folder / "cdk-outputs.json"


@pytest.mark.parametrize(
    ("addition", "words"),
    [
        ({"queue": {"share": "design"}}, 'queue.share = "design": not one of the queue\'s shares (research, prod)'),
        ({"queue": {}, "instance_count": 3}, "instance_count = 3: more than the queue's cap of 2 instances"),
    ],
    ids=["share", "cap"],
)
def test_a_queued_spec_is_checked_against_the_stacks_shares_and_cap(addition, words, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")

    code, lines = submitted({**SPEC, **addition}, tmp_path, queue_stack_outputs(tmp_path), capsys)

    assert code == EXIT_BAD_INPUT and len(lines) == 1 and words in lines[0], lines


@pytest.mark.parametrize("inline", [False, True], ids=["upload", "inline"])
def test_a_team_the_stack_does_not_have_is_refused_in_one_line_and_nothing_is_uploaded_or_started(
    bare_stack, inline, tmp_path, capsys
):
    stack, outputs = bare_stack
    before = what_the_stack_holds(stack)
    code, lines = submitted(SPEC, tmp_path, outputs, capsys, "--team", "research", *(["--inline"] if inline else []))
    assert code == EXIT_BAD_INPUT and len(lines) == 1, lines
    assert 'team = "research": not one of the stack\'s teams (default)' in lines[0]
    assert what_the_stack_holds(stack) == before


def test_a_spec_is_uploaded_into_its_teams_folder(bare_stack, tmp_path, capsys):
    stack, outputs = bare_stack
    code, _ = submitted({**SPEC, "inputs": {}}, tmp_path, outputs, capsys)
    assert code == 0
    keys = [key for key, _ in what_the_stack_holds(stack)[0]]
    assert "jobs/default/job.yaml" in keys  # the folder names the run's team
