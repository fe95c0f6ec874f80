"""`make local` and `make test` check the machine first: on one without what they need (a PATH
without util-linux `unshare`, a user other than root, no interpreter for an image's Python) each
stops within seconds, before any install, with one line per missing thing naming it and the fix."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tools import image_runtimes, prerequisites

ROOT = Path(__file__).resolve().parents[2]
WHY = "(the SageMaker twin runs each emulated host in Linux namespaces)"
SETPRIV = shutil.which("setpriv")
# What the check reads, and what make reads while it parses the Makefile; nothing else of the repository.
CHECKED = (
    "Makefile",
    "pyproject.toml",
    "tools/prerequisites.py",
    "local/trainstack_local/__init__.py",
    "local/trainstack_local/prerequisites.py",
    "local/trainstack_local/runtimes.py",
    "local/trainstack_local/installer.py",
    "local/trainstack_local/cuda_stubs.py",
    "lambda/trainstack/__init__.py",
    "lambda/trainstack/facts.py",
    "lambda/trainstack/facts.json",
)
# The machine's interpreter, not this venv's: on a fresh machine the check runs before any venv exists.
MACHINE_PYTHON = str(Path(sys.base_prefix) / "bin" / "python3")

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the tests take away what root has, which they must hold first")
# Another user than root, who keeps the one capability that reads through folders (the interpreter may sit under /root).
NOBODY = (
    str(SETPRIV),
    "--reuid=65534",
    "--regid=65534",
    "--clear-groups",
    "--inh-caps=+dac_read_search",
    "--ambient-caps=+dac_read_search",
)


def test_the_runtimes_checked_are_the_ones_the_commands_build():
    default = image_runtimes.default_job_image().runtime
    assert set(prerequisites.RUNTIMES["local"]) == {(default.torch, default.python)}
    tested = {(image.runtime.torch, image.runtime.python) for image in image_runtimes.tested_images()}
    assert set(prerequisites.RUNTIMES["test"]) == tested


def copy(tmp_path: Path) -> Path:
    """The files the check and the Makefile's parse read, in a folder of their own: a command that
    went past the check would install there, and the test would see it."""
    repository = tmp_path / "repository"
    for name in CHECKED:
        (repository / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, repository / name)
    return repository


def tools_but(tmp_path: Path, *left_out: str) -> str:
    """A PATH of one folder holding links to what make and the check call, less `left_out`."""
    folder = tmp_path / "bin"
    folder.mkdir()
    for tool in ("make", "grep", "tr", "git", "ip", "unshare", "mpirun", "cc", "readelf"):
        if tool not in left_out and (found := shutil.which(tool)):
            (folder / tool).symlink_to(found)
    return str(folder)


def make(command: str, repository: Path, *prefix: str, path: str | None = None) -> tuple[subprocess.CompletedProcess, float]:
    # as a user types it: not a sub-make of the make running the tests (MAKELEVEL would make it `make[1]`)
    inherited = {key: value for key, value in os.environ.items() if key not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    environment = {**inherited, "PATH": path or os.environ["PATH"]}
    started = time.monotonic()
    result = subprocess.run(
        [*prefix, shutil.which("make"), "--no-print-directory", "-C", str(repository), command, f"PYTHON={MACHINE_PYTHON}"],
        env=environment, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return result, time.monotonic() - started


def stopped_first(result: subprocess.CompletedProcess, took: float, repository: Path, command: str) -> list[str]:
    """The check's lines, once it is shown that make stopped on them in seconds, having installed nothing."""
    assert result.returncode != 0, result.stdout[-2000:]
    assert took < 30, f"took {took:.0f} s"
    assert not (repository / ".venv").exists() and not (repository / "node_modules").exists()
    assert result.stdout == ""  # not one install command was started
    lines = result.stderr.strip().splitlines()
    assert lines[-1].startswith("make: *** ") and "Error 1" in lines[-1]  # make's own word that the recipe failed
    assert lines[:-1] and all(line.startswith(f"make {command} needs ") for line in lines[:-1]), lines
    return lines[:-1]


@needs_root
@pytest.mark.parametrize("command", ["local", "test"])
def test_without_unshare_on_the_path_both_commands_stop_before_installing(command, tmp_path):
    repository = copy(tmp_path)

    lines = stopped_first(*make(command, repository, path=tools_but(tmp_path, "unshare")), repository, command)

    assert [line for line in lines if "unshare" in line] == [f"make {command} needs `unshare` {WHY}: apt-get install util-linux"]


