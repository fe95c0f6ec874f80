"""SageMaker's API for the twin's MLflow tracking server (moto has no MLflow API): Describe, Stop and
Start of the one server the twin runs (mlflow_server.py), by its name, as SageMaker answers them for a
managed tracking server; any other name is unknown (ResourceNotFound). bridges.py routes the calls here.

A stopped server is one no job can reach, as on SageMaker: the twin gives jobs no endpoint for it and
no presigned URL, until it is started again. Its process keeps running meanwhile (a start is immediate,
where SageMaker takes minutes to stop or start one), so the address `local serve` printed still answers
a browser on this machine.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from importlib.metadata import version
from typing import Any

from trainstack_contract.tracking import resource_name
from trainstack_local.mlflow_server import TrackingServer
from trainstack_local.sagemaker_twin import SageMakerTwin

CREATED, STOPPED, STARTED = "Created", "Stopped", "Started"


class TrackingServerNotFoundError(LookupError):
    """No tracking server of that name (SageMaker's ResourceNotFound)."""


class TrackingServerApi:
    """The twin's tracking server as SageMaker's API describes, stops and starts it."""

    def __init__(self, twin: SageMakerTwin) -> None:
        self.twin = twin
        self.status = CREATED
        self._stopped: TrackingServer | None = None  # the server while it is stopped (the twin holds it otherwise)
        self._created = datetime.now(UTC)
        self._lock = threading.Lock()

    def describe(self, name: str) -> dict[str, Any]:
        with self._lock:
            server = self._server(name)
            active = self.status != STOPPED
            return {
                "TrackingServerArn": server.arn,
                "TrackingServerName": name,
                "ArtifactStoreUri": (server.directory / "mlflow-artifacts").as_uri(),
                "TrackingServerSize": "Small",
                "MlflowVersion": version("mlflow"),
                "TrackingServerStatus": self.status,
                "IsActive": "Active" if active else "Inactive",
                "TrackingServerUrl": server.url,
                "CreationTime": self._created,
            }

    def stop(self, name: str) -> dict[str, Any]:
        with self._lock:
            server = self._server(name)
            if self.status != STOPPED:
                self._stopped, self.twin.tracking_server, self.status = server, None, STOPPED
            return {"TrackingServerArn": server.arn}

    def start(self, name: str) -> dict[str, Any]:
        with self._lock:
            server = self._server(name)
            if self.status == STOPPED:
                self.twin.tracking_server, self._stopped, self.status = server, None, STARTED
            return {"TrackingServerArn": server.arn}

    def _server(self, name: str) -> TrackingServer:
        server = self.twin.tracking_server or self._stopped
        if server is None or name != resource_name(server.arn):
            raise TrackingServerNotFoundError(f"Tracking server {name} does not exist")
        return server
