"""Synthesize the real app (cdk-nag included) once per settings variant and share the result."""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from aws_cdk.assertions import Template

from stacks.app import build_app

ALL_OPTIONS = {
    "account": "123456789012",
    "region": "us-east-1",
    "availability_zone_ids": ["use1-az4", "use1-az6"],
    "nat_gateway": True,
    "interface_endpoints": ["ecr.api", "ecr.dkr", "logs"],
    "inter_container_encryption": True,
}
# The tracking server of the stack synthesized with -c mlflow_tracking_server_arn.
TRACKING_SERVER_ARN = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/research"


@dataclass(frozen=True)
class Synthesized:
    template: Template
    json: dict[str, Any]
    directory: Path
    template_path: Path

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.json["Resources"].items() if v["Type"] == resource_type}


@cache
def _synthesize(context_json: str) -> Synthesized:
    outdir = tempfile.mkdtemp(prefix="trainstack-synth-")
    app, stack = build_app(json.loads(context_json), outdir=outdir)
    assembly = app.synth()  # raises if cdk-nag reports an unacknowledged finding
    artifact = assembly.get_stack_by_name(stack.stack_name)
    template_path = Path(assembly.directory) / artifact.template_file
    return Synthesized(Template.from_json(artifact.template), artifact.template, Path(assembly.directory), template_path)


def synthesize(**context: Any) -> Synthesized:
    return _synthesize(json.dumps(context, sort_keys=True))
