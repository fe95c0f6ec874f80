"""The twin's MLflow tracking server, and how its jobs reach it: as a SageMaker job reaches managed
MLflow, through the one route its isolated network has (hosts.SERVICE_ADDRESS), with the tracking
server's ARN as tracking URI, resolved and signed by the sagemaker-mlflow plugin.

The jobs here run a few lines of Python (this machine's, which has mlflow and the plugin) as their
container entry instead of a training script: what is tested is what the twin gives the container.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import boto3
import psutil
import pytest

from tests.local.twin_runs import description, job_run, wait_for_status
from trainstack.identity import Run
from trainstack.request import build_request
from trainstack.rules import check_or_raise
from trainstack.spec import STACK_TRACKING_SERVER, parse_spec
from trainstack_contract.tracking import TRACKING_URI
from trainstack_local.emulator import ACCOUNT, REGION
from trainstack_local.hosts import SERVICE_ADDRESS, JobNetwork, service_address
from trainstack_local.mlflow_server import TrackingServerError, tracking_server, tracking_server_arn
from trainstack_local.process_environment import TWIN_CREDENTIALS
from trainstack_local.sagemaker_twin import MLFLOW_ENDPOINT_OVERRIDE

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

EXPERIMENT = "twin-tests"
SIGNING = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
ENVIRONMENT_FILE = "/opt/ml/environment.json"  # where the entries below leave what their container was given
WRITE_ENVIRONMENT = f"import json, os; open({ENVIRONMENT_FILE!r}, 'w').write(json.dumps(dict(os.environ)))"
# What the built-in script does, reduced: MLflow reads the tracking URI (the ARN) and the experiment
# from the job's Environment; the run is named after the job.
LOG_A_RUN = f"""{WRITE_ENVIRONMENT}
import mlflow
with mlflow.start_run(run_name=os.environ["TRAINING_JOB_NAME"]):
    mlflow.log_metric("loss", 0.5, step=1)
    mlflow.log_text("weights", "model/model.txt")
"""


def _create(stack, name: str, entry: str, *, tracking_arn: str | None) -> str:
    """A one-host CPU job whose container runs `entry` with this machine's Python; with a tracking
    server, its spec logs to the stack's, and the request builder sets MlflowConfig and Environment."""
    raw = {"name": name, "instance_type": "ml.m5.xlarge", "framework_version": "2.10.0", "max_runtime": "1h"}
    context = stack.context
    if tracking_arn is not None:
        raw["tracking"] = {"mlflow": STACK_TRACKING_SERVER, "experiment": EXPERIMENT}
        context = dataclasses.replace(context, mlflow_tracking_server_arn=tracking_arn)  # the stack's server
    spec = parse_spec(raw)
    request = build_request(spec, check_or_raise(spec), context, trial=Run(f"mlflow:{name}").trial())
    request["AlgorithmSpecification"]["ContainerEntrypoint"] = [sys.executable, "-c", entry]
    boto3.client("sagemaker", region_name=REGION).create_training_job(**request)
    return request["TrainingJobName"]


def _finished(twin, name: str) -> dict:
    final = wait_for_status(name, ("Completed", "Failed", "Stopped"), timeout=300)
    assert final["TrainingJobStatus"] == "Completed", twin.runs[name].log()[-3000:]
    return final


def _given_environment(twin, name: str) -> dict[str, str]:
    path = job_run(twin, name).host_root("algo-1") / Path(ENVIRONMENT_FILE).relative_to("/opt/ml")
    return json.loads(path.read_text())


@pytest.fixture(scope="module")
def logged_job(tracked_twin) -> str:
    """A job with MlflowConfig that logs a run as the built-in script does, run to completion."""
    stack, twin, tracking = tracked_twin
    name = _create(stack, "logged", LOG_A_RUN, tracking_arn=tracking.arn)
    _finished(twin, name)
    return name


@pytest.fixture(scope="module")
def untracked_job(tracked_twin) -> str:
    """A job without MlflowConfig, on the same twin."""
    stack, twin, _ = tracked_twin
    name = _create(stack, "untracked", WRITE_ENVIRONMENT, tracking_arn=None)
    _finished(twin, name)
    return name


def _connects(namespace: str, address: str, port: int) -> bool:
    """Whether a TCP connection from inside the namespace gets through."""
    probe = f"import socket; socket.create_connection(({address!r}, {port}), timeout=3).close()"
    return subprocess.run(["ip", "netns", "exec", namespace, sys.executable, "-c", probe], capture_output=True).returncode == 0


