"""`trainstack submit` and `trainstack resume`: the commands that start a run on a stack."""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from trainstack import yaml12
from trainstack.account import AccountView, read_account
from trainstack.budgets import TeamBudget, stack_team_budget
from trainstack.layout import JOBS_PREFIX, SOURCES_PREFIX, team_folder
from trainstack.polling import poll_until
from trainstack.preflight import preflight
from trainstack.rules import SpecRejectedError
from trainstack.source_archive import write_source_tarball
from trainstack.spec import SpecError, parse_spec
from trainstack_cli.executions import describe_execution
from trainstack_cli.runs import run_identity
from trainstack_cli.spec_file import read_spec
from trainstack_cli.stack import EXIT_BAD_INPUT, EXIT_RUN_FAILED, CliError, Stack, aws_errors

EXECUTION_APPEARS_SECONDS = 60  # EventBridge starts a run seconds after the upload


def submit(stack: Stack, spec_path: Path, source_dir: Path | None = None, inline: bool = False, team: str | None = None) -> str:
    """Validate the spec here, against the stack, upload the code it needs, start the run as `team`'s
    (the stack's default team unless given: its folders, its role); return the run's name."""
    team = team or stack.context.default_team
    text, data = read_spec(spec_path)
    with tempfile.TemporaryDirectory(prefix="trainstack-source-") as scratch:
        archive = None
        if source_dir is not None:
            archive = _pack(source_dir, Path(scratch))
            digest = hashlib.sha256(archive.read_bytes()).hexdigest()[:16]
            sources = team_folder(SOURCES_PREFIX, team)
            data["source_dir"] = f"s3://{stack.context.artifacts_bucket}/{sources}{digest}/sourcedir.tar.gz"
        _validate(data, spec_path, stack, team)
        with aws_errors(f"stack {stack.name}"):
            if archive is not None:
                bucket, _, key = data["source_dir"].removeprefix("s3://").partition("/")
                stack.client("s3").upload_file(str(archive), bucket, key)
            if inline:
                name = f"{data['name']}-{datetime.now(UTC):%Y%m%dT%H%M%S}"
                stack.client("stepfunctions").start_execution(
                    stateMachineArn=stack.state_machine_arn, name=name, input=json.dumps({"spec": data, "team": team})
                )
                return name
            key = f"{team_folder(JOBS_PREFIX, team)}{spec_path.name}"  # the folder names the run's team
            body = text if source_dir is None else yaml12.dump(data).encode()
            version = stack.client("s3").put_object(Bucket=stack.trigger_bucket, Key=key, Body=body).get("VersionId")
            return _execution_for_upload(stack, f"s3://{stack.trigger_bucket}/{key}#{version}")


def _validate(data: dict[str, Any], path: Path, stack: Stack, team: str) -> None:
    """The Validate step's own checks, with the stack's values (its tracking server, its team queue)
    and what the account allows (its quotas, the training subnet's AZ), read with the caller's
    credentials, before anything is uploaded or billed."""
    try:
        spec = parse_spec(data)
        account = read_account(stack.client, stack.region, spec.capacity_options, stack.context.subnet_ids)
        budget = _team_budget(stack, team, account)
        checked = preflight(spec, None, stack.region, stack.context, account, team, budget)
    except (SpecError, SpecRejectedError) as error:
        raise CliError("; ".join(f"{path}: {p}" for p in error.problems) + "; nothing was submitted", EXIT_BAD_INPUT) from None
    for warning in checked.warnings:  # what the job will meet, or what the caller's credentials could not read
        print(f"trainstack submit: warning: {warning}", file=sys.stderr)


def _team_budget(stack: Stack, team: str, account: AccountView) -> TeamBudget | None:
    """The team's month against its budget, read with the caller's credentials; what they may not read
    is a warning (the stack's Validate reads it with its own role and refuses the run there)."""
    try:
        return stack_team_budget(stack.client, stack.context, team, account.jobs_in_progress)
    except (ClientError, BotoCoreError) as error:
        print(f"trainstack submit: warning: team {team}'s budget not checked here ({error})", file=sys.stderr)
        return None


def _pack(source_dir: Path, scratch: Path) -> Path:
    if not source_dir.is_dir():
        raise CliError(f"--source {source_dir}: not a directory; give the folder that holds the entry point", EXIT_BAD_INPUT)
    try:
        return write_source_tarball(source_dir, scratch / "sourcedir.tar.gz")
    except ValueError as error:
        raise CliError(f"--source {source_dir}: {error}", EXIT_BAD_INPUT) from None


def _execution_for_upload(stack: Stack, lineage: str) -> str:
    """The execution EventBridge started for this upload (its input names the key and version)."""
    sfn = stack.client("stepfunctions")
    seen: set[str] = set()

    def started() -> str | None:
        for summary in sfn.list_executions(stateMachineArn=stack.state_machine_arn, maxResults=50)["executions"]:
            if summary["executionArn"] not in seen:
                seen.add(summary["executionArn"])
                if run_identity(sfn.describe_execution(executionArn=summary["executionArn"])).lineage == lineage:
                    return summary["name"]
        return None

    try:
        return poll_until(started, timeout=EXECUTION_APPEARS_SECONDS, interval=0.5, what="a run of the upload")
    except TimeoutError:
        raise CliError(
            f"uploaded {lineage.partition('#')[0]}, but no run started within {EXECUTION_APPEARS_SECONDS} s; "
            "check the stack's JobSpecUploaded rule and the trigger dead-letter queue (trainstack redrive)",
            EXIT_RUN_FAILED,
        ) from None


def resume(stack: Stack, run: str) -> str:
    """Start a run that continues an ended run's lineage from its checkpoints; return its name.
    Only a run started with its spec inline has a lineage a start can name (the pipeline's contract:
    `{"spec": ..., "lineage": ..., "resume": true}`); an upload's lineage is its object version."""
    with aws_errors(f"stack {stack.name}"):
        execution = describe_execution(stack, run)
        if execution["status"] == "RUNNING":
            raise CliError(f"run {run} is still running; `trainstack stop {run}` first", EXIT_BAD_INPUT)
        started = json.loads(execution.get("input") or "{}")
        if "spec" not in started:
            raise CliError(
                f"run {run} was started by an upload, whose lineage a new start cannot name; submit with --inline "
                "to make a run resumable (its checkpoints stay in S3)",
                EXIT_BAD_INPUT,
            )
        lineage = started.get("lineage") or execution["name"]
        name = f"{lineage[:40]}-resume-{datetime.now(UTC):%Y%m%dT%H%M%S}"
        payload = {"spec": started["spec"], "lineage": lineage, "resume": True}
        if started.get("team"):  # the same team's folders hold the checkpoints it resumes from
            payload["team"] = started["team"]
        stack.client("stepfunctions").start_execution(
            stateMachineArn=stack.state_machine_arn, name=name, input=json.dumps(payload)
        )
        return name
