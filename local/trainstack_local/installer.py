"""uv, pinned in pyproject.toml, installing from the package index this machine's pip is configured with.

    .venv/bin/python local/trainstack_local/installer.py --python ENV [uv pip install arguments]

The Makefile fills its environments (.venv, .venv-checkov, .venv-sdk) with `uv pip install` through
this, and the twin each image runtime's base (trainstack_local.runtimes). uv reads no pip
configuration, so pip's own, as `pip config list` reports it (its files: /etc/pip.conf, /etc/xdg/pip, ~/.config/pip,
the environment's; and the PIP_* variables), becomes uv's options: index-url, extra-index-url,
find-links, constraint, no-index and cert. pip takes the best version any of its indexes offers; uv
by default takes the first index that has the package at all, so uv is told pip's rule
(--index-strategy unsafe-best-match). Standard library only, but for uv: the Makefile runs it in a
venv that holds nothing else yet.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys

# pip's option -> uv's, for the options that say where packages come from and which versions may be
# taken (a machine's constraint file caps what its disk holds: pip obeys it, so uv must).
SOURCE_OPTIONS = {
    "index-url": "--default-index",
    "extra-index-url": "--index",
    "find-links": "--find-links",
    "constraint": "--constraint",
}
# Where pip reads an option of `pip install`, highest precedence first.
SECTIONS = (":env:", "install", "global")


class InstallerError(RuntimeError):
    """pip's configuration could not be read (no pip beside the interpreter)."""


def pip_configuration(python: str = sys.executable) -> dict[str, str]:
    """`pip config list` of `python`'s pip as {"section.option": value}."""
    listed = subprocess.run([python, "-m", "pip", "config", "list"], capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        raise InstallerError(f"{python} -m pip config list failed: {listed.stderr.strip()[-300:]}")
    configured = {}
    for line in listed.stdout.splitlines():
        key, _, value = line.partition("=")
        configured[key] = ast.literal_eval(value)  # pip prints each value as a Python literal
    return configured


def _option(configured: dict[str, str], name: str) -> str | None:
    return next((configured[key] for section in SECTIONS if (key := f"{section}.{name}") in configured), None)


def uv_options(configured: dict[str, str]) -> list[str]:
    """uv's `pip install` options that take packages from where pip would."""
    options = ["--index-strategy", "unsafe-best-match"]
    if (_option(configured, "no-index") or "").lower() in ("1", "true", "yes", "on"):
        options.append("--no-index")
    for name, flag in SOURCE_OPTIONS.items():
        for value in (_option(configured, name) or "").split():  # pip splits a list option on whitespace
            options += [flag, value]
    return options


def uv_environment(configured: dict[str, str]) -> dict[str, str]:
    """The process environment for uv: pip's CA bundle, where pip has one of its own."""
    cert = _option(configured, "cert")
    return {**os.environ, "SSL_CERT_FILE": cert} if cert else dict(os.environ)


def uv_binary() -> str:
    """The uv of this interpreter's environment (pyproject.toml's dev extra pins it)."""
    from uv import find_uv_bin  # imported on the call: a reader of pip's configuration alone needs no uv

    return find_uv_bin()


def install_command(arguments: list[str], python: str = sys.executable) -> tuple[list[str], dict[str, str]]:
    """`uv pip install ARGUMENTS` from pip's index, and the environment to run it in."""
    configured = pip_configuration(python)
    return [uv_binary(), "pip", "install", *uv_options(configured), *arguments], uv_environment(configured)


def main() -> None:
    command, environment = install_command(sys.argv[1:])
    os.execve(command[0], command, environment)


if __name__ == "__main__":
    main()
