"""What a training job has cost, from what SageMaker reports: the one formula the notification, the
CLI and the dashboard's figures share."""

from __future__ import annotations

from trainstack import facts


def billed_usd(instance_type: str, instances: int, billable_seconds: int) -> float | None:
    """SageMaker's billable seconds (per instance: DescribeTrainingJob's BillableTimeInSeconds) x
    instances x the catalog's on-demand price (a spot job's savings are already in its billable
    seconds). None where the catalog has no price for the type."""
    instance = facts.instance(instance_type)
    if instance is None or instance.price_per_hour is None:
        return None
    return round(instance.price_per_hour * instances * billable_seconds / 3600, 4)


def cost_basis() -> str:
    """What every cost figure is, said where one is shown: an estimate, not the bill."""
    prices = facts.prices()
    return (
        f"estimate: billable seconds x {prices['source']}, {prices['region']} list prices as of {prices['as_of']}; "
        "not your bill (discounts, savings plans and other regions differ)"
    )
