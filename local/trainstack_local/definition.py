"""The state machine's definition from the synthesized template, with its tokens resolved.

CloudFormation holds the definition as an `Fn::Join` of strings and references (the Lambda ARNs).
Resolving them against a map of logical id -> ARN yields the plain Amazon States Language
document that asl-validator checks and that the local emulation runs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

PSEUDO = {
    "AWS::Partition": "aws",
    "AWS::Region": "us-east-1",
    "AWS::AccountId": "123456789012",
    "AWS::URLSuffix": "amazonaws.com",
}


def state_machine_resource(template: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    (item,) = [(k, r) for k, r in template["Resources"].items() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    return item


def render_definition(
    template: dict[str, Any], arns: Mapping[str, str] | None = None, pseudo: Mapping[str, str] = PSEUDO
) -> dict[str, Any]:
    """`arns` maps a resource's logical id to the ARN `Fn::GetAtt [id, Arn]` should become;
    unmapped ids get a well-formed placeholder Lambda ARN."""
    _, resource = state_machine_resource(template)

    def resolve(node: Any) -> str:
        if isinstance(node, str):
            return node
        if "Ref" in node:
            return pseudo.get(node["Ref"]) or (arns or {}).get(node["Ref"], node["Ref"])
        if "Fn::GetAtt" in node:
            logical_id = node["Fn::GetAtt"][0]
            return (arns or {}).get(
                logical_id
            ) or f"arn:{pseudo['AWS::Partition']}:lambda:{pseudo['AWS::Region']}:{pseudo['AWS::AccountId']}:function:{logical_id}"
        if "Fn::Join" in node:
            separator, parts = node["Fn::Join"]
            return separator.join(resolve(part) for part in parts)
        raise ValueError(f"cannot resolve {node!r} in the state machine definition")

    return json.loads(resolve(resource["Properties"]["DefinitionString"]))


def function_logical_ids(template: dict[str, Any]) -> dict[str, str]:
    """Handler module name ("validate", ...) -> the Lambda function's logical id."""
    found = {}
    for logical_id, resource in template["Resources"].items():
        handler = resource.get("Properties", {}).get("Handler", "") if resource["Type"] == "AWS::Lambda::Function" else ""
        if handler.startswith("trainstack.handlers."):
            found[handler.split(".")[2]] = logical_id
    return found
