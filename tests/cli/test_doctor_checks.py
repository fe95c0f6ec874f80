"""A doctor check the caller may not run fails naming the actions to allow, never with a traceback:
each check's first call answered AccessDenied by botocore's Stubber, as IAM answers a caller without
the permission (test_doctor_served.py shows two of them on the served twin, through `trainstack local
fault`), and the account reads all refused."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from trainstack_cli.doctor import CHECKS, FAILED, PASSED, Subject, run_check
from trainstack_cli.stack import Stack

OUTPUTS = {
    "ExecutionRoleArn": "arn:aws:iam::123456789012:role/trainstack-execution",
    "ArtifactsBucketName": "artifacts",
    "KeyArn": "arn:aws:kms:us-east-1:123456789012:key/k",
    "TrainingSubnetIds": "subnet-1",
    "SecurityGroupId": "sg-1",
    "SourceS3Uri": "s3://assets/source.tar.gz",
    "TriggerBucketName": "trigger",
    "StateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:trainstack",
    "JobQueueArn": "arn:aws:batch:us-east-1:123456789012:job-queue/trainstack-queue",
    "MlflowTrackingServerArn": "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/research",
}
# The first call of each check, refused.
FIRST_CALL = {
    "trigger bucket and key": ("s3", "put_object"),
    "Batch's service-linked role": ("iam", "get_role"),
    "MLflow tracking server": ("sagemaker", "describe_mlflow_tracking_server"),
    "Lambda runtime and API models": ("stepfunctions", "describe_state_machine"),
    "framework image": ("ecr", "batch_get_image"),
}


class StubbedSession:
    """What Stack.client asks of a boto3 session: clients, here with every call stubbed."""

    region_name = "us-east-1"

    def __init__(self) -> None:
        self.stubbers: dict[str, Stubber] = {}

    def client(self, service: str):
        if service not in self.stubbers:
            client = boto3.client(service, region_name=self.region_name, aws_access_key_id="a", aws_secret_access_key="b")
            self.stubbers[service] = Stubber(client)
            self.stubbers[service].activate()
        return self.stubbers[service].client


@pytest.mark.parametrize("name", list(FIRST_CALL))
def test_a_check_refused_access_fails_naming_the_actions_to_allow(name):
    session = StubbedSession()
    service, method = FIRST_CALL[name]
    session.client(service)
    session.stubbers[service].add_client_error(method, "AccessDeniedException", "User: x is not authorized", 400)
    check = next(check for check in CHECKS if check.name == name)

    (result,) = run_check(check, Subject(Stack("trainstack", OUTPUTS, session), []))

    assert result.status == FAILED
    assert result.detail == "cannot run: AccessDeniedException: User: x is not authorized"
    assert result.fix == f"allow the caller {', '.join(check.actions)}"


def test_an_account_the_caller_may_not_read_fails_the_quota_check_naming_what_to_allow():
    session = StubbedSession()
    for service, method in (
        ("service-quotas", "list_service_quotas"),
        ("sagemaker", "list_training_jobs"),
        ("ec2", "describe_instance_type_offerings"),
        ("ec2", "describe_subnets"),
    ):
        session.client(service)
        session.stubbers[service].add_client_error(method, "AccessDeniedException", "denied", 400)
    from trainstack.spec import parse_spec

    spec = parse_spec({"name": "j", "instance_type": "ml.g5.xlarge"})
    quotas = next(check for check in CHECKS if check.name == "quotas")

    results = run_check(quotas, Subject(Stack("trainstack", OUTPUTS, session), [("job.yaml", spec)]))

    assert [r.status for r in results] == [FAILED] * 4 and PASSED not in {r.status for r in results}
    assert results[0].detail.startswith("cannot read: Service Quotas (the account's quotas: not checked): AccessDeniedException")
    assert "servicequotas:ListServiceQuotas" in results[0].fix and "ec2:DescribeSubnets" in results[0].fix
