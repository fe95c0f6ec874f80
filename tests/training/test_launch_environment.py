"""The distributed bootstrap reads its place in the job from torchrun's or Open MPI's variables."""

from __future__ import annotations

import json

import pytest

from trainstack_training.distributed import Launch, mpi_rendezvous, read_launch

TORCHRUN = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "algo-1"}
OPEN_MPI = {
    "OMPI_COMM_WORLD_RANK": "3",
    "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    "OMPI_COMM_WORLD_SIZE": "4",
    "OMPI_COMM_WORLD_LOCAL_SIZE": "2",
}


@pytest.mark.parametrize(
    ("environ", "launch"),
    [
        (TORCHRUN, Launch("torchrun", 3, 1, 4, 2)),
        (OPEN_MPI, Launch("mpirun", 3, 1, 4, 2)),
        (
            {**OPEN_MPI, "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2"},
            Launch("torchrun", 0, 0, 2, 2),
        ),  # torchrun under mpirun
        ({}, Launch("none", 0, 0, 1, 1)),
    ],
    ids=["torchrun", "mpirun", "torchrun-started-by-mpirun", "one-process"],
)
def test_the_launch_is_read_from_the_launchers_variables(environ, launch):
    assert read_launch(environ) == launch


def test_an_mpi_rank_finds_the_master_as_the_first_sagemaker_host_on_the_toolkits_port():
    rendezvous = mpi_rendezvous(read_launch(OPEN_MPI), {**OPEN_MPI, "SM_HOSTS": json.dumps(["algo-1", "algo-2"])})
    torchrun_style = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}
    assert rendezvous == {**torchrun_style, "MASTER_ADDR": "algo-1", "MASTER_PORT": "7777"}


def test_an_mpi_rank_takes_the_master_the_pytorch_toolkit_set():
    environ = {**OPEN_MPI, "SM_HOSTS": '["algo-1", "algo-2"]', "MASTER_ADDR": "10.0.0.5", "MASTER_PORT": "29500"}
    rendezvous = mpi_rendezvous(read_launch(environ), environ)
    assert (rendezvous["MASTER_ADDR"], rendezvous["MASTER_PORT"]) == ("10.0.0.5", "29500")


def test_mpi_across_hosts_without_a_master_is_refused():
    with pytest.raises(RuntimeError, match="needs MASTER_ADDR or SM_HOSTS"):
        mpi_rendezvous(read_launch(OPEN_MPI), OPEN_MPI)
