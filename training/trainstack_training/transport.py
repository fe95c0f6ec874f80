"""Whether NCCL carries traffic between hosts over EFA, read from NCCL's own init lines.

On an EFA instance NCCL reaches the network through the aws-ofi-nccl plugin (libfabric with the efa
provider). When the plugin is missing, or libfabric finds no EFA device, NCCL quietly falls back to
TCP sockets: the job runs at a fraction of the bandwidth it pays for. NCCL names the network it chose
when it creates a communicator (NVIDIA/nccl src/init.cc; aws-ofi-nccl src/nccl_ofi_net.cpp):

    NCCL INFO Using network Libfabric             aws-ofi-nccl ("AWS Libfabric" in older plugins)
    NCCL INFO NET/OFI Selected provider is efa, fabric is efa (found 4 nics)
    NCCL INFO Using network Socket                the fallback

These are INFO lines, which NCCL prints only with NCCL_DEBUG=INFO (or TRACE), on stdout or into
NCCL_DEBUG_FILE, and which it configures once, before its first communicator. So the check arranges
before the process group exists to be able to read them:
- NCCL_DEBUG unset (NCCL would print nothing): INFO for the INIT subsystem, into NCCL_DEBUG_FILE when
  set, else into `<output_dir>/nccl-rank-N.log`;
- NCCL_DEBUG_FILE set: that file, its %h and %p expanded as NCCL expands them;
- NCCL_DEBUG set without a file (printing to stdout): stdout is captured while NCCL creates its
  first communicator, then written back where it was going.

The job is on an EFA type when FI_PROVIDER=efa: trainstack sets it for every EFA type (the core's
instances.efa_environment), and this package runs in the container without the core.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import sys
import tempfile
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path

OFI_NETWORKS = ("Libfabric", "AWS Libfabric")  # aws-ofi-nccl's network name since 1.13, and before
USING_NETWORK = re.compile(r"NCCL INFO Using network (.+?)\s*$", re.MULTILINE)
SELECTED_PROVIDER = re.compile(r"NET/OFI Selected [Pp]rovider is ([\w-]+)")
OPT_OUT = "set the hyperparameter require_efa_transport false to run without EFA"


class EfaTransportError(RuntimeError):
    """NCCL does not (or cannot be shown to) use EFA between the hosts of an EFA job."""


def check_required(
    require_efa_transport: bool, backend: str, world_size: int, local_world_size: int, environ: Mapping[str, str]
) -> bool:
    """Only NCCL across hosts on an EFA type: within one host NCCL uses NVLink or PCIe, never the
    network, and SMDDP runs its collectives over EFA by itself."""
    return require_efa_transport and backend == "nccl" and world_size > local_world_size and environ.get("FI_PROVIDER") == "efa"


@dataclass(frozen=True)
class NcclInitLines:
    """Where NCCL will print its init lines: a file, or (None) stdout."""

    file: Path | None

    def read_during(self, create_communicator: Callable[[], None]) -> str:
        """The init lines NCCL prints while create_communicator runs its first collective."""
        if self.file is None:
            return _captured_stdout(create_communicator)
        create_communicator()
        try:
            return self.file.read_text(errors="replace")
        except OSError:
            return ""


def prepare(environ: MutableMapping[str, str], directory: Path, rank: int) -> NcclInitLines:
    """Arrange, before NCCL reads its environment, for its init lines to be readable by this process."""
    if not environ.get("NCCL_DEBUG"):
        # NCCL would print nothing: INFO for its INIT lines only, into the user's file or one of ours.
        environ["NCCL_DEBUG"] = "INFO"
        environ.setdefault("NCCL_DEBUG_SUBSYS", "INIT")
        if not environ.get("NCCL_DEBUG_FILE"):
            directory.mkdir(parents=True, exist_ok=True)
            path = directory / f"nccl-rank-{rank}.log"
            path.unlink(missing_ok=True)  # an earlier run's lines must not answer for this one
            environ["NCCL_DEBUG_FILE"] = str(path)
    if environ.get("NCCL_DEBUG_FILE"):
        return NcclInitLines(Path(_expand_debug_file(environ["NCCL_DEBUG_FILE"])))
    return NcclInitLines(None)


def transport_problem(init_lines: str) -> str | None:
    """None when NCCL uses aws-ofi-nccl with the efa provider, else what is wrong and the fix."""
    networks = USING_NETWORK.findall(init_lines)
    if not networks:
        return (
            "could not tell which network NCCL uses: its init output has no 'Using network' line (NCCL prints it at "
            "NCCL_DEBUG=INFO for the INIT subsystem; check NCCL_DEBUG and NCCL_DEBUG_SUBSYS); " + OPT_OUT
        )
    network = networks[-1]
    if network not in OFI_NETWORKS:
        return (
            f"NCCL uses network '{network}', not EFA: the aws-ofi-nccl plugin was not loaded or libfabric found no EFA "
            "device, so traffic between hosts goes over TCP. Use an image with aws-ofi-nccl and libfabric (the SageMaker "
            "PyTorch training images have both; in your own image install them with the EFA installer and put them on "
            "LD_LIBRARY_PATH); or " + OPT_OUT
        )
    providers = SELECTED_PROVIDER.findall(init_lines)
    if providers and providers[-1] != "efa":
        return f"NCCL uses libfabric with provider '{providers[-1]}', not efa: set FI_PROVIDER=efa, or " + OPT_OUT
    return None


def require_efa(init_lines: str, environ: Mapping[str, str]) -> None:
    problem = transport_problem(init_lines)
    if problem:
        raise EfaTransportError(f"on {_instance_type(environ)} (FI_PROVIDER=efa): {problem}")


def _instance_type(environ: Mapping[str, str]) -> str:
    """SM_CURRENT_INSTANCE_TYPE from the toolkit, else resourceconfig.json's current_instance_type."""
    if environ.get("SM_CURRENT_INSTANCE_TYPE"):
        return environ["SM_CURRENT_INSTANCE_TYPE"]
    path = Path(environ.get("SM_INPUT_CONFIG_DIR", "/opt/ml/input/config")) / "resourceconfig.json"
    try:
        return json.loads(path.read_text()).get("current_instance_type") or "this instance type"
    except (OSError, ValueError):
        return "this instance type"


def _expand_debug_file(pattern: str) -> str:
    """NCCL_DEBUG_FILE as NCCL opens it (src/debug.cc): %h the host name up to its first dot, with
    '%' and '/' replaced by '-'; %p the pid; %% a percent sign; any other %x kept as it is."""
    host = socket.gethostname().split(".")[0].replace("%", "-").replace("/", "-")
    return re.sub(r"%(.?)", lambda m: {"h": host, "p": str(os.getpid()), "%": "%"}.get(m[1], m[0]), pattern)


def _captured_stdout(run: Callable[[], None]) -> str:
    """Run with file descriptor 1 redirected, then write what was printed to the real stdout.

    NCCL prints with C stdio, which Python's sys.stdout never sees, and C stdio holds stdout in a
    buffer when it is a pipe (as under torchrun and the toolkit): hence the fd-level redirect and
    the flush of every C stream before it is undone.
    """
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    libc.fflush(None)
    saved = os.dup(1)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 1)
        try:
            run()
        finally:
            sys.stdout.flush()
            libc.fflush(None)
            os.dup2(saved, 1)
            os.close(saved)
        captured.seek(0)
        printed = memoryview(captured.read())
    text = printed.tobytes().decode(errors="replace")
    while printed:  # the lines whoever set NCCL_DEBUG asked for, where they expected them
        printed = printed[os.write(1, printed) :]
    return text
