"""The environments of the processes the twin starts: never this process's whole `os.environ` (the
developer's AWS credentials and profile, proxies, tool settings), only what a program needs to run on
this machine, and, where a process signs AWS requests, the emulated account's own test keys.

TWIN_CREDENTIALS are the keys every part of the emulated stack uses; this module imports nothing of
the twin's, so that any of its modules can import them.
"""

from __future__ import annotations

import os

# What any program needs from this machine: where its tools are, a home, the locale, a temporary folder.
MACHINE_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")
TWIN_CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_SESSION_TOKEN": "testing"}


def machine_environment(**variables: str) -> dict[str, str]:
    """This machine's MACHINE_VARIABLES that are set, with `variables` on top."""
    return {**{name: os.environ[name] for name in MACHINE_VARIABLES if name in os.environ}, **variables}
