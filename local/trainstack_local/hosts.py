"""Emulated SageMaker hosts on this machine: each container in namespaces of its own.

A SageMaker training job runs one container per instance (`algo-1` … `algo-N`). What matters for
distributed training, and what this module reproduces with Linux namespaces (root needed):

- a network namespace per host with its own `eth0` address, joined to the job's other hosts by a
  bridge in a namespace of the job's own (all traffic stays on this machine), `/etc/hosts` naming
  every `algo-i`, and the host name `algo-i` (UTS namespace);
- a PID namespace in which the container's entry is PID 1: a stop or spot reclaim signals that
  process only, and the kernel drops SIGTERM for a PID 1 without a handler, exactly as in a
  container; when PID 1 exits, everything else in the container is killed;
- a mount namespace in which the host's own directory is `/opt/ml`.
The image's software is its own (runtimes.py): the container runs the image's torch and Python.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

OPT_ML = Path("/opt/ml")
NETNS_ETC = Path("/etc/netns")
INTERFACE = "eth0"  # what SageMaker's resourceconfig.json names as network_interface_name
NAMESPACE_PREFIX = "tstwin"  # + the owning process id, so namespaces left by a killed run can be found
_subnets = itertools.count(1)
_subnets_lock = threading.Lock()


class NamespacesUnavailableError(RuntimeError):
    """The twin needs root (network, PID, UTS and mount namespaces)."""


def require_namespaces() -> None:
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        raise NamespacesUnavailableError(
            "the SageMaker twin runs each host in Linux namespaces: run it as root with util-linux `unshare` "
            "and iproute2 `ip` installed (the CI machines and sessions here are root)"
        )


def remove_stale_networks() -> None:
    """Delete the namespaces of twin processes that are gone (a test run killed mid-job)."""
    listing = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False).stdout
    for line in listing.splitlines():
        name = line.split()[0] if line.strip() else ""
        owner = name.removeprefix(NAMESPACE_PREFIX).split("n", 1)[0]
        if name.startswith(NAMESPACE_PREFIX) and owner.isdigit() and not Path(f"/proc/{owner}").exists():
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


def host_names(count: int) -> list[str]:
    return [f"algo-{index}" for index in range(1, count + 1)]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@dataclass
class JobNetwork:
    """The hosts' network: one namespace per host plus one for the bridge that joins them."""

    hosts: list[str]
    tag: str = field(default="")
    addresses: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        with _subnets_lock:
            subnet = next(_subnets) % 250 + 1
        self.tag = self.tag or f"{NAMESPACE_PREFIX}{os.getpid()}n{subnet}"
        self.addresses = {host: f"10.213.{subnet}.{index}" for index, host in enumerate(self.hosts, start=1)}

    def namespace(self, host: str) -> str:
        return f"{self.tag}-{host}"

    @property
    def bridge_namespace(self) -> str:
        return f"{self.tag}-switch"

    def create(self) -> JobNetwork:
        switch = self.bridge_namespace
        _ip("netns", "add", switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(f"{address} {host}\n" for host, address in self.addresses.items())
        for index, (host, address) in enumerate(self.addresses.items(), start=1):
            name = self.namespace(host)
            _ip("netns", "add", name)
            _ip("-n", switch, "link", "add", f"port{index}", "type", "veth", "peer", "name", INTERFACE, "netns", name)
            _ip("-n", switch, "link", "set", f"port{index}", "master", "br0")
            _ip("-n", switch, "link", "set", f"port{index}", "up")
            _ip("-n", name, "addr", "add", f"{address}/24", "dev", INTERFACE)
            _ip("-n", name, "link", "set", INTERFACE, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            # `ip netns exec` bind-mounts /etc/netns/<name>/* over /etc/*: each host's own /etc/hosts.
            (NETNS_ETC / name).mkdir(parents=True, exist_ok=True)
            (NETNS_ETC / name / "hosts").write_text(hosts_file)
        return self

    def destroy(self) -> None:
        for name in [*(self.namespace(h) for h in self.hosts), self.bridge_namespace]:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)


@dataclass
class Container:
    """One host's container: `entry` runs as PID 1 with `root` mounted at /opt/ml."""

    host: str
    network: JobNetwork
    root: Path
    entry: Sequence[str]
    environment: Mapping[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> Container:
        OPT_ML.mkdir(parents=True, exist_ok=True)  # the mount point; each container mounts its own tree there
        setup = f'hostname {self.host} && mount --bind "$0" {OPT_ML} && cd {OPT_ML} && exec "$@"'
        command = [
            "ip", "netns", "exec", self.network.namespace(self.host),
            "unshare", "--fork", "--pid", "--mount-proc", "--uts", "--kill-child",
            "/bin/sh", "-c", setup, str(self.root), *self.entry,
        ]  # fmt: skip
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, env=dict(self.environment), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def pid1(self) -> int | None:
        """PID 1 of the container, as this machine numbers it (the child of `unshare --fork`)."""
        if self.process is None:
            return None
        try:
            children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        except OSError:
            return None
        return int(children[0]) if children else None

    def signal_pid1(self, signum: int) -> bool:
        """What SageMaker does to stop a container; False when it has no PID 1 (not started or gone)."""
        pid = self.pid1()
        if pid is None:
            return False
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            return False
        return True

    def kill(self) -> None:
        """SIGKILL PID 1: the kernel then kills every process in the container's PID namespace."""
        self.signal_pid1(signal.SIGKILL)
        if self.process is not None and self.process.poll() is None:
            self.process.wait(timeout=30)

    def poll(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        assert self.process is not None
        return self.process.wait(timeout=timeout)
