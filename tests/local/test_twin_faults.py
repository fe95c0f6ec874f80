"""Faults injected through the twin reach the containers of the jobs they name: by the trial's job
prefix, a given number of times, on one host or all."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainstack_local.emulator import REGION
from trainstack_local.registry import ImageRegistry
from trainstack_local.sagemaker_twin import InjectedFault, JobRun, SageMakerTwin

TRIAL = "trainstack-gpt-3f9c2a"
TRANSPORT_ERROR = InjectedFault(TRIAL, "TRAINSTACK_INJECT_TRANSPORT_ERROR", "1:3")


@pytest.fixture
def twin(tmp_path) -> SageMakerTwin:
    return SageMakerTwin(tmp_path, ImageRegistry(), region=REGION)


def _create(twin: SageMakerTwin, name: str) -> JobRun:
    """What CreateTrainingJob makes of a job, short of starting it."""
    return JobRun(twin, SimpleNamespace(training_job_name=name), image=None)


def test_a_fault_reaches_every_host_of_a_job_whose_name_has_the_prefix(twin):
    twin.inject(TRANSPORT_ERROR)
    job = _create(twin, f"{TRIAL}-1")
    for host in ("algo-1", "algo-2"):
        assert job.injected_environment(host) == {"TRAINSTACK_INJECT_TRANSPORT_ERROR": "1:3"}


def test_a_job_of_another_trial_gets_no_fault_and_leaves_it_for_the_trial(twin):
    twin.inject(TRANSPORT_ERROR)
    assert _create(twin, "trainstack-gpt-77aa01-1").injected_environment("algo-1") == {}
    assert _create(twin, f"{TRIAL}-1").injected_environment("algo-1") == {"TRAINSTACK_INJECT_TRANSPORT_ERROR": "1:3"}


def test_a_fault_for_three_jobs_reaches_the_next_three_of_the_trial_and_no_more(twin):
    twin.inject(InjectedFault(TRIAL, "TRAINSTACK_INJECT_TRANSPORT_ERROR", "1:3", times=3))
    jobs = [_create(twin, f"{TRIAL}-{restart}") for restart in range(1, 5)]
    assert [bool(job.injected_environment("algo-1")) for job in jobs] == [True, True, True, False]


def test_a_fault_for_one_host_reaches_only_that_hosts_container(twin):
    twin.inject(InjectedFault(TRIAL, "TRAINSTACK_INJECT_HANG", "2:5", host="algo-2"))
    job = _create(twin, f"{TRIAL}-1")
    assert job.injected_environment("algo-1") == {}
    assert job.injected_environment("algo-2") == {"TRAINSTACK_INJECT_HANG": "2:5"}


def test_a_job_created_before_the_injection_never_gets_the_fault(twin):
    job = _create(twin, f"{TRIAL}-1")
    twin.inject(TRANSPORT_ERROR)
    assert job.injected_environment("algo-1") == {}
