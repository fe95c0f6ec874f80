"""`trainstack local serve` and `trainstack local run`: the CLI's commands on the emulated stack
(trainstack_local), which they import only when asked: the CLI itself needs no emulation."""

from __future__ import annotations

import argparse
import json
import signal
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from trainstack_cli.operate_command import follow
from trainstack_cli.run_reading import read_run
from trainstack_cli.spec_file import read_spec
from trainstack_cli.stack import EXIT_BAD_INPUT, EXIT_NO_STACK, EXIT_OK, EXIT_RUN_FAILED, CliError, Stack, find_stack
from trainstack_cli.submit import submit
from trainstack_cli.views import console as cli_console
from trainstack_cli.views import duration

if TYPE_CHECKING:  # the emulation is imported only when a local command runs
    from trainstack_local.account_twin import AccountSettings
    from trainstack_local.registry import ImageRegistry

TEMPLATE = Path("cdk.out") / "trainstack.template.json"


def run(args: argparse.Namespace) -> int:
    from trainstack_local.prerequisites import namespace_problem

    # Before anything starts (the MLflow server, the twin): what this machine lacks, then the files named.
    problem = namespace_problem(args.local_command)
    if problem:
        raise CliError(problem, EXIT_NO_STACK)
    from trainstack_local.emulator import ROOT
    from trainstack_local.event_feed import EventFeed
    from trainstack_local.sagemaker_twin import TwinSettings
    from trainstack_local.serve import serve

    if args.local_command == "run" and args.spec:
        read_spec(args.spec)  # submit reads it again, on the emulated stack, and checks it against that stack
    template = _template(args.template or ROOT / TEMPLATE)
    settings = TwinSettings(account=account_settings(args.quota, args.availability_zone_id))
    images = image_registry(args.missing_image)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="trainstack-local-"))
    console = cli_console()
    if args.local_command == "serve":
        with serve(template, workdir, port=args.port, settings=settings, images=images, feed=EventFeed()) as (served, _, _):
            for name, value in served.environment().items():
                print(f"export {name}={value}")
            print(f"# trainstack local: MLflow tracking server at {served.tracking.url} ({served.tracking.arn})", flush=True)
            print(
                f"# trainstack local: serving the emulated stack at {served.endpoint}; outputs in {served.outputs_file}; "
                "Ctrl-C stops it",
                flush=True,
            )
            _wait_for_signal()
        return EXIT_OK
    from trainstack_local.pipeline import DEFAULT_JOB

    spec = args.spec or DEFAULT_JOB
    started = time.monotonic()
    _unwind_on_sigterm()
    with serve(template, workdir, settings=settings, images=images) as (served, _, twin):
        console.print(f"trainstack local: MLflow tracking server at {served.tracking.url}")
        stack = find_stack(None, served.outputs_file, None, None)  # in-process: moto answers without HTTP
        name = submit(stack, spec, args.source)
        console.print(f"trainstack local: {spec.name} submitted to the emulated stack: run {name}")
        view = follow(stack, name, console)
        twin.wait()
        view = read_run(stack, name)
        console.print(f"run {view.name}: {view.status}" + (f" ({view.cause})" if view.cause else ""))
        for trial in view.trials:
            loss = trial.metrics.get("train:loss")
            console.print(f"  job {trial.job_name}: {trial.status}; final loss {'-' if loss is None else f'{loss:.4f}'}")
            job = twin.runs.get(trial.job_name)
            if job is not None and job.runtime is not None:  # the image's software it ran on
                console.print(f"  runtime: {job.runtime.describe()}")
            if trial.model_artifacts:
                local = _copy_model(stack, trial.model_artifacts, args.output_dir / trial.job_name)
                console.print(f"  model: {local}")
    console.print(f"  wall time {duration(int(time.monotonic() - started))}; the hosts' /opt/ml are under {workdir}")
    return EXIT_OK if view.status == "SUCCEEDED" else EXIT_RUN_FAILED


def _template(path: Path) -> dict[str, Any]:
    """The synthesized template the emulated stack is made from, or one line naming the fix."""
    if not path.exists():
        raise CliError(f"{path} is missing; run `make synth` first", EXIT_BAD_INPUT)
    try:
        template = json.loads(path.read_bytes())
    except OSError as error:
        raise CliError(
            f"{path}: cannot read it ({error.strerror}); run `make synth`, or pass its template with --template", EXIT_BAD_INPUT
        ) from None
    except ValueError as error:  # not JSON, or not text
        raise CliError(
            f"{path}: not JSON ({error}); run `make synth` again, or pass its template with --template", EXIT_BAD_INPUT
        ) from None
    if not isinstance(template, dict) or "Resources" not in template:
        raise CliError(
            f"{path}: not a CloudFormation template; run `make synth`, or pass its template with --template", EXIT_BAD_INPUT
        )
    return template


def account_settings(quotas: list[str], availability_zone_id: str | None) -> AccountSettings:
    """The emulated account's settings from `--quota TYPE=N` (each use of the type) and the AZ ID."""
    from trainstack import facts
    from trainstack.account import quota_name
    from trainstack_local.account_twin import USES, AccountSettings

    values: dict[str, float] = {}
    for given in quotas:
        instance_type, _, text = given.partition("=")
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if facts.instance(instance_type) is None or value < 0:
            raise CliError(f"--quota {given}: give a training instance type and a number, e.g. ml.p4d.24xlarge=2", EXIT_BAD_INPUT)
        values.update({quota_name(instance_type, use): value for use in USES})
    defaults = AccountSettings()
    return AccountSettings(quotas=values, availability_zone_id=availability_zone_id or defaults.availability_zone_id)


def image_registry(missing: list[str]) -> ImageRegistry:
    """The twin's image registry, lacking the framework images `--missing-image` names (each one of the
    emulated region's framework images)."""
    from trainstack import images
    from trainstack_local.emulator import REGION
    from trainstack_local.registry import ImageRegistry

    for uri in missing:
        if images.framework_image_version(uri) is None or f".dkr.ecr.{REGION}." not in uri:
            raise CliError(
                f"--missing-image {uri}: give a framework image of {REGION}, e.g. {images.default_base_image(REGION)}",
                EXIT_BAD_INPUT,
            )
    return ImageRegistry(missing=frozenset(missing))


def _copy_model(stack: Stack, uri: str, directory: Path) -> Path:
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    directory.mkdir(parents=True, exist_ok=True)
    destination = directory / "model.tar.gz"
    stack.client("s3").download_file(bucket, key, str(destination))
    return destination.resolve()


def _wait_for_signal() -> None:
    stopped = threading.Event()
    for number in (signal.SIGINT, signal.SIGTERM):
        signal.signal(number, lambda *_: stopped.set())
    stopped.wait()


def _unwind_on_sigterm() -> None:
    """SIGTERM (`timeout`, the end of a CI job) ends the run as Ctrl-C does, through every context it
    is in, so that the twin stops its jobs and the MLflow server's process group goes: Python's
    default would end this process at once and leave them running. Exit status 128 + 15, as the
    signal's own; a SIGTERM that comes while it unwinds does not cut the cleanup short."""
    received = False

    def unwind(signum: int, _: FrameType | None) -> None:
        nonlocal received
        if not received:
            received = True
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)
