"""The watchdog: how long a step may take, which ranks a stalled node waits for, and a real torchrun
job with one rank stuck, which must end with the watchdog's exit code, that rank named and every
rank's stack dumped."""

from __future__ import annotations

import os
import re
import subprocess
import time

import pytest

from tests.training.launch import TIMEOUT, environment, job_args, run
from trainstack_contract.config import parse_config
from trainstack_training.distributed import Launch, process_group_timeout
from trainstack_training.watchdog import Heartbeat, Heartbeats, Point, Watchdog, diagnose, step_limit

STARTUP = 1800.0


def test_before_five_timed_steps_the_limit_is_the_startup_allowance():
    assert step_limit([0.5] * 4, step_timeout=0, startup_timeout=STARTUP).seconds == STARTUP


def test_the_derived_limit_is_twenty_median_steps():
    assert step_limit([30.0] * 5, step_timeout=0, startup_timeout=STARTUP).seconds == 600


def test_one_slow_step_does_not_move_the_derived_limit():
    assert step_limit([30.0, 30.0, 900.0, 30.0, 30.0], step_timeout=0, startup_timeout=STARTUP).seconds == 600


def test_fast_steps_get_at_least_five_minutes():
    assert step_limit([0.05] * 50, step_timeout=0, startup_timeout=STARTUP).seconds == 300


def test_the_derived_limit_never_exceeds_the_startup_allowance():
    assert step_limit([200.0] * 5, step_timeout=0, startup_timeout=STARTUP).seconds == STARTUP


def test_a_fixed_step_timeout_replaces_the_derivation():
    limit = step_limit([30.0] * 5, step_timeout=45, startup_timeout=STARTUP)
    assert (limit.seconds, limit.source) == (45, "step_timeout")


def test_the_first_step_and_every_save_get_the_startup_allowance(tmp_path):
    config = parse_config(["--step_timeout", "45", "--startup_timeout", "900", "--output_dir", str(tmp_path)], {})
    watchdog = Watchdog(config, Launch("none", 0, 0, 1, 1))  # not started: no thread, no heartbeats
    assert watchdog.limit().seconds == 900
    watchdog.step_completed(1)
    assert watchdog.limit().seconds == 45
    with watchdog.slow_phase():
        assert watchdog.limit().seconds == 900
    assert watchdog.limit().seconds == 45


def test_the_process_group_times_out_after_the_watchdog_would_have_fired():
    for argv in (["--startup_timeout", "600"], ["--startup_timeout", "600", "--step_timeout", "900"]):
        config = parse_config(argv, {})
        assert process_group_timeout(config).total_seconds() > max(config.startup_timeout, config.step_timeout)


def test_the_rank_behind_is_named_as_the_one_the_others_wait_for():
    heartbeats = {
        0: Heartbeat(3, 0, Point.COMPUTE),
        1: Heartbeat(3, 0, Point.DATA),
        2: Heartbeat(3, 0, Point.COMPUTE),
    }
    assert diagnose(heartbeats, grad_accum=1, node="node 0", other_nodes=False) == (
        "stuck: rank 1 at step 3 (loading data); waiting for them: ranks 0, 2 at step 3 (forward/backward)"
    )


def test_a_later_micro_step_is_ahead_of_a_later_phase_of_an_earlier_one():
    heartbeats = {0: Heartbeat(3, 1, Point.DATA), 1: Heartbeat(3, 0, Point.COMPUTE)}
    assert diagnose(heartbeats, grad_accum=4, node="node 0", other_nodes=False).startswith(
        "stuck: rank 1 at step 3 (forward/backward, micro-step 0)"
    )


def test_a_rank_without_a_live_process_is_named_stuck():
    heartbeats = {0: Heartbeat(7, 1, Point.AFTER_STEP), 1: None}
    assert diagnose(heartbeats, grad_accum=1, node="node 0", other_nodes=False).startswith("stuck: rank 1 with no live process")


def test_ranks_that_stopped_together_point_to_another_node():
    heartbeats = {8: Heartbeat(5, 0, Point.COMPUTE), 9: Heartbeat(5, 0, Point.COMPUTE)}
    assert diagnose(heartbeats, grad_accum=1, node="node 1", other_nodes=True) == (
        "ranks 8, 9 of node 1 stopped at step 5 (forward/backward) together, waiting for a rank on another node "
        "(its host's log names it) or for the network"
    )


def _heartbeats(directory, rank: int) -> Heartbeats:
    return Heartbeats(directory, Launch("torchrun", rank, rank, 2, 2))


def test_a_heartbeat_records_where_its_rank_is_for_the_nodes_other_ranks(tmp_path):
    writer = _heartbeats(tmp_path, 1)
    writer.beat(4, 0, Point.DATA)
    pid, heartbeat = _heartbeats(tmp_path, 0).read_node()[1]
    assert (pid, heartbeat) == (os.getpid(), Heartbeat(4, 0, Point.DATA))


def test_a_heartbeat_whose_pid_now_names_another_process_reads_as_gone(tmp_path):
    _heartbeats(tmp_path, 1)
    path = tmp_path / "rank-1"
    path.write_bytes(Heartbeats._IDENTITY.pack(os.getpid(), 1) + path.read_bytes()[Heartbeats._IDENTITY.size :])
    assert _heartbeats(tmp_path, 0).read_node()[1] is None


def test_a_heartbeat_of_an_exited_process_reads_as_gone(tmp_path):
    exited = subprocess.Popen(["true"])
    exited.wait()
    _heartbeats(tmp_path, 1)
    path = tmp_path / "rank-1"
    path.write_bytes(Heartbeats._IDENTITY.pack(exited.pid, 12345) + path.read_bytes()[Heartbeats._IDENTITY.size :])
    assert _heartbeats(tmp_path, 0).read_node()[1] is None


def test_only_the_first_rank_of_a_node_to_fire_claims_the_report(tmp_path):
    first, second = _heartbeats(tmp_path, 0), _heartbeats(tmp_path, 1)
    assert [first.claim(), second.claim()] == [True, False]


def test_a_new_run_clears_an_earlier_runs_claim(tmp_path):
    assert _heartbeats(tmp_path, 0).claim()
    assert _heartbeats(tmp_path, 0).claim()


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT + 60)
def test_a_stuck_rank_ends_the_job_naming_it_with_every_ranks_stack(tmp_path):
    args = job_args(tmp_path, "--step_timeout", "3", "--startup_timeout", "120", steps=20)
    started = time.monotonic()
    result = run(args, env=environment(TRAINSTACK_TWIN="1", TRAINSTACK_INJECT_HANG="1:3"))
    elapsed = time.monotonic() - started
    assert result.returncode != 0
    assert elapsed < 120  # the process group alone would have waited 180 s
    reason = (tmp_path / "output" / "failure").read_text()
    assert re.search(r"^rank [01]: StepTimeout: no optimizer step completed for \d+ s \(limit 3 s, step_timeout\)", reason)
    assert "stuck: rank 1 at step 3 (loading data); waiting for them: rank 0 at step 3 (forward/backward)" in reason
    assert "in hang_forever" in result.stderr  # rank 1's stack, where it hangs
    assert "in backward" in result.stderr  # rank 0's stack, waiting for rank 1's gradients
    assert re.search(r"exitcode\s*: 75\b", result.stderr)  # torchrun's summary: the watchdog's own exit code
