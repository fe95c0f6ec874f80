"""Capacity fallback (InstancePreferences), training plans and the pending-time limit: the rules the
CreateTrainingJob API documents, and the request they render."""

from __future__ import annotations

import pytest

from tests.core.specs import DDP, STACK
from trainstack.identity import Run
from trainstack.request import build_request, validate_request
from trainstack.rules import check, resolve
from trainstack.spec import SpecError, parse_spec

SIX_EFA_TYPES = (
    "ml.p5.48xlarge",
    "ml.p4d.24xlarge",
    "ml.p4de.24xlarge",
    "ml.p5e.48xlarge",
    "ml.p5en.48xlarge",
    "ml.p3dn.24xlarge",
)
PLAN_ARN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p5-week"


def fallback(*types: str, **changes) -> dict:
    data = {**DDP, "inputs": {}, "spot": {"enabled": False}, "warm_pool": None, "instance_types": list(types), **changes}
    del data["instance_type"]
    return data


def problems(data: dict) -> list[str]:
    return [str(p) for p in check(parse_spec(data))]


def request_of(data: dict) -> dict:
    spec = parse_spec(data)
    request = build_request(spec, resolve(spec), STACK, trial=Run("jobs/x.yaml").trial())
    validate_request(request)
    return request


def test_instance_types_render_instance_preferences_in_priority_order():
    resource = request_of(fallback("ml.p5.48xlarge", "ml.p4de.24xlarge", "ml.p4d.24xlarge"))["ResourceConfig"]
    assert [p["InstanceType"] for p in resource["InstancePreferences"]] == [
        "ml.p5.48xlarge",
        "ml.p4de.24xlarge",
        "ml.p4d.24xlarge",
    ]
    assert "InstanceType" not in resource and resource["InstanceCount"] == 2


def test_a_training_plan_and_a_pending_limit_are_rendered():
    request = request_of({**DDP, "inputs": {}, "spot": {"enabled": False}, "training_plan_arn": PLAN_ARN, "max_pending": "2h"})
    assert request["ResourceConfig"]["TrainingPlanArn"] == PLAN_ARN
    assert request["StoppingCondition"]["MaxPendingTimeInSeconds"] == 7200


def test_instance_type_and_instance_types_together_are_refused():
    with pytest.raises(SpecError, match=r"give instance_type \(one type\) or instance_types"):
        parse_spec({**fallback("ml.p5.48xlarge"), "instance_type": "ml.p4d.24xlarge"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (fallback("ml.p5.48xlarge", "ml.p4d.24xlarge", spot={"enabled": True}), "SageMaker refuses it with managed spot"),
        (fallback(*SIX_EFA_TYPES), "SageMaker takes at most 5 preferences"),
        (fallback("ml.p4d.24xlarge", "ml.p4d.24xlarge"), "an instance type can appear only once"),
        (fallback("ml.p4d.24xlarge", "ml.g5.48xlarge"), "differ in EFA support"),
        (fallback("ml.p4d.24xlarge", "ml.p4.24xlarge"), 'instance_types[1] = "ml.p4.24xlarge": not a SageMaker training'),
        ({**DDP, "training_plan_arn": "arn:aws:sagemaker:us-east-1:123:plan/x"}, "not a training plan ARN"),
        ({**DDP, "max_pending": "10m"}, "SageMaker allows 1800 to 2419200 seconds of pending"),
        ({**DDP, "instance_type": "ml.c5.xlarge", "max_pending": "1h"}, "has no effect on CPU-only types (ml.c5.xlarge)"),
    ],
    ids=["spot", "six", "repeated", "efa-mix", "unknown-fallback", "plan-arn", "pending-short", "pending-cpu"],
)  # fmt: skip
def test_capacity_settings_sagemaker_would_refuse_are_refused(data, message):
    assert any(message in p for p in problems(data)), problems(data)


def test_a_fallback_option_gets_every_rule_the_first_gets():
    smddp = {"smdistributed": {"dataparallel": {"enabled": True}}}
    found = problems(fallback("ml.p4d.24xlarge", "ml.p5.48xlarge", distribution=smddp, framework_version="2.2.0"))
    assert found == [
        'instance_types[1] (ml.p5.48xlarge): distribution = "smddp": SMDDP does not support ml.p5.48xlarge; use '
        "ml.p3.16xlarge, ml.p3dn.24xlarge, ml.p4d.24xlarge, ml.p4de.24xlarge, or strategy ddp / fsdp (NCCL over EFA) "
        "on ml.p5.48xlarge"
    ]
