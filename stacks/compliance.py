"""cdk-nag and checkov: the checks every synth runs, and the one way to record an exception.

Every acknowledgement carries the rule id and a reason specific to the resource, so the audit trail
reads as a list of decisions, not of silenced warnings.
"""

from __future__ import annotations

import re
from typing import Any

from aws_cdk import Acknowledgment, App, CfnResource, Stack, Validations
from cdk_nag import AwsSolutionsChecks, HIPAASecurityChecks, NIST80053R5Checks, PCIDSS321Checks, ServerlessChecks
from constructs import IConstruct

# Every rule pack cdk-nag ships except NIST 800-53 R4 (superseded by R5), by the name that prefixes
# its rule ids and heads its part of validation-report.json.
AWS_SOLUTIONS = "AwsSolutions"
SERVERLESS = "Serverless"
NIST_800_53_R5 = "NIST.800.53.R5"
HIPAA_SECURITY = "HIPAA.Security"
PCI_DSS_321 = "PCI.DSS.321"
NAG_PACKS = {
    AWS_SOLUTIONS: AwsSolutionsChecks,
    SERVERLESS: ServerlessChecks,
    NIST_800_53_R5: NIST80053R5Checks,
    HIPAA_SECURITY: HIPAASecurityChecks,
    PCI_DSS_321: PCIDSS321Checks,
}

# The compliance packs that check each rule acknowledged somewhere in the stack (cdk-nag 3.0.2).
# One decision about a rule is recorded once per pack that checks it, and under no other pack;
# tests/infra/test_compliance.py holds this table to cdk-nag's own pack sources.
PACKS_CHECKING = {
    "EC2RestrictedCommonPorts": (NIST_800_53_R5, HIPAA_SECURITY, PCI_DSS_321),
    "IAMNoInlinePolicy": (NIST_800_53_R5, HIPAA_SECURITY, PCI_DSS_321),
    "LambdaConcurrency": (NIST_800_53_R5, HIPAA_SECURITY),
    "LambdaDLQ": (SERVERLESS, NIST_800_53_R5, HIPAA_SECURITY),
    "LambdaInsideVPC": (NIST_800_53_R5, HIPAA_SECURITY, PCI_DSS_321),
    "LambdaLatestVersion": (SERVERLESS,),
    "LambdaTracing": (SERVERLESS,),
    "S3BucketReplicationEnabled": (NIST_800_53_R5, HIPAA_SECURITY, PCI_DSS_321),
    "S3DefaultEncryptionKMS": (NIST_800_53_R5, HIPAA_SECURITY, PCI_DSS_321),
    "SQSRedrivePolicy": (SERVERLESS,),
    "VPCNoUnrestrictedRouteToIGW": (NIST_800_53_R5, HIPAA_SECURITY, PCI_DSS_321),
}

# checkov findings on the Lambda functions that CDK itself adds as CloudFormation custom-resource
# handlers; they run only during deploys, invoked synchronously by CloudFormation.
CDK_HANDLER_CHECKOV_SKIPS = (
    ("CKV_AWS_115", "CDK deploy-time custom-resource handler: CloudFormation invokes it a few times per deploy."),
    ("CKV_AWS_116", "CDK deploy-time custom-resource handler: invoked synchronously, failures surface in the stack event."),
    ("CKV_AWS_117", "CDK deploy-time custom-resource handler: calls only AWS control-plane APIs, needs no VPC."),
)


def enable_nag(app: App) -> None:
    """Run every rule pack on every synth; an unacknowledged finding in any of them fails synth."""
    Validations.of(app).add_plugins(*(pack(app, verbose=True) for pack in NAG_PACKS.values()))


def acknowledge(construct: IConstruct, *findings: tuple[str, str]) -> None:
    """Acknowledge cdk-nag findings `(rule id, reason)` on a construct and its children."""
    Validations.of(construct).acknowledge(*(Acknowledgment(id=rule, reason=reason) for rule, reason in findings))


def in_every_pack(rule: str, reason: str) -> tuple[tuple[str, str], ...]:
    """One decision about a compliance-pack rule, as `(rule id, reason)` for each pack that checks it."""
    return tuple((f"{pack}-{rule}", reason) for pack in PACKS_CHECKING[rule])


def skip_checkov(construct: IConstruct, *skips: tuple[str, str]) -> None:
    """Record checkov skips `(check id, reason)` as metadata on the construct's CloudFormation resource."""
    resource = construct if isinstance(construct, CfnResource) else construct.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{construct.node.path} has no CloudFormation resource to annotate")
    existing = resource.get_metadata("checkov") or {"skip": []}
    existing["skip"].extend({"id": check, "comment": reason} for check, reason in skips)
    resource.add_metadata("checkov", existing)


def acknowledge_cdk_handler(handler: IConstruct) -> None:
    """Record why CDK's own custom-resource handlers (not our code) differ from our Lambda standards."""
    acknowledge(
        handler,
        (
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]",
            "CDK's own deploy-time custom-resource handler; the managed policy only lets it write its own logs.",
        ),
        *in_every_pack(
            "LambdaDLQ",
            "CDK's deploy-time custom-resource handler: CloudFormation invokes it synchronously and fails the "
            "deploy on its error, so a dead-letter queue would never receive an event.",
        ),
        *in_every_pack(
            "LambdaConcurrency",
            "CDK's deploy-time custom-resource handler runs a few times per deploy; reserving concurrency for it "
            "would only shrink the account's unreserved pool.",
        ),
        *in_every_pack(
            "LambdaInsideVPC",
            "CDK's deploy-time custom-resource handler calls only AWS control-plane APIs; inside the VPC it would "
            "need a NAT gateway or interface endpoints that cost money while idle.",
        ),
        *in_every_pack(
            "LambdaTracing",
            "CDK's deploy-time custom-resource handler: aws-cdk-lib offers no tracing setting for it, and its one "
            "SDK call per deploy is recorded in CloudTrail.",
        ),
    )
    for construct in handler.node.find_all():
        if isinstance(construct, CfnResource) and construct.cfn_resource_type == "AWS::Lambda::Function":
            skip_checkov(construct, *CDK_HANDLER_CHECKOV_SKIPS)


def nag_resource(scope: IConstruct, value: str) -> str:
    """How cdk-nag names a (token) resource in granular findings: `Ref X` and `${X}` -> `<X>`, `GetAtt X.Y` -> `<X.Y>`.

    Deriving the id from the ARN itself keeps acknowledgements right in every environment (tokens
    in an environment-agnostic stack, literals with an explicit account and region).
    """
    return _render(Stack.of(scope).resolve(value))


def _render(node: Any) -> str:
    if isinstance(node, str):
        return node
    if isinstance(node, dict) and "Ref" in node:
        return f"<{node['Ref']}>"
    if isinstance(node, dict) and "Fn::GetAtt" in node:
        return f"<{'.'.join(node['Fn::GetAtt'])}>"
    if isinstance(node, dict) and isinstance(node.get("Fn::Sub"), str):
        return re.sub(r"\$\{([^}]+)\}", r"<\1>", node["Fn::Sub"])
    if isinstance(node, dict) and "Fn::Join" in node:
        separator, parts = node["Fn::Join"]
        return separator.join(_render(part) for part in parts)
    raise ValueError(f"cannot render {node!r} as a cdk-nag resource id")
