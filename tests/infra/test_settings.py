"""Settings: typed, defaulted to the safe and cheap choice, and rejected with the setting's name."""

from __future__ import annotations

import pytest

from stacks.settings import SettingsError, StackSettings


def test_defaults_are_environment_agnostic_one_az_no_nat_no_endpoints_retained():
    settings = StackSettings.parse({})
    assert settings.environment_agnostic
    assert (settings.subnet_count, settings.nat_gateway, settings.interface_endpoints) == (1, False, ())
    assert settings.retain_data and not settings.inter_container_encryption


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({"nat_gateway": "true"}, {"nat_gateway": True}),
        ({"nat_gateway": "off"}, {"nat_gateway": False}),
        ({"subnet_count": "2"}, {"subnet_count": 2}),
        ({"interface_endpoints": "ecr.api, logs"}, {"interface_endpoints": ("ecr.api", "logs")}),
        ({"interface_endpoints": '["sts"]'}, {"interface_endpoints": ("sts",)}),
        (
            {"availability_zone_ids": ["use1-az4", "use1-az6"]},
            {"availability_zone_ids": ("use1-az4", "use1-az6"), "subnet_count": 2},
        ),
        ({"data_removal_policy": "DESTROY"}, {"data_removal_policy": "destroy"}),
        ({"account": "123456789012", "region": "eu-west-1"}, {"account": "123456789012", "region": "eu-west-1"}),
        ({"queue": "true"}, {"queue": True}),
        ({"queue_max_instances": "16"}, {"queue_max_instances": 16}),
        ({"queue_capacity_wait_seconds": "600"}, {"queue_capacity_wait_seconds": 600}),
        (
            {"queue_shares": "research:1, prod:0.5"},
            {"queue_shares": (("research", 1.0), ("prod", 0.5)), "queue_default_share": "research"},
        ),
        ({"queue_shares": {"research": 2, "prod": 0.25}}, {"queue_shares": (("research", 2.0), ("prod", 0.25))}),
        ({"queue_shares": '{"ops": 999.9999}'}, {"queue_shares": (("ops", 999.9999),), "queue_default_share": "ops"}),
        ({"queue_shares": "research,prod"}, {"queue_shares": (("research", 1.0), ("prod", 1.0))}),
        ({"queue_shares": "research:1,prod:0.5", "queue_default_share": "prod"}, {"queue_default_share": "prod"}),
        (
            {"queue": "true", "queue_shares": "research,prod", "queue_budgets": "research:500, prod:5000.5"},
            {"queue_budgets": (("research", 500.0), ("prod", 5000.5))},
        ),
        ({"queue_budgets": {"default": 100}}, {"queue_budgets": (("default", 100.0),)}),
    ],
)
def test_values_from_cdk_json_or_the_command_line_are_parsed(raw, expected):
    settings = StackSettings.parse(raw)
    for name, value in expected.items():
        assert getattr(settings, name) == value


@pytest.mark.parametrize(
    ("raw", "setting", "message"),
    [
        ({"subnet_cont": 1}, "subnet_cont", "unknown setting"),
        ({"subnet_count": 0}, "subnet_count", "whole number from 1 to 6"),
        ({"subnet_count": "two"}, "subnet_count", "whole number"),
        ({"subnet_count": 3}, "subnet_count", "at most 2 AZs"),
        ({"nat_gateway": "maybe"}, "nat_gateway", "true or false"),
        ({"availability_zone_ids": "us-east-1a"}, "availability_zone_ids", "use IDs such as use1-az4"),
        ({"availability_zone_ids": "use1-az4,use1-az4"}, "availability_zone_ids", "once"),
        (
            {"availability_zone_ids": "use1-az4", "subnet_count": 2},
            "subnet_count",
            "must equal the number of availability_zone_ids",
        ),
        ({"interface_endpoints": "s3"}, "interface_endpoints", "unsupported endpoint"),
        ({"interface_endpoints": "[ecr.api"}, "interface_endpoints", "JSON list"),
        ({"data_removal_policy": "snapshot"}, "data_removal_policy", "retain"),
        ({"name_prefix": "Train_Stack"}, "name_prefix", "lower-case"),
        ({"account": "12345"}, "account", "12-digit"),
        ({"account": "123456789012"}, "region", "together"),
        ({"log_retention_days": 100}, "log_retention_days", "accepts only"),
        ({"checkpoint_expiry_days": -1}, "checkpoint_expiry_days", "whole number"),
        ({"queue": "maybe"}, "queue", "true or false"),
        ({"queue_max_instances": 0}, "queue_max_instances", "whole number of at least 1"),
        ({"queue_max_instances": "many"}, "queue_max_instances", "whole number"),
        ({"queue_shares": ""}, "queue_shares", "at least one share"),
        ({"queue_shares": ["research"]}, "queue_shares", "at least one share"),
        ({"queue_shares": "{research: 1}"}, "queue_shares", "at least one share"),
        ({"queue_shares": "team-a:1"}, "queue_shares", "1-255 letters and digits"),
        ({"queue_shares": "research*"}, "queue_shares", "1-255 letters and digits"),
        ({"queue_shares": "a" * 256}, "queue_shares", "1-255 letters and digits"),
        ({"queue_shares": "research:0"}, "queue_shares", "from 0.0001 to 999.9999"),
        ({"queue_shares": "research:1000"}, "queue_shares", "from 0.0001 to 999.9999"),
        ({"queue_shares": "research:heavy"}, "queue_shares", "weight must be a number"),
        ({"queue_shares": {"research": True}}, "queue_shares", "weight must be a number"),
        ({"queue_shares": "research:1,research:2"}, "queue_shares", "appears twice"),
        ({"queue_default_share": "ops"}, "queue_default_share", "must be one of queue_shares"),
        ({"queue_shares": "research:1", "queue_default_share": "default"}, "queue_default_share", "must be one of"),
        ({"queue_budgets": "research:500"}, "queue_budgets", "not one of the stack's teams"),
        ({"queue_budgets": "default"}, "queue_budgets", "monthly budgets in USD"),
        ({"queue_budgets": "default:0"}, "queue_budgets", "above 0"),
        ({"queue_budgets": "default:lots"}, "queue_budgets", "above 0"),
        ({"queue_capacity_wait_seconds": 599}, "queue_capacity_wait_seconds", "from 600 to 86400"),
        ({"queue_capacity_wait_seconds": 86401}, "queue_capacity_wait_seconds", "from 600 to 86400"),
    ],
)
def test_invalid_setting_is_rejected_with_its_name_and_the_fix(raw, setting, message):
    with pytest.raises(SettingsError, match=message) as raised:
        StackSettings.parse(raw)
    assert raised.value.setting == setting
    assert f"setting '{setting}'" in str(raised.value)


def test_more_than_two_azs_are_allowed_with_an_explicit_environment():
    settings = StackSettings.parse({"account": "123456789012", "region": "us-east-1", "subnet_count": 3})
    assert settings.subnet_count == 3


def test_the_queue_is_off_by_default_with_one_default_share_of_eight_instances_and_an_hour_of_waiting():
    settings = StackSettings.parse({})
    assert not settings.queue
    assert (settings.queue_shares, settings.queue_default_share) == ((("default", 1.0),), "default")
    assert (settings.queue_max_instances, settings.queue_capacity_wait_seconds) == (8, 3600)
