"""The team queue (`queue`): the stack must have one, the job's share must be one of its teams, and
the job must fit under its instance cap — a job that needs more instances than the cap is never
dispatched, it waits at the head of the queue until the queue's time limit terminates it
(MISCONFIGURATION:SERVICE_ENVIRONMENT_MAX_RESOURCE), after blocking its team's jobs behind it.

Where the stack is not known (the CLI validating offline), only the spec's own fields are checked.
"""

from __future__ import annotations

from trainstack.rules.problems import Problem
from trainstack.spec import JobSpec
from trainstack.stack_context import StackContext

STACK_SETTING = "queue"  # the stack setting (-c) that deploys the queue


def share_of(spec: JobSpec, stack: StackContext) -> str:
    """The fair-share identifier the job is submitted under: the spec's, else the stack's default."""
    assert spec.queue is not None
    return spec.queue.share or stack.queue_default_share


def queue_problems(spec: JobSpec, stack: StackContext | None = None) -> list[Problem]:
    if spec.queue is None or stack is None:
        return []
    if not stack.job_queue_arn:
        return [
            Problem("queue", None, "the stack has no team queue", f"redeploy it with -c {STACK_SETTING}=true, or remove queue")
        ]
    problems = []
    share = share_of(spec, stack)
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
