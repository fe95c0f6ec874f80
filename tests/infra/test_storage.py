"""Storage: every bucket encrypted, TLS-only and private; one rotating key; data retained by default."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from tests.synth import synthesize


def _buckets(stack):
    return stack.resources("AWS::S3::Bucket")


def test_there_are_three_buckets_trigger_artifacts_and_access_logs(default_stack):
    assert sorted(k.split("Storage")[1].rstrip("0123456789ABCDEF") for k in _buckets(default_stack)) == [
        "AccessLogs",
        "Artifacts",
        "Trigger",
    ]


def test_every_bucket_blocks_public_access(default_stack):
    for logical_id, bucket in _buckets(default_stack).items():
        block = bucket["Properties"]["PublicAccessBlockConfiguration"]
        assert all(block[k] for k in ("BlockPublicAcls", "BlockPublicPolicy", "IgnorePublicAcls", "RestrictPublicBuckets")), (
            logical_id
        )


def test_every_bucket_is_encrypted(default_stack):
    for logical_id, bucket in _buckets(default_stack).items():
        rule = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]
        assert rule["SSEAlgorithm"] in ("aws:kms", "AES256"), logical_id


def test_data_buckets_use_the_customer_managed_key(default_stack):
    for logical_id, bucket in _buckets(default_stack).items():
        if "AccessLogs" in logical_id:
            continue  # S3 server access logging only delivers to SSE-S3 buckets
        rule = bucket["Properties"]["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]
        assert rule["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
        assert rule["ServerSideEncryptionByDefault"]["KMSMasterKeyID"]["Fn::GetAtt"][0].startswith("StorageKey")
        assert rule["BucketKeyEnabled"] is True


def test_every_bucket_denies_requests_without_tls(default_stack):
    policies = {
        p["Properties"]["Bucket"]["Ref"]: p["Properties"]["PolicyDocument"]
        for p in default_stack.resources("AWS::S3::BucketPolicy").values()
    }
    for logical_id in _buckets(default_stack):
        statements = policies[logical_id]["Statement"]
        assert any(s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in statements), (
            logical_id
        )


def test_every_bucket_is_versioned_and_aborts_incomplete_uploads(default_stack):
    for logical_id, bucket in _buckets(default_stack).items():
        assert bucket["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}, logical_id
        rules = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
        assert any(r.get("AbortIncompleteMultipartUpload", {}).get("DaysAfterInitiation") == 7 for r in rules), logical_id
        assert any("NoncurrentVersionExpiration" in r for r in rules), logical_id


def test_old_checkpoints_expire(default_stack):
    default_stack.template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "LifecycleConfiguration": {
                "Rules": Match.array_with([Match.object_like({"Prefix": "checkpoints/", "ExpirationInDays": 30})])
            }
        },
    )


def test_checkpoint_expiry_setting_changes_the_rule():
    stack = synthesize(checkpoint_expiry_days=90)
    stack.template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "LifecycleConfiguration": {
                "Rules": Match.array_with([Match.object_like({"Prefix": "checkpoints/", "ExpirationInDays": 90})])
            }
        },
    )


def test_trigger_bucket_sends_events_to_eventbridge(default_stack):
    default_stack.template.has_resource_properties(
        "Custom::S3BucketNotifications",
        {
            "BucketName": {"Ref": Match.string_like_regexp("StorageTrigger")},
            "NotificationConfiguration": {"EventBridgeConfiguration": {}},
        },
    )


def test_data_buckets_log_access_to_the_access_log_bucket(default_stack):
    for logical_id, bucket in _buckets(default_stack).items():
        if "AccessLogs" in logical_id:
            continue
        target = bucket["Properties"]["LoggingConfiguration"]["DestinationBucketName"]["Ref"]
        assert target.startswith("StorageAccessLogs"), logical_id


def test_key_rotates(default_stack):
    default_stack.template.resource_count_is("AWS::KMS::Key", 1)
    default_stack.template.has_resource_properties("AWS::KMS::Key", {"EnableKeyRotation": True})


def test_data_is_retained_by_default(default_stack):
    for kind in ("AWS::S3::Bucket", "AWS::KMS::Key", "AWS::Logs::LogGroup"):
        for logical_id, resource in default_stack.resources(kind).items():
            assert resource["DeletionPolicy"] == "Retain", logical_id


@pytest.mark.parametrize("kind", ["AWS::S3::Bucket", "AWS::KMS::Key", "AWS::Logs::LogGroup"])
def test_destroy_removal_policy_deletes_data_resources_with_the_stack(kind):
    stack = synthesize(data_removal_policy="destroy")
    assert {r["DeletionPolicy"] for r in stack.resources(kind).values()} == {"Delete"}
