"""One reference run shared by the tests that compare a resumed, multi-host or MPI-launched job with it."""

from __future__ import annotations

import pytest

from tests.training.launch import STEADY_LR, job_args, losses, run

REFERENCE_STEPS = 8


@pytest.fixture(scope="session")
def reference_losses(tmp_path_factory) -> dict[int, float]:
    """torchrun, one host, two ranks, 8 steps at a steady learning rate: the trajectory every other
    launch of the same global batch (two hosts, mpirun, one rank accumulating twice) must follow."""
    result = run(job_args(tmp_path_factory.mktemp("reference"), *STEADY_LR, steps=REFERENCE_STEPS))
    assert result.returncode == 0, result.stderr[-3000:]
    trajectory = losses(result.stdout)
    assert sorted(trajectory) == list(range(1, REFERENCE_STEPS + 1))
    return trajectory
