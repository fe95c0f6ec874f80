"""How ranks agree to stop, and to checkpoint by time, without a blocking collective per step
(distributed.StopVote): a flag a rank raises during step n reaches every rank at the end of step
n + 1, on every rank alike."""

from __future__ import annotations

import os

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.training.launch import free_port
from trainstack_training.distributed import DistContext, StopVote

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

RAISED_AT = 3  # rank 1 is signalled during its third step
STEPS = 6


def _vote(rank: int, port: int, answers: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2)
    context = DistContext(rank=rank, local_rank=rank, world_size=2, device=torch.device("cpu"), backend="gloo")
    vote = StopVote(context)
    # rank 1 is asked to stop from step RAISED_AT on; rank 0's clock says a checkpoint is due at step 2
    agreed = [vote.any_rank(rank == 1 and step >= RAISED_AT, rank == 0 and step == 2) for step in range(1, STEPS + 1)]
    answers[rank] = [(a.stop, a.save) for a in agreed]
    vote.close()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def answers() -> dict:
    found = mp.Manager().dict()
    mp.spawn(_vote, args=(free_port(), found), nprocs=2)
    return dict(found)


def test_a_stop_raised_on_one_rank_during_step_n_stops_every_rank_after_step_n_plus_1(answers):
    expected = [step > RAISED_AT for step in range(1, STEPS + 1)]
    assert [stop for stop, _ in answers[0]] == [stop for stop, _ in answers[1]] == expected


def test_a_checkpoint_rank_0_finds_due_during_step_n_is_saved_by_every_rank_after_step_n_plus_1(answers):
    expected = [step == 3 for step in range(1, STEPS + 1)]
    assert [save for _, save in answers[0]] == [save for _, save in answers[1]] == expected
