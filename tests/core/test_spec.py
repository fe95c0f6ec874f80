"""The job spec: YAML or JSON in, one typed model out, or every bad field named."""

from __future__ import annotations

import json

import pytest

from tests.core.specs import DDP
from trainstack.spec import SpecError, json_schema, load_spec, parse_spec

ARCHITECTURE_EXAMPLE = """
name: gpt-small
entry_point: train.py
framework_version: "2.3.1"
py_version: py311
instance_type: ml.p4d.24xlarge
instance_count: 2
distribution:
  torch_distributed: {enabled: true}
hyperparameters: {model: gpt-125m, max_steps: 2000, precision: bf16}
inputs:
  train: {s3_uri: "s3://trainstack-trigger/datasets/owt/", mode: FastFile, distribution: ShardedByS3Key}
spot: {enabled: true, max_wait: 48h}
checkpoints: true
warm_pool: 30m
max_runtime: 24h
sweep: {max_concurrency: 4, grid: {lr: [1.0e-4, 3.0e-4]}}
"""


def test_the_documented_example_parses_with_human_durations():
    spec = load_spec(ARCHITECTURE_EXAMPLE)
    assert (spec.max_runtime, spec.warm_pool, spec.spot.max_wait) == (86400, 1800, 172800)
    assert spec.inputs["train"].distribution == "ShardedByS3Key"
    assert spec.sweep.grid == {"lr": [1.0e-4, 3.0e-4]}


def test_json_is_yaml_too():
    assert load_spec(json.dumps(DDP)).name == "gpt-small"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"instance_typo": "x"}, "instance_typo: unknown field"),
        ({"instance_type": None}, "instance_type = null"),
        ({"max_runtime": "3 weeks"}, "max_runtime = \"3 weeks\": '3 weeks' is not a duration"),
        ({"name": "gpt_small"}, 'name = "gpt_small": letters, digits and hyphens'),
        ({"inputs": {"train": {"s3_uri": "/local/path"}}}, "inputs.train.s3_uri"),
        ({"inputs": {"train": {"s3_uri": "s3://b/p", "mode": "Stream"}}}, "inputs.train.mode"),
        ({"strategy": "ddp"}, "give either strategy (shorthand) or distribution"),
        ({"strategy": "deepspeed", "distribution": None}, "strategy"),
        ({"sweep": {"grid": {"lr": [1]}, "trials": [{"lr": 1}]}}, "exactly one of grid"),
        ({"sweep": {"trials": []}}, "sweep.trials = []: a sweep needs at least one trial"),
        ({"sweep": {"grid": {}}}, "sweep.grid = {}: a sweep needs at least one trial"),
        ({"sweep": {"grid": {"lr": []}}}, "sweep.grid.lr = []: a sweep needs at least one trial and every grid entry one value"),
        ({"instance_count": 0}, "instance_count = 0"),
        ({"framework_version": 2.10}, 'framework_version = 2.1: quote it ("2.1"): YAML reads an unquoted version as a number'),
    ],
)
def test_a_bad_field_is_named_with_its_value(change, message):
    with pytest.raises(SpecError) as raised:
        parse_spec({**DDP, **change})
    assert any(message in problem for problem in raised.value.problems), raised.value.problems


def test_a_missing_required_field_is_named():
    with pytest.raises(SpecError, match="instance_type: required"):
        parse_spec({"name": "x"})


def test_not_a_mapping_is_refused():
    with pytest.raises(SpecError, match="a job spec is a mapping"):
        load_spec("- just\n- a list\n")


def test_json_schema_describes_every_field_for_editors():
    schema = json_schema()
    assert schema["additionalProperties"] is False
    assert {"name", "instance_type", "distribution", "strategy", "spot", "sweep"} <= set(schema["properties"])
