"""Bad input never escapes as a traceback: every spec is either refused with problems, or yields for
each of its trials a CreateTrainingJob request the API's model accepts (with `queue`, also the
SubmitServiceJob request Batch's model accepts). Specs come from the job spec's JSON Schema
(`trainstack schema`) and from mutating the reviewed examples (wrong types, empty and huge
collections, long and odd strings, unknown keys, every enum value) with Hypothesis. The stack has a
team queue and a tracking server, so that specs with `queue` or `tracking` reach the request
builder; each run of mutations checks that a share of its specs did.

The budget is small in `make test`; `make fuzz` runs many more (TRAINSTACK_FUZZ_EXAMPLES).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import botocore.session
import pytest
from botocore.validate import ParamValidator
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.specs import SPECS, STACK
from trainstack.identity import Run
from trainstack.preflight import preflight
from trainstack.request import build_request, validate_request
from trainstack.rules import SpecRejectedError
from trainstack.rules.queue import run_team
from trainstack.service_jobs import submit_arguments
from trainstack.spec import JobSpec, SpecError, json_schema, parse_spec
from trainstack.workflow import Trigger, trials

# Every part of a stack a spec may ask for: the team queue (two teams) and a tracking server.
FUZZ_STACK = dataclasses.replace(
    STACK,
    mlflow_tracking_server_arn="arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/research",
    job_queue_arn="arn:aws:batch:us-east-1:123456789012:job-queue/trainstack-queue",
    queue_shares=("research", "prod"),
    queue_default_share="research",
    queue_max_instances=4,
)
EXAMPLES = int(os.environ.get("TRAINSTACK_FUZZ_EXAMPLES", "150"))
FIELDS = sorted(JobSpec.model_fields)
ODD_STRINGS = ["", " ", "x" * 3000, "ü-名前", "s3://", "s3://b/../k", "-1", "1e309", "null", "ml.p5.48xlarge", "2.1", "${x}"]
ENUMS = {  # every value each enum-like field takes, and near misses
    "strategy": ["ddp", "fsdp", "smddp", "smp", "mpi", "deepspeed"],
    "framework_version": ["1.13", "2.0", "2.2.0", "2.3", "2.5.1", "2.7.1", "2.10.0", "3.0"],
    "py_version": ["py39", "py310", "py311", "py312", "py313", "py2"],
    "instance_type": ["ml.g5.xlarge", "ml.p5.48xlarge", "ml.trn1.32xlarge", "ml.c5.xlarge", "ml.p2.xlarge", "ml.g7.2xlarge"],
}
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(ODD_STRINGS),
    st.text(max_size=40),
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=12) | st.sampled_from(FIELDS), inner, max_size=4),
        st.just([0] * 200),  # huge collections
        st.just({f"k{i}": i for i in range(150)}),
        st.just([]),
        st.just({}),
    ),
    max_leaves=8,
)


def from_schema(schema: dict[str, Any], root: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Instances of the job spec's own JSON Schema, edge values favoured (empty collections, the
    bounds). Written here rather than taken from hypothesis-jsonschema: its 0.23 release fails inside
    the pinned Hypothesis ("'many' object has no attribute 'more'")."""
    if "$ref" in schema:
        return st.deferred(lambda: from_schema(root["$defs"][schema["$ref"].rsplit("/", 1)[1]], root))
    if "anyOf" in schema:
        return st.one_of([from_schema(option, root) for option in schema["anyOf"]])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    kind = schema.get("type")
    if kind == "object":
        properties = {name: from_schema(sub, root) for name, sub in schema.get("properties", {}).items()}
        if properties:
            required = {name: properties[name] for name in schema.get("required", [])}
            optional = {name: value for name, value in properties.items() if name not in required}
            return st.fixed_dictionaries(required, optional=optional)
        values = schema.get("additionalProperties")
        return st.dictionaries(
            st.text(max_size=12), from_schema(values, root) if isinstance(values, dict) else SCALARS, max_size=3
        )
    if kind == "array":
        return st.lists(from_schema(schema.get("items", {}), root) if schema.get("items") else SCALARS, max_size=3)
    if kind == "integer":
        low, high = schema.get("minimum", -5), schema.get("maximum", 10**6)
        return st.integers(min_value=low, max_value=high) | st.sampled_from([low, high])
    if kind == "number":
        return st.floats(min_value=schema.get("minimum"), max_value=schema.get("maximum"), allow_nan=False)
    if kind == "string":
        return st.text(max_size=30) | st.sampled_from(ODD_STRINGS)
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    return SCALARS


SCHEMA = json_schema()


