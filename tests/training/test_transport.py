"""The EFA transport check: NCCL's own init lines decide, read from wherever NCCL prints them.

NCCL is not on this machine, so a stand-in prints its lines at the boundary, reading the environment
as NCCL does: the tests prove that what trainstack sets before the process group makes NCCL print
lines the check can read, and that the check reads them right."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.training.launch import ROOT
from tests.training.standins import nccl
from trainstack_contract.config import parse_config
from trainstack_training.transport import EfaTransportError, check_required, prepare, require_efa, transport_problem

EFA_HOST = {"FI_PROVIDER": "efa", "SM_CURRENT_INSTANCE_TYPE": "ml.p5.48xlarge"}
# aws-ofi-nccl before 1.13 named its network "AWS Libfabric", and logged the provider this way.
OLDER_OFI = "NET/OFI Selected Provider is efa (found 4 nics)\nUsing network AWS Libfabric\n"


@pytest.mark.parametrize("lines", [nccl.OFI_EFA, OLDER_OFI], ids=["current-plugin", "older-plugin"])
def test_aws_ofi_nccl_with_the_efa_provider_passes(lines):
    assert transport_problem(nccl.printed(lines)) is None


def test_the_socket_fallback_fails_naming_the_fix_and_the_opt_out():
    problem = transport_problem(nccl.printed(nccl.SOCKET))
    assert "NCCL uses network 'Socket', not EFA" in problem
    assert "aws-ofi-nccl" in problem and "require_efa_transport false" in problem


def test_libfabric_with_another_provider_fails():
    assert "provider 'tcp', not efa" in transport_problem(nccl.printed(nccl.OFI_TCP))


def test_init_output_without_a_network_line_fails_as_unconfirmed():
    assert "could not tell which network NCCL uses" in transport_problem(nccl.printed("Bootstrap : Using eth0:10.0.0.1<0>"))


def test_the_failure_names_the_instance_type():
    with pytest.raises(EfaTransportError, match=r"^on ml\.p5\.48xlarge \(FI_PROVIDER=efa\): NCCL uses network 'Socket'"):
        require_efa(nccl.printed(nccl.SOCKET), EFA_HOST)


def test_the_instance_type_comes_from_resourceconfig_without_the_toolkit(tmp_path):
    (tmp_path / "resourceconfig.json").write_text('{"current_host": "algo-1", "current_instance_type": "ml.p4d.24xlarge"}')
    with pytest.raises(EfaTransportError, match=r"^on ml\.p4d\.24xlarge "):
        require_efa(nccl.printed(nccl.SOCKET), {"FI_PROVIDER": "efa", "SM_INPUT_CONFIG_DIR": str(tmp_path)})


def test_nccl_across_efa_hosts_is_checked():
    assert check_required(True, "nccl", world_size=16, local_world_size=8, environ=EFA_HOST)


def test_require_efa_transport_false_opts_out():
    config = parse_config(["--require_efa_transport", "false"], {})
    assert not check_required(config.require_efa_transport, "nccl", world_size=16, local_world_size=8, environ=EFA_HOST)


@pytest.mark.parametrize(
    ("backend", "world_size", "environ"),
    [
        ("nccl", 8, EFA_HOST),  # one host: NCCL never touches the network
        ("nccl", 16, {"SM_CURRENT_INSTANCE_TYPE": "ml.g5.12xlarge"}),  # no FI_PROVIDER=efa: not an EFA type
        ("smddp", 16, EFA_HOST),  # SMDDP's collectives run over EFA by themselves
        ("gloo", 16, EFA_HOST),
    ],
    ids=["one-host", "not-efa", "smddp", "gloo"],
)
def test_nothing_is_checked_where_nccl_does_not_cross_efa_hosts(backend, world_size, environ):
    assert not check_required(True, backend, world_size=world_size, local_world_size=8, environ=environ)


def test_without_nccl_debug_its_init_lines_go_to_a_file_of_ours_and_stdout_stays_quiet(tmp_path, capfd):
    environ = dict(EFA_HOST)
    lines = prepare(environ, tmp_path, rank=3)
    assert (environ["NCCL_DEBUG"], environ["NCCL_DEBUG_SUBSYS"]) == ("INFO", "INIT")
    assert lines.read_during(lambda: nccl.create_communicator(environ, nccl.SOCKET)).endswith("Using network Socket\n")
    assert lines.file == tmp_path / "nccl-rank-3.log"
    assert capfd.readouterr().out == ""


def test_a_users_nccl_debug_file_is_read_where_nccl_expands_it(tmp_path):
    environ = {**EFA_HOST, "NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p.log")}
    lines = prepare(environ, tmp_path / "unused", rank=0)
    assert transport_problem(lines.read_during(lambda: nccl.create_communicator(environ, nccl.OFI_EFA))) is None
    assert environ["NCCL_DEBUG_FILE"] == str(tmp_path / "nccl.%h.%p.log")  # left as the user set it


# In a child whose stdout is a pipe and C stdio buffers it fully, as under torchrun without
# PYTHONUNBUFFERED (which would make C stdout unbuffered too): NCCL's lines then sit in C's buffer.
CHILD = """
import sys
from pathlib import Path
from tests.training.standins import nccl
from trainstack_training.transport import prepare
environ = {"FI_PROVIDER": "efa", "NCCL_DEBUG": "INFO"}  # e.g. custom_mpi_options "-x NCCL_DEBUG=INFO"
lines = prepare(environ, Path(sys.argv[1]), rank=0)
assert "NCCL_DEBUG_FILE" not in environ
sys.stderr.write(lines.read_during(lambda: nccl.create_communicator(environ, nccl.SOCKET)))
"""


def test_nccl_printing_to_stdout_is_read_and_still_reaches_stdout(tmp_path):
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{ROOT / 'training'}"
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path)], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    assert "Using network Socket" in child.stderr  # what the check read
    assert "Using network Socket" in child.stdout  # and where NCCL_DEBUG's lines were going
