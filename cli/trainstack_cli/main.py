"""`trainstack`: check a job spec offline, then submit, watch, read the logs of and stop its runs.

    trainstack validate job.yaml                 # exit 1 with one line per problem
    trainstack render job.yaml --json            # the request, validated by botocore's own model
    trainstack plan job.yaml [--json]            # memory per GPU, speed, worst-case cost
    trainstack schema > job.schema.json          # JSON Schema for editors
    trainstack submit job.yaml [--source DIR] [--wait]   # on the stack (--stack NAME or --outputs FILE)
    trainstack runs [--team T] | status RUN | logs RUN [--follow] | stop RUN | resume RUN   # --json on every read command
    trainstack queue                             # the team queue by share: jobs, positions, capacity in use
    trainstack doctor [--spec job.yaml]          # can this account and stack run a job? one line per check
    trainstack smoke [--yes]                     # a few minutes' real run: submit, stop, resume, model, cost
    trainstack local serve                       # the stack emulated on 127.0.0.1, for any AWS client
    trainstack local run [job.yaml]              # one run on the emulated stack, shown live
    trainstack local fault api|spot|capacity|preempt|hang|nan|transport|clear ...  # rehearse a failure on the served twin
    trainstack redrive --outputs cdk-outputs.json  # deliver the events the trigger dead-letter queue holds

Offline: without --outputs `render` marks the stack's values as placeholders, and a ShardedByS3Key
channel's object count is checked when the pipeline validates the spec (or here with --check-s3).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from trainstack import images
from trainstack.identity import Run
from trainstack.preflight import plan_problems, planned, preflight, rule_problems
from trainstack.request import build_request, validate_request
from trainstack.rules import SpecRejectedError
from trainstack.s3uri import count_objects
from trainstack.spec import SpecError, json_schema, parse_spec
from trainstack.stack_context import DEAD_LETTER_OUTPUT, STOP_FUNCTION_OUTPUT, StackContext
from trainstack_cli.operate_command import operate_command
from trainstack_cli.redrive import redrive
from trainstack_cli.spec_file import read_spec
from trainstack_cli.stack import EXIT_BAD_INPUT, EXIT_CODES, OUTPUTS_VARIABLE, STACK_VARIABLE, CliError, find_stack, read_outputs
from trainstack_local.rehearsal import KINDS

PLACEHOLDER = "PLACEHOLDER"


def placeholder_stack(region: str) -> StackContext:
    return StackContext(
        region=region,
        role_arn=f"arn:aws:iam::000000000000:role/{PLACEHOLDER}-ExecutionRoleArn",
        artifacts_bucket=f"{PLACEHOLDER.lower()}-artifacts-bucket",
        key_arn=f"arn:aws:kms:{region}:000000000000:key/{PLACEHOLDER}-KeyArn",
        subnet_ids=(f"subnet-{PLACEHOLDER}",),
        security_group_ids=(f"sg-{PLACEHOLDER}",),
        source_s3_uri=f"s3://{PLACEHOLDER.lower()}-cdk-assets/sourcedir.tar.gz",
        entry_s3_uri=f"s3://{PLACEHOLDER.lower()}-cdk-assets/container-entry.py",
        mlflow_tracking_server_arn=f"arn:aws:sagemaker:{region}:000000000000:mlflow-tracking-server/{PLACEHOLDER}",
    )


def s3_object_counter() -> Callable[[str], int]:
    import boto3

    s3 = boto3.client("s3")
    return lambda uri: count_objects(s3, uri)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except CliError as error:
        print(f"trainstack {args.command}: {error}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainstack",
        description=__doc__.splitlines()[0],
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("validate", "render"):
        what = {
            "validate": "check a spec offline: every rule, the script's contract, the plan",
            "render": "the CreateTrainingJob request a spec makes (offline)",
        }
        command = commands.add_parser(name, help=what[name])
        command.add_argument("spec", type=Path, help="the job spec (YAML or JSON)")
        command.add_argument("--check-s3", action="store_true", help="count ShardedByS3Key objects in S3 (needs credentials)")
        if name == "render":
            command.add_argument("--json", action="store_true", help="print the request as JSON (the default)")
            command.add_argument("--outputs", type=Path, help="cdk deploy --outputs-file JSON with the stack's values")
            command.add_argument("--stack", help="the stack's name, when the file holds several")
            command.add_argument("--region", default="us-east-1", help="the region the job would run in (its image registry)")
            command.add_argument("--lineage", help="what the job name derives from (default: the spec's path)")
        else:
            command.add_argument("--region", help="also check that the framework image exists in this region")
    plan_command = commands.add_parser("plan", help="will it fit, how fast, what can it cost (offline)")
    plan_command.add_argument("spec", type=Path, help="the job spec (YAML or JSON)")
    plan_command.add_argument("--json", action="store_true", help="the plan as JSON, with the verdict as booleans")
    commands.add_parser("schema", help="the job spec's JSON Schema, for editors")
    redrive_command = commands.add_parser("redrive", help="deliver the events EventBridge could not (needs credentials)")
    redrive_command.add_argument("--outputs", type=Path, required=True, help="cdk deploy --outputs-file JSON")
    redrive_command.add_argument("--stack", help="the stack's name, when the file holds several")

    submit = _stack_command(commands, "submit", "validate a spec here, upload it (and --source), start the run")
    submit.add_argument("spec", type=Path, help="the job spec (YAML or JSON)")
    submit.add_argument("--source", type=Path, help="a local folder packed as sourcedir.tar.gz into the artifacts bucket")
    submit.add_argument("--inline", action="store_true", help="start an execution with the spec inline instead of uploading it")
    submit.add_argument("--team", help="the team the run is (its folders and role; default: the stack's default team)")
    submit.add_argument("--wait", action="store_true", help="follow the run live until it ends; the exit code is the run's")
    runs = _stack_command(commands, "runs", "recent runs: status, trials, billable seconds, cost so far")
    runs.add_argument("--limit", type=int, default=20, help="how many runs, newest first (default: 20)")
    runs.add_argument("--team", help="only the team's runs, with what its jobs of this month came to (instance-hours, cost)")
    status = _stack_command(commands, "status", "a run's state, trials, history, latest metrics, cost so far")
    status.add_argument("run", help="the execution's name (or ARN), as `runs` lists it")
    logs = _stack_command(commands, "logs", "a trial's training job logs (CloudWatch Logs)")
    logs.add_argument("run", help="the execution's name (or ARN), as `runs` lists it")
    logs.add_argument("--trial", type=int, help="the trial of a sweep (default: the latest job)")
    logs.add_argument("--host", help="one host, e.g. algo-2 (default: every host)")
    logs.add_argument("--follow", action="store_true", help="wait for the job if the run has none yet, print until it ends")
    stop = _stack_command(commands, "stop", "stop the run and its jobs (their checkpoints are kept)")
    stop.add_argument("run", help="the execution's name (or ARN), as `runs` lists it")
    resume = _stack_command(commands, "resume", "continue a stopped or failed run (started inline) from its checkpoints")
    resume.add_argument("run", help="the stopped or failed execution's name (or ARN)")
    resume.add_argument("--wait", action="store_true", help="follow the new run live until it ends")
    _stack_command(commands, "queue", "the team queue by share: active jobs, their priority and position, capacity in use")
    doctor = _stack_command(commands, "doctor", "can this account and stack run a job? one line per check, with the fix")
    doctor.add_argument(
        "--spec", action="append", default=[], type=Path, help="a spec whose instance types to check (default: examples/*.yaml)"
    )
    smoke = _stack_command(commands, "smoke", "a real run through the stack on the cheapest CPU instance: stop, resume, model")
    smoke.add_argument("--yes", action="store_true", help="start without asking (the worst case is printed all the same)")
    smoke.add_argument("--instance-type", help="a CPU training instance type (default: the cheapest the catalog prices)")

    local = commands.add_parser("local", help="the stack emulated on this machine (needs `make synth`)")
    local_commands = local.add_subparsers(dest="local_command", required=True)
    serve = local_commands.add_parser("serve", help="serve the emulated stack on 127.0.0.1 for any AWS client")
    serve.add_argument("--port", type=int, default=0, help="default: a free port")
    serve.add_argument("--workdir", type=Path, help="where the hosts' /opt/ml trees go (default: a new temporary folder)")
    serve.add_argument("--template", type=Path, help="the synthesized template (default: cdk.out's)")
    run = local_commands.add_parser("run", help="one run on the emulated stack, shown live; the exit code is the run's")
    run.add_argument("spec", type=Path, nargs="?", help="default: the embedded default job")
    run.add_argument("--source", type=Path, help="a local folder to run instead of training/ (packed as sourcedir.tar.gz)")
    run.add_argument("--output-dir", type=Path, default=Path("local-output"), help="where model.tar.gz is copied")
    run.add_argument("--workdir", type=Path, help="where the hosts' /opt/ml trees go (default: a new temporary folder)")
    run.add_argument("--template", type=Path, help="the synthesized template (default: cdk.out's)")
    fault = local_commands.add_parser("fault", help=f"rehearse a failure on the served twin: {', '.join(KINDS)}")
    fault.add_argument("kind", choices=KINDS, help='what fails (see docs/operating-runs.md, "Rehearse failures")')
    fault.add_argument(
        "target",
        nargs="?",
        help="SERVICE:Action (api), a training job (spot), a type (capacity), a run or service job (preempt), a job prefix",
    )
    fault.add_argument("--code", help="api: the error code AWS answers, e.g. ServiceUnavailable, ThrottlingException")
    fault.add_argument(
        "--for", dest="for_", metavar="DURATION", help="api: for how long, e.g. 90s, 3m (default: until cleared or --times)"
    )
    fault.add_argument("--times", type=int, help="how many calls (api), jobs (capacity, hang, nan, transport)")
    fault.add_argument(
        "--fail",
        type=int,
        metavar="N",
        help="api, with --every M: fail intermittently; counted from the fault on, of every M calls of the action "
        "(each of botocore's attempts is one, whoever calls) the first N fail and the rest are answered "
        "(default: every call fails)",
    )
    fault.add_argument(
        "--every", type=int, metavar="M", help="api, with --fail N: how many calls make one cycle, of which the first N fail"
    )
    fault.add_argument("--rank", type=int, default=0, help="hang, nan, transport: the rank (default 0)")
    fault.add_argument("--step", type=int, help="hang, nan, transport: the step")
    fault.add_argument("--host", help="hang, nan, transport: one host, e.g. algo-2 (default: every host)")
    for command in (serve, run):  # the emulated account (a new account's, with the examples' increases, by default)
        command.add_argument(
            "--quota",
            action="append",
            default=[],
            metavar="TYPE=N",
            help="the account's SageMaker quotas for TYPE (training, spot, warm pool), e.g. ml.p4d.24xlarge=0; repeatable",
        )
        command.add_argument("--availability-zone-id", help="the AZ ID of the stack's training subnet (default: use1-az4)")
        command.add_argument(
            "--missing-image",
            action="append",
            default=[],
            metavar="URI",
            help="a framework image the region's registry lacks, as where AWS has not published it; repeatable",
        )
    return parser


def _stack_command(commands: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    command = commands.add_parser(name, help=help_text)
    command.add_argument("--stack", help=f"the deployed stack's name (default: ${STACK_VARIABLE})")
    command.add_argument("--outputs", type=Path, help=f"cdk deploy --outputs-file JSON (default: ${OUTPUTS_VARIABLE})")
    command.add_argument("--profile", help="the AWS profile (default: the AWS SDK's usual chain)")
    command.add_argument("--region", help="the stack's region (default: the profile's, or $AWS_REGION)")
    if name != "submit":
        command.add_argument("--json", action="store_true", help="machine-readable output")
    else:
        command.add_argument("--json", action="store_true", help="print the run's name (and with --wait the run) as JSON")
    return command


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "schema":
        print(json.dumps(json_schema(), indent=2))
        return 0
    if args.command == "redrive":
        return _redrive(args.outputs, args.stack)
    if args.command == "plan":
        return _plan(args.spec, args.json)
    if args.command == "local" and args.local_command == "fault":
        from trainstack_cli.local_fault import rehearse

        return rehearse(args)
    if args.command == "local":
        from trainstack_cli import local_commands

        return local_commands.run(args)
    if args.command == "doctor":  # whether the stack can be found is one of its checks
        from trainstack_cli.operate_command import doctor_command

        return doctor_command(args)
    if args.command in ("submit", "runs", "status", "logs", "stop", "resume", "queue", "smoke"):
        stack = find_stack(args.stack, args.outputs, args.profile, args.region)
        return operate_command(args, stack)
    return _validate_or_render(args)


def _validate_or_render(args: argparse.Namespace) -> int:
    _, data = read_spec(args.spec)
    # With the deployed stack's outputs, also whether the stack has the tracking server the spec names.
    outputs = getattr(args, "outputs", None)  # render's: validate checks offline
    known = _outputs_context(outputs, args.stack, args.region) if outputs else None
    try:
        spec = parse_spec(data)
        checked = preflight(spec, s3_object_counter() if args.check_s3 else None, args.region, known)
        spec, plan = checked.spec, checked.resolution
    except (SpecError, SpecRejectedError) as error:
        problems = error.problems
        for problem in problems:
            print(f"{args.spec}: {problem}", file=sys.stderr)
        print(f"{args.spec}: {len(problems)} problem(s); nothing would be launched", file=sys.stderr)
        return 1
    if args.command == "validate":
        print(
            f"{args.spec}: valid ({plan.strategy} on {spec.instance_count} x {spec.instance_type}, world size {plan.world_size})"
        )
        if plan.framework is not None:
            image = images.repository(plan.image_kind)
            print(f"{args.spec}: PyTorch {plan.framework.describe()}, {plan.py_version}, image {image}")
        worst = checked.plan.worst_case_usd
        verdict = "fits" if checked.plan.fits else "does not fit (force: true)"
        cost = "unknown" if worst is None else f"${worst:,.2f}"
        print(f"{args.spec}: plan: {verdict}; worst case {cost} (trainstack plan for details)")
        return 0
    stack = known or placeholder_stack(args.region)
    request = build_request(spec, plan, stack, trial=Run(args.lineage or str(args.spec)).trial())
    validate_request(request)
    print(json.dumps(request, indent=2, sort_keys=True))
    if not args.outputs:
        print(f"note: values marked {PLACEHOLDER} come from the deployed stack; pass --outputs cdk-outputs.json", file=sys.stderr)
    return 0


def _outputs_context(path: Path, stack_name: str | None, region: str) -> StackContext:
    try:
        return StackContext.from_outputs(read_outputs(path, stack_name), region)
    except KeyError as error:  # a value every trainstack stack publishes
        raise CliError(
            f"{path}: {error.args[0]}; pass the file `cdk deploy --outputs-file` wrote for a trainstack stack", EXIT_BAD_INPUT
        ) from None


def _plan(path: Path, as_json: bool) -> int:
    """Exit 0 when every option fits within budget, 1 when not, 2 when the spec itself is bad."""
    _, data = read_spec(path)
    try:
        spec = parse_spec(data)
        problems = rule_problems(spec)
        if problems:
            raise SpecRejectedError(problems)
    except (SpecError, SpecRejectedError) as error:
        for problem in error.problems:
            print(f"{path}: {problem}", file=sys.stderr)
        return EXIT_BAD_INPUT
    planned_spec, _, plan = planned(spec)
    for name, value in planned_spec.hyperparameters.items():
        if spec.hyperparameters.get(name) != value:  # the plan chose it: say so, as Validate will set it
            print(f"{path}: plan: hyperparameters.{name} = {str(value).lower()} (only then does it fit)", file=sys.stderr)
    if as_json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        from trainstack_cli.plan_view import show
        from trainstack_cli.views import console

        show(plan, str(path), console())
        for problem in plan_problems(plan):
            print(f"{path}: {problem}", file=sys.stderr)
    return 0 if plan.fits and plan.within_budget else 1


def _redrive(outputs: Path, stack_name: str | None) -> int:
    import boto3

    values = read_outputs(outputs, stack_name)
    if DEAD_LETTER_OUTPUT not in values:
        print(f"{outputs}: no {DEAD_LETTER_OUTPUT}; deploy the stack with this version first", file=sys.stderr)
        return 1
    result = redrive(values[DEAD_LETTER_OUTPUT], boto3.client, values.get(STOP_FUNCTION_OUTPUT, ""))
    print(f"redrive: {len(result.delivered)} event(s) delivered, {len(result.kept)} kept in the queue")
    for line in result.kept:
        print(f"redrive: kept {line}", file=sys.stderr)
    return 1 if result.kept else 0


if __name__ == "__main__":
    sys.exit(main())
