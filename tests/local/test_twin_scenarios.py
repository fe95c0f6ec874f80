"""Where distributed training breaks on SageMaker, run through the synthesized state machine and the
twin: several hosts, stop signals to PID 1, per-host checkpoint directories synced to one prefix.

Every job here trains the tiny GPT on the shipped sample data. A GPU instance type gets 2 emulated
GPUs per host in the twin (two CPU processes with gloo); `ml.m5.xlarge` has none (one process).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import boto3
import pytest
import torch

from tests.local.twin_runs import (
    checkpoint_keys,
    description,
    function_log,
    job_name,
    job_run,
    model_state,
    printed_steps,
    start_inline,
    wait_for_status,
    wait_for_step,
)
from tests.training.launch import TRAIN, environment
from trainstack.polling import poll_until
from trainstack.s3uri import split_s3_uri
from trainstack.stack_context import STOP_FUNCTION_OUTPUT
from trainstack_local.emulator import REGION, local_aws, training_files
from trainstack_local.pipeline import finish, upload_sample_data
from trainstack_local.sagemaker_twin import JobRun, TwinSettings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HYPERPARAMETERS = {
    "model": "gpt-tiny",
    "max_steps": 200,  # a few seconds: long enough for a stop to arrive mid-run
    "log_every": 1,
    "seed": 0,
    "lr": 1e-3,
    "warmup_steps": 2,
    "micro_batch_size": 4,
    "checkpoint_every": 100,  # only the final checkpoint, unless a stop asks for one
}
GPU, CPU = "ml.g5.12xlarge", "ml.m5.xlarge"
SETTINGS = TwinSettings(stop_grace_seconds=60, spot_capacity_wait_seconds=0.5)
UNREACHED = 1_000_000  # steps no job here reaches on its own
RESUMED_STEPS = 400  # seconds of training on 2 CPU processes, well past a synchronous Lambda call


def spec(name: str, *, instance_type: str = GPU, hosts: int = 1, **hyperparameters: object) -> dict:
    return {
        "name": name,
        "instance_type": instance_type,
        "instance_count": hosts,
        "strategy": "ddp",
        "framework_version": "2.10.0",
        "hyperparameters": {**HYPERPARAMETERS, **hyperparameters},
        "inputs": {"train": {"s3_uri": "s3://trainstack-local-trigger/datasets/default/sample/", "mode": "File"}},
        "max_runtime": "1h",
    }


@pytest.fixture(scope="module")
def twin_stack(default_stack, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("twin")
    with local_aws(default_stack.json, workdir, files=training_files(workdir), settings=SETTINGS) as (stack, twin):
        upload_sample_data(stack)
        yield stack, twin


@pytest.fixture(scope="module")
def two_hosts(twin_stack):
    """A 2-host DDP job (2 processes per host) run to completion: the reference for later scenarios."""
    stack, _ = twin_stack
    job = spec("two-hosts", hosts=2)
    execution = start_inline(stack, job, "two-hosts")
    run = finish(execution, timeout=300)
    assert (run.status, run.output.get("status")) == ("SUCCEEDED", "Completed"), run.cause
    return job_name(stack, job, "two-hosts")


@pytest.fixture(scope="module")
def one_host_four_processes(tmp_path_factory):
    """The same training as one host with 4 processes, straight under torchrun (no SageMaker)."""
    import subprocess

    from tests.training.launch import BIN

    directory = tmp_path_factory.mktemp("four")
    arguments = [f"--{key}={value}" for key, value in HYPERPARAMETERS.items()]
    command = [str(BIN / "torchrun"), "--standalone", "--nproc_per_node=4", str(TRAIN), *arguments]
    command += [f"--checkpoint_dir={directory / 'checkpoints'}", f"--model_dir={directory / 'model'}"]
    command += [f"--output_dir={directory / 'output'}", "--data_dir", str(TRAIN.parent / "sample_data" / "tokens")]
    result = subprocess.run(command, env=environment(), capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    return torch.load(directory / "model" / "model.pt", weights_only=True)


def test_a_two_host_job_runs_one_container_per_host_and_learns_what_one_host_with_four_processes_learns(
    twin_stack, two_hosts, one_host_four_processes
):
    _, twin = twin_stack
    run = twin.runs[two_hosts]
    log = run.log()
    assert "torchrun --nnodes 2 --nproc_per_node 2 --master_addr algo-1 --master_port 7777 --node_rank 1" in log
    assert description(two_hosts)["TrainingJobStatus"] == "Completed"
    weights = model_state(two_hosts)
    assert weights.keys() == one_host_four_processes.keys()
    for key, value in weights.items():  # the same world size and global batch; only the reduction order differs
        torch.testing.assert_close(value, one_host_four_processes[key], rtol=1e-4, atol=1e-5)


def test_a_spot_interruption_reaches_pid_1_of_every_host_saves_the_current_step_and_resumes_exactly(twin_stack, two_hosts):
    stack, twin = twin_stack
    job = spec("spot", hosts=2)
    start_inline(stack, job, "spot")
    run = job_run(twin, job_name(stack, job, "spot"))
    wait_for_step(run, 6)
    twin.interrupt(run.name)
    final = wait_for_status(run.name, ("Completed", "Failed", "Stopped"), timeout=400)
    assert final["TrainingJobStatus"] == "Completed", final.get("FailureReason")

    first, second = run.attempts[0], run.attempts[1]
    for host in ("algo-1", "algo-2"):  # the signal went to PID 1 of both hosts, which forwarded it
        assert "trainstack container entry: SIGTERM received" in (first.root / f"{host}.log").read_text()
    interrupted = max(printed_steps(run, attempt=0))
    assert interrupted % HYPERPARAMETERS["checkpoint_every"] != 0 and interrupted < HYPERPARAMETERS["max_steps"]
    assert f"saved /opt/ml/checkpoints/step_{interrupted:08d} at step {interrupted}" in (first.root / "algo-1.log").read_text()
    resumed_log = (second.root / "algo-1.log").read_text()
    assert f"resumed from /opt/ml/checkpoints/step_{interrupted:08d} at step {interrupted}" in resumed_log
    assert min(printed_steps(run, attempt=1)) == interrupted + 1

    statuses = [t["Status"] for t in final["SecondaryStatusTransitions"]]
    assert statuses.index("Interrupted") < len(statuses) - 1 - statuses[::-1].index("Training")
    assert 0 < final["BillableTimeInSeconds"] <= final["TrainingTimeInSeconds"]
    reference = model_state(two_hosts)
    for key, value in model_state(run.name).items():
        torch.testing.assert_close(value, reference[key], rtol=0, atol=1e-6)


@dataclass(frozen=True)
class StoppedThenResumed:
    stopped: dict  # the stopped job's description
    saved: int  # the step its stop saved
    checkpoints: list[str]
    resumed: JobRun
    late_stop_answer: dict  # the Stop function's answer to the first execution's ABORTED event, delivered again
    resumed_status_after_late_stop: str
    resumed_outcome: str


@pytest.fixture(scope="module")
def stopped_then_resumed(twin_stack) -> StoppedThenResumed:
    """A run stopped mid-training by stopping its execution, then resumed; while the resumed job trains,
    the first execution's ABORTED event reaches the Stop function again, as a late delivery or a DLQ
    redrive brings it. One lineage serves both scenarios below (each job start costs ~15 s here)."""
    stack, twin = twin_stack
    # The first job could not end on its own before the stop reaches it, however slowly the stop travels
    # (execution ABORTED → EventBridge → Stop → StopTrainingJob → PID 1); with 200 steps, a loaded CI
    # machine once let it complete first. The resumed job trains a fixed stretch past the saved step,
    # long enough to be still training when the late stop arrives.
    job = spec("stop", max_steps=UNREACHED, checkpoint_every=UNREACHED)
    sfn = boto3.client("stepfunctions", region_name=REGION)
    first = start_inline(stack, job, "stop-1", lineage="stop-lineage")
    run = job_run(twin, job_name(stack, job, "stop-1", lineage="stop-lineage"))
    wait_for_step(run, 5)
    sfn.stop_execution(executionArn=first)
    stopped = wait_for_status(run.name, ("Stopped", "Completed", "Failed"), timeout=200)
    saved = max(printed_steps(run))
    checkpoints = checkpoint_keys(run.name)

    job = spec("stop", max_steps=saved + RESUMED_STEPS, checkpoint_every=UNREACHED)
    second = start_inline(stack, job, "stop-2", lineage="stop-lineage", resume=True)
    resumed = job_run(twin, job_name(stack, job, "stop-2", lineage="stop-lineage", resume=True))
    wait_for_step(resumed, saved + 1)
    ended = sfn.describe_execution(executionArn=first)
    late = {"detail": {key: ended[key] for key in ("executionArn", "stateMachineArn", "name", "status", "input")}}
    answer = boto3.client("lambda", region_name=REGION).invoke(
        FunctionName=stack.outputs[STOP_FUNCTION_OUTPUT], Payload=json.dumps(late).encode()
    )
    late_answer = json.loads(answer["Payload"].read())
    status_after = description(resumed.name)["TrainingJobStatus"]
    return StoppedThenResumed(stopped, saved, checkpoints, resumed, late_answer, status_after, finish(second, timeout=300).status)


def test_stopping_the_execution_stops_the_job_with_a_complete_checkpoint_that_a_resumed_run_continues(stopped_then_resumed):
    outcome = stopped_then_resumed
    assert outcome.stopped["TrainingJobStatus"] == "Stopped"
    step = f"step_{outcome.saved:08d}"
    assert f"{step}/manifest.json" in outcome.checkpoints
    manifest = json.loads(_object(outcome.stopped["CheckpointConfig"]["S3Uri"] + f"{step}/manifest.json"))
    assert all(f"{step}/{name}" in outcome.checkpoints for name in manifest["files"])

    assert outcome.resumed_outcome == "SUCCEEDED"
    assert outcome.resumed.name != outcome.stopped["TrainingJobName"]
    log = outcome.resumed.log()
    assert f"at step {outcome.saved}" in log and min(printed_steps(outcome.resumed)) == outcome.saved + 1


def test_a_stopped_execution_is_aborted_as_stop_execution_answers_not_when_its_state_next_looks(twin_stack):
    # Started and stopped at once: the execution is inside Validate's task, which the interpreter finishes
    # before it sees the stop; Step Functions answers ABORTED, with the stop's date, from then on.
    stack, _ = twin_stack
    sfn = boto3.client("stepfunctions", region_name=REGION)
    execution = start_inline(stack, spec("stopped-at-once"), "stopped-at-once")

    stop_date = sfn.stop_execution(executionArn=execution)["stopDate"]
    described = sfn.describe_execution(executionArn=execution)

    assert (described["status"], described.get("stopDate")) == ("ABORTED", stop_date)


def test_a_late_stop_of_a_stopped_run_leaves_the_job_of_the_run_that_resumed_it(stopped_then_resumed):
    assert stopped_then_resumed.late_stop_answer["stopped"] == []
    assert stopped_then_resumed.resumed_status_after_late_stop == "InProgress"
    assert stopped_then_resumed.resumed_outcome == "SUCCEEDED"


def test_a_shard_of_a_non_zero_node_missing_from_s3_makes_every_host_use_the_previous_checkpoint(twin_stack):
    stack, twin = twin_stack
    job = spec("missing-shard", hosts=2, max_steps=6, checkpoint_every=3)
    first = start_inline(stack, job, "shard-1", lineage="shard-lineage")
    assert finish(first, timeout=300).status == "SUCCEEDED"
    name = job_name(stack, job, "shard-1", lineage="shard-lineage")
    uri = description(name)["CheckpointConfig"]["S3Uri"]
    node_one_shard = "step_00000006/__2_0.distcp"  # global rank 2 runs on algo-2
    assert node_one_shard in checkpoint_keys(name)
    bucket, prefix = split_s3_uri(uri)
    boto3.client("s3", region_name=REGION).delete_object(Bucket=bucket, Key=prefix + node_one_shard)

    again = start_inline(stack, {**job, "hyperparameters": {**job["hyperparameters"], "max_steps": 9}}, "shard-2",
                         lineage="shard-lineage", resume=True)  # fmt: skip
    assert finish(again, timeout=300).status == "SUCCEEDED"
    run = twin.runs[job_name(stack, job, "shard-2", lineage="shard-lineage", resume=True)]
    assert "resumed from /opt/ml/checkpoints/step_00000003 at step 3" in run.log()
    assert min(printed_steps(run)) == 4


def test_a_checkpoint_the_job_prunes_is_deleted_from_s3_as_sagemaker_deletes_it(twin_stack):
    stack, _ = twin_stack
    job = spec("pruned", hosts=2, max_steps=9, checkpoint_every=3)  # saves at steps 3, 6 and 9; each host keeps 2
    assert finish(start_inline(stack, job, "pruned-1"), timeout=300).status == "SUCCEEDED"
    keys = checkpoint_keys(job_name(stack, job, "pruned-1"))
    assert {key.split("/", 1)[0] for key in keys if key.startswith("step_")} == {"step_00000006", "step_00000009"}


def test_a_sweep_run_one_trial_at_a_time_trains_every_trial_from_step_zero_with_its_own_hyperparameters(twin_stack):
    stack, twin = twin_stack
    # one process per job (a CPU type): what is checked is the order and the hyperparameters, not the world
    job = {**spec("sweep", instance_type=CPU, max_steps=4), "sweep": {"max_concurrency": 1, "grid": {"lr": [0.001, 0.002]}}}
    assert finish(start_inline(stack, job, "sweep-1"), timeout=600).status == "SUCCEEDED"
    names = [name for name in twin.runs if name.startswith("trainstack-sweep-")]
    assert len(names) == 2
    prefixes = {description(name)["CheckpointConfig"]["S3Uri"] for name in names}
    assert len(prefixes) == 2
    learning_rates = set()
    for name in names:
        run = twin.runs[name]
        assert printed_steps(run) == [1, 2, 3, 4] and "resumed from" not in run.log()
        learning_rates.add(description(name)["HyperParameters"]["lr"])
    assert learning_rates == {"0.001", "0.002"}
    first, second = sorted((description(name) for name in names), key=lambda found: found["TrainingStartTime"])
    assert first["TrainingEndTime"] <= second["TrainingStartTime"]  # one at a time


def test_a_run_resumes_with_another_data_parallel_degree(twin_stack):
    # The sampler's arithmetic in both directions is checked step for step in
    # tests/training/test_distributed_runs.py; here, that a job's checkpoints reach a job on an instance
    # type with another number of processes through the pipeline and S3.
    stack, twin = twin_stack
    before, after = CPU, GPU
    lineage = f"degree-{before}-{after}"
    first = spec("degree", instance_type=before, max_steps=4)
    assert finish(start_inline(stack, first, f"{lineage}-1", lineage=lineage), timeout=300).status == "SUCCEEDED"
    second = spec("degree", instance_type=after, max_steps=8)
    assert finish(start_inline(stack, second, f"{lineage}-2", lineage=lineage, resume=True), timeout=300).status == "SUCCEEDED"
    run = twin.runs[job_name(stack, second, f"{lineage}-2", lineage=lineage, resume=True)]
    world = {CPU: 1, GPU: 2}
    batch = HYPERPARAMETERS["micro_batch_size"]
    assert f"resumed from /opt/ml/checkpoints/step_00000004 at step 4, example position {4 * world[before] * batch}" in run.log()
    assert f"data-parallel degree changed from {world[before]} to {world[after]}" in run.log()
    assert printed_steps(run) == [5, 6, 7, 8]


def _object(uri: str) -> str:
    bucket, key = split_s3_uri(uri)
    return boto3.client("s3", region_name=REGION).get_object(Bucket=bucket, Key=key)["Body"].read().decode()


def test_a_duplicate_execution_that_ends_early_leaves_the_job_the_original_created(twin_stack):
    stack, twin = twin_stack
    job = spec("duplicate", max_steps=UNREACHED, checkpoint_every=UNREACHED)  # running until its own execution stops
    original = start_inline(stack, job, "dup-1", lineage="dup-lineage")  # a redelivered trigger: the same lineage
    run = job_run(twin, job_name(stack, job, "dup-1", lineage="dup-lineage"))
    wait_for_step(run, 5)
    duplicate = start_inline(stack, job, "dup-2", lineage="dup-lineage")
    sfn = boto3.client("stepfunctions", region_name=REGION)
    poll_until(lambda: _has_state(sfn, duplicate, "WaitForJob"), timeout=60, what="the duplicate to find the job and watch it")
    sfn.stop_execution(executionArn=duplicate)
    left = f"dup-2 ABORTED: left {run.name} running, created by execution dup-1"
    poll_until(lambda: left in function_log("trainstack-stop"), timeout=60, what="the duplicate's Stop to decide")
    assert description(run.name)["TrainingJobStatus"] == "InProgress"

    sfn.stop_execution(executionArn=original)  # the original still owns the job: its end stops it
    stopped = f"dup-1 ABORTED: stopped {run.name}"
    poll_until(lambda: stopped in function_log("trainstack-stop"), timeout=60, what="the original's Stop to decide")
    assert wait_for_status(run.name, ("Stopped", "Completed", "Failed"), timeout=200)["TrainingJobStatus"] == "Stopped"
    assert len(run.attempts) == 1


def _has_state(sfn, execution: str, state: str) -> bool:
    events = sfn.get_execution_history(executionArn=execution)["events"]
    return any(e.get("stateEnteredEventDetails", {}).get("name") == state for e in events)
