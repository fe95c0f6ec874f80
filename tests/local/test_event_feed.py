"""The lines `local serve` prints per event (trainstack_local.event_feed)."""

from trainstack_local.event_feed import EventFeed


def feed() -> tuple[EventFeed, list[str]]:
    lines: list[str] = []
    return EventFeed(lines.append), lines


def test_a_job_prints_its_creation_then_each_status_change_once():
    events, lines = feed()
    events.job_created("j", 2, ["ml.p4d.24xlarge", "ml.p5.48xlarge"])
    for status, secondary in [("InProgress", "Starting"), ("InProgress", "Starting"), ("InProgress", "Training")]:
        events.job_status("j", status, secondary)
    assert lines == ["job j created: 2 x ml.p4d.24xlarge or ml.p5.48xlarge", "job j: Training (InProgress)"]


def test_a_failure_and_a_runs_cause_are_printed_on_one_line():
    events, lines = feed()
    events.job_status("j", "InProgress", "Starting")
    events.job_status("j", "Failed", "Failed", "AlgorithmError: rank 0:\n  DataError: no shards")
    events.run_ended("r", "FAILED", "j: Failed\nAlgorithmError")
    assert lines == [
        "job j: Failed (Failed): AlgorithmError: rank 0: DataError: no shards",
        "run r ended FAILED: j: Failed AlgorithmError",
    ]


def test_a_stopped_run_ends_without_a_cause():
    events, lines = feed()
    events.run_started("r")
    events.run_ended("r", "ABORTED", None)
    assert lines == ["run r started", "run r ended ABORTED"]
