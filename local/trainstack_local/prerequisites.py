"""What the SageMaker twin needs of this machine, checked before anything starts.

The twin runs each host in Linux namespaces (network, PID, UTS and mount: hosts.py), which takes
root holding the capabilities namespaces and their network need, util-linux `unshare` and iproute2
`ip`. A container's root may lack those capabilities (Docker grants neither by default).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

# The bits of the capabilities in /proc/self/status (linux/capability.h).
NAMESPACE_CAPABILITIES = {"CAP_NET_ADMIN": 12, "CAP_SYS_ADMIN": 21}
TOOLS = {"unshare": "util-linux", "ip": "iproute2"}


def missing() -> list[tuple[str, str]]:
    """Each thing this machine lacks for the twin and how to get it; empty where it has them all."""
    found = []
    if os.geteuid() != 0:
        found.append(("root", "run it as root, e.g. with sudo"))
    else:
        lacking = [name for name, bit in NAMESPACE_CAPABILITIES.items() if not _effective_capabilities() >> bit & 1]
        if lacking:
            added = " ".join(f"--cap-add {name.removeprefix('CAP_')}" for name in lacking)
            found.append((f"root's {' and '.join(lacking)}", f"start its container with --privileged, or {added}"))
    found += [(f"`{tool}`", f"apt-get install {package}") for tool, package in TOOLS.items() if shutil.which(tool) is None]
    return found


def namespace_problem(who: str = "the SageMaker twin") -> str | None:
    """One line saying what `who` needs and what of it is missing here, with how to get it; None
    where nothing is."""
    lacking = missing()
    if not lacking:
        return None
    return (
        f"{who} needs root, util-linux `unshare` and iproute2 `ip` (each emulated host runs in Linux namespaces); "
        f"missing here: {', '.join(f'{what} ({fix})' for what, fix in lacking)}"
    )


def _effective_capabilities() -> int:
    """The process's effective capability set; none where /proc does not say (not Linux)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return 0
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0