# Valid values of the fields the examples leave out, so that mutations reach what lies inside them.
FRAGMENTS: dict[str, Any] = {
    "sweep": {"max_concurrency": 2, "grid": {"lr": [1.0e-4, 3.0e-4], "seed": [0, 1]}},
    "instance_types": ["ml.p4d.24xlarge", "ml.p4de.24xlarge"],  # in place of instance_type and spot (on-demand only)
    "budget": {"max_usd": 100000},
    "health": {"rules": {"nonfinite": {"action": "stop"}}},
    "tags": {"team": "research"},
    "environment": {"NCCL_DEBUG": "INFO"},
    "queue": {"share": "prod", "priority": 9000, "max_wait": "3d"},
    "tracking": {"mlflow": "stack", "experiment": "fuzz"},
}


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place inside a spec: each key of each mapping and each item of each list, at any depth."""
    found = [prefix] if prefix else []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else []
    for key, inner in items:
        found += paths(inner, (*prefix, key))
    return found


def replaced(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    return [*value[:head], replaced(value[head], rest, new), *value[head + 1 :]]


@st.composite
def mutated_specs(draw: st.DrawFn, always: tuple[str, ...] = ()) -> dict[str, Any]:
    """An example (with some of the fields it leaves out, those named in `always` among them) with
    none, one or two places changed: a field set to an enum value, to a value of its schema type,
    or to anything; or any place inside it emptied, made huge, or replaced."""
    spec = dict(draw(st.sampled_from(sorted(SPECS.values(), key=lambda s: str(s)))))
    spec.update({name: value for name, value in FRAGMENTS.items() if name in always or draw(st.booleans())})
    if "instance_types" in spec:  # a capacity fallback list replaces the one type, and takes no spot
        del spec["instance_type"], spec["spot"]
    for _ in range(draw(st.sampled_from([0, 1, 1, 2]))):
        how = draw(st.sampled_from(["enum", "schema", "inside", "inside", "inside", "any"]))
        field = draw(st.sampled_from([*FIELDS, "unknown_field"]))
        if how == "enum" and field in ENUMS:
            spec[field] = draw(st.sampled_from(ENUMS[field]))
        elif how == "schema" and field in SCHEMA["properties"]:  # a value of the field's own type
            spec[field] = draw(from_schema(SCHEMA["properties"][field], SCHEMA))
        elif how == "inside":
            path = draw(st.sampled_from(paths(spec)))
            inner = spec
            for key in path:
                inner = inner[key]
            choices = [draw(VALUES)]
            if isinstance(inner, dict | list) and inner:  # or emptied, or made huge
                huge = inner * 100 if isinstance(inner, list) else {**inner, **{f"k{i}": i for i in range(150)}}
                choices += [type(inner)(), huge]
            current = draw(st.sampled_from(choices))
            spec = replaced(spec, path, current)
        else:
            spec[field] = draw(VALUES)
    return spec


SUBMIT_SERVICE_JOB = botocore.session.get_session().get_service_model("batch").operation_model("SubmitServiceJob")


def refused_or_valid_requests(data: dict[str, Any]) -> JobSpec | None:
    """The spec whose requests were built and found valid, or None when it was refused."""
    problems: list = []
    try:
        spec = parse_spec(data)
        team = run_team(Trigger("execution:fuzz", inline_spec={}), spec, FUZZ_STACK)  # started directly, as a platform would
        checked = preflight(spec, lambda uri: 64, FUZZ_STACK.region, FUZZ_STACK, team=team)
    except (SpecError, SpecRejectedError) as refused:
        problems = refused.problems
    if problems:  # refused: each problem a line of its own
        assert all(str(problem) for problem in problems)
        return None
    run = Run("s3://trainstack-trigger/jobs/fuzz.yaml#v1")
    for index, overrides in enumerate(trials(checked.spec)):
        trial = run.trial(index if checked.spec.sweep else None)
        request = build_request(checked.spec, checked.resolution, FUZZ_STACK, trial=trial, overrides=overrides, team=team)
        validate_request(request)
        if checked.spec.queue is not None:  # what Create submits to the team queue instead
            submission = submit_arguments(request, FUZZ_STACK.job_queue_arn, team, checked.spec.queue.priority)
            report = ParamValidator().validate(submission, SUBMIT_SERVICE_JOB.input_shape)
            assert not report.has_errors(), report.generate_report()
    return checked.spec


@pytest.mark.parametrize("always", [(), ("queue",), ("tracking",)], ids=["any", "queued", "tracked"])
def test_every_spec_is_refused_with_problems_or_yields_valid_requests_for_every_trial(always):
    built: list[JobSpec] = []

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(mutated_specs(always))
    def each(data):
        spec = refused_or_valid_requests(data)
        if spec is not None and all(getattr(spec, name) is not None for name in always):
            built.append(spec)

    each()
    # Mutations of accepted specs, some left as they are: a share of them reach the request builder.
    assert len(built) >= EXAMPLES // 20, f"{len(built)} of {EXAMPLES} specs {always} reached the request builder"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(from_schema(SCHEMA, SCHEMA))
def test_every_spec_the_schema_admits_is_refused_with_problems_or_yields_valid_requests(data):
    refused_or_valid_requests(data)
