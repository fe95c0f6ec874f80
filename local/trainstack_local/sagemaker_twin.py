"""The emulated SageMaker training service: jobs run the way SageMaker runs them, on this machine.

For each CreateTrainingJob the twin runs `InstanceCount` hosts (`algo-1` … `algo-N`, see hosts.py),
each with its own `/opt/ml` tree (hyperparameters, resource and input-data config, channels) and
its own checkpoint directory. What the twin does the way SageMaker does it:

- the job's data moves with its execution role's credentials (STS AssumeRole, as SageMaker assumes
  it), so S3 allows each download and upload only where the role's policies do (iam_twin.py); a
  refusal fails the job with SageMaker's ClientError ("Data download failed:..."); the containers get
  the same credentials, and the twin's S3 on the service address (s3_endpoint.py);
- channels are downloaded per host before the container starts; `ShardedByS3Key` gives each host
  every N-th object of the sorted keys (SageMaker promises "about 1/N of the objects");
- the checkpoint directory of every host is restored from the job's CheckpointConfig S3 prefix
  (the whole prefix onto every host: a plain string prefix, as SageMaker matches it) and uploaded
  file by file while the job runs and once more when the container has exited; a file deleted from
  a host's checkpoint directory (restored or written there) is deleted from the prefix ("If a
  checkpoint is deleted in the SageMaker AI container, it will also be deleted in the S3 folder",
  the SageMaker guide's "Checkpoints in Amazon SageMaker AI"), so a pruned checkpoint never comes back;
- the container's entry is `AlgorithmSpecification.ContainerEntrypoint` if the request has one,
  else the image's own entry (the framework images': `bash -m start_with_right_hostname.sh train`),
  run as PID 1 of the host's PID namespace with the image's environment plus the request's;
- StopTrainingJob and an injected spot interruption send SIGTERM to every host's PID 1 and SIGKILL
  after the grace period; a stop ends the job `Stopped`; a spot interruption restarts the whole job
  on fresh hosts with the checkpoints restored (secondary status `Interrupted`, then `Starting`);
- a non-zero exit of any host fails the job with that host's `/opt/ml/output/failure`; success
  uploads `/opt/ml/model` as `<S3OutputPath>/<job>/output/model.tar.gz`;
- per-region image registries: a request whose image does not exist in its region is refused;
- each host's output goes to CloudWatch Logs as it is written: group /aws/sagemaker/TrainingJobs,
  stream `<job>/algo-N-<epoch seconds of the start>`, a new stream per host after a spot restart;
- capacity: `refuse_capacity(instance_type)` makes jobs on that type fail as SageMaker reports it;
  a job with `ResourceConfig.InstancePreferences` runs on the first listed type that has capacity,
  reported as `SelectedInstanceType` / `SelectedInstanceCount`, and fails only when none has;
- MLflow: with a tracking server attached (`tracking_server`, mlflow_server.py), a job whose request
  has `MlflowConfig` reaches it as a SageMaker job reaches managed MLflow (its ARN tracking URI,
  resolved by the sagemaker-mlflow plugin, signed with the job's credentials), and DescribeTrainingJob
  gives the run named after the job as `MlflowDetails` once the job has ended.

For tests, `inject(InjectedFault(...))` gives the next jobs of a trial a fault of the training
script's (trainstack_contract.fault_hooks) through the twin itself, never through a spec, which
may not name those variables.

What it does not reproduce is listed in docs/local-mode.md ("What the twin does not reproduce").
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import signal
import tarfile
import threading
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
from botocore.exceptions import ClientError

from trainstack import facts
from trainstack.layout import TRAINING_JOB_LOG_GROUP
from trainstack.s3uri import split_s3_uri
from trainstack.workflow import CAPACITY_FAILURE_MARKERS
from trainstack_contract import fault_hooks
from trainstack_contract.sigterm import SIGTERM_GRACE_SECONDS
from trainstack_local import container, iam_twin, runtimes
from trainstack_local.account_twin import AccountSettings
from trainstack_local.event_feed import EventFeed
from trainstack_local.hosts import Container, JobNetwork, host_names, remove_stale_networks, require_namespaces
from trainstack_local.mlflow_server import TrackingServer
from trainstack_local.registry import ImageRegistry, TwinImage

CAPACITY_FAILURE = f"{CAPACITY_FAILURE_MARKERS[0]}: Unable to provision requested ML compute capacity. Please retry later."
SUBMIT_DIRECTORY = "sagemaker_submit_directory"
# The sagemaker-mlflow plugin's override of the endpoint that a tracking server's ARN resolves to.
MLFLOW_ENDPOINT_OVERRIDE = "SAGEMAKER_MLFLOW_CUSTOM_ENDPOINT"
TWIN_ERROR_FILE = "twin-error.txt"  # in the job's folder: the trace of an error of the twin's own that failed it
# SageMaker's FailureReason for a channel it could not download ("ClientError: Data download failed:Unable to
# download object s3://... (AccessDenied: Access Denied)", as jobs report it); its wording for a listing and
# for an upload it could not make is not published: the twin's follows the same form.
DATA_FAILURE = "ClientError: Data {direction} failed:Unable to {what} {uri} ({code}: {message})"


class TwinClosedError(Exception):
    """A job created once the twin has closed: it would train with no twin left to stop it, its threads
    calling AWS itself once the emulated account is gone."""


class DataMovementRefusedError(Exception):
    """S3 refused SageMaker's own data movement for the job (its execution role may not): the job fails
    with this reason, SageMaker's ClientError."""


