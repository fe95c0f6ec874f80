"""The account against the spec (trainstack/account.py reads it): a job that can never start is
refused before anything is uploaded, naming why and what to do; one that must wait is let through
with a note that says for what.

A capacity option can never start when the account's quota for its type and use (spot or on-demand)
is below the job's instance count, or when EC2 offers its type in the region but not in the AZ of
the stack's training subnet. The spec is refused when no option can start; an option that cannot,
beside one that can, is a warning. A quota the caller may not read is no refusal either. A job on a
training plan's reserved capacity is not counted against the per-type quotas.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.account import SPOT, TRAINING, WARM_POOL, AccountView, ec2_type, quota_name
from trainstack.rules.problems import Problem
from trainstack.spec import JobSpec


@dataclass(frozen=True)
class OptionAccount:
    """What the account says of one capacity option: why it can never start (refusals), and what to
    know before it launches (`note`: the quota beside the option; `warnings`)."""

    instance_type: str
    field: str
    refusals: tuple[Problem, ...]
    note: str
    warnings: tuple[str, ...]


def option_accounts(spec: JobSpec, view: AccountView) -> list[OptionAccount]:
    return [_option(spec, view, index, name) for index, name in enumerate(spec.capacity_options)]


def account_problems(spec: JobSpec, view: AccountView | None) -> list[Problem]:
    """The refusals, when no capacity option can ever start."""
    if view is None:
        return []
    options = option_accounts(spec, view)
    if all(option.refusals for option in options):
        return [problem for option in options for problem in option.refusals]
    return []


def account_warnings(spec: JobSpec, view: AccountView | None) -> list[str]:
    """What could not be read, and what the job will meet without being refused for it."""
    if view is None:
        return []
    options = option_accounts(spec, view)
    warnings = list(view.unreadable)
    if not all(option.refusals for option in options):
        warnings += [
            f"{option.field} = {option.instance_type}: {problem.rule}" for option in options for problem in option.refusals
        ]
    return warnings + [warning for option in options for warning in option.warnings]


def _option(spec: JobSpec, view: AccountView, index: int, name: str) -> OptionAccount:
    field = f"instance_types[{index}]" if spec.instance_types else "instance_type"
    count = spec.instance_count
    refusals, notes, warnings = [], [], []
    if spec.training_plan_arn:
        notes.append("on the training plan's reserved capacity")
    else:
        usage = SPOT if spec.spot.enabled else TRAINING
        quota = view.quota(name, usage)
        if quota is None:
            if view.quotas is not None:
                notes.append(f"quota '{quota_name(name, usage)}' not listed by Service Quotas")
        elif quota.value < count:
            refusals.append(
                Problem(
                    field,
                    name,
                    f"the account's quota '{quota.name}' is {quota.value:g} in {view.region}, below the {count} "
                    "instances this job needs: it can never start",
                    f"request an increase: {quota.increase_command(count, view.region)}",
                )
            )
        else:
            using = view.using(name, usage)
            note = f"quota {quota.value:g}, {using} in use"
            if using + count > quota.value:
                note += f": waits for quota until {using + count - quota.value:g} instances are free"
            notes.append(note)
        if spec.warm_pool:
            pool = view.quota(name, WARM_POOL)
            if pool is not None and pool.value < count:
                warnings.append(
                    f"{field} = {name}: no warm pool is kept: the quota '{pool.name}' is {pool.value:g} "
                    f"({pool.increase_command(count, view.region)})"
                )
    refusals += _offering_refusals(field, name, view)
    return OptionAccount(name, field, tuple(refusals), "; ".join(notes), tuple(warnings))


def _offering_refusals(field: str, name: str, view: AccountView) -> list[Problem]:
    """EC2 offers the type here, but not where the job's instances would be. A type EC2 does not list
    in the region at all (one SageMaker alone offers) is not checked."""
    if view.offerings is None or not view.subnet_zones:
        return []
    offered = view.offerings.get(ec2_type(name), ())
    if not offered or set(offered) & set(view.subnet_zones):
        return []
    return [
        Problem(
            field,
            name,
            f"{ec2_type(name)} is not offered in the training subnet's AZ ({', '.join(view.subnet_zones)}) of "
            f"{view.region}: it can never start there",
            f"deploy the training subnet in an AZ that offers it (-c availability_zone_ids={offered[0]}; any of "
            f"{', '.join(offered)}), or choose another instance type",
        )
    ]
