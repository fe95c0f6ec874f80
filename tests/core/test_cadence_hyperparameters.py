"""What the request tells the built-in script's `checkpoint_every: auto`: the job's mean time to failure
and the plan's save time (planner/goodput.py's cadence_hyperparameters), and only where auto is in use."""

from __future__ import annotations

import json

import pytest

from tests.core.specs import DDP, STACK
from trainstack.identity import Run
from trainstack.preflight import preflight
from trainstack.request import build_request
from trainstack.rules import check_or_raise
from trainstack.spec import SpecError, parse_spec
from trainstack_contract.checkpoint_cadence import job_mttf_seconds

GP2 = {**DDP, "instance_type": "ml.p3.16xlarge"}  # a gp2 volume: the plan knows a checkpoint's write time


def hyperparameters(raw: dict, **overrides) -> dict:
    spec = parse_spec(raw)
    trial = Run("s3://trainstack-trigger/jobs/cadence.yaml#v1").trial()
    request = build_request(spec, check_or_raise(spec, lambda uri: 64), STACK, trial=trial, overrides=overrides)
    return {name: json.loads(value) for name, value in request["HyperParameters"].items()}


def test_a_multi_node_job_uses_auto_and_is_told_its_mttf_and_the_plans_save_time():
    values = hyperparameters(GP2)
    assert "checkpoint_every" not in values  # auto is the script's own default on several hosts
    assert values["mttf"] == round(job_mttf_seconds(2 * 8))
    (option,) = preflight(parse_spec({**GP2, "force": True})).plan.options
    assert values["planned_save_seconds"] == round(option.checkpoint.seconds, 1)


def test_on_local_nvme_only_the_mttf_is_told_and_the_job_times_its_own_first_save():
    values = hyperparameters(DDP)  # ml.p4d.24xlarge
    assert values["mttf"] == round(job_mttf_seconds(16)) and "planned_save_seconds" not in values


def test_the_specs_mttf_is_told_as_it_is():
    assert hyperparameters({**GP2, "mttf": "3d"})["mttf"] == 3 * 86400


def test_with_a_fallback_the_shortest_mttf_and_the_longest_save_are_told():
    values = hyperparameters({**GP2, "instance_type": "", "instance_types": ["ml.p3.8xlarge", "ml.p3.16xlarge"], "spot": {}})
    assert values["mttf"] == round(job_mttf_seconds(2 * 8))  # the 8-GPU type's
    assert values["planned_save_seconds"] == hyperparameters(GP2)["planned_save_seconds"]  # DDP: one host writes it all


def test_nothing_is_told_where_auto_is_not_in_use():
    assert {"mttf", "planned_save_seconds"}.isdisjoint(hyperparameters({**GP2, "instance_count": 1}))  # 50 steps on one node
    steps = {**GP2, "hyperparameters": {**GP2["hyperparameters"], "checkpoint_every": 200}}
    assert {"mttf", "planned_save_seconds"}.isdisjoint(hyperparameters(steps))
    assert {"mttf", "planned_save_seconds"}.isdisjoint(hyperparameters(GP2, checkpoint_every=100))  # a sweep trial's
    own_script = {**GP2, "source_dir": "s3://my-code/sourcedir.tar.gz", "hyperparameters": {"epochs": 3}}
    assert {"mttf", "planned_save_seconds"}.isdisjoint(hyperparameters(own_script))


def test_the_specs_own_hyperparameters_win():
    assert hyperparameters({**GP2, "hyperparameters": {**GP2["hyperparameters"], "mttf": 3600}})["mttf"] == 3600


@pytest.mark.parametrize("mttf", ["0s", "-2h"])
def test_an_mttf_is_a_positive_duration(mttf):
    with pytest.raises(SpecError, match="mttf"):
        parse_spec({**GP2, "mttf": mttf})
