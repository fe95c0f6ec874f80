"""`trainstack doctor`: whether these credentials, this account and the deployed stack can run a job,
one line per check: passed (with what it saw), failed (with the fix), or not applicable to this stack.

Each check is a small function over what it reads with the caller's own credentials; `actions` names
the AWS actions it calls (docs/deploying.md, "2. trainstack doctor"), and a check the caller may not run
fails naming them. The first two, the credentials and the stack's outputs, are what every other check
needs: when one fails, the rest are not run.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from trainstack import images
from trainstack.account import AccountView, ec2_type, read_account
from trainstack.facts import ImageUnavailableError
from trainstack.handlers.environment import LAMBDA_TASK_ROOT, SERVICE_MODELS_DIR
from trainstack.preflight import rule_problems
from trainstack.rules.account import option_accounts
from trainstack.service_jobs import SERVICE_LINKED_ROLE, SERVICE_LINKED_ROLE_SERVICE
from trainstack.spec import JobSpec, SpecError, parse_spec
from trainstack.stack_context import STOP_FUNCTION_OUTPUT
from trainstack_cli.spec_file import read_spec
from trainstack_cli.stack import EXIT_BAD_INPUT, CliError, Stack, aws_errors, find_stack
from trainstack_contract.tracking import is_mlflow_app, resource_name

PASSED, FAILED, NOT_APPLICABLE = "passed", "failed", "not applicable"
TRIGGER_BUCKET_OUTPUT, STATE_MACHINE_OUTPUT = "TriggerBucketName", "StateMachineArn"
# Where the trigger bucket's probe object goes: neither jobs/ nor datasets/, so no rule starts a run for it.
PROBE_PREFIX = "trainstack-doctor/"
# The specs whose instance types the account checks read when no --spec is given.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# Where the functions read the API models the asset ships (stacks/lambda_asset.py writes them there).
SHIPPED_MODELS_PATH = f"{LAMBDA_TASK_ROOT}/{SERVICE_MODELS_DIR}"
HANDLER_PACKAGE = "trainstack.handlers."  # the stack's own functions, among the template's (CDK's custom resources)
ACCESS_DENIED = ("AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "AuthorizationError")
# Lambda's first line of each cold start: "INIT_START Runtime Version: python:3.13.v32 Runtime Version ARN: ..."
INIT_START = re.compile(r"INIT_START Runtime Version: (\S+)")
COLD_STARTS_READ_SECONDS = 30 * 86400  # how far back the functions' logs are read for one
ACCOUNT_READS = (
    "servicequotas:ListServiceQuotas",
    "sagemaker:ListTrainingJobs",
    "sagemaker:DescribeTrainingJob",
    "ec2:DescribeInstanceTypeOfferings",
    "ec2:DescribeSubnets",
)


@dataclass(frozen=True)
class CheckResult:
    check: str
    status: str  # PASSED, FAILED or NOT_APPLICABLE
    detail: str  # what it saw
    fix: str = ""  # for a failed check: what to do

    def to_json(self) -> dict[str, str]:
        return asdict(self)


@dataclass(frozen=True)
class Outcome:
    """What a check found, before run_check names it."""

    status: str
    detail: str
    fix: str = ""


def ok(detail: str) -> Outcome:
    return Outcome(PASSED, detail)


def bad(detail: str, fix: str = "") -> Outcome:
    return Outcome(FAILED, detail, fix)


def not_applicable(detail: str) -> Outcome:
    return Outcome(NOT_APPLICABLE, detail)


@dataclass
class Subject:
    """What the checks after the first two read: the stack, and the specs whose instance types the
    account checks cover (`refused`: those Validate refuses, with its first reason: none of them runs)."""

    stack: Stack
    specs: list[tuple[str, JobSpec]]
    refused: list[tuple[str, str]] = field(default_factory=list)
    _account: AccountView | None = None

    def account(self) -> AccountView:
        """The account as Validate reads it for these specs' instance types (read once)."""
        if self._account is None:
            types = [name for _, spec in self.specs for name in spec.capacity_options]
            self._account = read_account(self.stack.client, self.stack.region, types, self.stack.context.subnet_ids)
        return self._account


@dataclass(frozen=True)
class Check:
    name: str
    actions: tuple[str, ...]  # what it calls, so what the caller must be allowed
    run: Callable[[Subject], Iterator[Outcome]]
    on_error: str  # the fix when AWS refuses a call for another reason than access


