"""Validate: load the spec the trigger names, check every rule and the plan, expand the sweep. S3
failing on its side (throttled, a 5xx) is a ControlPlaneError, which the state machine retries: no
answer of the control plane rejects a spec."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from trainstack.errors import SpecInvalidError
from trainstack.handlers.environment import asked_again, client, control_plane_retried, environment
from trainstack.identity import Run
from trainstack.s3uri import count_objects
from trainstack.stack_context import StackContext
from trainstack.workflow import (
    STEP_FUNCTIONS_MAX_SECONDS,
    Trigger,
    deadline,
    max_concurrency,
    run_deadline_seconds,
    trials,
    trigger_of,
)

if TYPE_CHECKING:  # the account and budget modules load on the call (Validate's cold start)
    from trainstack.account import AccountView
    from trainstack.budgets import TeamBudget


def handler(event: dict[str, Any], context: Any = None) -> dict[str, Any]:
    # Imported on the call, not with the module: the spec model (pydantic) and the checks (rules,
    # planner, the training script's contract) are most of this package's import time
    # (tools/bench_lambda.py); the module's cold import leaves them to the first call.
    from trainstack.account import read_account
    from trainstack.preflight import preflight
    from trainstack.rules import SpecRejectedError
    from trainstack.rules.queue import run_team
    from trainstack.spec import SpecError, parse_spec

    trigger = trigger_of(event["input"], event["execution"], environment().default_spec_key)
    data = _spec_data(trigger)
    if trigger.train_channel:  # a data drop: its prefix becomes the train channel
        inputs = dict(data.get("inputs") or {})
        inputs["train"] = {**inputs.get("train", {}), "s3_uri": trigger.train_channel}
        data = {**data, "inputs": inputs}
    try:
        spec = parse_spec(data)
        stack = environment().stack
        account = read_account(client, stack.region, spec.capacity_options, stack.subnet_ids)
        team = run_team(trigger, spec, stack)  # where the spec came from, never the uploader's word
        checked = preflight(spec, _object_counter(), stack.region, stack, account, team, _budget(stack, team, account))
    except (SpecError, SpecRejectedError) as error:
        raise SpecInvalidError(f"{trigger.spec_key or 'inline spec'}: " + "; ".join(map(str, error.problems))) from None
    for warning in checked.warnings:  # the function's log: what the job will meet, or what was not checked
        print(f"warning: {warning}")
    runs = trials(spec)
    seconds = run_deadline_seconds(spec, len(runs))
    if seconds > STEP_FUNCTIONS_MAX_SECONDS:
        raise SpecInvalidError(
            f"{trigger.spec_key or 'inline spec'}: sweep = {len(runs)} trials at max_concurrency "
            f"{max_concurrency(spec)} may take up to {seconds // 86400} days, longer than "
            f"one execution may run ({STEP_FUNCTIONS_MAX_SECONDS // 86400} days): raise max_concurrency, shorten "
            "max_runtime or max_wait, or split the sweep"
        )
    return {
        "spec": checked.spec.model_dump(mode="json"),
        "team": team,
        "run": Run(trigger.lineage, trigger.resume).to_json(),
        "trials": [{"index": index, "hyperparameters": overrides} for index, overrides in enumerate(runs)],
        "trial_count": len(runs),
        "max_concurrency": max_concurrency(spec),
        "deadline": deadline(datetime.now(UTC), seconds),
        "plan": checked.plan.to_json(),
        "warnings": list(checked.warnings),
        "resolution": checked.resolution.to_json(),  # Create builds the request from it: resolved once
    }


def _budget(stack: StackContext, team: str, account: AccountView) -> TeamBudget | None:
    """The team's month against its budget; None without one. Each of its calls (one per job of the
    month) is asked again on its own while AWS fails on its side; one still failing is ControlPlaneError,
    which the state machine retries."""
    from trainstack.budgets import stack_team_budget

    return stack_team_budget(client, stack, team, account.jobs_in_progress, ask=asked_again)


def _object_counter() -> Callable[[str], int]:
    """Counts a sharded channel's objects; S3 failing on its side is retried by the state machine
    (ControlPlaneError), never read as a spec that cannot run."""

    def count(uri: str) -> int:
        with control_plane_retried(f"ListObjectsV2 {uri}"):
            return count_objects(client("s3"), uri)

    return count


def _spec_data(trigger: Trigger) -> dict[str, Any]:
    if trigger.inline_spec is not None:
        return trigger.inline_spec
    from trainstack.spec import SpecError, spec_data

    s3 = client("s3")
    keys = [k for k in (trigger.spec_key, trigger.fallback_spec_key) if k]
    for key in keys:
        request = {"Bucket": trigger.spec_bucket, "Key": key}
        if trigger.spec_version and key == trigger.spec_key:
            request["VersionId"] = trigger.spec_version
        try:
            with control_plane_retried(f"GetObject s3://{trigger.spec_bucket}/{key}"):
                body = s3.get_object(**request)["Body"].read()
        except s3.exceptions.NoSuchKey:
            continue
        try:
            return spec_data(body, f"s3://{trigger.spec_bucket}/{key}")
        except SpecError as error:
            raise SpecInvalidError(error.problems[0]) from None
    raise SpecInvalidError(
        f"no job spec at {', '.join(f's3://{trigger.spec_bucket}/{k}' for k in keys)}; upload one or set the stack's default spec"
    )
