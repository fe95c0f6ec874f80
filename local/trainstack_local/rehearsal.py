"""Failures a user rehearses on the served twin (`trainstack local fault ...`), each made the way the
twin makes it for the tests, so that what trainstack does about it can be watched before it happens
on AWS:

- `api SERVICE:Action --code CODE [--for DURATION] [--times N] [--fail N --every M]`: the control
  plane answers that error (with the HTTP status AWS gives it), for a while or a number of times;
  with `--fail N --every M`, intermittently: the action's calls are counted from the fault on (each
  of botocore's attempts is a call, whoever makes it), and of every M the first N fail;
- `spot JOB`: a spot reclaim of a training job (SIGTERM to each host's PID 1, SIGKILL after the
  grace, then the whole job again on fresh hosts from its checkpoints);
- `capacity TYPE [--times N]`: the next jobs on the type fail for capacity;
- `preempt JOB`: Batch preempts a job of the team queue (its service job's id or name, or a run,
  whose dispatched service jobs are all preempted): its training job stopped (SIGTERM: a checkpoint),
  the job back in the queue, then dispatched again as a new training job that resumes from the
  checkpoints (batch_twin.py; on AWS only a quota-managed queue preempts);
- `hang | nan | transport PREFIX --rank R --step S [--host algo-N] [--times N]`: the next jobs whose
  names start with PREFIX (a trial's: its restarts share it) hang, lose their loss to NaN, or fail
  their collectives at step S on rank R (the built-in script's fault hooks, honoured in the twin only);
- `clear`: the control plane answers again.

The served app takes them on FAULT_PATH as JSON, signed with the access key the twin printed (the
header ACCESS_KEY_HEADER), and answers with one line saying what it did, or why not.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from trainstack.durations import parse_duration
from trainstack.identity import Run
from trainstack.service_jobs import DISPATCHED
from trainstack.workflow import trigger_of
from trainstack_contract import fault_hooks

if TYPE_CHECKING:  # the CLI imports this module for its names alone, without the emulation
    from trainstack_local.batch_state import ServiceJob
    from trainstack_local.emulator import LocalStack
    from trainstack_local.sagemaker_twin import SageMakerTwin

FAULT_PATH = "/_trainstack/faults"
ACCESS_KEY_HEADER = "X-Trainstack-Access-Key"
SCRIPT_FAULTS = {
    "hang": fault_hooks.INJECT_HANG,
    "nan": fault_hooks.INJECT_NAN,
    "transport": fault_hooks.INJECT_TRANSPORT_ERROR,
}
KINDS = ("api", "spot", "capacity", "preempt", *SCRIPT_FAULTS, "clear")
# Why the rehearsal says Batch preempted a job (its statusReason follows "Preempted: ").
PREEMPTION_REASON = "rehearsed: a job of another quota share needed its instances"


class RehearsalError(ValueError):
    """A fault the twin cannot make as asked; the message names the field and the fix."""


def apply_fault(request: dict[str, Any], stack: LocalStack, twin: SageMakerTwin) -> str:
    """Make the fault `request` describes (the CLI's arguments, as JSON); what was done, in one line."""
    from trainstack_local.sagemaker_twin import InjectedFault

    kind = request.get("kind")
    target = str(request.get("target") or "")
    times = _times(request.get("times"))
    if kind == "clear":
        stack.faults.clear()
        return "the control plane answers again"
    if not target:
        raise RehearsalError(f"{kind}: name what it acts on (see `trainstack local fault --help`)")
    if kind == "api":
        service, _, action = target.partition(":")
        code = request.get("code") or ""
        if not (service and action and code):
            raise RehearsalError(
                "api: give SERVICE:Action and --code, e.g. sagemaker:DescribeTrainingJob --code ServiceUnavailable"
            )
        seconds = parse_duration(request["for"]) if request.get("for") else None
        fail, every = _intermittent(request.get("fail"), request.get("every"))
        message = request.get("message") or "rehearsed fault"
        stack.faults.inject(service, action, code, message, times=times, seconds=seconds, fail=fail, every=every)
        how_often = f" to the first {fail} of every {every} calls" if every > 1 else ""
        how_long = f" for {request['for']}" if seconds else ("" if times < 0 else f" {times} times")
        return f"{service} {action} answers {code}{how_often}{how_long}"
    if kind == "spot":
        if target not in twin.runs or twin.runs[target].job.training_job_status != "InProgress":
            raise RehearsalError(f"spot: {target} is no training job in progress; name one `trainstack status` shows")
        twin.interrupt(target)
        return f"{target}: spot capacity reclaimed; SageMaker starts it again from its checkpoints"
    if kind == "preempt":
        return _preempt(stack, target)
    if kind == "capacity":
        twin.refuse_capacity(target, times)
        return f"the next {'' if times < 0 else f'{times} '}jobs on {target} fail for capacity"
    if kind in SCRIPT_FAULTS:
        rank, step = _whole(request.get("rank"), "rank"), _whole(request.get("step"), "step")
        host = request.get("host") or None
        twin.inject(InjectedFault(target, SCRIPT_FAULTS[kind], f"{rank}:{step}", host, max(times, 1)))
        return f"the next {max(times, 1)} jobs named {target}* {kind} at step {step} on rank {rank}" + (
            f" of {host}" if host else ""
        )
    raise RehearsalError(f"kind {kind!r}: one of {', '.join(KINDS)}")


def _preempt(stack: LocalStack, target: str) -> str:
    """Batch preempts the dispatched service jobs `target` names (see the module's documentation)."""
    from trainstack_local.batch_api_checks import BatchClientError

    if stack.batch is None or not stack.batch.queues:
        raise RehearsalError("preempt: this stack has no team queue; serve a template synthesized with -c queue=true")
    running = [job for job in _service_jobs(stack, target) if job.status in DISPATCHED]
    if not running:
        raise RehearsalError(
            f"preempt: {target} names no job running through the team queue; name its run, job or service job "
            "as `trainstack status` shows them once the job is dispatched"
        )
    try:
        for job in running:
            stack.batch.preempt(job.id, PREEMPTION_REASON)
    except BatchClientError as error:  # it ended, or began stopping, meanwhile
        raise RehearsalError(f"preempt: {error}") from None
    names = ", ".join(job.name for job in running)
    return f"{names}: preempted by Batch; back in the queue, it resumes from its checkpoints when dispatched again"


def _service_jobs(stack: LocalStack, target: str) -> list[ServiceJob]:
    """The service jobs `target` names: by id or name, else the run (execution) of that name's."""
    import boto3
    from botocore.exceptions import ClientError

    assert stack.batch is not None
    with stack.batch.lock:
        jobs = list(stack.batch.jobs.values())
    named = [job for job in jobs if target in (job.id, job.name)]
    if named or not stack.state_machine_arn:
        return named
    execution_arn = stack.state_machine_arn.replace(":stateMachine:", ":execution:") + f":{target}"
    try:
        execution = boto3.client("stepfunctions").describe_execution(executionArn=execution_arn)
    except ClientError:
        return []
    trigger = trigger_of(json.loads(execution["input"]), target)
    run, prefix = Run(trigger.lineage, trigger.resume), stack.context.name_prefix
    return [job for job in jobs if run.made(job.name, prefix)]


def _times(value: Any) -> int:
    """How many times; -1 (until cleared) where not given."""
    if value is None:
        return -1
    if not isinstance(value, int) or value < 1:
        raise RehearsalError("times: give a whole number from 1, e.g. --times 3")
    return value


def _intermittent(fail: Any, every: Any) -> tuple[int, int]:
    """Of every `every` calls, the first `fail` fail; (1, 1), every call failing, where neither is given
    (`fail` as large as `every` would fail every call too, which needs neither)."""
    if fail is None and every is None:
        return 1, 1
    if fail is None or every is None:
        raise RehearsalError("--fail and --every: give both, e.g. --fail 3 --every 4 (the first 3 of every 4 calls fail)")
    if not (isinstance(fail, int) and isinstance(every, int) and 1 <= fail < every):
        raise RehearsalError(f"--fail {fail} --every {every}: fail must be at least 1 and below every, e.g. --fail 3 --every 4")
    return fail, every


def _whole(value: Any, name: str) -> int:
    if not isinstance(value, int) or value < 0:
        raise RehearsalError(f"{name}: give a whole number, e.g. --{name} 1")
    return value
