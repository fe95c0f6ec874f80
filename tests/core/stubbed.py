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


# The services Validate reads the account from (trainstack/account.py), and what a healthy account answers.
ACCOUNT_SERVICES = ("service-quotas", "sagemaker", "ec2")


def account_answers(stubbers: Mapping[str, Stubber], instance_type: str = "ml.p4d.24xlarge", quota: float = 8) -> None:
    """Validate's reads of the account, in their order: the type's quotas, the training jobs in
    progress (none), EC2's offerings of the type and the training subnet's AZ (one that offers it)."""
    listed = [
        {"ServiceCode": "sagemaker", "QuotaName": f"{instance_type} for {use}", "QuotaCode": f"L-{index:08X}", "Value": quota}
        for index, use in enumerate(("training job usage", "spot training job usage", "training warm pool usage"))
    ]
    stubbers["service-quotas"].add_response("list_service_quotas", {"Quotas": listed}, {"ServiceCode": "sagemaker"})
    stubbers["sagemaker"].add_response("list_training_jobs", {"TrainingJobSummaries": []}, {"StatusEquals": "InProgress"})
    ec2_name = instance_type.removeprefix("ml.")
    stubbers["ec2"].add_response(
        "describe_instance_type_offerings",
        {"InstanceTypeOfferings": [{"InstanceType": ec2_name, "LocationType": "availability-zone-id", "Location": "use1-az4"}]},
    )
    stubbers["ec2"].add_response("describe_subnets", {"Subnets": [{"SubnetId": "subnet-1", "AvailabilityZoneId": "use1-az4"}]})
