"""cdk-nag and checkov: the checks every synth runs, and the one way to record an exception.

Every acknowledgement carries the rule id and a reason specific to the resource, so the audit trail
reads as a list of decisions, not of silenced warnings.
"""

from __future__ import annotations

import re
from typing import Any

from aws_cdk import Acknowledgment, App, CfnResource, Stack, Validations
from cdk_nag import AwsSolutionsChecks
from constructs import IConstruct

# checkov findings on the Lambda functions that CDK itself adds as CloudFormation custom-resource
# handlers; they run only during deploys, invoked synchronously by CloudFormation.
CDK_HANDLER_CHECKOV_SKIPS = (
    ("CKV_AWS_115", "CDK deploy-time custom-resource handler: CloudFormation invokes it a few times per deploy."),
    ("CKV_AWS_116", "CDK deploy-time custom-resource handler: invoked synchronously, failures surface in the stack event."),
    ("CKV_AWS_117", "CDK deploy-time custom-resource handler: calls only AWS control-plane APIs, needs no VPC."),
)


def enable_nag(app: App) -> None:
    """Run the AWS Solutions rule pack on every synth; unacknowledged findings fail synth."""
    Validations.of(app).add_plugins(AwsSolutionsChecks(app, verbose=True))


def acknowledge(construct: IConstruct, *findings: tuple[str, str]) -> None:
    """Acknowledge cdk-nag findings `(rule id, reason)` on a construct and its children."""
    Validations.of(construct).acknowledge(*(Acknowledgment(id=rule, reason=reason) for rule, reason in findings))


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
