"""A deployed stack's outputs as `cdk deploy --outputs-file` writes them, for the CLI's offline tests:
every value a stack without a queue, a tracking server or a project image publishes."""

from __future__ import annotations

STACK_OUTPUTS = {
    "TriggerBucketName": "trigger",
    "StateMachineArn": "arn:aws:states:us-east-1:123456789012:stateMachine:m",
    "ExecutionRoleArn": "arn:aws:iam::123456789012:role/exec",
    "ArtifactsBucketName": "artifacts",
    "KeyArn": "arn:aws:kms:us-east-1:123456789012:key/k",
    "TrainingSubnetIds": "subnet-1",
    "SecurityGroupId": "sg-1",
    "SourceS3Uri": "s3://assets/source.tar.gz",
}
