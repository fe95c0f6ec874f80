"""The container entry (PID 1) forwards a stop to the training processes and to nothing else."""

from __future__ import annotations

import subprocess
import sys

import pytest
from container_entry import program, training_processes

from tests.training.launch import ROOT

ENTRY = ROOT / "training" / "container_entry.py"


@pytest.mark.parametrize(
    ("argv", "name"),
    [
        (["bash", "-m", "start_with_right_hostname.sh", "train"], "start_with_right_hostname.sh"),
        (["/opt/conda/bin/python3.11", "/opt/conda/bin/train"], "train"),
        (["/usr/bin/python3", "/usr/local/bin/torchrun", "--nnodes", "2"], "torchrun"),
        (["python", "-m", "torch.distributed.run", "train.py"], "torch.distributed.run"),
        (["/usr/bin/python3", "-u", "train.py", "--max_steps", "10"], "train.py"),
        (["python3", "-W", "ignore", "-X", "faulthandler", "train.py"], "train.py"),
        (["sshd: root@notty"], "sshd"),
        (["/bin/sh", "-c", "./run.sh"], "sh"),
        (["mpirun", "--host", "algo-1:2", "python3", "train.py"], "mpirun"),
    ],
)
def test_a_process_is_known_by_the_program_it_runs(argv, name):
    assert program(argv) == name


def _table(*rows: tuple[int, int, str]) -> dict[int, tuple[int, list[str]]]:
    return {pid: (parent, command.split()) for pid, parent, command in rows}


def test_torchrun_workers_are_signalled_but_not_the_launchers_or_their_data_loader_workers():
    processes = _table(
        (10, 1, "bash -m start_with_right_hostname.sh train"),
        (11, 10, "/usr/bin/python3 /usr/local/bin/train"),
        (12, 11, "/usr/bin/python3 /usr/local/bin/torchrun --nnodes 1 --nproc_per_node 2 train.py"),
        (13, 12, "/usr/bin/python3 -u train.py --max_steps 10"),
        (14, 12, "/usr/bin/python3 -u train.py --max_steps 10"),
        (15, 13, "/usr/bin/python3 -u train.py --max_steps 10"),  # a forked data loader worker
    )
    assert training_processes(1, processes) == [13, 14]


def test_mpi_ranks_on_a_worker_host_are_reached_through_sshd_and_orted():
    processes = _table(
        (10, 1, "bash -m start_with_right_hostname.sh train"),
        (11, 10, "/usr/bin/python3 /usr/local/bin/train"),
        (12, 11, "/usr/sbin/sshd -D"),
        (13, 12, "sshd: root@notty"),
        (14, 13, "orted -mca ess env"),
        (15, 14, "python3 -m mpi4py train.py"),
    )
    assert training_processes(1, processes) == [15]


def test_a_script_the_toolkit_runs_directly_is_signalled_itself():
    processes = _table(
        (10, 1, "bash -m start_with_right_hostname.sh train"),
        (11, 10, "python3 /usr/local/bin/train"),
        (12, 11, "python3 train.py"),
    )
    assert training_processes(1, processes) == [12]


def test_the_entry_exits_with_the_status_of_the_command_it_runs():
    result = subprocess.run([sys.executable, str(ENTRY), "sh", "-c", "exit 3"], capture_output=True, timeout=30, check=False)
    assert result.returncode == 3


def test_the_entry_without_a_command_says_how_to_use_it():
    result = subprocess.run([sys.executable, str(ENTRY)], capture_output=True, text=True, timeout=30, check=False)
    assert result.returncode == 2 and "usage: container_entry.py COMMAND" in result.stderr