def doctor(
    stack_name: str | None, outputs: Path | None, profile: str | None, region: str | None, spec_paths: list[Path]
) -> list[CheckResult]:
    """Every check, in order; a spec that cannot be read or parsed is bad input (CliError), checked first."""
    specs = _read_specs(spec_paths) if spec_paths else _read_specs(sorted(EXAMPLES.glob("*.yaml")))
    credentials, caller_account = check_credentials(profile, region)
    results = [credentials]
    if credentials.status == FAILED:
        return results + _not_run([OUTPUTS, *(check.name for check in CHECKS)])
    outputs_result, stack = check_outputs(stack_name, outputs, profile, region, caller_account)
    results.append(outputs_result)
    if stack is None:
        return results + _not_run([check.name for check in CHECKS])
    subject = Subject(stack, [], [])
    for label, spec in specs:
        problems = rule_problems(spec, None, stack.region, stack.context)
        if problems:
            subject.refused.append((label, str(problems[0])))
        else:
            subject.specs.append((label, spec))
    for check in CHECKS:
        results += run_check(check, subject)
    return results


def run_check(check: Check, subject: Subject) -> list[CheckResult]:
    """The check's lines; one failed line naming what to allow where AWS refuses the caller an action."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        outcomes = list(check.run(subject))
    except ClientError as error:
        code, message = error.response["Error"].get("Code", ""), _one_line(error.response["Error"].get("Message", ""))
        if code in ACCESS_DENIED:
            outcomes = [bad(f"cannot run: {code}: {message}", f"allow the caller {', '.join(check.actions)}")]
        else:
            outcomes = [bad(f"{code}: {message}", check.on_error)]
    except BotoCoreError as error:
        outcomes = [bad(_one_line(str(error)), check.on_error)]
    return [CheckResult(check.name, outcome.status, outcome.detail, outcome.fix) for outcome in outcomes]


def _one_line(message: str, limit: int = 300) -> str:
    """A message as one line (an endpoint that is not AWS may answer a page of HTML)."""
    text = " ".join(message.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _not_run(names: list[str]) -> list[CheckResult]:
    return [CheckResult(name, NOT_APPLICABLE, "not run: it needs the checks above") for name in names]


def _read_specs(paths: list[Path]) -> list[tuple[str, JobSpec]]:
    specs = []
    for path in paths:
        _, data = read_spec(path)
        try:
            specs.append((_shown(path), parse_spec(data)))
        except SpecError as error:
            raise CliError(f"{path}: {error.problems[0]}; fix it, or leave it out of --spec", EXIT_BAD_INPUT) from None
    return specs


def _shown(path: Path) -> str:
    """A spec's path as the user would type it here: relative to the current folder where it is below it."""
    resolved = path.resolve()
    return str(resolved.relative_to(Path.cwd())) if resolved.is_relative_to(Path.cwd()) else str(path)


# -- the credentials and the stack: what every other check needs ----------------------------------------
CREDENTIALS = "credentials and region"
OUTPUTS = "stack outputs"


def check_credentials(profile: str | None, region: str | None) -> tuple[CheckResult, str]:
    """STS GetCallerIdentity (which needs no permission): who the caller is, in which account and region."""
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        session = boto3.Session(profile_name=profile, region_name=region)
    except BotoCoreError as error:
        return CheckResult(CREDENTIALS, FAILED, str(error), "name a profile of ~/.aws/config with --profile"), ""
    if session.region_name is None:
        return CheckResult(CREDENTIALS, FAILED, "no AWS region", "pass --region, or set AWS_REGION"), ""
    try:
        with aws_errors("STS GetCallerIdentity"):
            identity = session.client("sts").get_caller_identity()
    except CliError as error:
        return CheckResult(CREDENTIALS, FAILED, str(error)), ""
    seen = f"{identity['Arn']} in account {identity['Account']}, region {session.region_name}"
    return CheckResult(CREDENTIALS, PASSED, seen), identity["Account"]


