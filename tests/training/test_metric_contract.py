"""The request builder's MetricDefinitions parse what the entry point really prints."""

from __future__ import annotations

import re

import pytest

from tests.training.launch import job_args, run
from trainstack_contract.metric_lines import format_line, metric_definitions

pytestmark = pytest.mark.slow


def _parse(line: str) -> dict[str, float]:
    parsed = {}
    for definition in metric_definitions():
        match = re.search(definition["Regex"], line)
        if match:
            parsed[definition["Name"]] = float(match[1])
    return parsed


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory) -> str:
    """What a real two-step run prints on stdout (its last step saves a checkpoint)."""
    tmp_path = tmp_path_factory.mktemp("two-steps")
    result = run(job_args(tmp_path, "--tensorboard_dir", str(tmp_path / "tb"), steps=2), nproc=0)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_every_value_on_a_real_training_line_is_captured_exactly(two_steps):
    line = next(line for line in two_steps.splitlines() if line.startswith("step=2 "))
    printed = dict(pair.split("=") for pair in line.split())
    parsed = _parse(line)
    for key in ("loss", "grad_norm", "tokens_per_sec", "step_time"):
        assert parsed[f"train:{key}"] == float(printed[key])
    assert parsed["train:learning_rate"] == float(printed["lr"])
    assert "train:samples_per_sec" not in parsed and "train:mfu" not in parsed  # CPU: no known peak


def test_a_complete_checkpoint_publishes_its_step_and_only_as_the_checkpoint_metric(two_steps):
    (line,) = [line for line in two_steps.splitlines() if line.startswith("checkpoint ")]
    assert _parse(line) == {"train:checkpoint_step": 2.0}


def test_mfu_and_samples_per_sec_are_captured_when_printed():
    line = format_line(
        {"step": 7, "loss": 0.5, "lr": 1e-4, "grad_norm": 0.25, "samples_per_sec": 900.5, "step_time": 0.5, "mfu": 0.4123}
    )
    parsed = _parse(line)
    assert parsed["train:mfu"] == 0.4123
    assert parsed["train:samples_per_sec"] == 900.5
    assert parsed["train:learning_rate"] == 1e-4


def test_tensorboard_event_files_hold_the_logged_scalars(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = run(job_args(tmp_path, "--tensorboard_dir", str(tmp_path / "tb"), steps=3), nproc=0)
    assert result.returncode == 0, result.stderr[-2000:]
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [event.step for event in events.Scalars("train/loss")] == [1, 2, 3]
    assert "train/tokens_per_sec" in events.Tags()["scalars"]
