"""The trainstack CLI: validate, render and schema, offline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from trainstack.request import validate_request
from trainstack_cli.main import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_validate_accepts_the_example(capsys):
    assert main(["validate", str(EXAMPLES / "gpt-small.yaml")]) == 0
    assert "valid (ddp on 2 x ml.p4d.24xlarge, world size 16)" in capsys.readouterr().out


def test_validate_lists_every_problem_and_exits_nonzero(capsys):
    assert main(["validate", str(EXAMPLES / "broken.yaml")]) == 1
    errors = capsys.readouterr().err
    assert "SMDDP does not support ml.p5.48xlarge" in errors
    assert "spot.max_wait = 43200" in errors
    assert "3 problem(s); nothing would be launched" in errors


def test_render_prints_a_valid_request_with_marked_placeholders(capsys):
    assert main(["render", str(EXAMPLES / "gpt-small.yaml"), "--json"]) == 0
    captured = capsys.readouterr()
    request = json.loads(captured.out)
    validate_request(request)
    assert "PLACEHOLDER" in request["RoleArn"] and "PLACEHOLDER" in captured.err


def test_render_uses_the_deployed_stacks_outputs(tmp_path, capsys):
    outputs = {
        "trainstack": {
            "ExecutionRoleArn": "arn:aws:iam::123456789012:role/trainstack-exec",
            "ArtifactsBucketName": "trainstack-artifacts-1",
            "KeyArn": "arn:aws:kms:us-east-1:123456789012:key/abc",
            "TrainingSubnetIds": "subnet-1,subnet-2",
            "SecurityGroupId": "sg-1",
            "SourceS3Uri": "s3://cdk-assets/source.tar.gz",
            "InterContainerEncryption": "true",
        }
    }
    (tmp_path / "cdk-outputs.json").write_text(json.dumps(outputs))
    assert main(["render", str(EXAMPLES / "gpt-small.yaml"), "--outputs", str(tmp_path / "cdk-outputs.json")]) == 0
    request = json.loads(capsys.readouterr().out)
    assert request["VpcConfig"] == {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1", "subnet-2"]}
    assert request["EnableInterContainerTrafficEncryption"] is True
    assert "PLACEHOLDER" not in json.dumps(request)


def test_schema_is_json_schema(capsys):
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out)["title"] == "JobSpec"


def test_plan_says_the_example_fits_and_exits_zero(capsys):
    assert main(["plan", str(EXAMPLES / "gpt-small.yaml")]) == 0
    out = capsys.readouterr().out
    assert "instance_type: ml.p4d.24xlarge" in out and "fits" in out and "Worst case for the whole run" in out


def test_plan_of_a_job_that_does_not_fit_exits_one_with_the_fix(capsys):
    assert main(["plan", str(EXAMPLES / "llama-13b-smddp.yaml")]) == 1
    captured = capsys.readouterr()
    assert "does not fit" in captured.out and "cheapest fix" in captured.out
    assert "strategy: fsdp" in captured.err


def test_plan_json_carries_the_verdict_as_booleans():
    # its own process, as a script runs it: its stdout is the plan's alone, whatever else this one prints
    planned = subprocess.run(
        [sys.executable, "-m", "trainstack_cli.main", "plan", str(EXAMPLES / "llama-13b-smddp.yaml"), "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert planned.returncode == 1, planned.stderr
    report = json.loads(planned.stdout)
    assert report["fits"] is False and report["within_budget"] in (True, False)
    assert report["options"][0]["memory_gib"]["total"] > 200


def test_plan_of_bad_input_exits_two_with_one_line(tmp_path, capsys):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: x\ninstance_type: ml.p4.24xlarge\n")
    assert main(["plan", str(spec)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert 'instance_type = "ml.p4.24xlarge": not a SageMaker training instance type' in line
    assert main(["plan", str(tmp_path / "missing.yaml")]) == 2
