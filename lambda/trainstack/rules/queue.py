"""Teams and the team queue (`queue`). A run's team is where its spec came from (layout.team_of_key:
jobs/<team>/, datasets/<team>/; the stack's default team for a spec directly under jobs/), never a
field the uploader writes: it must be one of the stack's teams, and a spec whose `queue.share` names
another is refused naming both. With `queue` the stack must have one, the job is submitted under its
team's share, and it must fit under the queue's instance cap — a job that needs more instances than the cap is never
dispatched, it waits at the head of the queue until the queue's time limit terminates it
(MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE), after blocking its team's jobs behind it.

Where the stack is not known (the CLI validating offline), only the spec's own fields are checked.
"""

from __future__ import annotations

from trainstack.rules.problems import Problem
from trainstack.spec import JobSpec
from trainstack.stack_context import StackContext
from trainstack.workflow import Trigger

STACK_SETTING = "queue"  # the stack setting (-c) that deploys the queue


def run_team(trigger: Trigger, spec: JobSpec, stack: StackContext) -> str:
    """The run's team: the folder its spec came from; for a direct start (the platform's own principals,
    who may start a run for any team) the team it names, else the share its spec names; else the
    stack's default team."""
    if trigger.team:
        return trigger.team
    if trigger.inline_spec is not None and spec.queue and spec.queue.share:
        return spec.queue.share
    return stack.default_team


def team_problems(spec: JobSpec, stack: StackContext | None, team: str | None) -> list[Problem]:
    """The run's team (None where not known: the CLI validating offline) against the stack's teams and
    the share the spec names."""
    if stack is None or team is None:
        return []
    if team not in stack.teams:
        return [
            Problem(
                "team",
                team,
                f"not one of the stack's teams ({', '.join(stack.teams)})",
                "upload the spec under jobs/<team>/ of one of them, or add the team to -c queue_shares and redeploy",
            )
        ]
    named = spec.queue.share if spec.queue else None
    if named and named != team:
        return [
            Problem(
                "queue.share",
                named,
                f"the spec came from team {team}'s folder, and a run is the team's whose folder it came from",
                f"upload it under jobs/{named}/ (as team {named}), or write share {team} or none",
            )
        ]
    return []


def queue_problems(spec: JobSpec, stack: StackContext | None = None) -> list[Problem]:
    if spec.queue is None or stack is None:
        return []
    if not stack.job_queue_arn:
        return [
            Problem("queue", None, "the stack has no team queue", f"redeploy it with -c {STACK_SETTING}=true, or remove queue")
        ]
    problems = []
    share = spec.queue.share or stack.default_team
    if share not in stack.queue_shares:
        problems.append(
            Problem(
                "queue.share",
                share,
                f"not one of the queue's shares ({', '.join(stack.queue_shares)})",
                "name one of them, or add the team to the stack's -c queue_shares and redeploy",
            )
        )
    if spec.instance_count > stack.queue_max_instances:
        problems.append(
            Problem(
                "instance_count",
                spec.instance_count,
                f"more than the queue's cap of {stack.queue_max_instances} instances: the job would never start, "
                "and would hold its team's jobs behind it until the queue's time limit ends it",
                f"use at most {stack.queue_max_instances} instances, or raise -c queue_max_instances and redeploy",
            )
        )
    return problems
