"""Team budgets on the served twin, as a platform engineer meets them: a stack synthesized with
`-c queue_budgets=research:500` (two teams, research with a budget, prod without), served with
`trainstack local serve`. A research run within the budget runs; a second one whose worst case with
what the first may cost would pass it is refused by `trainstack submit` in one line naming every
figure, nothing uploaded; the same spec uploaded with the AWS CLI into research's folder is refused by
the stack's Validate (the CLI is not the only gate); prod, without a budget, runs the same spec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.cli.served import serving
from trainstack import facts
from trainstack_cli.stack import EXIT_BAD_INPUT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

P4D = "ml.p4d.24xlarge"
# A run's worst case is 7 jobs (the first, 3 re-creations for capacity, 3 restarts) of 130 min of one p4d,
# about $466, under research's $500; one job of a run in progress may still cost about $67: a second run is over.
MINUTES = 130
UNREACHED = 1_000_000  # steps no run here reaches: only a stop ends it
BUCKET = "trainstack-local-trigger"


@pytest.fixture(scope="module")
def served(queue_stack, tmp_path_factory):
    """The queue stack (research:1,prod:0.5, queue_budgets research:500), served (each team's copy of the
    sample data in its own folder, as `local serve` uploads it)."""
    with serving(queue_stack.json, tmp_path_factory.mktemp("budgets")) as stack:
        yield stack


def spec_file(tmp_path, name: str, team: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "instance_type": P4D,
                "strategy": "ddp",
                "hyperparameters": {"model": "gpt-tiny", "max_steps": UNREACHED, "log_every": 10, "checkpoint_every": UNREACHED},
                "inputs": {"train": {"s3_uri": f"s3://{BUCKET}/datasets/{team}/sample/", "mode": "File"}},
                "max_runtime": f"{MINUTES}m",
            }
        )
    )
    return str(path)


def submitted(served, *arguments: str) -> str:
    result = served.trainstack("submit", *arguments, "--inline", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["run"]


def test_a_team_over_its_budget_is_refused_naming_each_figure_by_submit_and_by_validate_while_another_team_runs(served, tmp_path):
    planned = served.trainstack("plan", spec_file(tmp_path, "second", "research"), "--json")
    worst_case = json.loads(planned.stdout)["worst_case_usd"]
    running = facts.instance(P4D).price_per_hour * MINUTES / 60  # the first run's one job, in progress
    first = submitted(served, spec_file(tmp_path, "first", "research"), "--team", "research")
    served.wait_until(first, lambda view: view["trials"] and view["trials"][0]["status"] == "InProgress")

    refused = served.trainstack("submit", spec_file(tmp_path, "second", "research"), "--team", "research")

    assert refused.returncode == EXIT_BAD_INPUT
    (line,) = refused.stderr.strip().splitlines()
    assert (
        f"this run's worst case ${worst_case:,.2f}, the $0.00 the team's 0 ended jobs of the month were billed and the "
        f"${running:,.2f} its 1 running and queued jobs may cost come to ${worst_case + running:,.2f}, over its monthly "
        "budget of $500.00"
    ) in line
    assert line.endswith("nothing was submitted")
    uploaded = served.aws_json("s3api", "list-objects-v2", "--bucket", BUCKET, "--prefix", "jobs/")
    assert "Contents" not in uploaded

    spec = spec_file(tmp_path, "uploaded", "research")
    assert served.aws("s3", "cp", spec, f"s3://{BUCKET}/jobs/research/uploaded.yaml").returncode == 0
    failed = served.wait_until(served.run_of_upload("jobs/research/uploaded.yaml"), lambda view: view["status"] != "RUNNING")
    assert failed["status"] == "FAILED" and "over its monthly budget of $500.00" in failed["cause"]
    assert failed["trials"] == []  # never created: nothing billed

    other = submitted(served, spec_file(tmp_path, "other", "prod"), "--team", "prod")
    served.wait_until(other, lambda view: view["trials"] and view["trials"][0]["status"] == "InProgress")
    for run in (first, other):
        assert served.trainstack("stop", run).returncode == 0


def test_runs_of_a_team_lists_only_its_runs_with_what_its_jobs_of_the_month_came_to(served, tmp_path):
    spec = yaml.safe_load(Path(spec_file(tmp_path, "short", "prod")).read_text())
    spec.update(instance_type="ml.g5.xlarge", hyperparameters={"model": "gpt-tiny", "max_steps": 4, "log_every": 1})
    (tmp_path / "short.yaml").write_text(yaml.safe_dump(spec))
    short = submitted(served, str(tmp_path / "short.yaml"), "--team", "prod")
    assert served.wait_until(short, lambda view: view["status"] != "RUNNING")["status"] == "SUCCEEDED"

    prod = json.loads(served.trainstack("runs", "--team", "prod", "--json").stdout)
    research = json.loads(served.trainstack("runs", "--team", "research", "--json").stdout)
    shown = " ".join(served.trainstack("runs", "--team", "prod").stdout.split())

    assert short in [run["name"] for run in prod["runs"]] and short not in [run["name"] for run in research["runs"]]
    month = prod["month"]
    jobs = [trial for run in prod["runs"] for trial in run["trials"] if trial["training_job_name"]]
    assert (prod["team"], month["team"], month["jobs"]) == ("prod", "prod", len(jobs))
    assert month["instance_hours"] > 0 and month["cost_usd"] > 0
    assert f"team prod, {month['month']}: {month['jobs']} jobs" in shown and f"est. ${month['cost_usd']:,.2f}" in shown


def test_runs_of_a_team_the_stack_does_not_have_is_refused_naming_its_teams(served):
    refused = served.trainstack("runs", "--team", "nobody")

    assert refused.returncode == EXIT_BAD_INPUT
    assert (
        refused.stderr.strip()
        == "trainstack runs: --team nobody: stack trainstack-local's teams are research, prod; name one of them"
    )
