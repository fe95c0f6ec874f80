"""Encrypted log groups with a retention in days, used by the flow logs, the Lambdas and the state machine."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct


def encrypted_log_group(
    scope: Construct, construct_id: str, *, key: kms.IKey, retention_days: int, removal_policy: RemovalPolicy
) -> logs.LogGroup:
    group = logs.LogGroup(scope, construct_id, encryption_key=key, removal_policy=removal_policy)
    # Set on the L1: the L2 takes only the RetentionDays enum, whose Python members carry names,
    # not day counts; settings already limit the value to what CloudWatch Logs accepts.
    group.node.default_child.retention_in_days = retention_days
    return group
