"""A run's team is where its spec came from, never a field the uploader writes (rules/queue.py): the
folder of the trigger key names it, a spec naming another team's share is refused naming both, and a
folder that is no team of the stack is refused."""

from __future__ import annotations

import dataclasses

from tests.core.specs import DDP, STACK
from trainstack.layout import team_of_key
from trainstack.preflight import preflight
from trainstack.rules import SpecRejectedError
from trainstack.rules.queue import run_team
from trainstack.spec import parse_spec
from trainstack.workflow import trigger_of

QUEUE_STACK = dataclasses.replace(
    STACK,
    job_queue_arn="arn:aws:batch:us-east-1:123456789012:job-queue/trainstack-queue",
    queue_shares=("research", "prod"),
    queue_default_share="research",
    queue_max_instances=8,
    team_role_arns=("research=arn:aws:iam::123456789012:role/r", "prod=arn:aws:iam::123456789012:role/p"),
)
QUEUED = {**DDP, "inputs": {}, "spot": {"enabled": False}, "warm_pool": None}


def upload(key: str) -> dict:
    return {"detail": {"bucket": {"name": "trigger"}, "object": {"key": key, "version-id": "v1"}}}


def refusal(spec: dict, team: str) -> str:
    try:
        preflight(parse_spec(spec), lambda uri: 64, QUEUE_STACK.region, QUEUE_STACK, team=team)
    except SpecRejectedError as error:
        return str(error)
    return ""


def test_the_folder_of_the_key_names_the_team():
    assert team_of_key("jobs/prod/llama.yaml") == "prod"
    assert team_of_key("datasets/prod/owt/_SUCCESS") == "prod"
    assert team_of_key("jobs/llama.yaml") is None  # the stack's default team's


def test_an_upload_under_a_teams_folder_is_that_teams_run_whatever_the_spec_says():
    spec = parse_spec({**QUEUED, "queue": {"share": "research"}})
    assert run_team(trigger_of(upload("jobs/prod/x.yaml"), "e"), spec, QUEUE_STACK) == "prod"


def test_a_spec_directly_under_jobs_is_the_default_teams():
    assert run_team(trigger_of(upload("jobs/x.yaml"), "e"), parse_spec(QUEUED), QUEUE_STACK) == "research"


def test_a_direct_start_is_the_team_it_names_else_the_share_its_spec_names():
    spec = parse_spec({**QUEUED, "queue": {"share": "prod"}})
    assert run_team(trigger_of({"spec": {}, "team": "research"}, "e"), spec, QUEUE_STACK) == "research"
    assert run_team(trigger_of({"spec": {}}, "e"), spec, QUEUE_STACK) == "prod"


def test_an_upload_under_one_teams_folder_naming_another_teams_share_is_refused_naming_both():
    said = refusal({**QUEUED, "queue": {"share": "research"}}, team="prod")
    assert 'queue.share = "research": the spec came from team prod\'s folder' in said
    assert "upload it under jobs/research/ (as team research), or write share prod or none" in said


def test_a_folder_that_is_no_team_of_the_stack_is_refused_naming_the_teams():
    said = refusal(QUEUED, team="design")
    assert 'team = "design": not one of the stack\'s teams (research, prod)' in said


def test_a_spec_of_the_teams_own_share_passes():
    assert refusal({**QUEUED, "queue": {"share": "prod"}}, team="prod") == ""
