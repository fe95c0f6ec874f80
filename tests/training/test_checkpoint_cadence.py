"""`checkpoint_every`: a number of steps, or `auto` (the default on several hosts): the interval that
loses least to saves and failures, from the job's MTTF and its save time (the plan's until it has
timed one), in steps of its measured step time, logged when chosen and when it changes."""

from __future__ import annotations

import json
import logging
import math
import re
import statistics
from types import SimpleNamespace

import pytest
import torch

from tests.training.launch import job_args, run
from trainstack_contract.checkpoint_cadence import SAVE_OVERHEAD_BOUND, job_mttf_seconds, young_daly_seconds
from trainstack_contract.config import ConfigError, parse_config
from trainstack_training.cadence import KEEP_WITHIN, AutoCadence, FixedCadence, checkpoint_cadence
from trainstack_training.distributed import DistContext
from trainstack_training.watchdog import WARMUP_STEPS

SINGLE = DistContext(rank=0, local_rank=0, world_size=1, device=torch.device("cpu"), backend="gloo")
TWO_HOSTS = json.dumps(["algo-1", "algo-2"])


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        ([], {}, 50),
        ([], {"SM_HOSTS": json.dumps(["algo-1"])}, 50),
        ([], {"SM_HOSTS": TWO_HOSTS}, "auto"),
        (["--checkpoint_every", "auto"], {}, "auto"),
        (["--checkpoint_every", "200"], {"SM_HOSTS": TWO_HOSTS}, 200),
        ([], {"SM_HPS": json.dumps({"checkpoint_every": 30})}, 30),
    ],
)
def test_auto_is_the_default_on_several_hosts_and_a_number_means_steps(argv, environ, expected):
    assert parse_config(argv, environ).checkpoint_every == expected


def test_the_hosts_come_from_resourceconfig_json_without_the_toolkits_variable(tmp_path):
    (tmp_path / "resourceconfig.json").write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]}))
    assert parse_config([], {"SM_INPUT_CONFIG_DIR": str(tmp_path)}).checkpoint_every == "auto"


@pytest.mark.parametrize("value", ["sometimes", "0", "-5", "2.5"])
def test_anything_but_steps_or_auto_is_refused_naming_both(value):
    with pytest.raises(ConfigError, match=r"'checkpoint_every' = .*: steps \(at least 1\), or auto"):
        parse_config(["--checkpoint_every", value], {})


def test_mttf_and_the_planned_save_are_seconds_and_not_negative():
    config = parse_config(["--mttf", "7200", "--planned_save_seconds", "12.5"], {})
    assert (config.mttf, config.planned_save_seconds) == (7200.0, 12.5)
    with pytest.raises(ConfigError, match=r"'mttf' = -1\.0: seconds"):
        parse_config(["--mttf", "-1"], {})


def fakes(step_seconds: float = 0.1):
    checkpointer = SimpleNamespace(last_save_seconds=None, last_saved_step=0)
    watchdog = SimpleNamespace(median_step_seconds=lambda: step_seconds)
    return checkpointer, watchdog


def auto(checkpointer, watchdog, *, planned: float | None, mttf: float = 3600.0, start: int = 0) -> AutoCadence:
    return AutoCadence(SINGLE, checkpointer, watchdog, mttf, "mttf", planned, start_step=start)


def due_steps(cadence: AutoCadence, steps: range) -> list[int]:
    return [step for step in steps if cadence.due(step)]


def test_with_the_plans_save_time_the_first_interval_is_young_dalys_in_measured_steps(caplog):
    cadence = auto(*fakes(step_seconds=0.1), planned=0.5, start=40)  # resumed at step 40
    caplog.set_level(logging.INFO, "trainstack")
    interval = round(young_daly_seconds(0.5, 3600.0) / 0.1)  # 600 steps
    assert due_steps(cadence, range(41, 41 + WARMUP_STEPS + 1)) == []  # nothing before the first decision
    assert cadence.steps_between == interval and not cadence.times_next_save
    assert due_steps(cadence, range(47, 40 + interval + 1)) == [40 + interval]  # counted from where it resumed
    assert f"checkpoint_every auto: every {interval} steps" in caplog.text and "the plan's estimate" in caplog.text


