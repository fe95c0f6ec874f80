"""Experiment tracking end to end: specs with `tracking` run through the emulated pipeline on the
project image (which installs mlflow-skinny and the sagemaker-mlflow plugin), and their jobs log to
the twin's MLflow tracking server as SageMaker jobs log to managed MLflow. What the server holds is
read back with the MLflow client."""

from __future__ import annotations

import dataclasses
import socket

import boto3
import pytest

from tests.local.twin_runs import (
    description,
    job_name,
    job_run,
    printed_steps,
    start_inline,
    wait_for_status,
    wait_for_step,
)
from trainstack_contract import tracking as contract
from trainstack_local.emulator import REGION
from trainstack_local.hosts import SERVICE_ADDRESS
from trainstack_local.pipeline import finish

mlflow = pytest.importorskip("mlflow")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
CPU = "ml.m5.xlarge"  # one process per host


def spec(name: str, experiment: str, *, hosts: int = 1, **hyperparameters: object) -> dict:
    return {
        "name": name,
        "instance_type": CPU,
        "instance_count": hosts,
        "strategy": "ddp",
        "framework_version": "2.10.0",
        "image": "project",  # the stack's project image: it has the MLflow client and plugin
        "hyperparameters": {"model": "gpt-tiny", "max_steps": 6, "log_every": 2, "checkpoint_every": 3, **hyperparameters},
        "inputs": {"train": {"s3_uri": "s3://trainstack-local-trigger/datasets/default/sample/", "mode": "File"}},
        "max_runtime": "1h",
        "tracking": {"mlflow": "stack", "experiment": experiment},
    }  # fmt: skip


def runs(server, experiment: str) -> dict[str, object]:
    """The experiment's runs by name, as the MLflow client reads them from the twin's server."""
    client = mlflow.MlflowClient(tracking_uri=server.url)
    found = client.get_experiment_by_name(experiment)
    return {run.info.run_name: run for run in client.search_runs([found.experiment_id])} if found else {}


def steps(server, run, key: str = "loss") -> list[int]:
    return [metric.step for metric in mlflow.MlflowClient(tracking_uri=server.url).get_metric_history(run.info.run_id, key)]


def test_a_two_trial_sweep_on_two_hosts_leaves_one_run_per_trial_with_config_loss_curve_and_model(tracked_twin):
    stack, _, server = tracked_twin
    job = {**spec("tracked-sweep", "sweep", hosts=2), "sweep": {"max_concurrency": 2, "grid": {"lr": [0.001, 0.002]}}}
    assert finish(start_inline(stack, job, "tracked-sweep"), timeout=600).status == "SUCCEEDED"

    found = runs(server, "sweep")
    assert len(found) == 2
    client = mlflow.MlflowClient(tracking_uri=server.url)
    for name, run in found.items():
        assert run.info.status == "FINISHED"
        assert run.data.params["max_steps"] == "6" and run.data.params["lr"] == description(name)["HyperParameters"]["lr"]
        assert steps(server, run) == [2, 4, 6]  # one point per log step, from rank 0 only
        assert [artifact.path for artifact in client.list_artifacts(run.info.run_id, "model")]
        assert description(name)["MlflowDetails"]["MlflowRunId"] == run.info.run_id
    trials = {run.data.tags[contract.TRIAL_TAG] for run in found.values()}
    lineages = {run.data.tags[contract.LINEAGE_TAG] for run in found.values()}
    assert trials == {"0", "1"} and len(lineages) == 1
    assert {run.data.params["lr"] for run in found.values()} == {"0.001", "0.002"}


def test_a_stopped_and_resumed_run_continues_its_loss_curve_from_the_resumed_step(tracked_twin):
    stack, twin_, server = tracked_twin
    job = spec("tracked-stop", "resume", max_steps=1_000_000, log_every=1, checkpoint_every=1_000_000)  # ends only when stopped
    first = start_inline(stack, job, "tracked-stop-1", lineage="tracked-stop")
    stopped = job_run(twin_, job_name(stack, job, "tracked-stop-1", lineage="tracked-stop"))
    wait_for_step(stopped, 5)
    boto3.client("stepfunctions", region_name=REGION).stop_execution(executionArn=first)
    assert finish(first, timeout=300).status == "ABORTED"
    assert wait_for_status(stopped.name, ("Stopped", "Completed", "Failed"), timeout=200)["TrainingJobStatus"] == "Stopped"
    saved = max(printed_steps(stopped))  # SIGTERM saves the step it reached
    resumed = {**job, "hyperparameters": {**job["hyperparameters"], "max_steps": saved + 4}}
    second = start_inline(stack, resumed, "tracked-stop-2", lineage="tracked-stop", resume=True)
    assert finish(second, timeout=300).status == "SUCCEEDED"

    found = runs(server, "resume")
    before = found[stopped.name]
    after = found[job_name(stack, job, "tracked-stop-2", lineage="tracked-stop", resume=True)]
    assert steps(server, before) == list(range(1, saved + 1)) and before.info.status == "KILLED"
    assert steps(server, after) == list(range(saved + 1, saved + 5))  # from the resumed step on, none twice
    assert after.data.tags[contract.LINEAGE_TAG] == before.data.tags[contract.LINEAGE_TAG]
    assert after.data.tags[contract.SEGMENT_TAG] and not before.data.tags[contract.SEGMENT_TAG]


def test_with_the_tracking_server_down_the_job_completes_and_its_log_says_why_nothing_was_tracked(tracked_twin):
    stack, twin_, server = tracked_twin
    with socket.socket() as probe:  # a port on the service address where nothing listens
        probe.bind((SERVICE_ADDRESS, 0))
        down = dataclasses.replace(server, url=f"http://{SERVICE_ADDRESS}:{probe.getsockname()[1]}")
    twin_.tracking_server = down
    try:
        job = spec("tracked-down", "down")
        assert finish(start_inline(stack, job, "tracked-down"), timeout=300).status == "SUCCEEDED"
    finally:
        twin_.tracking_server = server
    log = twin_.runs[job_name(stack, job, "tracked-down")].log()
    assert "cannot be reached" in log and "nothing is tracked" in log
    assert runs(server, "down") == {}
