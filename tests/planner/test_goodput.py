"""The goodput model (trainstack.planner.goodput) against a simulation of what it describes, its
first-order limit, and the interval `checkpoint_every: auto` takes (trainstack_contract.checkpoint_cadence)."""

from __future__ import annotations

import random
import statistics

import pytest

from trainstack.planner.goodput import FailureKind, expected_goodput, pipeline_restart
from trainstack.workflow import MAX_POLL_SECONDS
from trainstack_contract.checkpoint_cadence import (
    SAVE_OVERHEAD_BOUND,
    checkpoint_interval_seconds,
    job_mttf_seconds,
    young_daly_seconds,
)

CRASH = FailureKind(1.0, restart_seconds=18.0)


def simulated_fraction(
    interval: float, save: float, mttf: float, kinds: tuple[FailureKind, ...], work: float, seed: int
) -> float:
    """One run of `work` seconds of training, failures a Poisson process over the time it trains: a
    failure that loses work goes back to the last checkpoint, one that saves first keeps its work and
    saves; each then restarts; a checkpoint every `interval` of training since the last one."""
    rng = random.Random(seed)
    rate = 1 / mttf
    shares = [kind.share for kind in kinds]
    done, since_checkpoint, wall = 0.0, 0.0, 0.0
    next_failure = rng.expovariate(rate)
    while done < work:
        to_checkpoint = interval - since_checkpoint
        step = min(to_checkpoint, work - done, next_failure)
        done, since_checkpoint, wall, next_failure = done + step, since_checkpoint + step, wall + step, next_failure - step
        if next_failure <= 0:
            kind = rng.choices(kinds, shares)[0]
            wall += kind.restart_seconds
            if kind.saves_first:
                wall += save
                since_checkpoint = 0.0
            else:
                done -= since_checkpoint
                since_checkpoint = 0.0
            next_failure = rng.expovariate(rate)
        elif since_checkpoint >= interval:
            wall += save
            since_checkpoint = 0.0
    return work / wall


@pytest.mark.parametrize(
    ("interval", "kinds"),
    [
        (2.0, (CRASH,)),  # short against the MTTF: the first-order regime
        (30.0, (CRASH,)),  # as long as the MTTF: where first-order figures are far off
        (90.0, (CRASH,)),  # three MTTFs: most intervals fail before they complete
        (10.0, (FailureKind(2 / 3, 18.0), FailureKind(1 / 3, 11.0, saves_first=True))),  # a third save first (spot reclaims)
    ],
)
def test_the_model_is_what_a_simulation_of_poisson_failures_measures(interval, kinds):
    mttf, save = 30.0, 0.5
    measured = statistics.fmean(simulated_fraction(interval, save, mttf, kinds, work=3000.0, seed=seed) for seed in range(40))
    predicted = expected_goodput(interval, save, mttf, kinds).effective_fraction
    assert measured == pytest.approx(predicted, abs=0.01)


def test_while_the_interval_is_short_the_figures_are_first_order():
    interval, save, mttf, restart = 60.0, 5.0, 36_000.0, 1500.0
    goodput = expected_goodput(interval, save, mttf, (FailureKind(1.0, restart),))
    assert goodput.failures == pytest.approx(1 / mttf, rel=0.01)  # run time / MTTF
    assert goodput.work_lost_per_failure == pytest.approx(interval / 2, rel=0.01)
    first_order = 1 / (1 + save / interval + (interval / 2 + restart) / mttf)
    assert goodput.effective_fraction == pytest.approx(first_order, rel=1e-3)


def test_young_daly_is_the_models_best_interval_while_the_save_is_short():
    save, mttf = 10.0, 100_000.0
    best = young_daly_seconds(save, mttf)
    # the time lost per second of training: saves, work trained again and restarts
    lost = {
        scale: 1 / expected_goodput(best * scale, save, mttf, (CRASH,)).effective_fraction - 1 for scale in (0.5, 0.8, 1, 1.25, 2)
    }
    assert min(lost, key=lost.get) == 1
    assert lost[2] > 1.2 * lost[1] and lost[0.5] > 1.2 * lost[1]  # (2 + 1/2) / 2 = 1.25 times the optimum's


def test_auto_keeps_saves_within_the_bound_however_rarely_the_job_fails():
    save = 30.0
    interval = checkpoint_interval_seconds(save, mttf_seconds=1e9)
    assert interval == pytest.approx(young_daly_seconds(save, 1e9))
    short = checkpoint_interval_seconds(save, mttf_seconds=60.0)  # Young/Daly would save every 60 s
    assert save / short == pytest.approx(SAVE_OVERHEAD_BOUND)


def test_a_jobs_mttf_is_the_published_one_at_1024_gpus_and_scales_with_its_gpus():
    assert job_mttf_seconds(1024) / 3600 == pytest.approx(7.9)
    assert job_mttf_seconds(8) / 86400 == pytest.approx(42.1, abs=0.1)  # the paper's 8-GPU figure is about 47 days
    assert job_mttf_seconds(16) == pytest.approx(job_mttf_seconds(8) / 2)


def test_a_restart_through_the_pipeline_waits_half_a_poll_and_the_mean_of_its_backoffs():
    restart = pipeline_restart(expected_restarts=3, checkpoint_load=20.0, start_up=600)
    assert restart.detection == MAX_POLL_SECONDS / 2
    assert restart.backoff == pytest.approx((60 + 120 + 240) / 3)
    assert restart.seconds == pytest.approx(900 + 140 + 600 + 20)
    assert restart.billed_seconds == 620  # finding the failure and waiting bill nothing
    assert pipeline_restart(expected_restarts=0.2, checkpoint_load=0.0).backoff == 60  # at least the first restart's


def test_checkpoints_that_cost_nothing_leave_only_the_restarts():
    goodput = expected_goodput(0.0, 0.0, 100.0, (FailureKind(1.0, 25.0),))
    assert goodput.effective_fraction == pytest.approx(1 / 1.25)
    assert goodput.failures == pytest.approx(1 / 100)