@dataclass(frozen=True)
class TwinSettings:
    """What this machine needs the twin to do differently from SageMaker, all stated here."""

    gpus_per_host: int = 2  # emulated GPUs per host of a GPU instance type (each a CPU process with gloo)
    stop_grace_seconds: float = SIGTERM_GRACE_SECONDS  # SIGTERM -> SIGKILL, as SageMaker gives a stopping container
    spot_capacity_wait_seconds: float = 1.0  # how long an interrupted job waits for spot capacity again
    sync_interval_seconds: float = 0.5  # checkpoint upload period while a job runs
    threads_per_process: int = 1  # OMP_NUM_THREADS in every container: several hosts share 2 cores
    # The Batch twin's job queues (batch_twin.py) wait maxTimeSeconds x this before a RUNNABLE time limit
    # acts: Batch's shortest limit is 600 s, too long for a test to wait out.
    queue_time_limit_scale: float = 1.0
    # Test-only variables every container gets (the training script's fault hooks, faults.py); a
    # spec cannot set them (Validate refuses TRAINSTACK_* names), so they exist only here.
    fault_hooks: tuple[tuple[str, str], ...] = ()
    # The emulated account: its quotas and the training subnet's AZ (account_twin.py); a new account's by default.
    account: AccountSettings = field(default_factory=AccountSettings)


@dataclass(frozen=True)
class InjectedFault:
    """A variable (e.g. TRAINSTACK_INJECT_TRANSPORT_ERROR=1:3) for the containers of the next `times`
    training jobs whose names start with job_prefix: a pipeline's restart creates a new job under the
    trial's prefix, so `times=3` fails three jobs in a row. Only `host`'s container gets it when host
    is set (e.g. "algo-2"), every host's otherwise. A job keeps its faults for its whole life: the
    restart after a spot interruption (a new attempt of the same job) gets them again."""

    job_prefix: str
    variable: str
    value: str
    host: str | None = None
    times: int = 1


@dataclass
class _Attempt:
    """One start of the job's hosts; a spot interruption ends it and starts the next."""

    index: int
    root: Path
    network: JobNetwork | None = None
    containers: list[Container] = field(default_factory=list)
    started: float = 0.0
    ended: float = 0.0
    running: threading.Event = field(default_factory=threading.Event)
    epoch: int = 0  # wall-clock seconds at the start: SageMaker's log stream names carry it
    logged: dict[str, int] = field(default_factory=dict)  # host -> bytes of its log sent to CloudWatch Logs
    failed: list[Container] = field(default_factory=list)  # the hosts that failed before the twin killed the rest
    refused: DataMovementRefusedError | None = None  # a checkpoint upload S3 refused the job's role while it ran


class _Requests:
    def __init__(self) -> None:
        self.stop = threading.Event()
        self.interrupt = threading.Event()


