"""The operator CLI and the real AWS CLI against `trainstack local serve`, started here as a user starts
it: a subprocess on a free loopback port, reached only over HTTP with the environment it prints."""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest
import yaml

from tests.cli.served import BIN, Served, serving
from trainstack.layout import SOURCES_PREFIX, TRAINING_JOB_LOG_GROUP
from trainstack.polling import poll_until
from trainstack.source_archive import write_source_tarball
from trainstack_cli.stack import EXIT_RUN_FAILED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

DATA = "s3://trainstack-local-trigger/datasets/default/sample/"
UNREACHED = 1_000_000  # steps no run here reaches: only a stop ends it


@pytest.fixture(scope="module")
def served(default_stack, tmp_path_factory):
    with serving(default_stack.json, tmp_path_factory.mktemp("served")) as stack:
        yield stack


def job(name: str, **overrides) -> dict:
    return {
        "name": name,
        "instance_type": "ml.g5.12xlarge",
        "strategy": "ddp",
        "framework_version": "2.10.0",
        "hyperparameters": {"model": "gpt-tiny", "max_steps": 6, "log_every": 2, "seed": 0},
        "inputs": {"train": {"s3_uri": DATA, "mode": "File"}},
        "max_runtime": "1h",
        **overrides,
    }


def write(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec))
    return path


def test_the_aws_cli_starts_a_run_with_s3_cp_and_reads_it_from_step_functions_sagemaker_and_logs(served, tmp_path):
    spec = write(tmp_path / "from-aws-cli.yaml", job("awscli"))
    copied = served.aws("s3", "cp", str(spec), f"s3://{served.outputs['TriggerBucketName']}/jobs/from-aws-cli.yaml")
    assert copied.returncode == 0, copied.stderr

    run = served.run_of_upload("jobs/from-aws-cli.yaml")
    view = served.wait_until(run, lambda v: v["status"] != "RUNNING")
    assert view["status"] == "SUCCEEDED", view["cause"]
    (trial,) = view["trials"]
    job_name = trial["job_name"]
    assert (
        served.aws_json("sagemaker", "describe-training-job", "--training-job-name", job_name)["TrainingJobStatus"] == "Completed"
    )
    streams = served.aws_json(
        "logs", "describe-log-streams", "--log-group-name", TRAINING_JOB_LOG_GROUP, "--log-stream-name-prefix", f"{job_name}/"
    )
    assert [s["logStreamName"].rsplit("-", 1)[0] for s in streams["logStreams"]] == [f"{job_name}/algo-1"]
    refused = served.trainstack("resume", run)  # an upload's lineage is its object version: nothing can name it
    assert refused.returncode == 2 and "started by an upload" in refused.stderr


def test_submit_packs_a_local_source_dir_into_the_artifacts_bucket_and_waits_for_the_run(served, tmp_path):
    source = tmp_path / "code"
    source.mkdir()
    (source / "train.py").write_text(
        "import os, pathlib\n"
        "if int(os.environ.get('RANK', '0')) == 0:\n"
        "    for step in (1, 2):\n"
        "        print(f'step={step} loss={1 / step:.4f} tokens_per_sec=100.0', flush=True)\n"
        "    pathlib.Path(os.environ['SM_MODEL_DIR'], 'weights.txt').write_text('trained')\n"
    )
    spec = write(tmp_path / "own-code.yaml", job("own-code", hyperparameters={}, entry_point="train.py"))

    result = served.trainstack("submit", str(spec), "--source", str(source), "--wait", "--json")

    assert result.returncode == 0, result.stderr
    view = json.loads(result.stdout)
    assert view["status"] == "SUCCEEDED"
    (trial,) = view["trials"]
    assert trial["metrics"]["train:step"] == 2 and trial["metrics"]["train:loss"] == 0.5
    description = served.aws_json("sagemaker", "describe-training-job", "--training-job-name", trial["job_name"])
    code = json.loads(description["HyperParameters"]["sagemaker_submit_directory"])
    bucket = served.outputs["ArtifactsBucketName"]
    assert code.startswith(f"s3://{bucket}/{SOURCES_PREFIX}") and code.endswith("/sourcedir.tar.gz")
    uploaded = tmp_path / "uploaded.tar.gz"
    assert served.aws("s3", "cp", code, str(uploaded)).returncode == 0
    assert uploaded.read_bytes() == write_source_tarball(source, tmp_path / "expected.tar.gz").read_bytes()


