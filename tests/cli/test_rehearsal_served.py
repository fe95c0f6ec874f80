"""Failures rehearsed on the served twin with `trainstack local fault`, as a user would before they happen
on AWS: the control plane failing for a while leaves a healthy job training to completion with no
restart; a spot reclaim is SageMaker's to handle, and the job resumes from its checkpoints; a Batch
preemption of a queued job is no failure and no restart, and the job resumes from its checkpoints."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.cli.served import BIN, serving
from trainstack_cli.stack import EXIT_BAD_INPUT, EXIT_NO_STACK

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def served(default_stack, tmp_path_factory):
    with serving(default_stack.json, tmp_path_factory.mktemp("rehearsal")) as stack:
        yield stack


def spec_file(tmp_path, name: str, steps: int) -> str:
    spec = {
        "name": name,
        "instance_type": "ml.g5.12xlarge",
        "strategy": "ddp",
        "hyperparameters": {"model": "gpt-tiny", "max_steps": steps, "log_every": 10, "checkpoint_every": 20},
        "inputs": {"train": {"s3_uri": "s3://trainstack-local-trigger/datasets/default/sample/", "mode": "File"}},
        "max_runtime": "1h",
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def submit(served, tmp_path, name: str, steps: int) -> str:
    result = served.trainstack("submit", spec_file(tmp_path, name, steps), "--inline", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["run"]


def training(view: dict) -> bool:
    return bool(view["trials"]) and view["trials"][0]["secondary_status"] == "Training"


def test_describe_failing_for_a_while_leaves_the_job_training_to_completion_with_no_restart(served, tmp_path):
    # A user follows the run with `submit --wait`; the outage must end neither the run nor the watch.
    command = [str(BIN / "trainstack"), "submit", spec_file(tmp_path, "outage", 300), "--inline", "--wait"]
    following = subprocess.Popen(command, env=served.environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    (run,) = re.findall(r"^run (\S+) started", following.stdout.readline())
    served.wait_until(run, training)
    fault = served.trainstack(
        "local", "fault", "api", "sagemaker:DescribeTrainingJob", "--code", "ServiceUnavailable", "--for", "15s"
    )
    assert fault.returncode == 0, fault.stderr
    assert fault.stdout.strip() == "trainstack local fault: sagemaker DescribeTrainingJob answers ServiceUnavailable for 15s"
    _, errors = following.communicate(timeout=300)
    assert following.returncode == 0, errors[-2000:]  # the run succeeded, and the watch lived through the outage
    ended = served.status(run)
    assert ended["status"] == "SUCCEEDED"
    (trial,) = ended["trials"]  # one job: neither stopped nor created again
    assert (trial["status"], trial["attempt"]) == ("Completed", 0)


def test_a_spot_reclaim_is_sagemakers_to_restart_and_the_job_resumes_from_its_checkpoint(served, tmp_path):
    run = submit(served, tmp_path, "reclaimed", steps=600)
    job = served.wait_until(run, lambda view: training(view) and view["trials"][0]["metrics"].get("train:step", 0) >= 40)
    name = job["trials"][0]["job_name"]
    fault = served.trainstack("local", "fault", "spot", name)
    assert fault.returncode == 0, fault.stderr
    ended = served.wait_until(run, lambda view: view["status"] != "RUNNING")
    assert ended["status"] == "SUCCEEDED"
    (trial,) = ended["trials"]
    assert trial["job_name"] == name and trial["attempt"] == 0  # the same job, started again by SageMaker
    transitions = [t["Status"] for t in served.aws_json("sagemaker", "describe-training-job", "--training-job-name", name)[
        "SecondaryStatusTransitions"
    ]]  # fmt: skip
    assert "Interrupted" in transitions
    log = served.trainstack("logs", run)
    assert "resumed from" in log.stdout


def test_a_fault_the_twin_cannot_make_is_one_line_naming_the_fix(served):
    result = served.trainstack("local", "fault", "spot", "no-such-job")
    assert result.returncode == EXIT_BAD_INPUT
    assert result.stderr.strip().splitlines() == [
        "trainstack local: spot: no-such-job is no training job in progress; name one `trainstack status` shows"
    ]


def test_intermittent_api_faults_need_fail_below_every_said_in_one_line(served):
    result = served.trainstack(
        "local", "fault", "api", "sagemaker:DescribeTrainingJob", "--code", "ServiceUnavailable", "--fail", "4", "--every", "4"
    )
    assert result.returncode == EXIT_BAD_INPUT
    assert result.stderr.strip().splitlines() == [
        "trainstack local: --fail 4 --every 4: fail must be at least 1 and below every, e.g. --fail 3 --every 4"
    ]


def test_an_intermittent_api_fault_needs_both_fail_and_every_said_in_one_line(served):
    result = served.trainstack("local", "fault", "api", "sns:Publish", "--code", "ServiceUnavailable", "--fail", "3")
    assert result.returncode == EXIT_BAD_INPUT
    assert result.stderr.strip().splitlines() == [
        "trainstack local: --fail and --every: give both, e.g. --fail 3 --every 4 (the first 3 of every 4 calls fail)"
    ]


def test_without_a_served_twin_a_fault_says_how_to_start_one(served):
    result = served.trainstack("local", "fault", "clear", AWS_ENDPOINT_URL="")
    assert result.returncode == EXIT_NO_STACK
    assert "run `trainstack local serve`" in result.stderr


def test_a_preempted_queued_job_resumes_at_its_checkpoint_and_its_run_reports_one_preemption_and_no_failure(
    queue_stack, tmp_path
):
    spec = yaml.safe_load(Path(spec_file(tmp_path, "preempted", 600)).read_text())
    spec["hyperparameters"]["log_every"] = 10
    spec["queue"] = {"share": "research"}
    spec["inputs"]["train"]["s3_uri"] = "s3://trainstack-local-trigger/datasets/research/sample/"  # the team's own data
    (tmp_path / "queued.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "twin").mkdir()
    with serving(queue_stack.json, tmp_path / "twin") as served:
        result = served.trainstack("submit", str(tmp_path / "queued.yaml"), "--inline", "--json")
        assert result.returncode == 0, result.stderr
        run = json.loads(result.stdout)["run"]
        served.wait_until(run, lambda view: training(view) and view["trials"][0]["metrics"].get("train:step", 0) >= 40)
        fault = served.trainstack("local", "fault", "preempt", run)
        assert fault.returncode == 0, fault.stderr
        assert fault.stdout.strip().endswith(
            ": preempted by Batch; back in the queue, it resumes from its checkpoints when dispatched again"
        )
        ended = served.wait_until(run, lambda view: view["status"] != "RUNNING")
        listed = served.trainstack("runs").stdout
        shown = served.trainstack("status", run).stdout
        (trial,) = ended["trials"]
        service_job = served.aws_json("batch", "describe-service-job", "--job-id", trial["queue"]["service_job_id"])
        (preempted,) = service_job["preemptionSummary"]["recentPreemptedAttempts"]
        first = preempted["serviceResourceId"]["value"].split("/", 1)[1]
        metrics = served.aws_json("sagemaker", "describe-training-job", "--training-job-name", first)["FinalMetricDataList"]
        checkpoint = int(next(m["Value"] for m in metrics if m["MetricName"] == "train:checkpoint_step"))
        log = served.trainstack("logs", run).stdout

    assert ended["status"] == "SUCCEEDED"
    assert (trial["status"], trial["attempt"], trial["failure"], trial["preemptions"]) == ("Completed", 0, "", 1)
    assert trial["training_job_name"] != first  # Batch dispatched it again as a new training job ...
    assert checkpoint >= 40 and f"at step {checkpoint}, example position" in log  # ... which resumed at the checkpoint
    assert "Completed (SUCCEEDED, share research, priority 0, preempted 1x)" in " ".join(listed.split())
    assert f"{trial['job_name']}: preempted 1x by Batch: no failure and no restart spent" in " ".join(shown.split())
    assert 0 < ended["goodput"]["goodput"] < 1 and "goodput " in shown