@needs_root
@pytest.mark.skipif(SETPRIV is None, reason="util-linux setpriv runs make as another user")
@pytest.mark.parametrize("command", ["local", "test"])
def test_as_another_user_than_root_both_commands_stop_before_installing(command, tmp_path):
    repository = copy(tmp_path)

    lines = stopped_first(*make(command, repository, *NOBODY), repository, command)

    assert f"make {command} needs root {WHY}: run it as root, e.g. with sudo" in lines


@pytest.mark.parametrize("command", ["local", "test"])
def test_without_a_c_compiler_both_commands_name_gcc_first(monkeypatch, tmp_path, command):
    monkeypatch.setenv("PATH", tools_but(tmp_path, "cc"))

    assert [line for line in prerequisites.problems(command) if "stand-ins" in line] == [
        "cc (the image runtimes' stand-ins for the CUDA libraries): apt-get install gcc binutils"
    ]


def test_without_an_images_python_the_check_names_pyenv_install(monkeypatch, tmp_path):
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    monkeypatch.setenv("PATH", tools_but(tmp_path))

    found = prerequisites.problems("test")

    wanted = sorted({python for _, python in prerequisites.RUNTIMES["test"]})
    named = [line for line in found if "the image runtimes' interpreter" in line]
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"  # this interpreter stands in for its own version
    assert named == [
        f"Python {version} (the image runtimes' interpreter): pyenv install {version}, or put python{version} on PATH"
        for version in wanted
        if version != running
    ]


def test_a_machine_with_everything_is_told_nothing():
    if os.geteuid() != 0:
        pytest.skip("the twin needs root")
    assert prerequisites.problems("local") == []


@needs_root
@pytest.mark.parametrize(
    ("left_out", "named"),
    [(("mpirun",), "mpirun"), ((), "Chromium")],  # tools_but never gives chromium
    ids=["open-mpi", "chromium"],
)
def test_as_root_with_apt_what_make_system_packages_installs_is_not_a_prerequisite_of_make_test(
    monkeypatch, tmp_path, left_out, named
):
    folder = tools_but(tmp_path, *left_out)
    if (apt := shutil.which("apt-get")) is None:
        pytest.skip(f"make system-packages installs {named} with apt-get, which this machine lacks")
    (Path(folder) / "apt-get").symlink_to(apt)
    monkeypatch.setenv("PATH", folder)

    assert not [line for line in prerequisites.problems("test") if named in line]


@needs_root
@pytest.mark.skipif(SETPRIV is None, reason="util-linux setpriv runs make as another user")
def test_as_another_user_than_root_make_test_names_chromiums_apt_package(tmp_path):
    repository = copy(tmp_path)

    lines = stopped_first(*make("test", repository, *NOBODY, path=tools_but(tmp_path)), repository, "test")

    assert "make test needs Chromium (the docs site's test drives it headless): apt-get install chromium" in lines


@needs_root
def test_as_root_without_apt_a_missing_mpirun_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", tools_but(tmp_path, "mpirun"))

    assert [line for line in prerequisites.problems("test") if "mpirun" in line] == [
        "mpirun and /usr/sbin/sshd (the tests run the toolkit's MPI launcher; make test installs openmpi-bin "
        "openssh-server with apt-get, which this machine lacks): install Open MPI and an OpenSSH server with its package manager"
    ]


@needs_root
def test_on_a_disk_short_of_four_runtimes_make_test_names_what_they_and_one_build_take(monkeypatch, tmp_path):
    # A 2 GB file system holds the runtime cache, as a user's small disk would; make test builds four.
    repository = copy(tmp_path)
    cache = tmp_path / "small-disk"
    cache.mkdir()
    monkeypatch.setenv("TRAINSTACK_RUNTIME_CACHE", str(cache / "runtimes"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2g", "tmpfs", str(cache)], check=True)
    try:
        lines = stopped_first(*make("test", repository), repository, "test")
    finally:
        subprocess.run(["umount", str(cache)], check=True)

    # four runtimes: 3 GB that stays of each, 5 GB more while one builds; and the environments, 4 GB
    needed = "21 GB of free disk under {} (the environments and image runtimes still to build): 2 GB free"
    assert f"make test needs {needed.format(cache)}" in lines