def test_runs_and_status_report_trials_history_metrics_billable_seconds_and_cost(served, tmp_path):
    run = json.loads(served.trainstack("submit", str(write(tmp_path / "s.yaml", job("status"))), "--inline", "--json").stdout)[
        "run"
    ]
    view = served.wait_until(run, lambda v: v["status"] != "RUNNING")

    (trial,) = view["trials"]
    assert (view["status"], view["position"], trial["status"]) == ("SUCCEEDED", "Completed", "Completed")
    assert [t["status"] for t in trial["transitions"]][-3:] == ["Training", "Uploading", "Completed"]
    assert trial["metrics"]["train:step"] == 6 and trial["metrics"]["train:loss"] > 0
    assert trial["billable_seconds"] >= 1 and trial["instance_type"] == "ml.g5.12xlarge"
    price = json.loads(served.trainstack("plan", str(tmp_path / "s.yaml"), "--json").stdout)["options"][0]["cost_usd"][
        "price_per_hour"
    ]
    assert trial["cost_usd"] == pytest.approx(price * trial["billable_seconds"] / 3600, abs=1e-4)
    assert trial["model_artifacts"].endswith("/output/model.tar.gz")

    listed = served.trainstack("runs", "--json")
    assert listed.returncode == 0, listed.stderr
    runs = {r["name"]: r for r in json.loads(listed.stdout)}
    assert runs[run]["status"] == "SUCCEEDED" and runs[run]["billable_seconds"] == trial["billable_seconds"]
    assert runs[run]["cost_usd"] == trial["cost_usd"]
    assert "status" in served.trainstack("runs").stdout  # the tables, for people
    shown = served.trainstack("status", run).stdout
    assert f"{trial['job_name']}: history" in shown and "#/jobs/" in shown


def test_logs_print_the_training_output_of_one_host(served, tmp_path):
    run = json.loads(served.trainstack("submit", str(write(tmp_path / "l.yaml", job("logs"))), "--inline", "--json").stdout)[
        "run"
    ]

    followed = served.trainstack("logs", run, "--host", "algo-1", "--follow")

    assert followed.returncode == 0, followed.stderr
    steps = [line.split()[0] for line in followed.stdout.splitlines() if line.startswith("step=")]
    assert steps == ["step=2", "step=4", "step=6"]
    records = [json.loads(line) for line in served.trainstack("logs", run, "--json").stdout.splitlines()]
    assert {r["stream"].rsplit("-", 1)[0].rsplit("/", 1)[1] for r in records} == {"algo-1"}


