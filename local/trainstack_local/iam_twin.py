"""IAM as the twin enforces it: what a role's policies allow, read from moto's IAM and decided by moto's
IAM evaluator (the one its own access control uses; pinned), for the requests signed with credentials
that STS issued for the role.

SageMaker assumes a job's execution role (AssumeRole, session `SageMaker`) and moves the job's data with
those credentials, and gives the job's containers the same; the twin does both (sagemaker_twin.py), and
the twin's S3 decides each request signed with them here (bridges.role_checked_s3). Requests signed
with the twin's own keys (the stack's functions, the twin itself, a caller of `local serve`) are the
platform's and are not evaluated.

How a request is decided: every statement of the role's inline and attached policies is evaluated on
its own by moto's evaluator, which matches actions and resources (`*` wildcards) and evaluates only
StringEquals conditions, on the condition keys the request gives; an explicit Deny wins, then an
Allow. Two corrections to moto's answer, where IAM answers otherwise: a statement whose condition
does not hold does not apply (moto answers it as a Deny, whatever its Effect: each statement is
asked as an Allow, and applies where moto permits it), and S3's HeadBucket is s3:ListBucket (moto
names the action HeadBucket, which IAM has not). The only condition key given is
`s3:prefix` of a bucket listing (the request's prefix, empty without one). docs/local-mode.md lists what
is not evaluated ("What the twin does not reproduce", "IAM").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from trainstack_local.process_environment import TWIN_CREDENTIALS

# SageMaker's session name when it assumes a job's execution role (CloudTrail shows assumed-role/<role>/SageMaker).
SESSION_NAME = "SageMaker"
# What S3 answers a request its caller may not make (the code and the message of S3's own AccessDenied).
ACCESS_DENIED = "AccessDenied"
# moto's S3 action names (moto.s3.responses.ACTION_MAP) that IAM names otherwise.
S3_ACTIONS = {"HeadBucket": "ListBucket"}
# The S3 actions whose request gives the listing's prefix as s3:prefix.
LISTINGS = {"ListBucket", "ListBucketVersions"}


@dataclass(frozen=True)
class RoleCredentials:
    """Temporary credentials of a role, as STS AssumeRole answers them."""

    role_arn: str
    access_key_id: str
    secret_access_key: str
    session_token: str

    def environment(self) -> dict[str, str]:
        """The variables that give a process these credentials (boto3's and the AWS CLI's names)."""
        return {
            "AWS_ACCESS_KEY_ID": self.access_key_id,
            "AWS_SECRET_ACCESS_KEY": self.secret_access_key,
            "AWS_SESSION_TOKEN": self.session_token,
        }

    def client(self, service: str, region: str) -> Any:
        """A client of the emulated AWS that signs with these credentials."""
        import boto3

        return boto3.client(
            service,
            region_name=region,
            aws_access_key_id=self.access_key_id,
            aws_secret_access_key=self.secret_access_key,
            aws_session_token=self.session_token,
        )


def assume_role(role_arn: str, region: str) -> RoleCredentials:
    """The role's credentials, as SageMaker gets a job's: STS AssumeRole, called with the twin's own keys
    (SageMaker's service principal, which the role's trust policy names; the trust policy is not
    evaluated, see docs/local-mode.md)."""
    import boto3

    sts = boto3.client(
        "sts",
        region_name=region,
        aws_access_key_id=TWIN_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=TWIN_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        aws_session_token=TWIN_CREDENTIALS["AWS_SESSION_TOKEN"],
    )
    issued = sts.assume_role(RoleArn=role_arn, RoleSessionName=SESSION_NAME)["Credentials"]
    return RoleCredentials(role_arn, issued["AccessKeyId"], issued["SecretAccessKey"], issued["SessionToken"])


def assumed_role(account: str, access_key_id: str) -> str | None:
    """The ARN of the role whose STS credentials carry this access key; None for any other key (the
    twin's own, or none)."""
    from moto.sts.models import sts_backends

    found = sts_backends[account]["aws"].get_assumed_role_from_access_key(access_key_id)
    return None if found is None else found.role_arn


def role_policies(account: str, role_arn: str) -> list[dict[str, Any]]:
    """The documents of the role's inline and attached policies (their default versions) as moto's IAM
    holds them; none for a role IAM does not have."""
    from moto.iam.exceptions import NotFoundException
    from moto.iam.models import iam_backends

    try:
        role = iam_backends[account]["aws"].get_role_by_arn(role_arn)
    except NotFoundException:
        return []
    documents = [json.loads(document) for document in role.policies.values()]
    for policy in role.managed_policies.values():
        documents.append(json.loads(next(v.document for v in policy.versions if v.is_default)))
    return documents


def allows(policies: list[dict[str, Any]], action: str, resource: str, context: dict[str, str] | None = None) -> bool:
    """Whether the policies allow `action` on `resource`, with `context` the request's condition keys."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    permitted = False
    for policy in policies:
        statements = policy["Statement"] if isinstance(policy["Statement"], list) else [policy["Statement"]]
        for statement in statements:
            # Each statement asked as an Allow: moto answers PERMITTED where its action, resource and
            # conditions match (it applies), and DENIED where a condition does not hold (it does not).
            alone = json.dumps({"Version": policy.get("Version", "2012-10-17"), "Statement": [{**statement, "Effect": "Allow"}]})
            applies = IAMPolicy(alone).is_action_permitted(action, resource, incoming_condition_values=context)
            if applies == PermissionResult.PERMITTED and statement["Effect"] == "Deny":
                return False  # an explicit Deny wins
            permitted = permitted or applies == PermissionResult.PERMITTED
    return permitted


def s3_request(moto_action: str, bucket: str | None, key: str | None, prefix: str | None) -> tuple[str, str, dict[str, str]]:
    """An S3 request as IAM evaluates it: its action, its resource's ARN and its condition keys, from the
    action moto names it by (S3Response's ACTION_MAP), its bucket, its key and a listing's prefix."""
    action = S3_ACTIONS.get(moto_action, moto_action)
    target = f"{bucket or '*'}/{key}" if key else (bucket or "*")
    context = {"s3:prefix": prefix or ""} if action in LISTINGS else {}
    return f"s3:{action}", f"arn:aws:s3:::{target}", context
