"""cdk-nag is a real gate, every pack of it, and every exception to it (and to checkov) is a recorded decision."""

from __future__ import annotations

import json
import re
import tarfile
from pathlib import Path

import cdk_nag
import pytest
from aws_cdk import Validations, aws_lambda, aws_s3

from stacks.app import build_app
from stacks.compliance import AWS_SOLUTIONS, NAG_PACKS, PACKS_CHECKING

# aws-cdk-lib acknowledges some of its own CloudFormation validation rules (e.g. on flow logs).
CDK_OWN = "CloudFormation-Validate::"
COMPLIANCE_PACKS = [pack for pack in NAG_PACKS if pack != AWS_SOLUTIONS]
SPECIFIC_RULE = re.compile(
    r"^(AwsSolutions-[A-Z]+\d+|(" + "|".join(map(re.escape, COMPLIANCE_PACKS)) + r")-[A-Za-z0-9]+)(\[.+\])?$"
)


@pytest.fixture(scope="module")
def insecure_report(tmp_path_factory) -> dict:
    """The validation report of the real app plus a bucket and a function that break rules of every pack."""
    outdir = tmp_path_factory.mktemp("insecure")
    app, stack = build_app(outdir=str(outdir))
    aws_s3.Bucket(stack, "Insecure")  # no TLS-only policy, no access logs, no KMS key, no replication
    aws_lambda.Function(  # no dead-letter queue, no tracing, no reserved concurrency, no VPC
        stack,
        "Bare",
        runtime=aws_lambda.Runtime.PYTHON_3_12,
        handler="index.handler",
        code=aws_lambda.Code.from_inline("def handler(event, context):\n    return event\n"),
    )
    with pytest.raises(Exception, match="ValidationFailed"):
        app.synth()
    return json.loads((outdir / "validation-report.json").read_text())


@pytest.mark.parametrize("pack", list(NAG_PACKS))
def test_every_nag_pack_fails_synth_on_an_insecure_resource(insecure_report, pack):
    flagged = {
        resource["constructPath"].split("/")[1]
        for report in insecure_report["pluginReports"]
        if report["pluginName"] == pack
        for violation in report["violations"]
        for resource in violation["violatingConstructs"]
    }
    assert flagged and flagged <= {"Insecure", "Bare"}, flagged


@pytest.mark.parametrize("pack", list(NAG_PACKS))
@pytest.mark.parametrize("variant", ["default", "all_options"])
def test_every_nag_pack_reports_no_unacknowledged_finding(variant, pack, default_stack, all_options_stack):
    # The fixtures synthesize through app.synth(), which raises on any unacknowledged finding; a
    # report that passed lists no pack at all.
    stack = {"default": default_stack, "all_options": all_options_stack}[variant]
    report = json.loads((stack.directory / "validation-report.json").read_text())
    assert [r["violations"] for r in report["pluginReports"] if r["pluginName"] == pack] == []


@pytest.fixture(scope="module")
def acknowledgements(tmp_path_factory) -> list[tuple[str, str, str]]:
    """Every `(construct path, rule id, reason)` the stack acknowledges, aws-cdk-lib's own left out."""
    _, stack = build_app(outdir=str(tmp_path_factory.mktemp("acknowledged")))
    return [
        (construct.node.path, rule.removeprefix("Annotation::"), reason)
        for construct in stack.node.find_all()
        for entry in construct.node.metadata
        if entry.type == Validations.ACKNOWLEDGED_RULES_METADATA_KEY
        for rule, reason in entry.data.items()
        if CDK_OWN not in rule
    ]


def test_every_acknowledgement_names_a_specific_rule_and_a_reason(acknowledgements):
    assert acknowledgements
    for path, rule, reason in acknowledgements:
        assert SPECIFIC_RULE.match(rule), (path, rule)
        assert len(reason) >= 40, (path, rule, reason)


def test_a_decision_about_a_compliance_rule_is_recorded_under_every_pack_that_checks_it(acknowledgements):
    packs_by_decision: dict[tuple[str, str, str], set[str]] = {}
    for path, rule, reason in acknowledgements:
        pack, _, name = rule.partition("-")
        if pack in COMPLIANCE_PACKS:
            packs_by_decision.setdefault((path, name, reason), set()).add(pack)
    assert packs_by_decision
    for (path, name, _), packs in packs_by_decision.items():
        assert packs == set(PACKS_CHECKING[name]), (path, name, packs)


def _pack_sources() -> dict[str, str]:
    """cdk-nag's own pack definitions (JavaScript in its jsii bundle), by pack name."""
    (bundle,) = (Path(cdk_nag.__file__).parent / "_jsii").glob("*.jsii.tgz")
    sources = {}
    with tarfile.open(bundle) as archive:
        for member in archive.getmembers():
            if re.fullmatch(r"package/lib/packs/[^/]+\.js", member.name):
                text = archive.extractfile(member).read().decode()
                if name := re.search(r"packName = '([^']+)'", text):
                    sources[name.group(1)] = text
    return sources


def test_the_pack_table_names_exactly_the_packs_whose_sources_apply_each_rule():
    sources = _pack_sources()
    for rule, packs in PACKS_CHECKING.items():
        applying = {pack for pack in COMPLIANCE_PACKS if re.search(rf"\.{rule}\b", sources[pack])}
        assert applying == set(packs), rule


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
