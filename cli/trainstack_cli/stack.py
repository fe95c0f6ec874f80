"""Which stack the CLI talks to, and the one-line errors of reaching it.

A stack is found by its name (`--stack`, or TRAINSTACK_STACK: CloudFormation DescribeStacks) or by
the file `cdk deploy --outputs-file` wrote (`--outputs`, or TRAINSTACK_OUTPUTS). AWS_ENDPOINT_URL,
AWS_PROFILE and the rest of the AWS environment apply as they do to the AWS CLI, so the same
commands reach a deployed stack or the twin `trainstack local serve` runs on loopback.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainstack.errors import is_control_plane_error
from trainstack.stack_context import StackContext, read_outputs_file

STACK_VARIABLE = "TRAINSTACK_STACK"
OUTPUTS_VARIABLE = "TRAINSTACK_OUTPUTS"

# Exit codes, stable for scripts (docs/operating-runs.md, "Exit codes").
EXIT_OK = 0
EXIT_RUN_FAILED = 1  # the run (or the plan) did not succeed
EXIT_BAD_INPUT = 2  # a spec, a file or an argument is wrong
EXIT_NO_STACK = 3  # the stack cannot be reached: not found, no or wrong credentials, no region; this machine cannot emulate it
EXIT_UNKNOWN_RUN = 4
EXIT_CODES = """exit codes: 0 done (a run that succeeded, a plan that fits); 1 the run failed or was stopped, or
the plan does not fit; 2 bad input (a spec, a file, an argument); 3 the stack cannot be reached (not
found, no or wrong credentials, no region; for `local`, this machine cannot run the emulated one); 4 no
such run, trial or job; 130 interrupted."""

_CREDENTIAL_ERRORS = {
    "InvalidClientTokenId",
    "UnrecognizedClientException",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "ExpiredTokenException",
    "AccessDenied",
    "AccessDeniedException",
}


class CliError(Exception):
    """One line for the user, naming the fix, and the exit code that goes with it."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class ControlPlaneUnavailableError(CliError):
    """AWS failed on its side (throttled, timed out, a 5xx): nothing is known of what was asked, and
    a command that follows a run asks again rather than ending."""


@dataclass(frozen=True)
class Stack:
    name: str
    outputs: dict[str, str]
    session: Any = field(repr=False)  # boto3.Session

    @property
    def region(self) -> str:
        return self.session.region_name

    @property
    def context(self) -> StackContext:
        try:
            return StackContext.from_outputs(self.outputs, self.region)
        except KeyError as error:  # a value every trainstack stack publishes
            raise CliError(
                f"stack {self.name}: {error.args[0]}; deploy it with this version of trainstack", EXIT_NO_STACK
            ) from None

    def output(self, name: str) -> str:
        if name not in self.outputs:
            raise CliError(f"stack {self.name} has no output {name}; deploy it with this version of trainstack", EXIT_NO_STACK)
        return self.outputs[name]

    @property
    def trigger_bucket(self) -> str:
        return self.output("TriggerBucketName")

    @property
    def state_machine_arn(self) -> str:
        return self.output("StateMachineArn")

    def client(self, service: str) -> Any:
        return self.session.client(service)

    def team(self, name: str) -> str:
        """`name` where it is one of the stack's teams; one line naming them otherwise."""
        teams = self.context.teams
        if name not in teams:
            raise CliError(f"--team {name}: stack {self.name}'s teams are {', '.join(teams)}; name one of them", EXIT_BAD_INPUT)
        return name


def find_stack(name: str | None, outputs: Path | None, profile: str | None, region: str | None) -> Stack:
    """From the arguments, else the environment; the one stack the commands act on."""
    import boto3
    from botocore.exceptions import BotoCoreError, ProfileNotFound

    name = name or os.environ.get(STACK_VARIABLE)
    outputs = outputs or (Path(os.environ[OUTPUTS_VARIABLE]) if os.environ.get(OUTPUTS_VARIABLE) else None)
    try:
        session = boto3.Session(profile_name=profile, region_name=region)
    except ProfileNotFound as error:
        raise CliError(f"{error}; name one from ~/.aws/config with --profile", EXIT_NO_STACK) from None
    except BotoCoreError as error:
        raise CliError(str(error), EXIT_NO_STACK) from None
    if session.region_name is None:
        raise CliError("no AWS region: pass --region or set AWS_REGION", EXIT_NO_STACK)
    if outputs is not None:
        values = read_outputs(outputs, name)
        return Stack(name or next(iter(json.loads(outputs.read_text()))), values, session)
    if name is None:
        raise CliError(f"which stack? pass --stack NAME or --outputs cdk-outputs.json (or set {STACK_VARIABLE})", EXIT_NO_STACK)
    with aws_errors(f"stack {name}"):
        stacks = session.client("cloudformation").describe_stacks(StackName=name)["Stacks"]
    values = {o["OutputKey"]: o["OutputValue"] for o in stacks[0].get("Outputs", [])}
    return Stack(name, values, session)


def read_outputs(path: Path, stack_name: str | None) -> dict[str, str]:
    """One stack's outputs from the file `cdk deploy --outputs-file` wrote, or one line naming the file and the fix."""
    try:
        return read_outputs_file(path, stack_name)
    except OSError as error:
        raise CliError(
            f"{path}: cannot read it ({error.strerror}); pass the file `cdk deploy --outputs-file` wrote", EXIT_BAD_INPUT
        ) from None
    except ValueError as error:
        raise CliError(str(error), EXIT_BAD_INPUT) from None


@contextmanager
def aws_errors(what: str) -> Iterator[None]:
    """AWS's refusals as one line each: no credentials, wrong credentials, a missing stack."""
    from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError, NoRegionError

    try:
        yield
    except NoCredentialsError:
        raise CliError("no AWS credentials: pass --profile, or set AWS_PROFILE or AWS_ACCESS_KEY_ID", EXIT_NO_STACK) from None
    except NoRegionError:
        raise CliError("no AWS region: pass --region or set AWS_REGION", EXIT_NO_STACK) from None
    except EndpointConnectionError as error:
        raise CliError(
            f"cannot reach {error.kwargs.get('endpoint_url', 'AWS')}: is the endpoint up (AWS_ENDPOINT_URL)?", EXIT_NO_STACK
        ) from None
    except ClientError as error:
        code = error.response.get("Error", {}).get("Code", "")
        message = error.response.get("Error", {}).get("Message", str(error))
        if code in _CREDENTIAL_ERRORS:
            raise CliError(
                f"AWS refused the credentials ({code}: {message}); check --profile or AWS_PROFILE", EXIT_NO_STACK
            ) from None
        if is_control_plane_error(error):
            raise ControlPlaneUnavailableError(
                f"{what}: {code}: {message} (AWS failed on its side: try again)", EXIT_NO_STACK
            ) from None
        if code == "ValidationError" and "does not exist" in message:
            raise CliError(
                f"{what} not found ({message}); deploy it with `cdk deploy` or check --stack and --region", EXIT_NO_STACK
            ) from None
        raise CliError(f"{what}: {code}: {message}", EXIT_NO_STACK) from None
