"""The handlers' environment as a deployed stack sets it, and boto3 clients whose every call is
asserted with botocore's Stubber (for the edges moto does not model)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import boto3
from botocore.stub import Stubber

from trainstack.handlers.environment import use_client_factory

ENVIRONMENT = {
    "AWS_REGION": "us-east-1",
    "EXECUTION_ROLE_ARN": "arn:aws:iam::123456789012:role/exec",
    "ARTIFACTS_BUCKET": "artifacts",
    "KEY_ARN": "arn:aws:kms:us-east-1:123456789012:key/k",
    "SUBNET_IDS": "subnet-1",
    "SECURITY_GROUP_ID": "sg-1",
    "SOURCE_S3_URI": "s3://assets/source.tar.gz",
    "NAME_PREFIX": "trainstack",
    "TOPIC_ARN": "arn:aws:sns:us-east-1:123456789012:topic",
}


@contextmanager
def stubbed_clients(monkeypatch, environment: Mapping[str, str], services: tuple[str, ...]) -> Iterator[dict[str, Stubber]]:
    """The handlers get these services' clients, each behind an active Stubber; every response
    added must have been asked for by the end."""
    for key, value in environment.items():
        monkeypatch.setenv(key, value)
    clients = {
        name: boto3.client(name, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x") for name in services
    }
    stubbers = {name: Stubber(c) for name, c in clients.items()}
    use_client_factory(clients.__getitem__)
    for stubber in stubbers.values():
        stubber.activate()
    try:
        yield stubbers
        for stubber in stubbers.values():
            stubber.assert_no_pending_responses()
    finally:
        use_client_factory(None)