def _listener(address: str) -> socket.socket:
    listening = socket.socket()
    listening.bind((address, 0))
    listening.listen()
    return listening


def _this_machines_addresses() -> list[str]:
    """Loopback and every global IPv4 address of this machine but the twin's own (10.213.*)."""
    listing = subprocess.run(["ip", "-4", "-o", "addr", "show", "scope", "global"], capture_output=True, text=True, check=True)
    addresses = [line.split()[3].split("/")[0] for line in listing.stdout.splitlines()]
    return ["127.0.0.1", *(address for address in addresses if not address.startswith("10.213."))]


def test_a_twin_host_reaches_the_tracking_server_and_no_other_address_of_this_machine(tracked_twin):
    _, _, tracking = tracked_twin
    port = int(tracking.url.rsplit(":", 1)[1])
    listeners = [_listener(address) for address in _this_machines_addresses()]
    network = JobNetwork(["algo-1"]).create()
    try:
        namespace = network.namespace("algo-1")
        assert _connects(namespace, SERVICE_ADDRESS, port)
        reached = [listening.getsockname() for listening in listeners if _connects(namespace, *listening.getsockname())]
        routes = subprocess.run(["ip", "-n", namespace, "-4", "route"], capture_output=True, text=True, check=True).stdout
    finally:
        network.destroy()
        for listening in listeners:
            listening.close()
    assert reached == []
    assert "default" not in routes


def test_the_tracking_server_answers_health_on_the_service_address(tracked_twin):
    _, _, tracking = tracked_twin
    assert tracking.url.startswith(f"http://{SERVICE_ADDRESS}:")
    assert tracking.healthy()


def test_the_tracking_server_has_a_stable_arn_in_the_twins_region_and_account(tracked_twin):
    _, _, tracking = tracked_twin
    assert tracking.arn == f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:mlflow-tracking-server/trainstack-twin"
    assert tracking.arn == tracking_server_arn(REGION, ACCOUNT)


def _role_credentials(twin, name: str) -> dict[str, str]:
    """The STS credentials of the job's execution role, as the twin assumed it for the job."""
    credentials = twin.runs[name].credentials
    assert credentials.role_arn == description(name)["RoleArn"]
    return credentials.environment()


def test_a_job_with_mlflow_config_gets_the_tracking_servers_endpoint_and_its_roles_credentials_to_sign_with(
    tracked_twin, logged_job
):
    _, twin, tracking = tracked_twin
    given = _given_environment(twin, logged_job)
    assert given[MLFLOW_ENDPOINT_OVERRIDE] == tracking.url
    signing = {key: given.get(key) for key in SIGNING}
    assert signing == _role_credentials(twin, logged_job) and signing != TWIN_CREDENTIALS  # its role's, not the twin's
    assert given[TRACKING_URI] == tracking.arn  # the request's: the plugin resolves the ARN to the endpoint


def test_a_tracked_jobs_container_signs_with_its_roles_credentials_never_those_of_this_process(tracked_twin, monkeypatch):
    stack, twin, tracking = tracked_twin
    developer = {"AWS_ACCESS_KEY_ID": "AKIADEVELOPER", "AWS_SECRET_ACCESS_KEY": "developer-secret", "AWS_SESSION_TOKEN": "dev"}
    for key, value in developer.items():
        monkeypatch.setenv(key, value)  # what boto3 finds in this process now
    name = _create(stack, "keys", WRITE_ENVIRONMENT, tracking_arn=tracking.arn)
    _finished(twin, name)
    given = _given_environment(twin, name)
    assert {key: given.get(key) for key in SIGNING} == _role_credentials(twin, name)
    assert not set(developer.values()) & set(given.values())


def test_a_job_without_mlflow_config_gets_no_endpoint_and_its_roles_credentials_as_every_job(tracked_twin, untracked_job):
    _, twin, _ = tracked_twin
    given = _given_environment(twin, untracked_job)
    assert MLFLOW_ENDPOINT_OVERRIDE not in given
    assert {key: given.get(key) for key in SIGNING} == _role_credentials(twin, untracked_job)


