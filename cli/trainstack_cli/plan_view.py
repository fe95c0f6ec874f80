"""`trainstack plan`'s readable output: one table per capacity option (memory per GPU by category,
speed, cost), then the verdict. The numbers are the planner's (trainstack.planner); this only shows them."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from trainstack import facts
from trainstack.planner import cost, memory, speed
from trainstack.planner.plan import JobPlan


def show(plan: JobPlan, source: str, console: Console) -> None:
    report = plan.to_json()
    model = report["model"]
    if model:
        console.print(
            f"[bold]{source}[/]: {model['name']}, {model['parameters'] / 1e9:.2f} B parameters, "
            f"{model['layers']} layers x {model['hidden']}, sequence {model['seq_len']}, micro-batch {model['micro_batch_size']} "
            f"x {model['grad_accum']} accumulation, {model['precision']}"
            + (", activation checkpointing" if model["activation_checkpointing"] else "")
            + f"; a checkpoint writes {model['checkpoint_gib']:,.1f} GiB (all hosts together)"
        )
    for option in report["options"]:
        console.print(_option_table(option))
    prices = facts.prices()
    console.print(
        f"Assumed: MFU growing with the model's FLOPs per token up to {speed.MFU_CEILING:.0%} of dense peak "
        f"(measured on one H200); {memory.HEADROOM:.0%} of GPU memory kept free; "
        f"{memory.FRAMEWORK_OVERHEAD_BYTES / memory.GIB:.0f} GiB framework overhead; spot {cost.ASSUMED_SPOT_DISCOUNT:.0%} "
        f"below on demand; prices in {prices['currency']}: {prices['source']}, {prices['region']}, {prices['as_of']}.",
        style="dim",
    )
    worst = report["worst_case_usd"]
    budget = report["budget_usd"]
    console.print(f"Worst case for the whole run: {_usd(worst)}" + (f" (budget {_usd(budget)})" if budget is not None else ""))
    if plan.fits and plan.within_budget:
        console.print("[bold green]fits[/]: every capacity option fits" + (" and the run is within budget" if budget else ""))
    else:
        reasons = [] if plan.fits else ["does not fit"]
        reasons += [] if plan.within_budget else ["over budget"]
        console.print(f"[bold red]{' and '.join(reasons)}[/]" + (" (force: true launches it anyway)" if plan.force else ""))


def _option_table(option: dict[str, Any]) -> Table:
    verdict = "[green]fits[/]" if option["fits"] else "[red]does not fit[/]"
    title = f"{option['field']}: {option['instance_type']} — {verdict}"
    table = Table(title=title, title_justify="left", show_header=False, box=None, padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    if "note" in option:
        table.add_row("note", option["note"])
    if "layout" in option:
        layout = option["layout"]
        parts = f"{layout['strategy']} on {layout['gpus']} GPUs ({layout['nodes']} node(s)), shard {layout['shard']}"
        table.add_row("layout", parts + (f", tensor {layout['tensor']}" if layout["tensor"] > 1 else ""))
    if "memory_gib" in option:
        gib = option["memory_gib"]
        breakdown = ", ".join(
            f"{name} {gib[name]:.1f}" for name in ("parameters", "gradients", "optimizer", "activations", "temporary", "overhead")
        )
        table.add_row(
            "memory per GPU", f"{gib['total']:.1f} GiB of {gib['usable']:.1f} usable ({gib['capacity']:.0f} GiB): {breakdown}"
        )
    if "speed" in option:
        pace = option["speed"]
        efficiency = pace["scaling_efficiency"]
        table.add_row(
            "speed",
            f"{pace['step_seconds']:.3f} s/step ({pace['exposed_communication_seconds']:.3f} s exposed communication), "
            f"{pace['tokens_per_second']:,} tokens/s, MFU {pace['mfu']:.0%}"
            + (f", scaling efficiency {efficiency:.0%} of one node" if efficiency is not None else ""),
        )
    money = option["cost_usd"]
    table.add_row(
        "cost",
        f"{_usd(money['price_per_hour'])}/h x {money['instances']}; expected {_usd(money['expected'])} "
        f"(spot {_usd(money['expected_spot'])}); worst case {_usd(money['worst_case'])} (spot {_usd(money['worst_case_spot'])}) "
        f"= {money['billable_hours_per_job']:g} h x {money['jobs_per_trial']} jobs x {money['trials']} trial(s)",
    )
    if "checkpoint" in option:
        table.add_row("checkpoint", _checkpoint_line(option["checkpoint"]))
    if "goodput" in option:
        table.add_row("goodput", _goodput_line(option["goodput"]))
    for warning in option.get("warnings", []):
        table.add_row("[yellow]warning[/]", warning)
    if "suggestion" in option:
        suggestion = option["suggestion"]
        table.add_row("cheapest fix", f"{suggestion['change']} ({suggestion['memory_gib']:.1f} GiB per GPU)")
    return table


def _checkpoint_line(checkpoint: dict[str, Any]) -> str:
    share = f"{checkpoint['gib_per_host']:,.1f} GiB on the busiest host"
    if checkpoint["write_seconds"] is None:
        return f"{share}; write time unknown: {checkpoint['write_seconds_unknown']}"
    line = (
        f"{share}, about {checkpoint['write_seconds']:,.0f} s at gp2's {checkpoint['throughput_mib_per_second']:g} MiB/s "
        f"({checkpoint['volume_size_gb']} GB volume)"
    )
    if checkpoint["exceeds_sigterm_grace"]:
        return line  # the option's warning says what follows
    return f"{line}: within SageMaker's {checkpoint['sigterm_grace_seconds']} s SIGTERM grace"


def _goodput_line(goodput: dict[str, Any]) -> str:
    restart = goodput["restart_seconds"]
    parts = ", ".join(f"{name.replace('_', ' ')} {restart[name]:,.0f}" for name in restart if name != "total")
    interval = goodput["checkpoint_interval_seconds"]
    cadence = f"checkpoints {goodput['checkpoint_cadence']}" + (
        f" ({interval:,.0f} s of training apart)" if interval else " (the interval follows the save time the job measures)"
    )
    line = f"{goodput['effective_training_fraction']:.1%} of the run trains"
    if goodput["upper_bound"]:
        line = f"at most {line} (the save time is unknown, counted as nothing)"
    failures = goodput["expected_failures"]
    line += f"; MTTF {goodput['mttf_hours']:,.1f} h ({goodput['mttf_source']})"
    if failures is not None:
        line += f", {failures:,.2f} failures expected over the run"
    line += (
        f"; each loses {goodput['work_lost_per_failure_seconds']:,.0f} s of work since the last checkpoint and "
        f"{restart['total']:,.0f} s to restart ({parts}); {cadence}"
    )
    if goodput["extra_usd"] is not None:
        line += (
            f"; failures and saves add {_usd(goodput['extra_usd'])} to the expected cost "
            "(the worst case already bills every job a restart may create)"
        )
    return line


def _usd(value: float | None) -> str:
    return "unknown" if value is None else f"${value:,.2f}"
