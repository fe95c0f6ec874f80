"""Experiment tracking from the built-in script to a real MLflow tracking server (SQLite, on loopback)."""

from __future__ import annotations

import http.server
import logging
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

from tests.training.launch import environment, free_port, job_args, run
from trainstack_contract import tracking
from trainstack_contract.config import TrainConfig
from trainstack_local.mlflow_server import tracking_server
from trainstack_training.tracking import open_tracker

mlflow = pytest.importorskip("mlflow")  # a dev dependency: `make setup` installs it
JOB = "trainstack-track-0123456789ab-t1-a2"
END_RUN_SECONDS = 8.0  # longer than the step_timeout below, shorter than the client's request timeout (20 s)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """The twin's tracking server (trainstack_local.mlflow_server), addressed by its URL directly."""
    with tracking_server(tmp_path_factory.mktemp("mlflow"), region="us-east-1", account="123456789012") as running:
        yield running.url


@pytest.fixture
def slow_to_end_runs(server):
    """The server behind a proxy that holds each request to end a run (MLflow's runs/update, which
    the tracker's close sends) for END_RUN_SECONDS, as a busy or distant server would."""

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def _forward(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or None
            if self.path.endswith("/runs/update"):
                time.sleep(END_RUN_SECONDS)
            headers = {"Content-Type": self.headers.get("Content-Type") or "application/json"}
            request = urllib.request.Request(server + self.path, data=body, headers=headers, method=self.command)
            try:
                with urllib.request.urlopen(request, timeout=60) as response:
                    status, answer = response.status, response.read()
            except urllib.error.HTTPError as error:
                status, answer = error.code, error.read()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_: object) -> None:  # no line per request in the test's output
            pass

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{proxy.server_port}"
    proxy.shutdown()
    thread.join()


def _environ(address: str, experiment: str) -> dict[str, str]:
    return {tracking.TRACKING_URI: address, tracking.EXPERIMENT_NAME: experiment}


def _run(address: str, experiment: str, job: str = JOB):
    client = mlflow.MlflowClient(tracking_uri=address)
    found = client.get_experiment_by_name(experiment)
    (run,) = client.search_runs([found.experiment_id], filter_string=f"tags.`mlflow.runName` = '{job}'")
    return client, run


def test_a_jobs_run_holds_its_config_its_loss_per_log_step_its_links_and_its_model(server, tmp_path):
    tracker = open_tracker(TrainConfig(max_steps=30, lr=0.002), JOB, _environ(server, "specification"))
    for step in (10, 20, 30):
        tracker.log_line({"step": step, "loss": 5.0 - step / 10, "lr": 0.002, "tokens_per_sec": 1000.0})
    tracker.log_event("loss_spike", 20)
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    tracker.log_model(tmp_path)
    tracker.close("FINISHED")

    client, run = _run(server, "specification")
    assert run.info.status == "FINISHED"
    assert (run.data.params["max_steps"], run.data.params["lr"]) == ("30", "0.002")
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")] == [(10, 4.0), (20, 3.0), (30, 2.0)]
    assert [m.step for m in client.get_metric_history(run.info.run_id, "health/loss_spike")] == [20]
    assert run.data.tags[tracking.LINEAGE_TAG] == "0123456789ab" and run.data.tags[tracking.TRIAL_TAG] == "1"
    assert run.data.tags[tracking.ATTEMPT_TAG] == "2"
    assert [artifact.path for artifact in client.list_artifacts(run.info.run_id, "model")] == ["model/model.safetensors"]


def test_a_job_restarted_under_its_own_name_does_not_log_the_steps_its_run_already_holds(server):
    first = open_tracker(TrainConfig(), JOB, _environ(server, "restarted"))
    for step in (1, 2, 3, 4):
        first.log_line({"step": step, "loss": 1.0})
    first.close("KILLED")  # a spot interruption: SageMaker restarts the same job, which resumes from step 2
    again = open_tracker(TrainConfig(), JOB, _environ(server, "restarted"))
    for step in (3, 4, 5, 6):
        again.log_line({"step": step, "loss": 0.5})
    again.close("FINISHED")

    client, run = _run(server, "restarted")
    history = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")]
    assert sorted(history) == [(1, 1.0), (2, 1.0), (3, 1.0), (4, 1.0), (5, 0.5), (6, 0.5)]


def test_a_server_that_cannot_be_reached_is_a_warning_and_no_tracker(caplog):
    with caplog.at_level(logging.WARNING, logger="trainstack"):
        tracker = open_tracker(TrainConfig(), JOB, _environ(f"http://127.0.0.1:{free_port()}", "nowhere"))
    assert tracker is None
    assert "cannot be reached" in caplog.text and "nothing is tracked" in caplog.text


def test_without_a_tracking_uri_nothing_is_tracked_and_nothing_said(caplog):
    with caplog.at_level(logging.INFO, logger="trainstack"):
        assert open_tracker(TrainConfig(), JOB, {}) is None
    assert caplog.text == ""


def test_an_image_without_mlflow_says_so_once_and_trains_untracked(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow now raises ImportError
    with caplog.at_level(logging.WARNING, logger="trainstack"):
        assert open_tracker(TrainConfig(), JOB, _environ("http://127.0.0.1:1", "none")) is None
    assert caplog.text.count("lacks the mlflow package") == 1


@pytest.mark.slow
def test_a_two_rank_run_logs_one_loss_point_per_log_step_from_rank_0_only(server, tmp_path):
    args = job_args(tmp_path, "--log_every", "2", steps=8)
    result = run(args, env=environment(**_environ(server, "two-ranks"), TRAINING_JOB_NAME=JOB))
    assert result.returncode == 0, result.stderr[-3000:]
    client, run_found = _run(server, "two-ranks")
    assert [m.step for m in client.get_metric_history(run_found.info.run_id, "loss")] == [2, 4, 6, 8]
    assert run_found.info.status == "FINISHED"
    assert [a.path for a in client.list_artifacts(run_found.info.run_id, "model")]


@pytest.mark.slow
def test_a_slow_end_of_the_mlflow_run_is_no_hang_for_the_watchdog(slow_to_end_runs, tmp_path):
    args = job_args(tmp_path, "--step_timeout", "3", "--startup_timeout", "120", steps=6)
    result = run(args, env=environment(**_environ(slow_to_end_runs, "slow-close"), TRAINING_JOB_NAME=JOB))
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "output" / "failure").exists()
    _, run_found = _run(slow_to_end_runs, "slow-close")
    assert run_found.info.status == "FINISHED"