class JobRun:
    """One training job's life, driven in a thread; `job` is moto's record, which DescribeTrainingJob reads."""

    def __init__(self, twin: SageMakerTwin, job: Any, image: TwinImage) -> None:
        self.twin = twin
        self.job = job
        self.image = image
        self.runtime: runtimes.ImageRuntime | None = None  # provided when the job first starts
        # Its execution role's credentials, assumed when it first starts, and S3 as they sign for it.
        self.credentials: iam_twin.RoleCredentials | None = None
        self.s3: Any = None
        self.name: str = job.training_job_name
        self.root = twin.workdir / self.name
        self.requests = _Requests()
        self.attempts: list[_Attempt] = []
        # Taken once, when the job is created: a spot interruption's restart (a new attempt of this
        # job) keeps them, as only a new job, the pipeline's restart, takes the next use.
        self.faults = twin.take_injected_faults(self.name)
        self.thread = threading.Thread(target=self._run, name=f"twin-{self.name}", daemon=True)

    # -- what the API and tests see ------------------------------------------------------------
    @property
    def hosts(self) -> list[str]:
        return host_names(int(self.job.resource_config["InstanceCount"]))

    def host_root(self, host: str, attempt: int = -1) -> Path:
        """The host's /opt/ml of an attempt (the latest by default)."""
        return self.attempts[attempt].root / host / "opt" / "ml"

    def log(self, host: str | None = None) -> str:
        """Everything the hosts printed, across attempts (what CloudWatch Logs would hold)."""
        texts = []
        for attempt in self.attempts:
            for name in [host] if host else self.hosts:
                path = attempt.root / f"{name}.log"
                if path.exists():
                    texts.append(path.read_text(errors="replace"))
        return "".join(texts)

    def injected_environment(self, host: str) -> dict[str, str]:
        """The variables of this job's injected faults that reach this host's container."""
        return {fault.variable: fault.value for fault in self.faults if fault.host in (None, host)}

    @property
    def instance_type(self) -> str:
        """The type the job runs on: its InstanceType, or the preference SageMaker selected."""
        config = self.job.resource_config
        return config.get("SelectedInstanceType") or config["InstanceType"]

    # -- the job's life --------------------------------------------------------------------------
    def _select_instance_type(self) -> str | None:
        """SageMaker's choice: the first preference with capacity (InstancePreferences), or the one
        type; None when there is no capacity for any."""
        config = self.job.resource_config
        preferences = config.get("InstancePreferences")
        if not preferences:
            return None if self.twin.take_capacity_refusal(config["InstanceType"]) else config["InstanceType"]
        for preference in preferences:
            if not self.twin.take_capacity_refusal(preference["InstanceType"]):
                config["SelectedInstanceType"] = preference["InstanceType"]
                config["SelectedInstanceCount"] = preference.get("InstanceCount", config["InstanceCount"])
                return preference["InstanceType"]
        return None

    def _run(self) -> None:
        try:
            self._status("InProgress", "Starting", "Preparing the instances for training")
            while True:
                if self.requests.stop.is_set():
                    self._end("Stopped", "Stopped", "Training job stopped before it started")
                    return
                if self._select_instance_type() is None:
                    self.job.failure_reason = CAPACITY_FAILURE
                    self._end("Failed", "Failed", CAPACITY_FAILURE)
                    return
                attempt = self._start_attempt()
                outcome = self._watch(attempt)
                if outcome != "interrupted":
                    self._finish(attempt, outcome)
                    return
                self._status("InProgress", "Interrupted", "Job interrupted: spot capacity was reclaimed")
                time.sleep(self.twin.settings.spot_capacity_wait_seconds)
                self._status("InProgress", "Starting", "Launching requested ML instances after a spot interruption")
        except DataMovementRefusedError as refused:  # the job's role may not: the user's failure, worded as SageMaker's
            self.job.failure_reason = str(refused)
            self._end("Failed", "Failed", self.job.failure_reason)
        except Exception as error:  # the twin's own error: SageMaker fails such a job (an image it cannot pull) with a reason
            self._fail(error)
        finally:
            for attempt in self.attempts:
                try:
                    self._teardown(attempt)
                except Exception:  # the job has ended: what is left of it must not end the thread with a traceback
                    self._keep_trace()

    def _fail(self, error: Exception) -> None:
        """End the job Failed with one line of reason and keep the trace in the job's folder. It never
        raises: a job thread that died would leave the job InProgress for good, and its execution
        polling it until its deadline."""
        self._keep_trace()
        self.job.failure_reason = " ".join(f"trainstack twin: {type(error).__name__}: {error}".split())[:1024]
        try:
            self._end("Failed", "Failed", self.job.failure_reason)
        except Exception:  # whatever else the end met, the job's status says it ended
            self._keep_trace()
            self.job.training_job_status = self.job.secondary_status = "Failed"

    def _keep_trace(self) -> None:
        """The exception being handled, appended to TWIN_ERROR_FILE for debugging; the folder may not
        exist yet (the job failed before its first host was prepared), and a trace that cannot be
        written is lost rather than raised."""
        with contextlib.suppress(OSError):
            self.root.mkdir(parents=True, exist_ok=True)
            with (self.root / TWIN_ERROR_FILE).open("a") as trace:
                trace.write(traceback.format_exc())

    def _start_attempt(self) -> _Attempt:
        attempt = _Attempt(len(self.attempts), self.root / f"attempt-{len(self.attempts)}")
        self.attempts.append(attempt)
        self._status("InProgress", "Downloading", "Downloading input data")
        # The image's software: torch, Python and packages of its own, as SageMaker pulls the image.
        self.runtime = self.runtime or runtimes.ensure(self.image.runtime, self.image.extra_packages)
        if self.credentials is None:  # SageMaker assumes the job's role once; the twin's never expire
            self.credentials = iam_twin.assume_role(self.job.role_arn, self.twin.region)
            self.s3 = self.credentials.client("s3", self.twin.region)
        attempt.network = network = JobNetwork(self.hosts).create()
        stage = self.root / "sourcedir.tar.gz"
        submit = json.loads(self.job.hyper_parameters.get(SUBMIT_DIRECTORY, '""'))
        if submit.startswith("s3://") and not stage.exists():
            _download(self.s3, submit, stage)
        for host in self.hosts:
            self._prepare_host(attempt, host, stage if submit.startswith("s3://") else None)
        self._status("InProgress", "Training", "Training image download completed. Training in progress.")
        attempt.started = time.monotonic()
        attempt.epoch = int(time.time())
        if self.job.training_start_time is None:
            self.job.training_start_time = _now()
        for host in self.hosts:
            root = attempt.root / host
            with (attempt.root / f"{host}.log").open("a") as log:  # never silently on another runtime
                log.write(f"trainstack twin: {host} runs the image's software: {self.runtime.describe()}\n")
            attempt.containers.append(
                Container(
                    host=host,
                    network=network,
                    root=root / "opt" / "ml",
                    entry=self._entry(),
                    environment=self._environment(host, root),
                    log_path=attempt.root / f"{host}.log",
                ).start()
            )
        return attempt

    def _prepare_host(self, attempt: _Attempt, host: str, staged_source: Path | None) -> None:
        root = attempt.root / host
        opt_ml = root / "opt" / "ml"
        hyperparameters = dict(self.job.hyper_parameters or {})
        if staged_source is not None:
            # The twin's one rewrite: the code tarball is staged here, the toolkit reads it from a path.
            hyperparameters[SUBMIT_DIRECTORY] = json.dumps(str(staged_source))
        channels = self.job.input_data_config or []
        hosts = self.hosts
        container.write_config(
            opt_ml,
            hyperparameters,
            container.resource_config(hosts, host, self.instance_type, "eth0"),
            {
                c["ChannelName"]: container.channel_config(
                    c.get("InputMode") or self.job.algorithm_specification.get("TrainingInputMode", "File"),
                    c["DataSource"]["S3DataSource"].get("S3DataDistributionType", "FullyReplicated"),
                )
                for c in channels
            },
        )
        for channel in channels:
            source = channel["DataSource"]["S3DataSource"]
            if (channel.get("InputMode") or "File") == "Pipe":
                raise NotImplementedError(f"channel {channel['ChannelName']}: Pipe input mode is not emulated")
            keys = _keys(self.s3, source["S3Uri"])
            if source.get("S3DataDistributionType") == "ShardedByS3Key":
                keys = keys[hosts.index(host) :: len(hosts)]
            _download_keys(self.s3, source["S3Uri"], keys, opt_ml / "input" / "data" / channel["ChannelName"])
        if self.job.checkpoint_config:
            local = self._in_container(opt_ml, self.job.checkpoint_config.get("LocalPath") or "/opt/ml/checkpoints")
            uri = self.job.checkpoint_config["S3Uri"]
            _download_keys(self.s3, uri, _keys(self.s3, uri), local)
            # What was restored is the host's as much as what it writes: deleted, it goes from S3 too.
            self._synced(attempt, host).update(_signatures(local))
        bin_dir = root / "bin"
        bin_dir.mkdir(parents=True, exist_ok=True)
        gpus = self.twin.gpus(self.instance_type)
        if gpus:  # what the toolkit counts to choose processes per host (`nvidia-smi --list-gpus`)
            lines = "".join(f"GPU {index}: Emulated GPU (UUID: GPU-twin-{index})\\n" for index in range(gpus))
            _executable(bin_dir / "nvidia-smi", f'#!/bin/sh\nprintf "{lines}"\n')
        for name, text in self.image.programs.items():
            _executable(bin_dir / name, text)

    def _entry(self) -> list[str]:
        return list(self.job.algorithm_specification.get("ContainerEntrypoint") or self.image.entry)

    def _environment(self, host: str, host_root: Path) -> dict[str, str]:
        environment = {
            **self.image.environment,
            "PATH": f"{host_root / 'bin'}:{self.runtime.bin}:{self.image.environment.get('PATH', '')}",
            "OMP_NUM_THREADS": str(self.twin.settings.threads_per_process),
            "TRAINING_JOB_NAME": self.name,
            "TRAINING_JOB_ARN": self.job.arn,
        }
        environment.update(self._role_environment())
        environment.update(getattr(self.job, "environment", None) or {})
        environment.update({fault_hooks.TWIN: "1", **dict(self.twin.settings.fault_hooks)})  # the twin's own, never the spec's
        environment.update(self.injected_environment(host))
        environment.update(self._tracking_environment())
        return environment

    def _role_environment(self) -> dict[str, str]:
        """The job's execution role's credentials and the region, as SageMaker gives a job's containers
        its role (here as variables, which boto3, the AWS CLI and the MLflow plugin read before anything
        else: never whatever this process holds, the developer's own keys), and the twin's S3 where it
        is served (the region's endpoint is not reachable from here). The request's Environment comes
        after, as a variable a user sets wins over the role's credentials on SageMaker too."""
        assert self.credentials is not None, "the job's role is assumed before its containers start"
        environment = {**self.credentials.environment(), "AWS_REGION": self.twin.region, "AWS_DEFAULT_REGION": self.twin.region}
        if self.twin.storage_endpoint:
            environment["AWS_ENDPOINT_URL_S3"] = self.twin.storage_endpoint
        return environment

    def _tracking_environment(self) -> dict[str, str]:
        """What a job with MlflowConfig needs to log to the twin's tracking server along SageMaker's own
        path: the plugin's documented endpoint override (the region's endpoint is not reachable from
        here); it signs with the job's role's credentials. Nothing without a server: the job then finds
        its tracking server unreachable."""
        server = self.twin.tracking_server
        if server is None or not getattr(self.job, "mlflow_config", None):
            return {}
        return {MLFLOW_ENDPOINT_OVERRIDE: server.url}

    def _record_mlflow_run(self) -> None:
        """MlflowDetails, which SageMaker fills in once a job has ended (the SageMaker SDK 3.x reads the
        run id "only available after the job completes"). How SageMaker finds the run is undocumented;
        the twin takes the latest run named MlflowRunName (else the job's name) in MlflowExperimentName
        (else in any experiment)."""
        config = getattr(self.job, "mlflow_config", None)
        server = self.twin.tracking_server
        if not config or server is None:
            return
        run = server.find_run(config.get("MlflowRunName") or self.name, config.get("MlflowExperimentName"))
        if run is not None:
            self.job.mlflow_details = {"MlflowExperimentId": run.experiment_id, "MlflowRunId": run.run_id}

    def _watch(self, attempt: _Attempt) -> str:
        """Until every host has exited: 'completed', 'failed', 'stopped' or 'interrupted'."""
        attempt.running.set()
        syncer = threading.Thread(target=self._sync_loop, args=(attempt,), daemon=True)
        syncer.start()
        deadline = attempt.started + int(self.job.stopping_condition.get("MaxRuntimeInSeconds", 86400))
        outcome = None
        while outcome is None:
            codes = [c.poll() for c in attempt.containers]
            if self.requests.stop.is_set():
                self._status("Stopping", "Stopping", "Stopping the training job")
                self._stop_containers(attempt)
                outcome = "stopped"
            elif self.requests.interrupt.is_set():
                self.requests.interrupt.clear()
                self._stop_containers(attempt)
                outcome = "interrupted"
            elif time.monotonic() > deadline:
                self._status("Stopping", "MaxRuntimeExceeded", "Training job reached its MaxRuntimeInSeconds")
                self._stop_containers(attempt)
                outcome = "stopped"
            elif attempt.refused is not None:  # an upload the job's role may not make (the sync thread's)
                for other in attempt.containers:
                    other.kill()
                outcome = "failed"
            elif any(code not in (None, 0) for code in codes):
                attempt.failed = [c for c, code in zip(attempt.containers, codes, strict=True) if code not in (None, 0)]
                for other in attempt.containers:  # one failed host ends the job
                    other.kill()
                outcome = "failed"
            elif all(code == 0 for code in codes):
                outcome = "completed"
            else:
                time.sleep(0.1)
        attempt.ended = time.monotonic()
        attempt.running.clear()
        syncer.join()
        if attempt.refused is None:
            try:
                self._sync_checkpoints(attempt)  # the last upload, after the containers are gone
            except DataMovementRefusedError as refused:
                attempt.refused, outcome = refused, "failed"
        self._sync_logs(attempt)
        return outcome

    def _stop_containers(self, attempt: _Attempt) -> None:
        """SIGTERM to every host's PID 1, SIGKILL to those still running after the grace period."""
        for host_container in attempt.containers:
            host_container.signal_pid1(signal.SIGTERM)
        deadline = time.monotonic() + self.twin.settings.stop_grace_seconds
        while time.monotonic() < deadline and any(c.poll() is None for c in attempt.containers):
            time.sleep(0.1)
        for host_container in attempt.containers:
            if host_container.poll() is None:
                host_container.kill()

    def _finish(self, attempt: _Attempt, outcome: str) -> None:
        self._collect_metrics()
        if outcome == "completed":
            self._status("InProgress", "Uploading", "Uploading generated training model")
            self._upload_outputs(attempt)
            self._end("Completed", "Completed", "Training job completed")
        elif outcome == "stopped":
            self._upload_outputs(attempt)
            self._end("Stopped", "Stopped", "Training job stopped")
        else:
            self.job.failure_reason = str(attempt.refused) if attempt.refused else self._failure_reason(attempt)
            self._end("Failed", "Failed", "Training job failed")

    def _failure_reason(self, attempt: _Attempt) -> str:
        """The reason of the host that failed (the first in host order when several did at once), not
        algo-1's for being first: the hosts the twin killed after it exit non-zero too, often before
        writing a reason of their own."""
        failed = attempt.failed[0]
        failure = failed.root / "output" / "failure"
        if failure.exists() and failure.read_text().strip():
            return f"AlgorithmError: {failure.read_text().strip()}"[:1024]
        tail = failed.log_path.read_text(errors="replace")[-800:] if failed.log_path.exists() else ""
        return f"AlgorithmError: {failed.host} exited with {failed.poll()}: {tail}"[:1024]

    def _upload_outputs(self, attempt: _Attempt) -> None:
        s3 = self.s3
        output = self.job.output_data_config["S3OutputPath"].rstrip("/") + f"/{self.name}/output/"
        model = io.BytesIO()
        with tarfile.open(fileobj=model, mode="w:gz") as tar:
            for host_container in attempt.containers:  # every host's /opt/ml/model, later hosts on top
                directory = host_container.root / "model"
                for path in sorted(p for p in directory.rglob("*") if p.is_file()):
                    tar.add(path, arcname=path.relative_to(directory).as_posix())
        _put(s3, output + "model.tar.gz", model.getvalue())
        self.job.model_artifacts = {"S3ModelArtifacts": output + "model.tar.gz"}
        tensorboard = self.job.tensor_board_output_config
        if tensorboard:
            for host_container in attempt.containers:
                local = self._in_container(host_container.root, tensorboard.get("LocalPath") or "/opt/ml/output/tensorboard")
                _upload_tree(s3, local, tensorboard["S3OutputPath"])

    def _collect_metrics(self) -> None:
        """What SageMaker does with MetricDefinitions: scan the log, keep each metric's last value."""
        text = self.log()
        final = []
        for definition in self.job.algorithm_specification.get("MetricDefinitions") or []:
            values = re.findall(definition["Regex"], text)
            if values:
                try:
                    final.append({"MetricName": definition["Name"], "Value": float(values[-1]), "Timestamp": _now()})
                except ValueError:
                    continue
        self.job.final_metric_data_list = final

    # -- checkpoints --------------------------------------------------------------------------------
    def _sync_loop(self, attempt: _Attempt) -> None:
        while attempt.running.is_set():
            try:
                self._sync_checkpoints(attempt)
            except DataMovementRefusedError as refused:  # _watch ends the job with it
                attempt.refused = refused
                return
            self._sync_logs(attempt)
            time.sleep(self.twin.settings.sync_interval_seconds)

    def _sync_logs(self, attempt: _Attempt) -> None:
        """What SageMaker does with a container's output: CloudWatch Logs, group
        /aws/sagemaker/TrainingJobs, one stream per host and start (`<job>/algo-1-<epoch>`), sent
        as it is written."""
        logs = boto3.client("logs", region_name=self.twin.region)
        for host_container in attempt.containers:
            path = host_container.log_path
            if not path.exists():
                continue
            sent = attempt.logged.get(host_container.host, 0)
            with path.open("rb") as handle:
                handle.seek(sent)
                data = handle.read()
            complete = data[: data.rfind(b"\n") + 1] if attempt.running.is_set() else data  # whole lines while it runs
            if not complete:
                continue
            stream = f"{self.name}/{host_container.host}-{attempt.epoch}"
            if sent == 0:
                with contextlib.suppress(logs.exceptions.ResourceAlreadyExistsException):
                    logs.create_log_group(logGroupName=TRAINING_JOB_LOG_GROUP)
                logs.create_log_stream(logGroupName=TRAINING_JOB_LOG_GROUP, logStreamName=stream)
            now = int(time.time() * 1000)
            lines = complete.decode(errors="replace").splitlines() or [""]
            for start in range(0, len(lines), 5000):  # PutLogEvents takes at most 10,000 events
                events = [{"timestamp": now, "message": line or " "} for line in lines[start : start + 5000]]
                logs.put_log_events(logGroupName=TRAINING_JOB_LOG_GROUP, logStreamName=stream, logEvents=events)
            attempt.logged[host_container.host] = sent + len(complete)

    def _sync_checkpoints(self, attempt: _Attempt) -> None:
        """Upload each host's new or changed checkpoint files to the one S3 prefix, and delete there
        each file the host held (restored or uploaded) that is gone from its directory."""
        if not self.job.checkpoint_config:
            return
        s3 = self.s3
        uri = self.job.checkpoint_config["S3Uri"]
        for host_container in attempt.containers:
            local = self._in_container(host_container.root, self.job.checkpoint_config.get("LocalPath") or "/opt/ml/checkpoints")
            _upload_tree(s3, local, uri, self._synced(attempt, host_container.host))

    def _synced(self, attempt: _Attempt, host: str) -> dict[str, tuple[int, int]]:
        """The checkpoint files a host of this attempt holds in S3 (restored or uploaded), by size and mtime."""
        return self.twin.synced.setdefault((self.name, host, attempt.index), {})

    @staticmethod
    def _in_container(opt_ml: Path, path: str) -> Path:
        """A container path under /opt/ml as this machine sees it."""
        relative = Path(path).relative_to("/opt/ml")
        return opt_ml / relative

    # -- status --------------------------------------------------------------------------------
    def _status(self, status: str, secondary: str, message: str) -> None:
        now = _now()
        transitions = self.job.secondary_status_transitions
        if transitions and "EndTime" not in transitions[-1]:
            transitions[-1]["EndTime"] = now
        transitions.append({"Status": secondary, "StartTime": now, "StatusMessage": message})
        self.job.training_job_status, self.job.secondary_status = status, secondary
        self.job.last_modified_time = now
        if self.twin.feed is not None:
            self.twin.feed.job_status(self.name, status, secondary, self.job.failure_reason if status == "Failed" else None)

    def _end(self, status: str, secondary: str, message: str) -> None:
        self._record_mlflow_run()  # before the status: a caller that sees the job ended sees its run
        self._status(status, secondary, message)
        self.job.secondary_status_transitions[-1]["EndTime"] = self.job.last_modified_time
        self.job.training_end_time = self.job.last_modified_time
        ran = [a.ended - a.started for a in self.attempts if a.started]
        # Billable: the seconds the hosts ran; training: from the first start to the end, including
        # the time an interrupted spot job waited (SageMaker's savings = 1 - billable / training).
        self.job.billable_time_in_seconds = max(1, round(sum(ran))) if ran else 0
        start = self.job.training_start_time
        self.job.training_time_in_seconds = max(1, round((self.job.training_end_time - start).total_seconds())) if ran else 0

    def _teardown(self, attempt: _Attempt) -> None:
        for host_container in attempt.containers:
            if host_container.poll() is None:
                host_container.kill()
        if attempt.network is not None:
            attempt.network.destroy()


