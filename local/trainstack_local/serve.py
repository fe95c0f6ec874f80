"""`trainstack local serve`: the emulated stack kept running on 127.0.0.1, so that any AWS client (the
AWS CLI, boto3, `trainstack` itself) drives it as it drives a deployed stack.

One process holds everything: moto's backends (served over HTTP by moto's own WSGI app, the one
`moto_server` runs), the bridges, the real handlers and the SageMaker twin. Calls from the twin and
the handlers go to the same backends in-process; clients outside come in over HTTP. The stack's
outputs are published twice, as a deployed stack publishes them: a CloudFormation stack named
`trainstack-local` (DescribeStacks, `trainstack --stack`) and a `cdk deploy --outputs-file` JSON file.
Beside it runs the twin's MLflow tracking server (mlflow_server.py), which jobs with MlflowConfig log
to, under the work directory's `mlflow/`; it outlives the twin's jobs, so each job's run is found
once it ends.

`trainstack local fault ...` rehearses failures on it (rehearsal.py: the control plane failing, a spot
reclaim, no capacity, a hang, a NaN or a transport error in a job).

Like AWS, the served endpoint refuses a request signed with another access key than the one it
prints (InvalidAccessKeyId / UnrecognizedClientException / InvalidClientTokenId, in the protocol of
the service asked, read from botocore's model), so a client with the wrong credentials learns it here.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from trainstack_local.emulator import (
    ACCOUNT,
    LOCAL_ENVIRONMENT,
    REGION,
    LocalStack,
    TrainingFiles,
    local_aws,
    training_files,
)
from trainstack_local.event_feed import EventFeed
from trainstack_local.mlflow_server import TrackingServer, tracking_server
from trainstack_local.pipeline import upload_sample_data
from trainstack_local.registry import ImageRegistry
from trainstack_local.rehearsal import ACCESS_KEY_HEADER, FAULT_PATH, RehearsalError, apply_fault
from trainstack_local.sagemaker_twin import SageMakerTwin, TwinSettings

STACK_NAME = "trainstack-local"
HOST = "127.0.0.1"
# The services the emulated stack is made of, as botocore names them (their protocols come from botocore).
SERVED_SERVICES = (
    "s3", "stepfunctions", "sagemaker", "logs", "cloudformation", "sns", "sqs", "events", "lambda", "iam", "sts", "batch",
    "service-quotas", "ec2", "ecr",
)  # fmt: skip
_CREDENTIAL = re.compile(r"Credential=([^/,\s]+)/\d{8}/[^/]+/([^/]+)/aws4_request")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@dataclass(frozen=True)
class Served:
    """What a client needs to reach the served stack."""

    endpoint: str
    outputs_file: Path
    tracking: TrackingServer  # the MLflow tracking server: its ARN, and the URL a browser or client uses
    stack_name: str = STACK_NAME

    def environment(self) -> dict[str, str]:
        """The variables that point the AWS CLI, boto3 and `trainstack` at it."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": LOCAL_ENVIRONMENT["AWS_ACCESS_KEY_ID"],
            "AWS_SECRET_ACCESS_KEY": LOCAL_ENVIRONMENT["AWS_SECRET_ACCESS_KEY"],
            "AWS_DEFAULT_REGION": REGION,
            "TRAINSTACK_STACK": self.stack_name,
        }


@contextmanager
def serve(
    template: dict[str, Any],
    workdir: Path,
    *,
    port: int = 0,
    settings: TwinSettings | None = None,
    images: ImageRegistry | None = None,
    feed: EventFeed | None = None,
) -> Iterator[tuple[Served, LocalStack, SageMakerTwin]]:
    """Create the emulated stack, publish its outputs and serve it on 127.0.0.1:`port` (0: a free one);
    `feed` gets a line per run and job event."""
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    os.environ.pop("AWS_ENDPOINT_URL", None)  # the twin's and the handlers' own calls stay in-process
    with tracked_local_aws(template, workdir, files=training_files(workdir), settings=settings, images=images, feed=feed) as (
        stack,
        twin,
        tracking,
    ):
        upload_sample_data(stack)  # what the embedded default job trains on
        _publish_stack(stack.outputs, template)
        outputs_file = workdir / "cdk-outputs.json"
        outputs_file.write_text(json.dumps({STACK_NAME: stack.outputs}, indent=1, sort_keys=True))
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
        access_key = LOCAL_ENVIRONMENT["AWS_ACCESS_KEY_ID"]
        app = rehearsals(refuse_other_keys(DomainDispatcherApplication(create_backend_app), access_key), stack, twin, access_key)
        server = make_server(HOST, port, app, threaded=True, request_handler=MotoRequestHandler)
        thread = threading.Thread(target=server.serve_forever, name="trainstack-local-serve", daemon=True)
        thread.start()
        try:
            yield Served(f"http://{HOST}:{server.server_port}", outputs_file, tracking), stack, twin
        finally:
            server.shutdown()
            thread.join()


