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

The hosts reach nothing outside their job but one address of this machine, SERVICE_ADDRESS, where
the twin's own services listen (its MLflow tracking server): on SageMaker a job in the stack's
isolated subnets has no route anywhere either, and reaches a managed service only through the VPC
endpoint that routes to it.
"""

from __future__ import annotations

import fcntl
import itertools
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

OPT_ML = Path("/opt/ml")
NETNS_ETC = Path("/etc/netns")
INTERFACE = "eth0"  # what SageMaker's resourceconfig.json names as network_interface_name
NAMESPACE_PREFIX = "tstwin"  # + the owning process id, so namespaces left by a killed run can be found
SUBNETS = 250  # jobs' subnets are 10.213.<1..250>.0/24: host i is .i, this machine's end of the job's link is .254
SERVICE_ADDRESS = "10.213.0.254"  # outside every job's subnet; on this machine's `lo` while a twin service uses it
# Who holds what, across every twin process on this machine (pytest workers, a `local serve` beside
# tests): a job's subnet is routed from this machine's own namespace, so two live jobs must never
# share one. flock locks go when their process does, so a killed twin holds nothing.
LOCKS = Path("/run/trainstack-twin")
_subnets = itertools.count(1)  # where this process starts looking for a free subnet
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


def _lock_file(name: str) -> int:
    LOCKS.mkdir(parents=True, exist_ok=True)
    return os.open(LOCKS / name, os.O_CREAT | os.O_RDWR, 0o600)


@contextmanager
def service_address(address: str = SERVICE_ADDRESS) -> Iterator[str]:
    """`address`/32 on this machine's `lo` for as long as any twin on this machine uses it: each user
    holds a shared lock, and the last one out (the one that can take it exclusively) removes the
    address. Adding replaces, so an address left by a killed twin is simply taken over."""
    lock = _lock_file(f"service-{address}.lock")
    try:
        fcntl.flock(lock, fcntl.LOCK_SH)  # waits while a last user removes it
        _ip("addr", "replace", f"{address}/32", "dev", "lo")
        yield address
    finally:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # another twin still serves on it
        else:
            subprocess.run(["ip", "addr", "del", f"{address}/32", "dev", "lo"], capture_output=True, check=False)
        os.close(lock)


def _claim_subnet() -> tuple[int, int]:
    """A subnet no live job on this machine uses, and the open lock file that holds it."""
    with _subnets_lock:
        start = next(_subnets)
    for offset in range(SUBNETS):
        subnet = (start + offset) % SUBNETS + 1
        lock = _lock_file(f"subnet-{subnet}.lock")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(lock)
            continue
        return subnet, lock
    raise RuntimeError(f"all {SUBNETS} twin job subnets are in use on this machine")


@dataclass
class JobNetwork:
    """The hosts' network: one namespace per host plus one for the bridge that joins them, and a link
    from this machine into that bridge that carries only the hosts' route to SERVICE_ADDRESS. It holds
    its subnet from construction until destroy()."""

    hosts: list[str]
    tag: str = field(default="")
    addresses: dict[str, str] = field(default_factory=dict)
    subnet: int = field(init=False)
    _subnet_lock: int | None = field(init=False, default=None, repr=False)

    def __post_init__(self) -> None:
        self.subnet, self._subnet_lock = _claim_subnet()
        self.tag = self.tag or f"{NAMESPACE_PREFIX}{os.getpid()}n{self.subnet}"
        self.addresses = {host: f"10.213.{self.subnet}.{index}" for index, host in enumerate(self.hosts, start=1)}

    @property
    def gateway(self) -> str:
        """This machine's address on the job's bridge: the hosts' next hop to SERVICE_ADDRESS."""
        return f"10.213.{self.subnet}.254"

    @property
    def uplink(self) -> str:
        """This machine's end of the link into the bridge (named by subnet: the subnet lock makes it ours)."""
        return f"{NAMESPACE_PREFIX}up{self.subnet}"

    def namespace(self, host: str) -> str:
        return f"{self.tag}-{host}"

    @property
    def bridge_namespace(self) -> str:
        return f"{self.tag}-switch"

    def create(self) -> JobNetwork:
        try:
            self._create()
        except BaseException:
            self.destroy()
            raise
        return self

    def _create(self) -> None:
        switch = self.bridge_namespace
        _ip("netns", "add", switch)
        _ip("-n", switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", switch, "link", "set", "br0", "up")
        self._link_this_machine()
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
            _ip("-n", name, "route", "add", f"{SERVICE_ADDRESS}/32", "via", self.gateway)  # and no default route

    def _link_this_machine(self) -> None:
        """A veth from this machine into the bridge, through which the hosts reach SERVICE_ADDRESS. The
        hosts' route tables are what confine them: their one route off the subnet is SERVICE_ADDRESS's
        (a container that adds routes of its own meets this machine's forwarding, off here). What listens
        on all of this machine's addresses answers on this link's address and SERVICE_ADDRESS too:
        nothing here filters ports (no nftables or iptables; tc lacks its classifiers), so twin services
        bind SERVICE_ADDRESS alone."""
        subprocess.run(["ip", "link", "del", self.uplink], capture_output=True, check=False)  # a killed twin's
        _ip("link", "add", self.uplink, "type", "veth", "peer", "name", "uplink", "netns", self.bridge_namespace)
        _ip("-n", self.bridge_namespace, "link", "set", "uplink", "master", "br0")
        _ip("-n", self.bridge_namespace, "link", "set", "uplink", "up")
        _ip("addr", "add", f"{self.gateway}/24", "dev", self.uplink)
        _ip("link", "set", self.uplink, "up")

    def destroy(self) -> None:
        # The veth goes with the bridge's namespace, but the kernel frees a deleted namespace later:
        # deleted here first, the subnet is free to claim again at once.
        subprocess.run(["ip", "link", "del", self.uplink], capture_output=True, check=False)
        for name in [*(self.namespace(h) for h in self.hosts), self.bridge_namespace]:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
            shutil.rmtree(NETNS_ETC / name, ignore_errors=True)
        if self._subnet_lock is not None:
            os.close(self._subnet_lock)  # releases the subnet
            self._subnet_lock = None


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