def check_outputs(
    name: str | None, outputs: Path | None, profile: str | None, region: str | None, caller_account: str
) -> tuple[CheckResult, Stack | None]:
    """The stack's outputs, every value the CLI reads decoded (StackContext, the trigger bucket, the
    state machine), in the caller's account."""
    try:
        stack = find_stack(name, outputs, profile, region)
        for needed in (TRIGGER_BUCKET_OUTPUT, STATE_MACHINE_OUTPUT):  # beside the job context's, what the CLI reads
            stack.output(needed)
        context = stack.context
    except CliError as error:
        if error.exit_code == EXIT_BAD_INPUT:  # an --outputs file that is not one: the argument is wrong
            raise
        return CheckResult(OUTPUTS, FAILED, str(error)), None
    except ValueError as error:  # a value that does not decode (QueueMaxInstances not a number)
        fix = "deploy it with this version of trainstack"
        return CheckResult(OUTPUTS, FAILED, f"stack {stack.name}: an output does not decode ({error})", fix), None
    stack_account = context.role_arn.split(":")[4]
    if stack_account != caller_account:
        seen = f"stack {stack.name} is in account {stack_account}, the credentials are account {caller_account}'s"
        return CheckResult(OUTPUTS, FAILED, seen, "use credentials of the stack's account (--profile)"), None
    parts = [f"stack {stack.name}: {len(stack.outputs)} outputs decode"]
    if context.job_queue_arn:
        parts.append(f"team queue {context.job_queue_arn.rsplit('/', 1)[1]} (shares {', '.join(context.queue_shares)})")
    if context.mlflow_tracking_server_arn:
        parts.append(f"tracking server {resource_name(context.mlflow_tracking_server_arn)}")
    return CheckResult(OUTPUTS, PASSED, "; ".join(parts)), stack


# -- the checks on the stack ------------------------------------------------------------------------------
def trigger_bucket(subject: Subject) -> Iterator[Outcome]:
    """A probe object put into the trigger bucket under a key that starts no run, and deleted (its
    version: nothing is left); the bucket's default encryption uses the stack's key on the put."""
    stack = subject.stack
    bucket, key_arn, s3 = stack.trigger_bucket, stack.context.key_arn, stack.client("s3")
    probe = f"{PROBE_PREFIX}probe-{uuid.uuid4().hex}"
    put = s3.put_object(Bucket=bucket, Key=probe, Body=b"trainstack doctor: a probe, deleted at once\n")
    s3.delete_object(Bucket=bucket, Key=probe, **({"VersionId": put["VersionId"]} if put.get("VersionId") else {}))
    encryption, used_key = put.get("ServerSideEncryption"), put.get("SSEKMSKeyId")
    where = f"s3://{bucket}/{probe}"
    if encryption != "aws:kms" or used_key != key_arn:
        stored = f"{encryption} with {used_key}" if used_key else (encryption or "no encryption")
        yield bad(
            f"{where} was stored with {stored}, not the stack's key {key_arn}",
            "deploy the stack again (cdk deploy): it sets the bucket's default encryption to the stack's key",
        )
        return
    yield ok(f"put and deleted {where}, encrypted with the stack's key {key_arn}")


def quotas(subject: Subject) -> Iterator[Outcome]:
    """The SageMaker quota of each spec's instance types and uses against what it needs and what is in use."""
    view = subject.account()
    for unread in view.unreadable:
        yield bad(f"cannot read: {unread}", f"allow the caller {', '.join(ACCOUNT_READS)}")
    for label, reason in subject.refused:
        yield not_applicable(f"{label}: not checked: Validate refuses it ({reason})")
    if not subject.specs:
        yield not_applicable("no spec to check: pass --spec job.yaml")
    if view.quotas is None:
        return
    for label, spec in subject.specs:
        for option in option_accounts(spec, replace(view, offerings=None)):
            what = f"{label}: {spec.instance_count} x {option.instance_type}"
            if option.refusals:
                yield bad(f"{what}: {option.refusals[0].rule}", option.refusals[0].fix)
            else:
                yield ok("; ".join([f"{what}: {option.note or 'no quota applies'}", *option.warnings]))


def offerings(subject: Subject) -> Iterator[Outcome]:
    """EC2 offers each spec's instance types in the AZ of the stack's training subnet."""
    view = subject.account()
    if view.offerings is None or not view.subnet_zones:
        yield bad("not checked: EC2's offerings or the training subnets could not be read (see quotas)")
        return
    if not subject.specs:
        yield not_applicable("no spec to check (see quotas)")
    seen: set[str] = set()
    for _, spec in subject.specs:
        for option in option_accounts(spec, replace(view, quotas=None)):
            if option.instance_type in seen:
                continue
            seen.add(option.instance_type)
            if option.refusals:
                yield bad(option.refusals[0].rule, option.refusals[0].fix)
            elif view.offerings.get(ec2_type(option.instance_type)):
                yield ok(f"{option.instance_type}: offered in {', '.join(view.subnet_zones)}")
            else:
                yield ok(f"{option.instance_type}: EC2 lists no offering of it in {view.region} (not checked)")


