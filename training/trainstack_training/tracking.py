"""Experiment tracking to MLflow from rank 0: the typed config as parameters, each metric line and
health verdict as metrics, the exported model as an artifact, into one MLflow run per training job
(named after the job and tagged with its trial, resume segment and attempt; see
trainstack_contract.tracking). The job's Environment names the tracking server (its ARN, which the
`sagemaker-mlflow` plugin resolves and signs).

Tracking never fails a job: an image without the mlflow package, or a server that cannot be
reached, is one warning in the log, and training goes on untracked. The loop only appends to a
list; a background thread sends the metrics in batches (`MlflowClient.log_batch`, which splits them
into the API's 1,000-metric requests) every `FLUSH_SECONDS`, so a slow server costs the steps
nothing.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainstack_contract import tracking
from trainstack_contract.config import TrainConfig

log = logging.getLogger("trainstack")
FLUSH_SECONDS = 10.0
CLOSE_WAIT_SECONDS = 60.0  # for the last batch and the model's upload at the end
# Fail fast: MLflow's client retries 7 times with backoff and waits 120 s per request by default,
# minutes of a stalled close against a server that is gone.
CLIENT_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}
PARAM_VALUE_MAX = 6000  # MLflow's limit on a parameter's value


class MlflowTracker:
    """One job's MLflow run, fed by rank 0's loop."""

    def __init__(self, client: Any, run_id: str, first_step: int, uri: str) -> None:
        self.client, self.run_id, self.uri = client, run_id, uri
        # A run SageMaker restarted (a spot interruption) keeps its job name, so its MLflow run: the
        # steps it trains again after the checkpoint are not logged twice.
        self.first_step = first_step
        self.pending: list[Any] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.failed = False
        self.sender = threading.Thread(target=self._send_periodically, name="mlflow-tracking", daemon=True)
        self.sender.start()

    def log_line(self, line: Mapping[str, float | int]) -> None:
        """A metric line: every value but the step, at its step."""
        step = int(line["step"])
        self._add({key: float(value) for key, value in line.items() if key != "step"}, step)

    def log_event(self, name: str, step: int) -> None:
        """A health verdict, as a metric that is 1 at each step the rule spoke."""
        self._add({f"health/{name}": 1.0}, step)

    def log_model(self, model_dir: str | Path) -> None:
        if self.failed:
            return
        try:
            self.client.log_artifacts(self.run_id, str(model_dir), artifact_path="model")
        except Exception as error:  # tracking never fails the job
            self._give_up(error)

    def close(self, status: str) -> None:
        """Send what is left and end the run (FINISHED, KILLED or FAILED); bounded."""
        self.stopping.set()
        self.sender.join(timeout=CLOSE_WAIT_SECONDS)
        self.send_pending()
        if not self.failed:
            try:
                self.client.set_terminated(self.run_id, status=status)
            except Exception as error:
                self._give_up(error)

    def _add(self, values: dict[str, float], step: int) -> None:
        if self.failed or step <= self.first_step:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        with self.lock:
            self.pending.extend(Metric(key, value, now, step) for key, value in values.items())

    def _send_periodically(self) -> None:
        while not self.stopping.wait(FLUSH_SECONDS):
            self.send_pending()

    def send_pending(self) -> None:
        """Send the metrics logged since the last batch, now (the sending thread does this every FLUSH_SECONDS)."""
        with self.lock:
            batch, self.pending = self.pending, []
        if batch and not self.failed:
            try:
                self.client.log_batch(self.run_id, metrics=batch)
            except Exception as error:
                self._give_up(error)

    def _give_up(self, error: Exception) -> None:
        if not self.failed:
            self.failed = True
            log.warning("tracking: MLflow at %s failed (%s: %s); the rest of this job is not tracked",
                        self.uri, type(error).__name__, str(error)[:300])  # fmt: skip


def open_tracker(config: TrainConfig, job_name: str, environ: Mapping[str, str] | None = None) -> MlflowTracker | None:
    """The job's MLflow run (rank 0 only calls this), or None: no tracking asked for, or (with one
    warning) no mlflow package in the image, or no server to reach."""
    environ = os.environ if environ is None else environ
    uri = environ.get(tracking.TRACKING_URI, "")
    if not uri:
        return None
    experiment = environ.get(tracking.EXPERIMENT_NAME) or "Default"
    for name, value in CLIENT_SETTINGS.items():
        os.environ.setdefault(name, value)
    try:
        from mlflow import MlflowClient
        from mlflow.entities import Param
    except ImportError as error:
        log.warning(
            "tracking: %s is set but this image lacks the mlflow package (%s): nothing is tracked "
            "(the project image installs mlflow-skinny and sagemaker-mlflow)", tracking.TRACKING_URI, error,
        )  # fmt: skip
        return None
    try:
        client = MlflowClient(tracking_uri=uri)
        run_id, first_step = _run_for(client, experiment, job_name)
        if first_step == 0:
            params = [Param(key, _param_value(value)) for key, value in json.loads(config.to_json()).items()]
            client.log_batch(run_id, params=params)
    except Exception as error:
        log.warning("tracking: MLflow at %s cannot be reached (%s: %s): nothing is tracked",
                    uri, type(error).__name__, str(error)[:300])  # fmt: skip
        return None
    log.info("tracking: MLflow run %s (%s) in experiment %s at %s", job_name, run_id, experiment, uri)
    return MlflowTracker(client, run_id, first_step, uri)


def _run_for(client: Any, experiment: str, job_name: str) -> tuple[str, int]:
    """The run named after the job, made if none is (with its links to its trial's other runs), and
    the last step it already holds (0: none)."""
    found = client.get_experiment_by_name(experiment)
    if found is None:
        try:
            experiment_id = client.create_experiment(experiment)
        except Exception:  # another trial made it meanwhile
            experiment_id = client.get_experiment_by_name(experiment).experiment_id
    else:
        experiment_id = found.experiment_id
    runs = client.search_runs([experiment_id], filter_string=f"tags.`mlflow.runName` = '{job_name}'", max_results=1)
    if not runs:
        return client.create_run(experiment_id, run_name=job_name, tags=tracking.run_tags(job_name)).info.run_id, 0
    run = runs[0]
    client.update_run(run.info.run_id, status="RUNNING")
    logged = [metric.step for metric in client.get_metric_history(run.info.run_id, "loss")]
    return run.info.run_id, max(logged, default=0)


def _param_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value)
    return text[:PARAM_VALUE_MAX]
