"""One StackContext, read back the same from the Lambda environment and from the stack's outputs."""

from __future__ import annotations

import json

import pytest

from tests.core.specs import STACK
from trainstack.stack_context import FIELDS, StackContext


def test_the_lambda_environment_gives_back_the_context_the_stack_wrote():
    assert StackContext.from_variables({**STACK.to_variables(), "AWS_REGION": STACK.region}) == STACK


def test_the_stack_outputs_give_back_the_same_context(tmp_path):
    path = tmp_path / "cdk-outputs.json"
    path.write_text(json.dumps({"trainstack": STACK.to_outputs()}))
    assert StackContext.from_outputs_file(path, STACK.region) == STACK


def test_lists_and_flags_travel_as_text():
    context = StackContext(**{**STACK.__dict__, "subnet_ids": ("subnet-a", "subnet-b"), "inter_container_encryption": True})
    outputs = context.to_outputs()
    assert outputs["TrainingSubnetIds"] == "subnet-a,subnet-b" and outputs["InterContainerEncryption"] == "true"
    assert StackContext.from_outputs(outputs, context.region) == context


def test_outputs_of_an_older_stack_take_the_defaults_of_what_it_lacks():
    outputs = {k: v for k, v in STACK.to_outputs().items() if k not in ("NamePrefix", "ContainerEntryS3Uri")}
    context = StackContext.from_outputs(outputs, STACK.region)
    assert context.name_prefix == "trainstack" and context.entry_s3_uri == ""


def test_a_missing_required_output_names_it():
    outputs = {k: v for k, v in STACK.to_outputs().items() if k != "KeyArn"}
    with pytest.raises(KeyError, match="KeyArn"):
        StackContext.from_outputs(outputs, STACK.region)


def test_an_outputs_file_with_several_stacks_needs_a_stack_name(tmp_path):
    path = tmp_path / "cdk-outputs.json"
    path.write_text(json.dumps({"a": STACK.to_outputs(), "b": STACK.to_outputs()}))
    with pytest.raises(ValueError, match="name the stack"):
        StackContext.from_outputs_file(path, STACK.region)
    assert StackContext.from_outputs_file(path, STACK.region, stack_name="b") == STACK


def test_every_field_but_the_region_travels():
    names = {spec.name for spec in FIELDS}
    assert names == set(StackContext.__dataclass_fields__) - {"region"}
