"""cdk-nag is a real gate, and every exception to it (and to checkov) is a recorded decision."""

from __future__ import annotations

import re

import pytest
from aws_cdk import Validations, aws_s3

from stacks.app import build_app

# aws-cdk-lib acknowledges some of its own CloudFormation validation rules (e.g. on flow logs).
CDK_OWN = "CloudFormation-Validate::"
SPECIFIC_RULE = re.compile(r"^AwsSolutions-[A-Z]+\d+(\[.+\])?$")


def test_nag_gate_rejects_an_insecure_bucket(tmp_path):
    app, stack = build_app(outdir=str(tmp_path))
    aws_s3.Bucket(stack, "Insecure")  # no TLS-only policy, no access logs
    with pytest.raises(Exception, match="ValidationFailed"):
        app.synth()
    report = (tmp_path / "validation-report.json").read_text()
    assert "AwsSolutions-S1" in report and "AwsSolutions-S10" in report


def test_nag_gate_passes_the_stack_as_built(default_stack, all_options_stack):
    # The fixtures synthesize through app.synth(), which raises on any unacknowledged finding.
    assert default_stack.json["Resources"] and all_options_stack.json["Resources"]


def test_every_acknowledgement_names_a_specific_rule_and_a_reason(tmp_path):
    _, stack = build_app(outdir=str(tmp_path))
    acknowledgements = [
        (construct.node.path, rule, reason)
        for construct in stack.node.find_all()
        for entry in construct.node.metadata
        if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY
        for rule, reason in entry.data.items()
    ]
    ours = [(path, rule.removeprefix("Annotation::"), reason) for path, rule, reason in acknowledgements if CDK_OWN not in rule]
    assert ours
    for path, rule, reason in ours:
        assert SPECIFIC_RULE.match(rule), (path, rule)
        assert len(reason) >= 40, (path, rule, reason)


def test_every_checkov_skip_has_a_reason(all_options_stack):
    skips = [
        (logical_id, skip)
        for logical_id, resource in all_options_stack.json["Resources"].items()
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", [])
    ]
    assert skips
    for logical_id, skip in skips:
        assert re.match(r"^CKV2?_AWS_\d+$", skip["id"]), logical_id
        assert len(skip["comment"]) >= 40, (logical_id, skip)
