"""How ranks agree to stop without a blocking collective per step (distributed.StopVote): the flag
a rank raises during step n reaches every rank at the end of step n + 1, on every rank alike."""

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
    answers[rank] = [vote.any_rank(rank == 1 and step >= RAISED_AT) for step in range(1, STEPS + 1)]
    vote.close()
    dist.destroy_process_group()


def test_a_stop_raised_on_one_rank_during_step_n_stops_every_rank_after_step_n_plus_1():
    answers = mp.Manager().dict()

    mp.spawn(_vote, args=(free_port(), answers), nprocs=2)

    expected = [step > RAISED_AT for step in range(1, STEPS + 1)]
    assert answers[0] == answers[1] == expected
