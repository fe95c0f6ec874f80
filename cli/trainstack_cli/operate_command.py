"""The stack commands' output: rich tables and a live line for people, `--json` for scripts."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from rich.console import Console, RenderableType
from rich.live import Live

from trainstack_cli.logs import follow_logs
from trainstack_cli.queue_reading import read_queue
from trainstack_cli.run_reading import list_runs, read_run, read_team_month, watch
from trainstack_cli.runs import RunView
from trainstack_cli.stack import EXIT_NO_STACK, EXIT_OK, EXIT_RUN_FAILED, Stack
from trainstack_cli.stop import stop
from trainstack_cli.submit import resume, submit
from trainstack_cli.views import console as cli_console
from trainstack_cli.views import (
    doctor_view,
    live_line,
    queue_table,
    runs_table,
    smoke_view,
    status_view,
    stopped_view,
    team_runs_view,
)


def operate_command(args: argparse.Namespace, stack: Stack) -> int:
    console = cli_console()
    if args.command in ("submit", "resume"):
        name = (
            submit(stack, args.spec, args.source, args.inline, args.team) if args.command == "submit" else resume(stack, args.run)
        )
        if not args.wait:
            print(json.dumps({"run": name}) if args.json else f"run {name} started on stack {stack.name}")
            return EXIT_OK
        if not args.json:
            console.print(f"run {name} started on stack {stack.name}")
        return exit_code(follow(stack, name, console, quiet=args.json), console, args.json)
    if args.command == "runs":
        if args.team is None:
            runs = list_runs(stack, args.limit)
            return _show(console, args.json, [r.to_json() for r in runs], lambda: runs_table(runs))
        team = stack.team(args.team)
        runs, month = list_runs(stack, args.limit, team), read_team_month(stack, team)
        document = {"team": team, "month": month.to_json(), "runs": [r.to_json() for r in runs]}
        return _show(console, args.json, document, lambda: team_runs_view(runs, month))
    if args.command == "status":
        run = read_run(stack, args.run, with_mlflow_ui=True)
        return _show(console, args.json, run.to_json(), lambda: status_view(run))
    if args.command == "logs":
        for line in follow_logs(stack, args.run, args.trial, args.host, args.follow):
            record = {"stream": line.stream, "message": line.message}
            print(json.dumps(record) if args.json else line.message, flush=args.follow)
        return EXIT_OK
    if args.command == "stop":
        stopped = stop(stack, args.run)
        return _show(console, args.json, stopped.to_json(), lambda: stopped_view(stopped))
    if args.command == "queue":
        queue = read_queue(stack)
        return _show(console, args.json, queue.to_json(), lambda: queue_table(queue))
    if args.command == "smoke":
        return smoke_command(args, stack, console)
    raise ValueError(args.command)


def doctor_command(args: argparse.Namespace) -> int:
    """Every check, shown; exit 3 where the credentials or the stack's outputs fail (nothing else could
    be checked), 1 where another check fails."""
    from trainstack_cli.doctor import CREDENTIALS, FAILED, OUTPUTS, doctor

    results = doctor(args.stack, args.outputs, args.profile, args.region, args.spec)
    _show(cli_console(), args.json, [result.to_json() for result in results], lambda: doctor_view(results))
    failed = {result.check for result in results if result.status == FAILED}
    if failed & {CREDENTIALS, OUTPUTS}:
        return EXIT_NO_STACK
    return EXIT_RUN_FAILED if failed else EXIT_OK


def smoke_command(args: argparse.Namespace, stack: Stack, console: Console) -> int:
    """The worst case confirmed, then the legs, each step as it ends, and the summary."""
    from trainstack_cli.smoke import confirmed, plan_smoke, run_smoke

    report = plan_smoke(stack, args.instance_type)
    if not confirmed(report, args.yes, sys.stderr if args.json else sys.stdout):  # --json: stdout is the report alone
        print("trainstack smoke: nothing started", file=sys.stderr)
        return EXIT_RUN_FAILED
    report = run_smoke(stack, report, lambda line: None if args.json else console.print(line, soft_wrap=True))
    _show(console, args.json, report.to_json(), lambda: smoke_view(report))
    return EXIT_OK if report.passed else EXIT_RUN_FAILED


def _show(console: Console, as_json: bool, data: Any, view: Callable[[], RenderableType]) -> int:
    """`--json`: the data; otherwise the view for people."""
    if as_json:
        print(json.dumps(data, indent=1))
    else:
        console.print(view())
    return EXIT_OK


def follow(stack: Stack, name: str, console: Console, quiet: bool = False) -> RunView:
    """Watch the run to its end; a live line on a terminal, one line per change elsewhere."""
    if quiet:
        return watch(stack, name, lambda view: None)
    if console.is_terminal:
        with Live(console=console, refresh_per_second=2, transient=False) as live:
            return watch(stack, name, lambda view: live.update(live_line(view)))
    last: list[str] = []

    def changed(view: RunView) -> None:
        line = live_line(view).plain
        if not last or line.split("  ")[:4] != last[-1].split("  ")[:4]:  # a new state, job or step
            console.print(line, soft_wrap=True)
        last[:] = [line]

    return watch(stack, name, changed)


def exit_code(run: RunView, console: Console, as_json: bool) -> int:
    if as_json:
        print(json.dumps(run.to_json(), indent=1))
    else:
        console.print(status_view(run))
    if run.status != "SUCCEEDED":
        print(f"run {run.name} {run.status}: {run.cause or 'see trainstack status'}", file=sys.stderr)
        return EXIT_RUN_FAILED
    return EXIT_OK