def test_stop_ends_the_run_mid_training_keeping_its_checkpoint_and_resume_continues_from_it(served, tmp_path):
    # Only a stop ends these runs, however long the CLI and the stop take on a loaded machine (`resume`
    # reuses the spec, so the resumed run is stopped too, once it has trained past the saved step).
    hyperparameters = {"model": "gpt-tiny", "max_steps": UNREACHED, "log_every": 1, "checkpoint_every": UNREACHED, "seed": 0}
    spec = write(tmp_path / "stop.yaml", job("stop", hyperparameters=hyperparameters, checkpoints=True))
    run = json.loads(served.trainstack("submit", str(spec), "--inline", "--json").stdout)["run"]
    served.wait_until(run, lambda v: _step(v) >= 5)

    stopped = served.trainstack("stop", run, "--json")

    assert stopped.returncode == 0, stopped.stderr
    view = json.loads(stopped.stdout)
    (trial,) = view["trials"]
    assert (view["status"], trial["status"]) == ("ABORTED", "Stopped")
    description = served.aws_json("sagemaker", "describe-training-job", "--training-job-name", trial["job_name"])
    listing = served.aws("s3", "ls", "--recursive", description["CheckpointConfig"]["S3Uri"])
    (saved,) = {int(part.removeprefix("step_")) for part in listing.stdout.split("/") if part.startswith("step_")}

    command = [str(BIN / "trainstack"), "resume", run, "--wait", "--json"]
    following = subprocess.Popen(command, env=served.environment, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    resumed = poll_until(lambda: _newer_run(served, run), timeout=120, interval=1, what="the resumed run to start")
    served.wait_until(resumed, lambda v: _step(v) >= saved + 2)
    assert served.trainstack("stop", resumed).returncode == 0
    out, err = following.communicate(timeout=300)

    assert following.returncode == EXIT_RUN_FAILED and f"run {resumed} ABORTED" in err  # --wait followed it to its end
    followed = json.loads(out)
    (continued,) = followed["trials"]
    assert followed["name"] == resumed and continued["job_name"] != trial["job_name"]
    logs = served.trainstack("logs", resumed).stdout
    assert f"at step {saved}" in logs and f"step={saved + 1} " in logs and f"step={saved} " not in logs


def _step(view: dict) -> int:
    return view["trials"][0]["metrics"].get("train:step", 0) if view["trials"] else 0


def _newer_run(served: Served, than: str) -> str | None:
    """The run started after `than` (runs are listed newest first)."""
    names = [r["name"] for r in json.loads(served.trainstack("runs", "--json").stdout)]
    return names[0] if names and names[0] != than else None


def test_a_missing_stack_wrong_credentials_and_an_unknown_run_each_get_one_line_and_their_exit_code(served):
    missing = served.trainstack("runs", "--stack", "no-such-stack")
    refused = served.trainstack("runs", AWS_ACCESS_KEY_ID="AKIAIOSFODNN7EXAMPLE")
    unknown = served.trainstack("status", "no-such-run")

    for result, code, words in (
        (missing, 3, "no-such-stack not found"),
        (refused, 3, "refused the credentials"),
        (unknown, 4, "no run no-such-run"),
    ):
        assert result.returncode == code, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr and "Traceback" not in result.stderr


def test_a_spec_that_fails_validation_is_refused_before_anything_is_uploaded(served, tmp_path):
    spec = write(tmp_path / "bad.yaml", job("bad", instance_type="ml.g5.13xlarge"))
    before = served.aws_json(
        "s3api", "list-object-versions", "--bucket", served.outputs["TriggerBucketName"], "--prefix", "jobs/bad"
    )

    refused = served.trainstack("submit", str(spec))

    assert refused.returncode == 2 and "instance_type" in refused.stderr and "nothing was submitted" in refused.stderr
    after = served.aws_json(
        "s3api", "list-object-versions", "--bucket", served.outputs["TriggerBucketName"], "--prefix", "jobs/bad"
    )
    assert after == before


def test_serve_prints_one_line_per_event_of_a_failing_and_a_stopped_run(served, tmp_path):
    notes = tmp_path / "readme.txt"
    notes.write_text("not token shards")  # what only the running script can find out
    assert served.aws("s3", "cp", str(notes), "s3://trainstack-local-trigger/datasets/default/notes/readme.txt").returncode == 0
    broken = job("broken", inputs={"train": {"s3_uri": "s3://trainstack-local-trigger/datasets/default/notes/", "mode": "File"}})
    failing = json.loads(served.trainstack("submit", str(write(tmp_path / "broken.yaml", broken)), "--inline", "--json").stdout)[
        "run"
    ]
    failed = served.wait_until(failing, lambda v: v["status"] != "RUNNING")
    long = job("long", hyperparameters={"model": "gpt-tiny", "max_steps": UNREACHED, "log_every": 1, "seed": 0})
    running = json.loads(served.trainstack("submit", str(write(tmp_path / "long.yaml", long)), "--inline", "--json").stdout)[
        "run"
    ]
    served.wait_until(running, lambda v: v["trials"] and v["trials"][0]["metrics"].get("train:step", 0) >= 2)
    stopped = json.loads(served.trainstack("stop", running, "--json").stdout)

    (failed_job,), (stopped_job,) = ([t["job_name"] for t in view["trials"]] for view in (failed, stopped))
    reason = served.aws_json("sagemaker", "describe-training-job", "--training-job-name", failed_job)["FailureReason"]
    cause = served.aws_json("stepfunctions", "describe-execution", "--execution-arn", failed["execution_arn"])["cause"]
    assert "no token shards" in reason
    expected = {
        failing: [
            f"run {failing} started",
            f"job {failed_job} created: 1 x ml.g5.12xlarge",
            f"job {failed_job}: Downloading (InProgress)",
            f"job {failed_job}: Training (InProgress)",
            f"job {failed_job}: Failed (Failed): {' '.join(reason.split())}",
            f"run {failing} ended FAILED: {' '.join(cause.split())}",
        ],
        running: [
            f"run {running} started",
            f"job {stopped_job} created: 1 x ml.g5.12xlarge",
            f"job {stopped_job}: Downloading (InProgress)",
            f"job {stopped_job}: Training (InProgress)",
            f"run {running} ended ABORTED",
            f"job {stopped_job}: Stopping (Stopping)",
            f"job {stopped_job}: Stopped (Stopped)",
        ],
    }
    for run, job_name in ((failing, failed_job), (running, stopped_job)):
        lines = poll_until(
            lambda run=run, job_name=job_name: [
                line for line in served.printed if f"run {run} " in line or f"job {job_name}" in line
            ],
            lambda lines, run=run: len(lines) >= len(expected[run]),  # then compared line by line
            timeout=30,
            what=f"the lines of run {run}",
        )
        assert lines == expected[run]


def test_status_of_a_tracked_run_links_its_tracking_servers_ui_and_serve_stays_quiet(served, tmp_path):
    tracked = job("tracked", image="project", tracking={"mlflow": "stack", "experiment": "served"})
    run = _submitted(served.trainstack("submit", str(write(tmp_path / "tracked.yaml", tracked)), "--json"))
    assert served.wait_until(run, lambda view: view["status"] != "RUNNING")["status"] == "SUCCEEDED"
    shown = served.trainstack("status", run)
    assert shown.returncode == 0, shown.stderr
    (link,) = re.findall(r"MLflow UI, signed in for 5 minutes: (\S+)", shown.stdout)
    with urllib.request.urlopen(f"{link}/health", timeout=30) as answer:  # the twin's live MLflow server
        assert answer.read() == b"OK"
    assert "Traceback" not in served.log.read_text()  # the twin answers the call as SageMaker does, quietly


def _submitted(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["run"]