def batch_role(subject: Subject) -> Iterator[Outcome]:
    """Batch's service-linked role for SageMaker, with which Batch creates the team queue's training jobs."""
    if not subject.stack.context.job_queue_arn:
        yield not_applicable("the stack has no team queue")
        return
    iam = subject.stack.client("iam")
    try:
        role = iam.get_role(RoleName=SERVICE_LINKED_ROLE)["Role"]
    except iam.exceptions.NoSuchEntityException:
        yield bad(
            f"{SERVICE_LINKED_ROLE} does not exist: Batch cannot create the team queue's training jobs",
            f"aws iam create-service-linked-role --aws-service-name {SERVICE_LINKED_ROLE_SERVICE}",
        )
        return
    yield ok(role["Arn"])


def tracking_server(subject: Subject) -> Iterator[Outcome]:
    """The MLflow tracking server (or App) the stack names is up: SageMaker's own status of it."""
    stack = subject.stack
    arn = stack.context.mlflow_tracking_server_arn
    if not arn:
        yield not_applicable("the stack names none (-c mlflow_tracking_server_arn)")
        return
    sagemaker = stack.client("sagemaker")
    missing = (
        f"{arn} does not exist in {stack.region}",
        f"create it, or deploy the stack with -c mlflow_tracking_server_arn=<the ARN of one in {stack.region}>",
    )
    if is_mlflow_app(arn):
        try:
            status = sagemaker.describe_mlflow_app(Arn=arn)["Status"]
        except sagemaker.exceptions.ResourceNotFound:
            yield bad(*missing)
            return
        if status in ("Created", "Updated"):
            yield ok(f"MLflow App {arn}: {status}")
        else:
            yield bad(f"MLflow App {arn} is {status}", "see it in the SageMaker console; runs with tracking wait for it")
        return
    server_name = resource_name(arn)
    try:
        server = sagemaker.describe_mlflow_tracking_server(TrackingServerName=server_name)
    except sagemaker.exceptions.ResourceNotFound:
        yield bad(*missing)
        return
    status = server["TrackingServerStatus"]
    if server.get("IsActive") == "Active":
        yield ok(f"{server_name}: {status}, active, at {server.get('TrackingServerUrl', '-')}")
    elif status in ("Stopped", "StopFailed", "Stopping"):
        yield bad(
            f"{server_name} is {status}: no job can log to it",
            f"aws sagemaker start-mlflow-tracking-server --tracking-server-name {server_name} --region {stack.region}",
        )
    else:
        yield bad(f"{server_name} is {status} and inactive", "wait until it is active, or see it in the SageMaker console")


def functions(subject: Subject) -> Iterator[Outcome]:
    """The stack's functions (those the state machine invokes, and Stop) run on the runtime the stack
    deployed them with (its template's) and read the API models the asset ships (AWS_DATA_PATH)."""
    stack = subject.stack
    definition = stack.client("stepfunctions").describe_state_machine(stateMachineArn=stack.state_machine_arn)["definition"]
    arns = list(dict.fromkeys([*_function_arns(json.loads(definition)), stack.outputs.get(STOP_FUNCTION_OUTPUT, "")]))
    template = stack.client("cloudformation").get_template(StackName=stack.name, TemplateStage="Original")["TemplateBody"]
    deployed = _deployed_runtimes(json.loads(template) if isinstance(template, str) else template)
    if not deployed:
        yield bad(f"stack {stack.name}'s template has no trainstack function", "check --stack: is it trainstack's?")
        return
    lambda_client = stack.client("lambda")
    configurations = [lambda_client.get_function_configuration(FunctionName=arn) for arn in arns if arn]
    wrong = []
    for configuration in configurations:
        function, environment = configuration["FunctionName"], configuration.get("Environment") or {}
        if configuration.get("Runtime") not in deployed:
            wrong.append(f"{function} runs on {configuration.get('Runtime')}, the stack deploys {' or '.join(sorted(deployed))}")
        if "Variables" not in environment and environment.get("Error"):
            wrong.append(f"{function}'s variables cannot be read ({environment['Error'].get('Message', '')})")
        elif (environment.get("Variables") or {}).get("AWS_DATA_PATH") != SHIPPED_MODELS_PATH:
            found = (environment.get("Variables") or {}).get("AWS_DATA_PATH")
            wrong.append(f"{function}'s AWS_DATA_PATH is {found or 'unset'}, not {SHIPPED_MODELS_PATH} (the asset's API models)")
    if wrong:
        yield bad("; ".join(wrong), "deploy the stack again (cdk deploy): it sets both")
        return
    runtimes = sorted({configuration["Runtime"] for configuration in configurations})
    version = runtime_version(stack, configurations)
    seen = f"; runtime version {version} (its latest cold start)" if version else ""
    yield ok(
        f"{len(configurations)} functions on {', '.join(runtimes)} as deployed, AWS_DATA_PATH={SHIPPED_MODELS_PATH}{seen}",
    )


