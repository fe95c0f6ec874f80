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
