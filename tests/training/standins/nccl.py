"""NCCL's debug output when it creates its first communicator, as the real library produces it
(NVIDIA/nccl src/debug.cc); there is no NCCL on this machine.

It reads the environment the way NCCL does at that moment: nothing below NCCL_DEBUG=INFO; INFO
lines only when NCCL_DEBUG_SUBSYS selects INIT (unset: it does); into NCCL_DEBUG_FILE with %h, %p and
%% expanded; otherwise onto C stdout through C stdio's buffer, unflushed, as NCCL's vfprintf leaves
it when stdout is a pipe.
"""

from __future__ import annotations

import ctypes
import os
import socket
from collections.abc import Mapping

PREFIX = "{host}:{pid}:{pid} [0] NCCL INFO "

# Lines in NCCL's format: aws-ofi-nccl on a p5 (NVIDIA/nccl#1597) and the built-in socket fallback
# (src/transport/net_socket.cc).
OFI_EFA = """NET/OFI Initializing aws-ofi-nccl 1.14.0
NET/OFI Using Libfabric version 1.22
NET/OFI Selected provider is efa, fabric is efa (found 16 nics)
NET/OFI Creating one domain per process
Using network Libfabric
"""
OFI_TCP = OFI_EFA.replace("provider is efa, fabric is efa", "provider is tcp, fabric is 172.31.0.0/16")
SOCKET = """NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.
NET/IB : No device found.
NET/Socket : Using [0]eth0:10.0.12.34<0>
Using network Socket
"""


def create_communicator(environ: Mapping[str, str], lines: str) -> None:
    if environ.get("NCCL_DEBUG", "").upper() not in ("INFO", "TRACE"):
        return
    subsystems = environ.get("NCCL_DEBUG_SUBSYS", "INIT").upper().split(",")
    negated = subsystems[0].startswith("^")
    selected = {name.lstrip("^") for name in subsystems}
    if negated == bool(selected & {"INIT", "ALL"}):
        return
    if environ.get("NCCL_DEBUG_FILE"):
        with open(_expand(environ["NCCL_DEBUG_FILE"], _host()), "w") as log:
            log.write(printed(lines))
    else:
        ctypes.CDLL(None).printf(b"%s", printed(lines).encode())


def printed(lines: str) -> str:
    """Lines as NCCL prints INFO: `host:pid:tid [cudaDev] NCCL INFO message`."""
    return "".join(PREFIX.format(host=_host(), pid=os.getpid()) + line + "\n" for line in lines.splitlines())


def _host() -> str:
    return socket.gethostname().split(".")[0]


def _expand(pattern: str, host: str) -> str:
    expanded, index = "", 0
    while index < len(pattern):
        char, index = pattern[index], index + 1
        if char != "%" or index == len(pattern):
            expanded += char
            continue
        code, index = pattern[index], index + 1
        expanded += {"h": host, "p": str(os.getpid()), "%": "%"}.get(code, "%" + code)
    return expanded
