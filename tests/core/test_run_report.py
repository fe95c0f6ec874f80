"""The metric lines Notify prints for the dashboard (trainstack/run_report.py): valid embedded metric
format, and a trial's restarts by the kind of failure they followed (trainstack/restarts.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from trainstack.failures import CAPACITY, INFRASTRUCTURE, UNKNOWN, Failure
from trainstack.restarts import SPOT_INTERRUPTION, attempt_record
from trainstack.run_report import (
    KIND_DIMENSION,
    LOST_STEPS_COST_METRIC,
    RESTARTS_METRIC,
    RUN_METRICS_NAMESPACE,
    STEPS_LOST_METRIC,
    metric_lines,
)
from trainstack_contract.metric_lines import CHECKPOINT_STEP, STEP


def _attempt(
    kind: str, decision: str, *, trained: int = 0, checkpoint: int = 0, cost: float | None = 10.0, interruptions: int = 0
) -> dict[str, Any]:
    """An ended attempt's record, as Describe writes it."""
    transitions = [{"Status": "Training"}, *[{"Status": "Interrupted"}] * interruptions]
    summary = {
        "job_name": "trainstack-x",
        "status": "Failed" if kind else "Completed",
        "final_metrics": {STEP: trained, CHECKPOINT_STEP: checkpoint},
        "cost_usd": cost,
    }
    failure = Failure(kind, "hang") if kind else None
    return attempt_record({"SecondaryStatusTransitions": transitions}, summary, failure, decision)


def _restart_lines(attempts: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The restart documents of one trial's lines, by failure kind."""
    trial = {"job_name": "trainstack-x", "status": "Completed", "attempts": attempts}
    documents = [json.loads(line) for line in metric_lines([trial], "trainstack", 1_700_000_000_000)]
    return {document[KIND_DIMENSION]: document for document in documents if KIND_DIMENSION in document}


TWO_INFRASTRUCTURE_RESTARTS = [
    _attempt(INFRASTRUCTURE, "restart 1 of 3", trained=130, checkpoint=100),
    _attempt(INFRASTRUCTURE, "restart 2 of 3", trained=260, checkpoint=200),
    _attempt("", "", trained=400, checkpoint=400),
]


def test_a_trials_restarts_are_one_valid_emf_document_per_failure_kind():
    (document,) = _restart_lines(TWO_INFRASTRUCTURE_RESTARTS).values()
    (directive,) = document["_aws"]["CloudWatchMetrics"]
    assert document["_aws"]["Timestamp"] == 1_700_000_000_000
    assert directive["Namespace"] == RUN_METRICS_NAMESPACE
    (dimensions,) = directive["Dimensions"]
    assert all(isinstance(document[name], str) for name in dimensions)  # each declared dimension has its value
    assert all(isinstance(document[metric["Name"]], int | float) for metric in directive["Metrics"])


def test_restarts_are_counted_with_the_steps_and_cost_they_lost_under_stack_and_kind_only():
    document = _restart_lines(TWO_INFRASTRUCTURE_RESTARTS)[INFRASTRUCTURE]
    assert document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["Prefix", KIND_DIMENSION]]
    assert (document["Prefix"], document[RESTARTS_METRIC], document[STEPS_LOST_METRIC]) == ("trainstack", 2, 30 + 60)
    assert document[LOST_STEPS_COST_METRIC] == pytest.approx(10.0 * 30 / 130 + 10.0 * 60 / 260, abs=1e-3)


def test_each_kind_of_failure_is_counted_apart():
    attempts = [_attempt(INFRASTRUCTURE, "restart 1 of 3", trained=10), _attempt(UNKNOWN, "restart 2 of 3", trained=20)]
    restarts = _restart_lines(attempts)
    assert {kind: document[RESTARTS_METRIC] for kind, document in restarts.items()} == {INFRASTRUCTURE: 1, UNKNOWN: 1}


def test_a_trial_without_restarts_prints_no_restart_metrics():
    failed = _attempt(INFRASTRUCTURE, "not restarted: restarts.max = 0 spent", trained=130, checkpoint=100)
    assert _restart_lines([failed]) == {}


def test_a_capacity_retry_is_not_a_restart():
    assert _restart_lines([_attempt(CAPACITY, "capacity retry 1 of 3"), _attempt("", "", trained=400)]) == {}


def test_spot_interruptions_are_counted_as_restarts_with_their_losses_left_unknown():
    document = _restart_lines([_attempt("", "", trained=400, interruptions=2)])[SPOT_INTERRUPTION]
    assert document[RESTARTS_METRIC] == 2
    assert STEPS_LOST_METRIC not in document and LOST_STEPS_COST_METRIC not in document
    assert [metric["Name"] for metric in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]] == [RESTARTS_METRIC]


def test_an_unknown_cost_of_lost_steps_is_left_out_rather_than_reported_as_zero():
    attempts = [_attempt(INFRASTRUCTURE, "restart 1 of 3", trained=130, checkpoint=100, cost=None)]
    document = _restart_lines(attempts)[INFRASTRUCTURE]
    assert document[STEPS_LOST_METRIC] == 30 and LOST_STEPS_COST_METRIC not in document