@contextmanager
def tracked_local_aws(
    template: dict[str, Any],
    workdir: Path,
    *,
    files: TrainingFiles,
    settings: TwinSettings | None = None,
    images: ImageRegistry | None = None,
    feed: EventFeed | None = None,
) -> Iterator[tuple[LocalStack, SageMakerTwin, TrackingServer]]:
    """`local_aws` with the twin's MLflow tracking server (files under `workdir`/mlflow), started first
    and stopped last: the twin's jobs have ended, and their runs been looked up, before it goes."""
    with (
        tracking_server(workdir / "mlflow", region=REGION, account=ACCOUNT) as tracking,
        local_aws(
            template, workdir, files=files, settings=settings, images=images, feed=feed, mlflow_tracking_server_arn=tracking.arn
        ) as (stack, twin),
    ):
        twin.tracking_server = tracking
        yield stack, twin, tracking


def _publish_stack(outputs: dict[str, str], template: dict[str, Any]) -> None:
    """The outputs as CloudFormation holds a deployed stack's (created from a template of one placeholder
    resource: the emulator made the resources), and the synthesized template as the one it deployed
    (GetTemplate, from which `trainstack doctor` reads the runtime its functions were deployed with)."""
    from moto.cloudformation.models import cloudformation_backends

    placeholder = {
        "Resources": {"Placeholder": {"Type": "AWS::CloudFormation::WaitConditionHandle"}},
        "Outputs": {name: {"Value": value} for name, value in outputs.items()},
    }
    with warnings.catch_warnings():  # moto notes that it creates nothing for the placeholder: none is wanted
        warnings.simplefilter("ignore", UserWarning)
        created = boto3.client("cloudformation", region_name=REGION).create_stack(
            StackName=STACK_NAME, TemplateBody=json.dumps(placeholder)
        )
    cloudformation_backends[ACCOUNT][REGION].stacks[created["StackId"]].template = json.dumps(template)


def refuse_other_keys(app: WsgiApp, access_key: str) -> WsgiApp:
    """Answer a request signed with another access key as AWS answers an unknown one."""
    protocols = _protocols()

    def checked(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        match = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", "")) or _CREDENTIAL.search(
            "Credential=" + environ.get("QUERY_STRING", "").partition("X-Amz-Credential=")[2].replace("%2F", "/")
        )
        if match is None or match.group(1) == access_key:
            return app(environ, start_response)
        body, content_type = _refusal(protocols.get(match.group(2), "json"))
        start_response("403 Forbidden", [("Content-Type", content_type), ("x-amzn-ErrorType", _JSON_CODE)])
        return [body]

    return checked


def rehearsals(app: WsgiApp, stack: LocalStack, twin: SageMakerTwin, access_key: str) -> WsgiApp:
    """FAULT_PATH takes a fault to rehearse (rehearsal.py), from a caller holding the printed key."""

    def answered(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO") != FAULT_PATH:
            return app(environ, start_response)
        status, answer = "200 OK", {}
        if environ.get("HTTP_" + ACCESS_KEY_HEADER.upper().replace("-", "_")) != access_key:
            status, answer = "403 Forbidden", {"error": "sign with the access key `trainstack local serve` printed"}
        else:
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
                answer = {"done": apply_fault(json.loads(environ["wsgi.input"].read(length) or b"{}"), stack, twin)}
            except (RehearsalError, ValueError) as error:
                status, answer = "400 Bad Request", {"error": str(error)}
        start_response(status, [("Content-Type", "application/json")])
        return [json.dumps(answer).encode()]

    return answered


_JSON_CODE = "UnrecognizedClientException"
_MESSAGE = "The security token included in the request is invalid."


def _protocols() -> dict[str, str]:
    """Signing name -> protocol of each served service, from botocore's models."""
    session = boto3.session.Session()._session
    protocols = {}
    for name in SERVED_SERVICES:
        model = session.get_service_model(name)
        protocols[model.signing_name] = model.protocol
    return protocols


def _refusal(protocol: str) -> tuple[bytes, str]:
    if protocol == "rest-xml":  # S3
        message = "The AWS Access Key Id you provided does not exist in our records."
        body = f"<Error><Code>InvalidAccessKeyId</Code><Message>{message}</Message></Error>"
        return body.encode(), "application/xml"
    if protocol in ("query", "ec2"):
        error = f"<Type>Sender</Type><Code>InvalidClientTokenId</Code><Message>{_MESSAGE}</Message>"
        body = f"<ErrorResponse><Error>{error}</Error></ErrorResponse>"
        return body.encode(), "text/xml"
    return json.dumps({"__type": _JSON_CODE, "message": _MESSAGE}).encode(), "application/x-amz-json-1.1"