class SageMakerTwin:
    """The emulated training service. moto keeps the job records; the twin makes them true."""

    def __init__(
        self,
        workdir: Path,
        images: ImageRegistry,
        *,
        region: str,
        settings: TwinSettings | None = None,
        feed: EventFeed | None = None,
    ) -> None:
        require_namespaces()
        remove_stale_networks()
        self.workdir = workdir
        self.images = images
        self.region = region
        self.settings = settings or TwinSettings()
        self.feed = feed  # where `local serve` prints each job's creation and status changes
        # The MLflow tracking server jobs with MlflowConfig log to, when one runs (`local serve`, tests).
        self.tracking_server: TrackingServer | None = None
        # The twin's S3 as the jobs' containers reach it (s3_endpoint.py), when it is served (local_aws).
        self.storage_endpoint: str | None = None
        self.runs: dict[str, JobRun] = {}
        self.closed = False  # from close() on, no job starts
        self.synced: dict[tuple[str, str, int], dict[str, tuple[int, int]]] = {}
        self._capacity: dict[str, int] = {}
        self._injected: dict[InjectedFault, int] = {}  # uses left
        self._lock = threading.Lock()

    # -- hooks for tests and local mode ---------------------------------------------------------
    def refuse_capacity(self, instance_type: str, times: int = 1) -> None:
        """The next `times` jobs on this type fail for capacity (-1: every one)."""
        with self._lock:
            self._capacity[instance_type] = times

    def take_capacity_refusal(self, instance_type: str) -> bool:
        with self._lock:
            remaining = self._capacity.get(instance_type, 0)
            if remaining == 0:
                return False
            self._capacity[instance_type] = remaining - 1 if remaining > 0 else remaining
            return True

    def inject(self, fault: InjectedFault) -> None:
        """The next `fault.times` jobs created whose names start with `fault.job_prefix` get the fault
        (see InjectedFault); injecting the same fault again adds its uses."""
        with self._lock:
            self._injected[fault] = self._injected.get(fault, 0) + fault.times

    def take_injected_faults(self, job_name: str) -> tuple[InjectedFault, ...]:
        """A new job's faults: one use of each injected fault whose prefix its name starts with."""
        with self._lock:
            taken = tuple(fault for fault, left in self._injected.items() if left > 0 and job_name.startswith(fault.job_prefix))
            for fault in taken:
                self._injected[fault] -= 1
            return taken

    def interrupt(self, job_name: str) -> None:
        """A spot interruption: SIGTERM to every host, SIGKILL after the grace, then a restart."""
        self.runs[job_name].requests.interrupt.set()

    def instances_in_use(self, instance_type: str, spot: bool) -> int:
        """What the account's jobs in progress hold of a type, on spot or on demand (its quotas count it)."""
        held = 0
        for run in list(self.runs.values()):
            job = run.job
            config = job.resource_config  # a job of InstancePreferences holds a type once SageMaker selected it
            holds = config.get("SelectedInstanceType") or config.get("InstanceType")
            if (
                job.training_job_status == "InProgress"
                and bool(job.enable_managed_spot_training) == spot
                and holds == instance_type
            ):
                held += int(config.get("SelectedInstanceCount") or config["InstanceCount"])
        return held

    def gpus(self, instance_type: str) -> int:
        """The processes a host of this type runs here: its GPUs, capped by the setting (CPU only)."""
        instance = facts.instance(instance_type)
        real = instance.accelerators if instance and instance.kind == "gpu" else 0
        return min(real, self.settings.gpus_per_host)

    # -- the API ----------------------------------------------------------------------------------
    def check_image(self, image_uri: str) -> TwinImage:
        """CreateTrainingJob's check: the image must exist in the job's region."""
        return self.images.resolve(image_uri, self.region)

    def start(self, job: Any, image: TwinImage) -> JobRun:
        run = JobRun(self, job, image)
        with self._lock:
            if self.closed:
                raise TwinClosedError(f"the SageMaker twin has closed: job {run.name} was not started")
            self.runs[run.name] = run
        if self.feed is not None:
            config = job.resource_config
            types = [p["InstanceType"] for p in config.get("InstancePreferences") or []] or [config["InstanceType"]]
            self.feed.job_created(run.name, int(config["InstanceCount"]), types)
        job.secondary_status_transitions = []
        job.training_start_time = None
        job.training_end_time = None
        job.failure_reason = None
        job.model_artifacts = None
        job.final_metric_data_list = None
        job.mlflow_details = None
        run._status("InProgress", "Starting", "Launching requested ML instances")
        run.thread.start()
        return run

    def stop(self, job_name: str) -> None:
        run = self.runs.get(job_name)
        if run is not None:
            run.requests.stop.set()

    def wait(self, timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        for run in list(self.runs.values()):
            run.thread.join(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        """Stop every job and wait for them. A job created from now on is refused: an execution still
        running when the twin closes (a restart on its way) once started one that trained on, unstopped,
        into later tests, its log sync calling AWS's own endpoints."""
        with self._lock:
            self.closed = True
        for run in list(self.runs.values()):
            run.requests.stop.set()
        self.wait(timeout=self.settings.stop_grace_seconds + 30)


def _now() -> datetime:
    return datetime.now(UTC)


def _executable(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


@contextlib.contextmanager
def _moving(direction: str, what: str, uri: str) -> Iterator[None]:
    """S3 refusing the job's role (AccessDenied) becomes the job's failure, worded as SageMaker words it."""
    try:
        yield
    except ClientError as error:
        code, message = error.response["Error"].get("Code"), error.response["Error"].get("Message", "")
        if code != iam_twin.ACCESS_DENIED:
            raise
        reason = DATA_FAILURE.format(direction=direction, what=what, uri=uri, code=code, message=message)
        raise DataMovementRefusedError(reason) from None


def _keys(s3: Any, uri: str) -> list[str]:
    bucket, prefix = split_s3_uri(uri)
    keys = []
    with _moving("download", "list objects under", uri):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys += [item["Key"] for item in page.get("Contents", [])]
    return sorted(keys)


def _download(s3: Any, uri: str, destination: Path) -> None:
    """One object into a file: GetObject, as SageMaker reads it (no HeadObject first, whose refusal has no code)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    bucket, key = split_s3_uri(uri)
    with _moving("download", "download object", uri):
        body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    with destination.open("wb") as file:
        shutil.copyfileobj(body, file)


def _download_keys(s3: Any, uri: str, keys: list[str], destination: Path) -> None:
    """Objects under an S3 prefix into a directory: each key without the prefix's folder part
    (an exact object key keeps its base name), as SageMaker lays out a channel."""
    bucket, prefix = split_s3_uri(uri)
    folder = prefix[: prefix.rfind("/") + 1]
    destination.mkdir(parents=True, exist_ok=True)
    for key in keys:
        _download(s3, f"s3://{bucket}/{key}", destination / key[len(folder) :])


def _put(s3: Any, uri: str, body: bytes) -> None:
    bucket, key = split_s3_uri(uri)
    with _moving("upload", "upload object", uri):
        s3.put_object(Bucket=bucket, Key=key, Body=body)


def _signatures(local: Path) -> dict[str, tuple[int, int]]:
    """Each file under `local` (its path relative to it) with its size and mtime. The job prunes its
    checkpoints while this looks: a folder or file gone meanwhile is skipped (os.walk ignores a folder
    it can no longer list, where Path.rglob raised and ended the sync thread)."""
    found = {}
    for folder, _, files in os.walk(local):
        for name in files:
            path = Path(folder) / name
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            found[path.relative_to(local).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return found


def _upload_tree(s3: Any, local: Path, uri: str, synced: dict[str, tuple[int, int]] | None = None) -> None:
    """Upload files that are new or changed since the last call (by size and mtime); with `synced`
    (what the host holds in S3 so far), also delete from S3 each of those files gone from `local`."""
    if not local.is_dir():
        return
    bucket, prefix = split_s3_uri(uri)

    def key(relative: str) -> str:
        return f"{prefix.rstrip('/')}/{relative}" if prefix else relative

    present = _signatures(local)
    for relative, signature in sorted(present.items()):
        if synced is not None and synced.get(relative) == signature:
            continue
        try:
            body = (local / relative).read_bytes()
        except FileNotFoundError:  # pruned since
            continue
        _put(s3, f"s3://{bucket}/{key(relative)}", body)
        if synced is not None:
            synced[relative] = signature
    for relative in sorted(set(synced or ()) - set(present)):
        with _moving("upload", "delete object", f"s3://{bucket}/{key(relative)}"):
            s3.delete_object(Bucket=bucket, Key=key(relative))
        del synced[relative]
