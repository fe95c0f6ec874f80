"""Idle cost: priced from the synthesized template and a dated table; the default stack stays cheap."""

from __future__ import annotations

import json

import pytest

from tests.synth import synthesize
from tools.idle_cost import DEFAULT_PRICES, UnpricedResourceError, idle_cost

PRICES = json.loads(DEFAULT_PRICES.read_text())


def test_default_stack_costs_the_key_three_alarms_and_the_dashboard_idle(default_stack):
    cost = idle_cost(default_stack.json, PRICES)
    # Only the key, three alarms (failed and timed-out executions, undelivered events) and the dashboard
    # cost anything while idle: no NAT, no endpoints; an empty queue costs nothing.
    assert {item.resource_type: item.quantity for item in cost.items} == {
        "AWS::KMS::Key": 1,
        "AWS::CloudWatch::Alarm": 3,
        "AWS::CloudWatch::Dashboard": 1,
    }
    assert cost.monthly_total <= 4.50


def test_without_the_dashboard_the_stack_costs_at_most_two_dollars_a_month_idle():
    assert idle_cost(synthesize(dashboard=False).json, PRICES).monthly_total <= 2.00


def test_nat_and_interface_endpoints_are_priced_per_gateway_and_per_az():
    stack = synthesize(nat_gateway=True, subnet_count=2, interface_endpoints="ecr.api,ecr.dkr")
    items = {item.resource_type: item for item in idle_cost(stack.json, PRICES).items}
    assert items["AWS::EC2::NatGateway"].quantity == 1
    assert items["AWS::EC2::VPCEndpoint/Interface"].quantity == 4  # 2 endpoints x 2 AZs
    assert items["AWS::EC2::VPCEndpoint/Interface"].monthly_each == pytest.approx(7.30)


def test_an_unpriced_resource_type_is_an_error_not_a_free_lunch():
    template = {"Resources": {"Db": {"Type": "AWS::RDS::DBInstance", "Properties": {}}}}
    with pytest.raises(UnpricedResourceError, match="AWS::RDS::DBInstance"):
        idle_cost(template, PRICES)


def test_price_table_is_dated():
    assert PRICES["as_of"] and PRICES["region"]
