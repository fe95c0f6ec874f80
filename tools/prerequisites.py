"""What `make local` and `make test` need of this machine, checked as their first step, before any install.

    python3 tools/prerequisites.py local|test

Prints one line for each thing missing, naming it and the fix, and exits 1 if anything is; prints
nothing otherwise. Standard library only, on the machine's Python: nothing is installed yet. It asks
the modules that use each thing, so the check and the use cannot drift apart: the twin's own check
(trainstack_local.prerequisites: root with its namespace capabilities, util-linux `unshare`, iproute2
`ip`) and the image runtimes' interpreter search (trainstack_local.runtimes.find_python).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT_PYTHON = (3, 11)  # pyproject.toml's requires-python
# The torch and Python of each image runtime the command builds (tools/image_runtimes.py derives the
# images; a test keeps these equal to it): `make local` the default job's image, `make test` every tested one.
RUNTIMES = {
    "local": (("2.10.0", "3.13"),),
    "test": (("2.2.0", "3.10"), ("2.5.1", "3.11"), ("2.7.1", "3.12"), ("2.10.0", "3.13")),
}
# Free disk a first install takes (measured on a fresh clone, rounded up): the project's environments
# (.venv, .venv-checkov, node_modules, and for the tests .venv-sdk); what stays of each image runtime
# (2.3 to 3.2 GB, its CUDA libraries replaced by stand-ins); and, while one builds (one at a time), its
# CUDA libraries whole and its downloads (torch 2.10.0's: 7.2 GB before the stand-ins).
ENVIRONMENTS_GB = 4
RUNTIME_STAYS_GB = 3
RUNTIME_BUILDING_GB = 8
# What the tests need of Debian's packages, which `make system-packages` installs as root with apt (the
# Makefile checks the same commands): (what, why, the commands, its apt packages, the fix without apt).
SYSTEM_PACKAGES = (
    (
        "mpirun and /usr/sbin/sshd",
        "the tests run the toolkit's MPI launcher",
        ("mpirun", "/usr/sbin/sshd"),
        "openmpi-bin openssh-server",
        "install Open MPI and an OpenSSH server with its package manager",
    ),
    ("Chromium", "the docs site's test drives it headless", ("chromium",), "chromium", "install Chromium as `chromium` on PATH"),
)


def problems(command: str) -> list[str]:
    """One line per thing `command` needs that this machine lacks."""
    if sys.version_info < PROJECT_PYTHON:
        wanted = ".".join(map(str, PROJECT_PYTHON))
        return [
            f"{sys.executable} is Python {sys.version.split()[0]}: the project needs {wanted} or newer (PYTHON=python{wanted})"
        ]
    sys.path[:0] = [path for path in (str(ROOT / "lambda"), str(ROOT / "local")) if path not in sys.path]
    from trainstack_local import cuda_stubs, prerequisites, runtimes  # the machine's Python: standard library only

    found = []
    if importlib.util.find_spec("ensurepip") is None:
        found.append(
            f"Python's venv with pip for {sys.executable} (the project's virtual environments): apt-get install python3-venv"
        )
    if missing := cuda_stubs.missing_tools():
        found.append(
            f"{' and '.join(missing)} (the image runtimes' stand-ins for the CUDA libraries): {cuda_stubs.INSTALL_TOOLS}"
        )
    for what, fix in prerequisites.missing():
        found.append(f"{what} (the SageMaker twin runs each emulated host in Linux namespaces): {fix}")
    for what, why, tools, packages, fix in SYSTEM_PACKAGES if command == "test" else ():
        if all(shutil.which(tool) for tool in tools):
            continue
        # Not a prerequisite where `make system-packages` can install them: as root, with apt.
        if os.geteuid() != 0:
            found.append(f"{what} ({why}): apt-get install {packages}")
        elif shutil.which("apt-get") is None:
            found.append(f"{what} ({why}; make test installs {packages} with apt-get, which this machine lacks): {fix}")
    for version in sorted({python for _, python in RUNTIMES[command]}):
        try:
            runtimes.find_python(version)
        except runtimes.RuntimeUnavailableError:
            found.append(
                f"Python {version} (the image runtimes' interpreter): pyenv install {version}, or put python{version} on PATH"
            )
    found += _disk(command, runtimes.cache_dir())
    return found


def disk_needed_gb(unbuilt_runtimes: int, *, environments: bool) -> int:
    """What stays of each runtime still to build, and room for the one building at its largest."""
    runtimes_gb = RUNTIME_STAYS_GB * (unbuilt_runtimes - 1) + RUNTIME_BUILDING_GB if unbuilt_runtimes else 0
    return runtimes_gb + (ENVIRONMENTS_GB if environments else 0)


def _disk(command: str, cache: Path) -> list[str]:
    """Free space for what is not built yet: the project's environments and each runtime's torch."""
    built = {path.parent.name.split("-")[0].removeprefix("torch") for path in cache.glob("torch*/.complete")}
    unbuilt = len({torch for torch, _ in RUNTIMES[command]} - built)
    needed = disk_needed_gb(unbuilt, environments=not (ROOT / ".venv" / ".installed").exists())
    existing = next(parent for parent in (cache, *cache.parents) if parent.exists())
    free = shutil.disk_usage(existing).free / 2**30
    if free >= needed:
        return []
    return [f"{needed} GB of free disk under {existing} (the environments and image runtimes still to build): {free:.0f} GB free"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=sorted(RUNTIMES))
    command = parser.parse_args().command
    found = problems(command)
    for line in found:
        print(f"make {command} needs {line}", file=sys.stderr)
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
