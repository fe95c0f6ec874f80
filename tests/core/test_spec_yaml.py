"""Spec text is read as YAML 1.2 (the core schema), by the CLI and by the Validate step alike: `on`,
`yes` and `no` are words, not booleans, and numbers are what the 1.2 core schema says they are."""

from __future__ import annotations

import io
import math

import pytest
import yaml
from botocore.response import StreamingBody

from tests.core.stubbed import ACCOUNT_SERVICES, ENVIRONMENT, account_answers, stubbed_clients
from trainstack import yaml12
from trainstack.handlers import validate
from trainstack.spec import SpecError, load_spec

BASE = "name: yaml12\ninstance_type: ml.g5.12xlarge\nhyperparameters: {model: gpt-tiny}\n"


def hyperparameter(plain: str) -> object:
    """What the spec's hyperparameter `value` holds when the YAML says `value: <plain>`."""
    return load_spec(BASE.replace("{model: gpt-tiny}", f"{{model: gpt-tiny, value: {plain}}}")).hyperparameters["value"]


def test_restarts_on_is_the_field_on_not_the_boolean_true():
    spec = load_spec(BASE + "restarts: {on: [infrastructure, unknown]}\n")

    assert spec.restarts.on == ["infrastructure", "unknown"]


@pytest.mark.parametrize(
    ("plain", "value"),
    [
        ("yes", "yes"),
        ("no", "no"),
        ("on", "on"),
        ("off", "off"),
        ("y", "y"),
        ("true", True),
        ("True", True),
        ("TRUE", True),
        ("false", False),
        ("FALSE", False),
        ("017", 17),  # decimal: YAML 1.1 read a leading 0 as octal
        ("0o17", 15),
        ("0x1F", 31),
        ("-12", -12),
        ("1_000", "1_000"),  # YAML 1.1's digit separators are not 1.2's
        ("1:30", "1:30"),  # nor its base-60 numbers
        ("1e3", 1000.0),  # a 1.2 float needs no dot
        ("-.5", -0.5),
        ("2026-01-01", "2026-01-01"),  # no timestamps in the core schema: JSON has none either
        ("0b101", "0b101"),
    ],
)
def test_a_plain_scalar_reads_as_the_yaml_1_2_core_schema_says(plain, value):
    read = hyperparameter(plain)

    assert (read, type(read)) == (value, type(value))


@pytest.mark.parametrize("plain", ["~", "null", "Null", "NULL", ""])
def test_the_core_schemas_nulls_leave_an_optional_field_unset(plain):
    assert load_spec(BASE + f"warm_pool: {plain}\n").warm_pool is None


@pytest.mark.parametrize(("plain", "check"), [(".inf", math.isinf), ("-.Inf", math.isinf), (".NaN", math.isnan)])
def test_infinity_and_not_a_number_are_floats(plain, check):
    assert check(hyperparameter(plain))


def test_a_tag_outside_the_core_schema_is_refused_in_one_line():
    with pytest.raises(SpecError) as refused:
        load_spec(BASE + "tags: {made: !!timestamp 2026-01-01}\n", "job.yaml")

    (problem,) = refused.value.problems
    assert problem.startswith("job.yaml: not valid YAML or JSON (") and "\n" not in problem


def test_a_syntax_error_is_one_line_with_where_the_parser_stopped():
    with pytest.raises(SpecError) as refused:
        load_spec(BASE + "inputs: {train: [\n", "job.yaml")

    (problem,) = refused.value.problems
    assert "\n" not in problem and "line 5, column 1" in problem


def test_the_validate_step_reads_an_uploaded_spec_as_yaml_1_2(monkeypatch):
    body = (BASE + "restarts: {on: [unknown]}\n").encode()
    trigger = {"detail": {"bucket": {"name": "b"}, "object": {"key": "jobs/x.yaml", "version-id": "v1"}}}
    with stubbed_clients(monkeypatch, ENVIRONMENT, ("s3", *ACCOUNT_SERVICES)) as stubbed:
        stubbed["s3"].add_response(
            "get_object",
            {"Body": StreamingBody(io.BytesIO(body), len(body))},
            {"Bucket": "b", "Key": "jobs/x.yaml", "VersionId": "v1"},
        )
        account_answers(stubbed, instance_type="ml.g5.12xlarge")
        result = validate.handler({"input": trigger, "execution": "e"})

    assert result["spec"]["restarts"]["on"] == ["unknown"]


def test_a_spec_the_cli_writes_back_reads_the_same_in_yaml_1_2_and_in_1_1():
    # `submit --source` writes the spec again with its source_dir; a stack deployed before this reads 1.1.
    data = {"name": "x", "hyperparameters": {"lr": "1e3", "flag": "on", "code": "017", "day": "2026-01-01", "n": None}}

    text = yaml12.dump({**data, "restarts": {"on": ["unknown"]}})

    assert yaml12.load(text) == yaml.safe_load(text) == {**data, "restarts": {"on": ["unknown"]}}
