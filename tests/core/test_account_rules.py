"""What the account allows a spec (rules/account.py): a job that can never start is refused naming the
quota and the command that raises it, or the AZ; one that must wait for instances in use says so."""

from __future__ import annotations

import pytest

from tests.core.specs import DDP
from trainstack.account import SPOT, TRAINING, WARM_POOL, AccountView, Quota, quota_name
from trainstack.preflight import preflight
from trainstack.rules import SpecRejectedError
from trainstack.spec import parse_spec

P4D, P5 = "ml.p4d.24xlarge", "ml.p5.48xlarge"


def quotas(**values: float) -> dict[str, Quota]:
    """Quotas by `<type>__<use>` keyword, e.g. p4d__training=2."""
    named = {}
    for key, value in values.items():
        family, use = key.split("__")
        instance_type = {"p4d": P4D, "p5": P5}[family]
        usage = {"training": TRAINING, "spot": SPOT, "warm_pool": WARM_POOL}[use]
        name = quota_name(instance_type, usage)
        named[name] = Quota(name, f"L-{abs(hash(name)) % 10**8:08d}", value)
    return named


def view(quota_values: dict[str, Quota] | None, **extra) -> AccountView:
    return AccountView("us-east-1", quota_values, **extra)


def spec(**changes):
    return parse_spec({**DDP, "spot": {"enabled": False}, "warm_pool": None, "inputs": {}, **changes})


def refusal(job, account) -> str:
    with pytest.raises(SpecRejectedError) as raised:
        preflight(job, account=account)
    return str(raised.value)


def test_a_quota_below_the_instance_count_is_refused_naming_the_quota_its_value_and_the_increase_command():
    account = view(quotas(p4d__training=0))
    code = account.quota(P4D, TRAINING).code
    said = refusal(spec(), account)
    assert f"the account's quota '{P4D} for training job usage' is 0 in us-east-1, below the 2 instances" in said
    assert (
        f"aws service-quotas request-service-quota-increase --service-code sagemaker --quota-code {code} "
        "--desired-value 2 --region us-east-1"
    ) in said


def test_force_does_not_launch_a_job_the_quota_never_lets_start():
    assert "can never start" in refusal(spec(force=True), view(quotas(p4d__training=1)))


def test_a_spot_job_is_held_to_the_spot_quota():
    assert "spot training job usage' is 0" in refusal(
        spec(spot={"enabled": True, "max_wait": "48h"}, checkpoints=True), view(quotas(p4d__training=8, p4d__spot=0))
    )


def test_a_job_within_its_quota_whose_instances_are_in_use_launches_and_says_it_waits_for_quota():
    account = view(quotas(p4d__training=2), in_use={quota_name(P4D, TRAINING): 2})
    (option,) = preflight(spec(), account=account).plan.options
    assert option.account == "quota 2, 2 in use: waits for quota until 2 instances are free"


def test_a_job_within_its_quota_and_nothing_in_use_shows_the_quota_beside_the_option():
    (option,) = preflight(spec(), account=view(quotas(p4d__training=4))).plan.to_json()["options"]
    assert option["account"] == "quota 4, 0 in use"


def test_one_option_below_its_quota_beside_one_within_is_a_warning():
    checked = preflight(spec(instance_type=None, instance_types=[P5, P4D]), account=view(quotas(p5__training=0, p4d__training=2)))
    assert any(f"instance_types[0] = {P5}: the account's quota" in w for w in checked.warnings)


def test_quotas_the_caller_may_not_read_are_a_warning_not_a_refusal():
    unread = "Service Quotas (the account's quotas: not checked): AccessDeniedException: not authorized"
    checked = preflight(spec(), account=view(None, unreadable=(unread,)))
    assert checked.warnings == (unread,)


def test_a_type_ec2_offers_in_the_region_but_not_in_the_training_subnets_az_is_refused_naming_the_azs_that_do():
    account = view(quotas(p4d__training=2), offerings={"p4d.24xlarge": ("use1-az1", "use1-az4")}, subnet_zones=("use1-az3",))
    said = refusal(spec(), account)
    assert "p4d.24xlarge is not offered in the training subnet's AZ (use1-az3) of us-east-1" in said
    assert "-c availability_zone_ids=use1-az1; any of use1-az1, use1-az4" in said


def test_a_type_ec2_does_not_list_in_the_region_is_not_checked_for_its_az():
    account = view(quotas(p4d__training=2), offerings={"p4d.24xlarge": ()}, subnet_zones=("use1-az3",))
    assert preflight(spec(), account=account).warnings == ()


def test_a_job_on_a_training_plan_is_not_held_to_the_per_type_quota():
    plan = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/reserved"
    (option,) = preflight(spec(training_plan_arn=plan), account=view(quotas(p4d__training=0))).plan.options
    assert option.account == "on the training plan's reserved capacity"


def test_a_warm_pool_beyond_its_quota_is_a_warning_that_none_is_kept():
    checked = preflight(spec(warm_pool="30m"), account=view(quotas(p4d__training=2, p4d__warm_pool=0)))
    (warning,) = checked.warnings
    assert warning.startswith(f"instance_type = {P4D}: no warm pool is kept: the quota '{P4D} for training warm pool usage' is 0")