def framework_image(subject: Subject) -> Iterator[Outcome]:
    """The image Validate picks for a spec that names none (the newest PyTorch training image on a GPU
    type) can be pulled in the stack's region: ECR's BatchGetImage of it, as a pull does."""
    region = subject.stack.region
    try:
        uri = images.default_base_image(region)
    except ImageUnavailableError as error:
        yield bad(f"no PyTorch training image for {region} in the facts file ({error})", "run jobs in another region")
        return
    match = images.IMAGE_URI.match(uri)
    assert match is not None, uri
    ecr = subject.stack.client("ecr")
    missing_fix = (
        f"Validate picks it for a spec without framework_version in {region}: pin an older framework_version in your "
        f"specs (`trainstack validate SPEC --region {region}` checks it), and refresh the facts (make facts)"
    )
    try:
        answer = ecr.batch_get_image(
            registryId=match["account"], repositoryName=match["repository"], imageIds=[{"imageTag": match["tag"]}]
        )
    except ecr.exceptions.RepositoryNotFoundException as error:
        yield bad(f"{uri}: {error.response['Error'].get('Message', '')}", missing_fix)
        return
    if answer.get("images"):
        yield ok(f"{uri} ({answer['images'][0]['imageId'].get('imageDigest', 'no digest')})")
        return
    reasons = "; ".join(f"{f.get('failureCode')}: {f.get('failureReason')}" for f in answer.get("failures", []))
    yield bad(f"{uri}: {reasons or 'not returned'}", missing_fix)


def runtime_version(stack: Stack, configurations: list[dict[str, Any]]) -> str:
    """The Lambda runtime version a function last started on, from the INIT_START line Lambda writes to
    its log group at each cold start ("" where none is found: no cold start yet, or the log unreadable).
    It is what fixes the runtime's boto3 and botocore, whose versions AWS does not publish per version."""
    from botocore.exceptions import ClientError

    logs = stack.client("logs")
    for configuration in configurations:
        group = (configuration.get("LoggingConfig") or {}).get("LogGroup") or f"/aws/lambda/{configuration['FunctionName']}"
        try:
            pages = logs.get_paginator("filter_log_events").paginate(
                logGroupName=group, filterPattern='"INIT_START"', startTime=int((time.time() - COLD_STARTS_READ_SECONDS) * 1000)
            )
            found = [m[1] for page in pages for event in page["events"] if (m := INIT_START.search(event["message"]))]
        except ClientError:
            continue
        if found:
            return found[-1]
    return ""


def _function_arns(definition: Any) -> list[str]:
    """The Lambda functions a state machine definition invokes (its Task states' Resource), in order."""
    if isinstance(definition, dict):
        return [arn for value in definition.values() for arn in _function_arns(value)]
    if isinstance(definition, list):
        return [arn for value in definition for arn in _function_arns(value)]
    return [definition] if isinstance(definition, str) and ":lambda:" in definition and ":function:" in definition else []


def _deployed_runtimes(template: dict[str, Any]) -> set[str]:
    """The runtimes the template gives trainstack's functions."""
    return {
        resource["Properties"].get("Runtime", "")
        for resource in template.get("Resources", {}).values()
        if resource.get("Type") == "AWS::Lambda::Function"
        and str(resource.get("Properties", {}).get("Handler", "")).startswith(HANDLER_PACKAGE)
    }


CHECKS = (
    Check(
        "trigger bucket and key",
        ("s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "kms:GenerateDataKey on the stack's key"),
        trigger_bucket,
        "deploy the stack again (cdk deploy) if the bucket or its key is gone; a disabled key: aws kms enable-key",
    ),
    Check("quotas", ACCOUNT_READS, quotas, "try again"),
    Check("instance types in the training subnet's AZ", ACCOUNT_READS[3:], offerings, "try again"),
    Check("Batch's service-linked role", ("iam:GetRole",), batch_role, "try again"),
    Check(
        "MLflow tracking server",
        ("sagemaker:DescribeMlflowTrackingServer (sagemaker:DescribeMlflowApp for an MLflow App)",),
        tracking_server,
        "try again",
    ),
    Check(
        "Lambda runtime and API models",
        (
            "states:DescribeStateMachine",
            "cloudformation:GetTemplate",
            "lambda:GetFunctionConfiguration",
            "kms:Decrypt on the stack's key (the functions' variables)",
            "logs:FilterLogEvents",
        ),
        functions,
        "deploy the stack again (cdk deploy)",
    ),
    Check("framework image", ("ecr:BatchGetImage",), framework_image, "try again"),
)
