"""Price what a synthesized template costs per month while no job runs.

Usage: python tools/idle_cost.py cdk.out/trainstack.template.json [--prices tools/prices.json] [--budget 2]

Every resource type must be in the dated price table, either with an always-on price or listed as
usage-priced (costs nothing idle); an unknown type is an error, so a new resource cannot slip in
unpriced.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_PRICES = Path(__file__).resolve().parent / "prices.json"


class UnpricedResourceError(ValueError):
    """The template holds a resource type the price table does not know."""


@dataclass(frozen=True)
class LineItem:
    resource_type: str
    quantity: int
    unit: str
    monthly_each: float

    @property
    def monthly(self) -> float:
        return self.quantity * self.monthly_each


@dataclass(frozen=True)
class IdleCost:
    items: tuple[LineItem, ...]
    as_of: str
    region: str

    @property
    def monthly_total(self) -> float:
        return round(sum(item.monthly for item in self.items), 2)


def _price_key(resource: dict[str, Any]) -> str:
    kind = resource["Type"]
    if kind == "AWS::EC2::VPCEndpoint":
        return f"{kind}/{resource.get('Properties', {}).get('VpcEndpointType', 'Gateway')}"
    return kind


def _units(resource: dict[str, Any], key: str) -> int:
    """How many billable units one resource is: an interface endpoint bills once per AZ (subnet)."""
    if key == "AWS::EC2::VPCEndpoint/Interface":
        return len(resource.get("Properties", {}).get("SubnetIds", [])) or 1
    return 1


def idle_cost(template: dict[str, Any], prices: dict[str, Any]) -> IdleCost:
    always_on = prices["always_on"]
    usage_priced = set(prices["usage_priced"])
    quantities: dict[str, int] = {}
    for logical_id, resource in template.get("Resources", {}).items():
        key = _price_key(resource)
        if key in always_on:
            quantities[key] = quantities.get(key, 0) + _units(resource, key)
        elif key not in usage_priced:
            raise UnpricedResourceError(
                f"{logical_id}: resource type {key} is not in the price table; add it to tools/prices.json"
            )
    items = []
    for key, quantity in sorted(quantities.items()):
        price = always_on[key]
        monthly_each = price["monthly"] if "monthly" in price else price["hourly"] * prices["hours_per_month"]
        items.append(LineItem(key, quantity, price["per"], round(monthly_each, 4)))
    return IdleCost(tuple(items), prices["as_of"], prices["region"])


def render(cost: IdleCost) -> str:
    lines = [f"Idle monthly cost ({cost.region} list prices as of {cost.as_of}):"]
    for item in cost.items:
        lines.append(
            f"  {item.resource_type:<34} {item.quantity:>3} x ${item.monthly_each:>7.2f} ({item.unit}) = ${item.monthly:>7.2f}"
        )
    lines.append(f"  {'total':<34} ${cost.monthly_total:.2f}/month")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("template", type=Path)
    parser.add_argument("--prices", type=Path, default=DEFAULT_PRICES)
    parser.add_argument("--budget", type=float, help="exit 1 if the idle cost exceeds this many dollars a month")
    parser.add_argument("--total", action="store_true", help="one line: the total only")
    args = parser.parse_args(argv)
    cost = idle_cost(json.loads(args.template.read_text()), json.loads(args.prices.read_text()))
    print(f"idle cost ${cost.monthly_total:.2f}/month (make cost itemizes it)" if args.total else render(cost))
    if args.budget is not None and cost.monthly_total > args.budget:
        print(f"idle cost ${cost.monthly_total:.2f}/month exceeds the budget of ${args.budget:.2f}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