def test_without_a_save_time_the_first_decision_saves_to_time_one_then_uses_it(caplog):
    checkpointer, watchdog = fakes(step_seconds=0.1)
    cadence = auto(checkpointer, watchdog, planned=None)
    caplog.set_level(logging.INFO, "trainstack")
    decision = WARMUP_STEPS + 1
    assert due_steps(cadence, range(1, decision + 1)) == [decision] and cadence.times_next_save
    assert "no save time known yet" in caplog.text
    checkpointer.last_save_seconds, checkpointer.last_saved_step = 2.0, decision
    cadence.saved(decision)
    assert cadence.steps_between == round(young_daly_seconds(2.0, 3600.0) / 0.1) and not cadence.times_next_save
    assert "(measured, median of 1)" in caplog.text


def test_the_interval_moves_only_past_the_dead_band_and_says_what_it_was(caplog):
    checkpointer, watchdog = fakes(step_seconds=0.1)
    cadence = auto(checkpointer, watchdog, planned=1.0)
    due_steps(cadence, range(1, WARMUP_STEPS + 2))
    first = cadence.steps_between
    slightly = 1.0 * (KEEP_WITHIN * 0.9) ** 2  # the interval goes with the square root of the save time
    checkpointer.last_save_seconds, checkpointer.last_saved_step = slightly, first
    cadence.saved(first)
    assert cadence.steps_between == first
    caplog.set_level(logging.INFO, "trainstack")
    checkpointer.last_save_seconds, checkpointer.last_saved_step = 4.0, 2 * first  # the median of the two: far off
    cadence.saved(2 * first)
    moved = round(young_daly_seconds(statistics.median([slightly, 4.0]), 3600.0) / 0.1)
    assert cadence.steps_between == moved
    assert f"every {moved} steps" in caplog.text and f"was every {first} steps" in caplog.text


def test_a_rare_failure_still_keeps_saves_within_the_overhead_bound(caplog):
    caplog.set_level(logging.INFO, "trainstack")
    cadence = auto(*fakes(step_seconds=1.0), planned=30.0, mttf=120.0)  # Young/Daly: every 85 s
    due_steps(cadence, range(1, WARMUP_STEPS + 2))
    assert cadence.steps_between == math.ceil(30.0 / SAVE_OVERHEAD_BOUND)  # 600 steps of 1 s
    assert "the 5% save-overhead bound" in caplog.text


def test_a_number_saves_on_its_multiples_and_auto_takes_its_mttf_from_the_config_or_the_processes():
    fixed = checkpoint_cadence(parse_config(["--checkpoint_every", "25"], {}), SINGLE, *fakes(), start_step=30)
    assert isinstance(fixed, FixedCadence) and [s for s in range(31, 101) if fixed.due(s)] == [50, 75, 100]
    given = checkpoint_cadence(parse_config(["--checkpoint_every", "auto", "--mttf", "600"], {}), SINGLE, *fakes(), start_step=0)
    assert (given.mttf_seconds, given.mttf_source) == (600.0, "mttf")
    derived = checkpoint_cadence(parse_config(["--checkpoint_every", "auto"], {}), SINGLE, *fakes(), start_step=0)
    assert derived.mttf_seconds == job_mttf_seconds(1) and derived.planned_save_seconds is None


SAVED = re.compile(r"saved step_(\d+) in ")
CHOSEN = re.compile(r"checkpoint_every auto: every (\d+) steps")


def test_two_ranks_save_at_the_intervals_auto_logs(tmp_path):
    """Under torchrun: every rank saves at the step rank 0 decided (a save is a collective: a rank that
    decided otherwise would hang the job), each interval counted from the save before."""
    args = job_args(tmp_path, "--checkpoint_every", "auto", "--mttf", "20", "--planned_save_seconds", "0.05", steps=300)
    result = run([*args, "--async_checkpoint", "false"])
    assert result.returncode == 0, result.stderr[-3000:]
    events = [(m.re, int(m[1])) for line in result.stderr.splitlines() for m in [SAVED.search(line) or CHOSEN.search(line)] if m]
    assert events[0][0] is CHOSEN and "the plan's estimate" in result.stderr
    interval, last_save, saves = None, 0, []
    for kind, value in events:
        if kind is CHOSEN:
            interval = value
            continue
        saves.append(value)
        assert value == 300 or value - last_save == interval
        last_save = value
    assert len(saves) >= 3 and saves[-1] == 300
