"""Everything checked before a job is billed, in one call for the Validate step and the CLI: the
spec's rules, the built-in script's contract, and the plan (memory per GPU on every capacity option,
the worst-case cost against the budget). `force: true` launches a job the plan refuses."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from trainstack.account import AccountView
from trainstack.budgets import TeamBudget, budget_problems
from trainstack.builtin_script import contract_problems
from trainstack.planner.memory import GIB
from trainstack.planner.plan import JobPlan, OptionPlan, plan_job
from trainstack.rules import Problem, Resolution, SpecRejectedError, checked, resolve
from trainstack.rules.account import account_problems, account_warnings, option_accounts
from trainstack.spec import JobSpec
from trainstack.stack_context import StackContext


@dataclass(frozen=True)
class Preflight:
    resolution: Resolution
    plan: JobPlan
    spec: JobSpec  # as it will run: with the choices the plan made where the spec left them open
    warnings: tuple[str, ...] = ()  # what the job will meet without being refused for it (the account's)


def rule_problems(
    spec: JobSpec,
    count_objects: Callable[[str], int] | None = None,
    region: str | None = None,
    stack: StackContext | None = None,
) -> list[Problem]:
    """The spec's rules and, once they pass, the built-in script's contract."""
    return _rules_and_contract(spec, count_objects, region, stack)[0]


def _rules_and_contract(
    spec: JobSpec,
    count_objects: Callable[[str], int] | None,
    region: str | None,
    stack: StackContext | None,
    team: str | None = None,
) -> tuple[list[Problem], Resolution | None]:
    problems, resolution = checked(spec, count_objects, region, stack, team)
    if problems or resolution is None:
        return problems, resolution
    return contract_problems(spec, resolution), resolution


def preflight(
    spec: JobSpec,
    count_objects: Callable[[str], int] | None = None,
    region: str | None = None,
    stack: StackContext | None = None,
    account: AccountView | None = None,
    team: str | None = None,
    budget: TeamBudget | None = None,
) -> Preflight:
    """The resolution and the plan of a spec that may launch; SpecRejectedError otherwise. The
    resolution is computed once, here, and carried to Create (Resolution.to_json). With `stack`,
    the deployed stack's values (Validate has them): which tracking server its jobs may log to; with
    `account`, what the account allows (its quotas, the AZ's offerings): a job that can never start
    is refused, even with `force`, and the plan shows the quota beside each option; with `team`, the
    run's team (where its spec came from) must be the stack's and agree with the spec's share; with
    `budget`, the run's worst case and the team's commitments must fit the team's monthly budget."""
    problems, resolution = _rules_and_contract(spec, count_objects, region, stack, team)
    problems += account_problems(spec, account)
    if problems or resolution is None:
        raise SpecRejectedError(problems)
    spec, resolution, plan = planned(spec, resolution)
    refusals = plan_problems(plan)
    if refusals and not spec.force:
        raise SpecRejectedError(refusals)
    over_budget = budget_problems(budget, plan.worst_case_usd)  # the platform's cap: `force` does not lift it
    if over_budget:
        raise SpecRejectedError(over_budget)
    if account is None:
        return Preflight(resolution, plan, spec)
    return Preflight(resolution, with_account(plan, spec, account), spec, tuple(account_warnings(spec, account)))


def with_account(plan: JobPlan, spec: JobSpec, account: AccountView) -> JobPlan:
    """The plan with the account's word on each option: its quota, what is in use, its warnings."""
    said = {option.instance_type: option for option in option_accounts(spec, account)}
    options = tuple(
        dataclasses.replace(option, account=said[option.instance_type].note, account_warnings=said[option.instance_type].warnings)
        for option in plan.options
    )
    return dataclasses.replace(plan, options=options)


def planned(spec: JobSpec, resolution: Resolution | None = None) -> tuple[JobSpec, Resolution, JobPlan]:
    """The spec as it will run (with the defaults the plan chooses), its resolution (resolved here
    unless given) and its plan, for a spec whose rules pass."""
    resolution = resolution or resolve(spec)
    plan = plan_job(spec, resolution.strategy, resolution.smp_parameters)
    if not plan.fits:
        spec, plan = _reduce_every_micro_step_if_it_fits(spec, resolution, plan)
    return spec, resolution, plan


def _reduce_every_micro_step_if_it_fits(spec: JobSpec, resolution: Resolution, plan: JobPlan) -> tuple[JobSpec, JobPlan]:
    """The built-in script's accumulation default follows memory: it keeps a full gradient copy
    between micro-steps (fewer collectives) unless only reducing every micro-step fits the GPUs."""
    knob = "reduce_every_micro_step"
    if not spec.uses_builtin_script or resolution.strategy not in ("fsdp", "smp") or knob in spec.hyperparameters:
        return spec, plan
    reducing = spec.model_copy(update={"hyperparameters": {**spec.hyperparameters, knob: True}})
    reducing_plan = plan_job(reducing, resolution.strategy, resolution.smp_parameters)
    return (reducing, reducing_plan) if reducing_plan.fits else (spec, plan)


def plan_problems(plan: JobPlan) -> list[Problem]:
    problems = [_does_not_fit(option) for option in plan.options if not option.fits]
    if not plan.within_budget and plan.budget_usd is not None:
        problems.append(_over_budget(plan, plan.budget_usd))
    return problems


def _does_not_fit(option: OptionPlan) -> Problem:
    memory = option.memory
    assert memory is not None  # an option without a memory plan always fits
    parts = ", ".join(f"{name} {value / GIB:.1f}" for name, value in memory.categories().items())
    rule = (
        f"needs {memory.total / GIB:.1f} GiB per GPU, {memory.usable / GIB:.1f} usable of {memory.capacity / GIB:.0f} "
        f"({parts} GiB)"
    )
    if memory.host_offloaded > memory.host_capacity:
        rule += (
            f"; offloaded state needs {memory.host_offloaded / GIB:.1f} GiB of host memory per GPU, "
            f"{memory.host_capacity / GIB:.1f} usable"
        )
    if option.suggestion:
        change = option.suggestion
        fix = f"{change.description} (fits at {change.memory.total / GIB:.1f} GiB per GPU)"
    else:
        fix = "no change trainstack knows of fits: shard the model with more GPUs or tensor parallelism"
    return Problem(option.field, option.instance_type, rule, f"{fix}; or set force: true to launch anyway")


def _over_budget(plan: JobPlan, budget: float) -> Problem:
    worst = plan.worst_case_usd
    if worst is None:
        unpriced = [o.instance_type for o in plan.options if o.cost.price_per_hour is None]
        return Problem(
            "budget.max_usd",
            budget,
            f"{', '.join(unpriced)} has no on-demand list price (capacity blocks and training plans are priced "
            "per offering), so the worst case has no bound",
            "remove the budget (the plan's upfront fee is the bound) or choose an on-demand type",
        )
    dearest = max(plan.options, key=lambda o: o.cost.worst_case_usd or 0.0).cost
    rule = (
        f"the run may cost up to ${worst:,.0f}: {dearest.instances} x {dearest.instance_type} "
        f"at ${dearest.price_per_hour:,.2f}/h "
        f"x {dearest.billable_hours_per_job:g} h x {dearest.jobs_per_trial} jobs per trial (retries and capacity re-creations) "
        f"x {dearest.trials} trial(s)"
    )
    return Problem(
        "budget.max_usd",
        int(budget) if budget.is_integer() else budget,
        rule,
        "lower max_runtime, retry_attempts or the sweep, raise the budget, or set force: true",
    )
