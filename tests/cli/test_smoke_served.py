"""`trainstack smoke` against `trainstack local serve`, as a user runs it: the worst case is asked about
first, and a no starts nothing; `--yes` runs it through the stack (and through the team queue where the
stack has one) to the end in under 3 minutes (the command's timeout here), and what it reports left is
everything the stack's buckets gained."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.cli.served import BIN, Served, serving
from trainstack_cli.smoke import STEPS, cheapest_cpu_type

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

SMOKE_SECONDS = 180  # what the issue allows a smoke on the twin, with or without the queue
ARTIFACTS = "trainstack-local-artifacts"
TRIGGER = "trainstack-local-trigger"
STEP_NAMES = ["submit", "stop at a step", "resume", "complete", "model"]


@pytest.fixture(scope="module")
def served(default_stack, tmp_path_factory):
    with serving(default_stack.json, tmp_path_factory.mktemp("smoke")) as stack:
        yield stack


@pytest.fixture(scope="module")
def served_with_queue(queue_stack, tmp_path_factory):
    with serving(queue_stack.json, tmp_path_factory.mktemp("smoke-queue")) as stack:
        yield stack


def smoke(served: Served, *arguments: str, answer: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(BIN / "trainstack"), "smoke", *arguments],
        env=served.environment,
        input=answer,
        capture_output=True,
        text=True,
        timeout=SMOKE_SECONDS,
        check=False,
    )


def objects(served: Served, bucket: str) -> set[str]:
    listed = served.aws_json("s3api", "list-objects-v2", "--bucket", bucket)
    return {item["Key"] for item in listed.get("Contents", [])}


def executions(served: Served) -> list[str]:
    machine = served.outputs["StateMachineArn"]
    listed = served.aws_json("stepfunctions", "list-executions", "--state-machine-arn", machine)
    return [execution["name"] for execution in listed["executions"]]


def test_the_worst_case_is_asked_about_first_and_a_no_starts_nothing(served):
    before = executions(served)  # this module's other smoke may have run first
    declined = smoke(served, answer="n\n")

    assert declined.returncode == 1
    said, asked = declined.stdout.splitlines()
    assert said.startswith(
        f"trainstack smoke: 2 runs (direct: one stopped at a step, one resuming it) of 1 x {cheapest_cpu_type()}"
    )
    assert "worst case $" in said and asked == "start it? [y/N] "
    assert declined.stderr == "trainstack smoke: nothing started\n"
    assert executions(served) == before


def test_smoke_stops_resumes_and_completes_a_run_and_lists_all_it_left(served):
    trigger_before, artifacts_before = objects(served, TRIGGER), objects(served, ARTIFACTS)

    done = smoke(served, "--yes", "--json")

    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert done.stderr.startswith("trainstack smoke: 2 runs (direct: ")  # the worst case, said where the report is not
    assert report["passed"] and report["instance_type"] == "ml.t3.medium"
    (leg,) = report["legs"]
    assert [step["what"] for step in leg["steps"]] == STEP_NAMES and all(step["passed"] for step in leg["steps"])
    stopped, resumed, completed = (step["detail"] for step in leg["steps"][1:4])
    saved = stopped.rsplit("newest checkpoint at step ", 1)[1]
    assert f"resumed at step {saved} from /opt/ml/checkpoints/step_{int(saved):08d}" in resumed
    assert completed.endswith(f"SUCCEEDED at step {STEPS} of {STEPS}")
    assert report["billable_seconds"] > 0 and 0 < report["cost_usd"] < report["worst_case_usd"] < 1
    assert leg["observed"] == []  # what only the team queue shows

    # What it says it left is everything the buckets gained: the runs' outputs under their prefixes, nothing else.
    assert objects(served, TRIGGER) == trigger_before
    prefixes = [line.split(": objects ")[0] for line in report["left"] if line.startswith("s3://")]
    gained = objects(served, ARTIFACTS) - artifacts_before
    assert gained and all(any(f"s3://{ARTIFACTS}/{key}".startswith(p) for p in prefixes) for key in gained)
    assert {p.removeprefix(f"s3://{ARTIFACTS}/").split("/")[0] for p in prefixes} == {"models", "checkpoints", "tensorboard"}
    assert sum(line.startswith("log stream ") for line in report["left"]) == 2


def test_smoke_goes_through_the_team_queue_too_and_says_what_batch_did(served_with_queue):
    done = smoke(served_with_queue, "--yes")

    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "smoke: passed on 1 x ml.t3.medium" in lines
    for leg in ("direct", "team queue"):
        assert f"  {leg}: {', '.join(f'{name} ✓' for name in STEP_NAMES)}" in {line.split(" (runs ")[0] for line in lines}
        assert any(line.startswith(f"✓ {leg}: resume: run ") for line in lines)
    observed = lines[lines.index("observed (what the twin could only assume):") + 1 :][:2]
    assert observed[0].startswith("  Batch named the training job AWSBatchtrainstack-smoke-queue-")
    assert "trainstack's name kept whole, in its case" in observed[0]
    assert observed[1] == (
        "  Batch created it with the stack's key (arn:aws:kms:us-east-1:123456789012:key/local) and it Completed: "
        "Batch's service-linked role needed no grant of the key"
    )
