"""A team's monthly budget (trainstack/budgets.py): a run whose worst case, with what the team's ended
jobs of the month were billed and what its running and queued jobs may cost, exceeds it is refused
naming every figure; `force` does not lift it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from tests.core.specs import DDP
from trainstack import facts
from trainstack.budgets import TeamBudget, budget_problems, job_billed_usd, job_worst_case_usd, month_start, team_month
from trainstack.preflight import preflight
from trainstack.rules import SpecRejectedError
from trainstack.spec import parse_spec

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
PRICE = facts.instance("ml.p4d.24xlarge").price_per_hour


def job(**overrides) -> dict:
    return {
        "TrainingJobName": "trainstack-x-0123456789ab",
        "ResourceConfig": {"InstanceType": "ml.p4d.24xlarge", "InstanceCount": 2},
        "StoppingCondition": {"MaxRuntimeInSeconds": 4 * 3600},
        "TrainingStartTime": NOW - timedelta(hours=1),
        **overrides,
    }


def test_a_running_job_counts_its_whole_runtime_on_its_instances():
    assert job_worst_case_usd(job()) == pytest.approx(2 * PRICE * 4, abs=0.01)


def test_a_spot_job_counts_up_to_its_maximum_wait():
    spot = job(EnableManagedSpotTraining=True, StoppingCondition={"MaxRuntimeInSeconds": 3600, "MaxWaitTimeInSeconds": 3 * 3600})
    assert job_worst_case_usd(spot) == pytest.approx(2 * PRICE * 3, abs=0.01)


def test_a_queued_request_with_instance_preferences_counts_the_dearest_it_may_take():
    cheap = facts.instance("ml.g5.48xlarge").price_per_hour
    assert cheap < PRICE
    preferences = [{"InstanceType": "ml.g5.48xlarge"}, {"InstanceType": "ml.p4d.24xlarge"}]
    queued = job(ResourceConfig={"InstancePreferences": preferences, "InstanceCount": 2})
    assert job_worst_case_usd(queued) == pytest.approx(2 * PRICE * 4, abs=0.01)


def test_an_ended_job_counts_what_it_was_billed():
    ended = job(BillableTimeInSeconds=1800)
    assert job_billed_usd(ended) == pytest.approx(2 * PRICE / 2, abs=0.01)


def test_a_budgets_month_starts_at_midnight_utc_on_the_first():
    assert month_start(NOW) == datetime(2026, 11, 1, tzinfo=UTC)


def test_a_run_over_the_teams_budget_is_refused_naming_each_figure():
    budget = TeamBudget(
        "research", 1000.0, spent=(("trainstack-c", 49.5),), committed=(("trainstack-a", 400.0), ("trainstack-b", 150.5))
    )
    (problem,) = budget_problems(budget, 600.0)
    assert str(problem) == (
        "team = \"research\": this run's worst case $600.00, the $49.50 the team's 1 ended jobs of the month were billed "
        "and the $550.50 its 2 running and queued jobs may cost come to $1,200.00, over its monthly budget of "
        "$1,000.00; lower max_runtime, instance_count or the sweep, wait for next month or for the team's jobs to end, "
        "or raise -c queue_budgets"
    )


def test_a_run_within_the_teams_budget_passes():
    assert (
        budget_problems(
            TeamBudget("research", 1000.0, spent=(("trainstack-c", 0.5),), committed=(("trainstack-a", 399.5),)), 600.0
        )
        == []
    )


def test_force_does_not_lift_a_teams_budget():
    spec = parse_spec({**DDP, "inputs": {}, "force": True})
    with pytest.raises(SpecRejectedError, match=re.escape("over its monthly budget of $1.00")):
        preflight(spec, lambda uri: 64, budget=TeamBudget("research", 1.0, ()))


def test_a_teams_month_counts_ended_jobs_billed_time_and_running_jobs_time_so_far_on_their_instances():
    ended = job(TrainingJobStatus="Completed", BillableTimeInSeconds=1800)
    running = job(TrainingJobStatus="InProgress")  # started training an hour before NOW
    month = team_month("research", [ended, running], NOW)

    assert (month.month, month.jobs, month.in_progress) == ("2026-11", 2, 1)
    assert month.instance_hours == pytest.approx(2 * 0.5 + 2 * 1.0)
    assert month.cost_usd == pytest.approx(PRICE * 3, abs=0.01)


def test_a_teams_month_names_a_type_without_a_price_and_counts_its_hours_only():
    unpriced = job(
        TrainingJobStatus="Completed",
        BillableTimeInSeconds=3600,
        ResourceConfig={"InstanceType": "ml.x9.huge", "InstanceCount": 1},
    )
    month = team_month("research", [unpriced], NOW)

    assert (month.instance_hours, month.cost_usd, month.unpriced) == (1.0, 0.0, ("ml.x9.huge",))
