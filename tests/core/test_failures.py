"""Whose failure a failed job is, and what the restart policy then decides (trainstack/failures.py,
trainstack/restarts.py): every row of the documented table, and each limit of the policy."""

from __future__ import annotations

import pytest

from tools import failure_table
from tools.readme_section import section
from trainstack.failures import INFRASTRUCTURE, ROWS, UNKNOWN, USER, classify, failure_text
from trainstack.restarts import RestartPolicy, after_job, restart_decision
from trainstack.workflow import restart_wait_seconds

POLICY = RestartPolicy(max=2, on=(INFRASTRUCTURE,), exit_codes=(), within_seconds=48 * 3600)


@pytest.mark.parametrize("row", ROWS, ids=[f"{n}-{row.cause}" for n, row in enumerate(ROWS, start=1)])
def test_each_rows_example_is_classified_as_that_row(row):
    failure = classify(row.example)
    assert (failure.kind, failure.cause) == (row.kind, row.cause)


def test_the_documented_table_is_the_one_describe_uses():
    assert section(failure_table.START, failure_table.END, failure_table.DOC) == failure_table.render(), (
        "run `.venv/bin/python -m tools.failure_table`"
    )


def test_a_health_rule_that_a_collective_then_reports_stays_the_users():
    text = "AlgorithmError: rank 0: health rule nonfinite tripped at step 3\nrank 1: TransportError: Connection closed by peer"
    assert classify(text).kind == USER


def test_a_reason_no_rule_knows_is_unknown():
    assert (classify("AlgorithmError: loss is NaN").kind, classify("").kind) == (UNKNOWN, UNKNOWN)


def test_an_exit_code_the_spec_lists_is_transient_whatever_the_text_says():
    text = 'ExecuteUserScriptError:\nExitCode 3\nErrorMessage "ValueError: retry me"'
    assert classify(text).kind == USER
    listed = classify(text, restart_exit_codes=(3,))
    assert (listed.kind, listed.cause, listed.exit_code) == (INFRASTRUCTURE, "exit code 3", 3)


def test_the_last_secondary_status_message_is_read_with_the_failure_reason():
    description = {
        "FailureReason": "",
        "SecondaryStatusTransitions": [
            {"Status": "Starting", "StatusMessage": "Launching requested ML instances"},
            {"Status": "Failed", "StatusMessage": "InternalServerError: We encountered an internal error."},
        ],
    }
    assert classify(failure_text(description)).cause == "sagemaker"


def test_a_users_failure_is_never_restarted():
    failure = classify("AlgorithmError: rank 0: OutOfMemoryError: CUDA out of memory")
    assert restart_decision(failure, POLICY, 0, 60) == (False, "not restarted: a user failure (out of memory)")


def test_unknown_failures_restart_only_when_the_spec_says_so():
    unknown = classify("AlgorithmError: something odd")
    assert restart_decision(unknown, POLICY, 0, 60)[0] is False
    assert restart_decision(unknown, RestartPolicy(2, (INFRASTRUCTURE, UNKNOWN), (), 3600), 0, 60)[0] is True


def test_restarts_stop_when_max_is_spent():
    hang = classify(ROWS[[row.cause for row in ROWS].index("hang")].example)
    assert restart_decision(hang, POLICY, 1, 60) == (True, "restart 2 of 2")
    assert restart_decision(hang, POLICY, 2, 60) == (False, "not restarted: restarts.max = 2 spent")
    assert restart_decision(hang, RestartPolicy(0, (INFRASTRUCTURE,), (), 3600), 0, 60)[0] is False


def test_no_restart_begins_after_the_within_window():
    hang = classify("rank 1: StepTimeout: no optimizer step")
    assert restart_decision(hang, POLICY, 0, 48 * 3600 + 1)[0] is False


def test_restart_waits_double_from_a_minute_up_to_fifteen():
    assert [restart_wait_seconds(n) for n in range(6)] == [60, 120, 240, 480, 900, 900]


def _ended(status: str, step: int, checkpoint: int, reason: str = "", statuses: tuple[str, ...] = ()) -> tuple[dict, dict]:
    """A job's description (as far as the classification reads it) and its summary."""
    description = {"FailureReason": reason, "SecondaryStatusTransitions": [{"Status": s} for s in statuses]}
    metrics = {"train:step": step, "train:checkpoint_step": checkpoint}
    summary = {"job_name": "j-a0", "status": status, "failure_reason": reason, "final_metrics": metrics, "cost_usd": 10.0}
    return description, summary


def test_an_attempts_record_counts_the_steps_trained_after_the_last_checkpoint_as_lost():
    reason = "AlgorithmError: rank 1: StepTimeout: no optimizer step"
    description, summary = _ended("Failed", 130, 100, reason, ("Training", "Interrupted", "Failed"))
    (record,) = after_job(description, summary, POLICY, [], 60, capacity_retries=3)["attempts"]
    assert (record["trained_to_step"], record["checkpoint_step"], record["steps_lost"]) == (130, 100, 30)
    assert record["lost_usd"] == pytest.approx(10.0 * 30 / 130, abs=1e-4)
    assert (record["kind"], record["cause"], record["decision"], record["spot_interruptions"]) == (
        INFRASTRUCTURE, "hang", "restart 1 of 2", 1,
    )  # fmt: skip


def test_restarts_already_taken_are_counted_from_the_records_and_capacity_retries_apart():
    earlier = [{"decision": "restart 1 of 2"}, {"decision": "capacity retry 1 of 3"}, {"decision": "restart 2 of 2"}]
    assert (
        after_job(*_ended("Failed", 5, 4, "rank 0: StepTimeout: stuck"), POLICY, earlier, 60, capacity_retries=3)["retry"]
        is False
    )
    capacity = _ended("Failed", 0, 0, "CapacityError: Insufficient capacity")
    answer = after_job(*capacity, POLICY, earlier, 60, capacity_retries=3)
    assert (answer["retry"], answer["restart"], answer["attempts"][-1]["decision"]) == (True, False, "capacity retry 2 of 3")