def test_a_job_with_mlflow_config_and_no_tracking_server_gets_no_endpoint(tracked_twin):
    stack, twin, tracking = tracked_twin
    twin.tracking_server = None  # as if it had stopped: the job must find its tracking server unreachable
    try:
        name = _create(stack, "serverless", WRITE_ENVIRONMENT, tracking_arn=tracking.arn)
        _finished(twin, name)
    finally:
        twin.tracking_server = tracking
    given = _given_environment(twin, name)
    assert MLFLOW_ENDPOINT_OVERRIDE not in given
    assert "MlflowDetails" not in description(name)


def test_describe_returns_the_mlflow_config_as_given(tracked_twin, logged_job):
    _, _, tracking = tracked_twin
    expected = {"MlflowResourceArn": tracking.arn, "MlflowExperimentName": EXPERIMENT, "MlflowRunName": logged_job}
    assert description(logged_job)["MlflowConfig"] == expected


def test_describe_returns_no_mlflow_config_for_a_job_without_one(untracked_job):
    found = description(untracked_job)
    assert "MlflowConfig" not in found and "MlflowDetails" not in found


def test_a_job_logs_through_the_plugin_and_describe_names_its_run_once_it_has_ended(tracked_twin, logged_job, monkeypatch):
    _, _, tracking = tracked_twin
    details = description(logged_job).get("MlflowDetails")

    # Read back as a user would: the MLflow client with the plugin and the ARN as tracking URI.
    import mlflow

    monkeypatch.setenv(TRACKING_URI, tracking.arn)  # the plugin signs for the process's tracking URI, not a client's
    monkeypatch.setenv(MLFLOW_ENDPOINT_OVERRIDE, tracking.url)
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    client = mlflow.MlflowClient()
    experiment = client.get_experiment_by_name(EXPERIMENT)
    (run,) = client.search_runs([experiment.experiment_id], f"attributes.run_name = '{logged_job}'")
    assert details == {"MlflowExperimentId": experiment.experiment_id, "MlflowRunId": run.info.run_id}
    assert [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, "loss")] == [(1, 0.5)]
    assert [artifact.path for artifact in client.list_artifacts(run.info.run_id, "model")] == ["model/model.txt"]


def test_the_service_address_goes_with_its_last_user_and_one_left_behind_is_taken_over():
    address = "10.213.0.253"  # not the twin's: other twins on this machine may hold that one now

    def on_lo() -> bool:
        listing = subprocess.run(["ip", "-4", "addr", "show", "dev", "lo"], capture_output=True, text=True, check=True).stdout
        return f"inet {address}/32" in listing

    subprocess.run(["ip", "addr", "replace", f"{address}/32", "dev", "lo"], check=True)  # as a killed twin leaves it
    with service_address(address):
        with service_address(address):
            assert on_lo()
        assert on_lo()  # the outer user still holds it
    assert not on_lo()


def test_two_live_job_networks_never_share_a_subnet():
    first, second = JobNetwork(["algo-1"]), JobNetwork(["algo-1"])
    first.destroy()
    second.destroy()
    assert first.subnet != second.subnet


def test_a_destroyed_job_network_leaves_no_link_on_this_machine():
    network = JobNetwork(["algo-1"]).create()
    network.destroy()
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout
    assert f"{network.uplink}@" not in links


def test_a_tracking_server_that_cannot_start_says_why_with_the_end_of_its_log(tmp_path):
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "mlflow.db").write_text("what is left of a backend store that is no database\n")

    with (
        pytest.raises(TrackingServerError, match=r"(?s)mlflow server exited with 1:\n.*file is not a database"),
        tracking_server(tmp_path / "server", region=REGION, account=ACCOUNT),
    ):
        pass


def test_the_tracking_servers_processes_get_none_of_this_processs_credentials_or_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIADEVELOPER")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://elsewhere.invalid")  # the server sets its worker's own
    with tracking_server(tmp_path / "server", region=REGION, account=ACCOUNT):
        (server,) = [child for child in psutil.Process().children() if str(tmp_path) in " ".join(child.cmdline())]
        environments = [process.environ() for process in [server, *server.children(recursive=True)]]
    assert len(environments) == 2  # the server and the uvicorn worker it started
    for environment in environments:
        assert "AWS_ACCESS_KEY_ID" not in environment
        assert environment.get("MLFLOW_TRACKING_URI") != "http://elsewhere.invalid"
        assert environment["PATH"] == os.environ["PATH"]
