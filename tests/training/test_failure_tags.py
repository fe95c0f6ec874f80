"""Failures that are the infrastructure's are tagged so that the pipeline can restart them: which
exceptions count as a transport failure, and a real torchrun job whose rank meets one."""

from __future__ import annotations

import re

import pytest
import torch.distributed

from tests.training.launch import TIMEOUT, environment, job_args, run
from trainstack_training.faults import NCCL_REMOTE_ERROR, is_transport_error

# What gloo raised on this machine when the peer of an all_reduce exited (torch 2.13, CPU).
GLOO_PEER_EXITED = (
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:62089. "
    "This is typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an error."
)


def test_an_nccl_error_is_a_transport_error():
    assert is_transport_error(torch.distributed.DistBackendError(NCCL_REMOTE_ERROR))


def test_a_failed_connection_to_a_peer_is_a_transport_error():
    assert is_transport_error(torch.distributed.DistNetworkError("The client socket has failed to connect to algo-1:29500"))


def test_a_gloo_peer_that_exited_is_a_transport_error():
    assert is_transport_error(RuntimeError(GLOO_PEER_EXITED))


def test_a_gloo_peer_whose_host_reset_the_connection_is_a_transport_error():
    assert is_transport_error(RuntimeError("[pair.cc:598] Read error [10.0.0.2]:41234: Connection reset by peer"))


def test_another_runtime_error_is_not_a_transport_error():
    assert not is_transport_error(RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x64 and 32x64)"))


def test_a_peer_named_in_another_kind_of_error_is_not_a_transport_error():
    assert not is_transport_error(ValueError("Connection closed by peer"))


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT + 60)
def test_a_rank_whose_collective_fails_in_the_transport_ends_the_job_tagged_with_its_exit_code(tmp_path):
    env = environment(TRAINSTACK_TWIN="1", TRAINSTACK_INJECT_TRANSPORT_ERROR="1:3")
    result = run(job_args(tmp_path, "--checkpoint_every", "100", steps=6), env=env)
    assert result.returncode != 0
    reason = (tmp_path / "output" / "failure").read_text()
    assert reason.startswith("rank 1: TransportError: DistBackendError: NCCL error in: ")
    assert "remote process exited or there was a network error" in reason
    assert re.search(r"rank\s*: 1 .*\n.*exitcode\s*: 76\b", result.stderr)  # torchrun's summary of rank 1
    # Rank 0 waited for rank 1 in the gradient all-reduce: gloo's error for the vanished peer is tagged too.
    assert "trainstack: rank 0: TransportError: RuntimeError: " in result.stderr
