"""The synthesized template's IAM policies evaluated for one request, as IAM would decide it: each
statement's CloudFormation references resolved to ARNs named after the logical ids, then moto's IAM
evaluator (the same one its IAM access control uses; pinned) over the Allow and Deny statements.
Condition keys are evaluated where the request gives their values; none is assumed."""

from __future__ import annotations

import json
from typing import Any

from moto.iam.access_control import IAMPolicy, PermissionResult

ACCOUNT, REGION, PARTITION = "123456789012", "us-east-1", "aws"
PSEUDO = {"AWS::AccountId": ACCOUNT, "AWS::Region": REGION, "AWS::Partition": PARTITION, "AWS::URLSuffix": "amazonaws.com"}


def resolved(value: Any, template: dict[str, Any]) -> Any:
    """A template value with Ref, Fn::GetAtt (an S3 bucket's ARN is arn:aws:s3:::<logical id>) and
    Fn::Join resolved; other resources' ARNs are named after their logical ids too."""
    if isinstance(value, list):
        return [resolved(item, template) for item in value]
    if not isinstance(value, dict):
        return value
    if "Ref" in value:
        return PSEUDO.get(value["Ref"], value["Ref"].lower())
    if "Fn::GetAtt" in value:
        logical_id, _ = value["Fn::GetAtt"]
        kind = template["Resources"][logical_id]["Type"]
        if kind == "AWS::S3::Bucket":
            return f"arn:aws:s3:::{logical_id.lower()}"
        return f"arn:aws:{kind.split('::')[1].lower()}:{REGION}:{ACCOUNT}:{logical_id}"
    if "Fn::Join" in value:
        separator, parts = value["Fn::Join"]
        return separator.join(str(resolved(part, template)) for part in parts)
    return {key: resolved(item, template) for key, item in value.items()}


def bucket_arn(template: dict[str, Any], name_part: str) -> str:
    """The resolved ARN of the template's bucket whose logical id holds `name_part`."""
    (logical_id,) = [k for k, r in template["Resources"].items() if r["Type"] == "AWS::S3::Bucket" and name_part in k]
    return f"arn:aws:s3:::{logical_id.lower()}"


def allowed(template: dict[str, Any], policy_prefix: str, action: str, resource: str) -> bool:
    """Whether the managed policies whose logical ids start with `policy_prefix` allow the request."""
    documents = [
        resolved(r["Properties"]["PolicyDocument"], template)
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::ManagedPolicy" and k.startswith(policy_prefix)
    ]
    assert documents, f"no managed policy {policy_prefix}*"
    results = [IAMPolicy(json.dumps(document)).is_action_permitted(action, resource) for document in documents]
    return PermissionResult.DENIED not in results and PermissionResult.PERMITTED in results
