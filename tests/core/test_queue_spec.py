"""`queue`: the spec names a share of the stack's team queue and a priority; Validate refuses a job the
queue could never start (no queue, an unknown share, more instances than the cap) with one line naming
the field, and a queued run's deadline allows for the wait."""

from __future__ import annotations

import dataclasses

import pytest

from tests.core.specs import DDP, STACK
from trainstack.rules import checked
from trainstack.spec import SpecError, parse_spec
from trainstack.stack_context import StackContext
from trainstack.workflow import run_deadline_seconds

QUEUED_STACK = dataclasses.replace(
    STACK,
    job_queue_arn="arn:aws:batch:us-east-1:123456789012:job-queue/trainstack-queue",
    queue_shares=("research", "prod"),
    queue_default_share="research",
    queue_max_instances=4,
)


def queued(queue: dict, **changes) -> dict:
    return {**DDP, "queue": queue, **changes}


def problems(data: dict, stack: StackContext | None = QUEUED_STACK) -> list[str]:
    found, _ = checked(parse_spec(data), lambda uri: 64, None, stack)
    return [str(problem) for problem in found]


def test_a_job_for_a_share_of_the_stacks_queue_under_its_cap_passes():
    assert problems(queued({"share": "prod", "priority": 9000})) == []


def test_a_share_the_queue_does_not_have_is_one_line_naming_queue_share_and_the_shares():
    assert problems(queued({"share": "vision"})) == [
        'queue.share = "vision": not one of the queue\'s shares (research, prod); '
        "name one of them, or add the team to the stack's -c queue_shares and redeploy"
    ]


def test_a_job_over_the_queues_instance_cap_is_one_line_naming_instance_count():
    (line,) = problems(queued({}, instance_count=5))
    assert line.startswith("instance_count = 5: more than the queue's cap of 4 instances") and "queue_max_instances" in line


def test_a_stack_without_a_queue_is_one_line_naming_queue_and_the_setting():
    assert problems(queued({}), STACK) == ["queue: the stack has no team queue; redeploy it with -c queue=true, or remove queue"]


@pytest.mark.parametrize(("queue", "field"), [({"priority": 10000}, "queue.priority"), ({"share": "team-a"}, "queue.share")])
def test_a_priority_or_share_batch_refuses_is_refused_naming_the_field(queue, field):
    with pytest.raises(SpecError) as error:
        parse_spec(queued(queue))
    assert [problem.split(" = ")[0] for problem in error.value.problems] == [field]


def test_without_the_stack_only_the_specs_own_fields_are_checked():
    assert problems(queued({"share": "anyteam"}), None) == []


def test_a_queued_runs_deadline_allows_each_attempt_its_wait_in_the_queue():
    direct = run_deadline_seconds(parse_spec(DDP), 1)
    waited = run_deadline_seconds(parse_spec(queued({"max_wait": "10h"})), 1)
    assert waited - direct == 10 * 3600 * (parse_spec(DDP).restarts.max + 1)
