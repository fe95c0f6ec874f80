"""`trainstack local run` and `local serve` check this machine before anything starts: the twin runs
each host in Linux namespaces, which takes root with its namespace capabilities, util-linux
`unshare` and iproute2 `ip`. What is missing is named, with how to get it, in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trainstack_cli.stack import EXIT_NO_STACK

TRAINSTACK = Path(sys.executable).parent / "trainstack"
SETPRIV = shutil.which("setpriv")

# --template names no file: a command that went past the check would refuse it ("make synth"), and a
# check placed after the stack starts would never be reached in these runs.
NO_TEMPLATE = "/nonexistent/template.json"

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the test drops root's privileges, which it must hold first")
needs_setpriv = pytest.mark.skipif(SETPRIV is None, reason="util-linux setpriv runs the CLI with fewer privileges")


def local(command: str, *prefix: str, path: str | None = None) -> subprocess.CompletedProcess:
    environment = {**os.environ, "PATH": os.environ["PATH"] if path is None else path, "NO_COLOR": "1"}
    return subprocess.run(
        [*prefix, str(TRAINSTACK), "local", command, "--template", NO_TEMPLATE],
        env=environment, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def only(tmp_path: Path, *tools: str) -> str:
    """A PATH of one folder that holds these tools (links to this machine's) and nothing else."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in tools:
        found = shutil.which(tool)
        assert found, f"{tool} is needed on this machine to build the PATH that lacks the others"
        (folder / tool).symlink_to(found)
    return str(folder)


def the_one_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == EXIT_NO_STACK, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    return line


@needs_root
@pytest.mark.parametrize("command", ["run", "serve"])
def test_without_ip_on_the_path_it_says_to_install_iproute2(command, tmp_path):
    line = the_one_line(local(command, path=only(tmp_path, "unshare")))

    assert line.startswith(f"trainstack local: {command} needs") and "`ip`" in line and "apt-get install iproute2" in line
    assert "unshare" not in line.partition("missing")[2]


@needs_root
@pytest.mark.parametrize("command", ["run", "serve"])
def test_without_unshare_on_the_path_it_says_to_install_util_linux(command, tmp_path):
    line = the_one_line(local(command, path=only(tmp_path, "ip")))

    assert "`unshare`" in line and "apt-get install util-linux" in line and "iproute2" not in line.partition("missing")[2]


@needs_root
@needs_setpriv
def test_as_another_user_than_root_it_says_to_run_it_as_root():
    # The venv's interpreter may sit under /root, which only root may enter: the user keeps the one
    # capability that reads through folders, and nothing a namespace needs.
    read_through = ("--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search")
    line = the_one_line(local("run", SETPRIV, "--reuid=65534", "--regid=65534", "--clear-groups", *read_through))

    assert "root" in line and "run it as root" in line and "apt-get" not in line


@needs_root
@needs_setpriv
def test_root_without_the_namespace_capabilities_is_told_which_it_lacks():
    # As root in a container started without them.
    without = (SETPRIV, "--bounding-set=-sys_admin,-net_admin", "--inh-caps=-all")
    line = the_one_line(local("serve", *without))

    assert "CAP_SYS_ADMIN" in line and "CAP_NET_ADMIN" in line and "--privileged" in line


@needs_root
def test_everything_missing_is_named_in_the_same_one_line(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()

    line = the_one_line(local("run", path=str(empty)))

    assert "`unshare`" in line and "`ip`" in line
