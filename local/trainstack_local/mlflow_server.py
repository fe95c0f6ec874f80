"""The twin's MLflow tracking server: what a SageMaker managed MLflow tracking server is to a job.

A real `mlflow server` (the mlflow package) with a SQLite backend and a local artifact directory,
both under the twin's work directory, listening on SERVICE_ADDRESS (hosts.py), the one address of
this machine that the twin's jobs have a route to. Jobs reach it exactly as a SageMaker job reaches
managed MLflow: their tracking URI is the tracking server's ARN, which the `sagemaker-mlflow` plugin
resolves to an endpoint (here SAGEMAKER_MLFLOW_CUSTOM_ENDPOINT, which the twin sets in the container,
instead of the region's) and signs with the job's credentials (the signature is not verified here).

Why these options: `--workers 1` and MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false start it fastest and
in the least memory (2 processes, about 0.5 GB, against 15 processes and 2 GB by default), and
`--no-serve-artifacts` because a client with an ARN tracking URI refuses the `mlflow-artifacts:/`
URIs a proxying server hands out: the client writes artifacts itself, as it writes them to S3 on
SageMaker (the directory is on this machine's filesystem, which the containers share).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainstack_local.hosts import service_address
from trainstack_local.process_environment import machine_environment

SERVER_NAME = "trainstack-twin"
START_TIMEOUT_SECONDS = 120.0  # it takes 5 to 10 s here, more on a machine busy with other tests
STOP_GRACE_SECONDS = 10.0
# A busy 2-core machine can keep a live server from answering for seconds; a server that is down refuses
# at once, so a long limit costs nothing there (and a lookup that times out leaves MlflowDetails unset).
REQUEST_TIMEOUT_SECONDS = 30.0
# Straight to the server, never through a proxy from this machine's environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class TrackingServerError(RuntimeError):
    """The tracking server did not come up."""


def tracking_server_arn(region: str, account: str) -> str:
    """The twin's tracking server as a SageMaker ARN (what a spec's or the stack's `tracking` names)."""
    return f"arn:aws:sagemaker:{region}:{account}:mlflow-tracking-server/{SERVER_NAME}"


@dataclass(frozen=True)
class MlflowRun:
    experiment_id: str
    run_id: str


@dataclass(frozen=True)
class TrackingServer:
    """A running server: its ARN, the URL that the ARN resolves to in the twin, and its files."""

    arn: str
    url: str
    directory: Path  # mlflow.db, mlflow-artifacts/, server.log

    def healthy(self) -> bool:
        try:
            with _OPENER.open(f"{self.url}/health", timeout=REQUEST_TIMEOUT_SECONDS) as response:
                return response.status == 200
        except OSError:
            return False

    def find_run(self, run_name: str, experiment_name: str | None = None) -> MlflowRun | None:
        """The latest run of that name (in that experiment, if named), or None when there is none or the
        server does not answer."""
        try:
            if experiment_name:
                query = urllib.parse.urlencode({"experiment_name": experiment_name})
                experiments = [self._call(f"experiments/get-by-name?{query}")["experiment"]]
            else:
                experiments = self._call("experiments/search", {"max_results": 1000}).get("experiments", [])
            runs = self._call(
                "runs/search",
                {
                    "experiment_ids": [experiment["experiment_id"] for experiment in experiments],
                    "filter": f"attributes.run_name = {_quoted(run_name)}",
                    "order_by": ["attributes.start_time DESC"],
                    "max_results": 1,
                },
            ).get("runs", [])
        except (OSError, ValueError, KeyError):  # not answering, no such experiment (404), a name no filter can quote
            return None
        if not runs:
            return None
        info = runs[0]["info"]
        return MlflowRun(experiment_id=info["experiment_id"], run_id=info["run_id"])

    def _call(self, endpoint: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One REST API call: a POST with a JSON body, or a GET without."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(
            f"{self.url}/api/2.0/mlflow/{endpoint}", data=data, headers={"Content-Type": "application/json"}
        )
        with _OPENER.open(request, timeout=REQUEST_TIMEOUT_SECONDS) as response:
            return json.loads(response.read())


@contextmanager
def tracking_server(directory: Path, *, region: str, account: str) -> Iterator[TrackingServer]:
    """Run the server on SERVICE_ADDRESS until the block ends; raises TrackingServerError, with the end of
    the server's log, when it does not answer /health within START_TIMEOUT_SECONDS."""
    directory = directory.resolve()
    directory.mkdir(parents=True, exist_ok=True)
    with service_address() as address:
        port = _free_port(address)
        server = TrackingServer(tracking_server_arn(region, account), f"http://{address}:{port}", directory)
        log_path = directory / "server.log"
        command = [
            sys.executable, "-m", "mlflow", "server",
            "--backend-store-uri", f"sqlite:///{directory / 'mlflow.db'}",
            "--no-serve-artifacts", "--default-artifact-root", (directory / "mlflow-artifacts").as_uri(),
            "--host", address, "--port", str(port), "--workers", "1",
        ]  # fmt: skip
        # This machine's basics only: no credentials (it stores to files here) and no MLFLOW_* of this process's.
        environment = machine_environment(MLFLOW_SERVER_ENABLE_JOB_EXECUTION="false", MLFLOW_DISABLE_TELEMETRY="true")
        with log_path.open("ab") as log:
            # A session of its own: stopping it stops the uvicorn worker it starts as well.
            process = subprocess.Popen(
                command, env=environment, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        try:
            _wait_until_healthy(server, process, log_path)
            yield server
        finally:
            _stop(process)


def _wait_until_healthy(server: TrackingServer, process: subprocess.Popen[bytes], log_path: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while not server.healthy():
        if process.poll() is not None:
            raise TrackingServerError(f"mlflow server exited with {process.returncode}:\n{_tail(log_path)}")
        if time.monotonic() > deadline:
            raise TrackingServerError(
                f"mlflow server did not answer {server.url}/health within {START_TIMEOUT_SECONDS:.0f} s:\n{_tail(log_path)}"
            )
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's session, then SIGKILL to whatever of it is left after the grace period."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=STOP_GRACE_SECONDS)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _free_port(address: str) -> int:
    with socket.socket() as probe:
        probe.bind((address, 0))
        return int(probe.getsockname()[1])


def _tail(path: Path) -> str:
    return path.read_text(errors="replace")[-3000:] if path.exists() else "(no log)"


def _quoted(value: str) -> str:
    """A string literal of MLflow's search filters, which take either quote and no escapes."""
    quote = next((q for q in ("'", '"') if q not in value), None)
    if quote is None:
        raise ValueError(f"no filter can quote {value!r}")
    return f"{quote}{value}{quote}"
