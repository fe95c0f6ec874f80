"""The run identity: deterministic names, one checkpoint lineage per trial, shared by its attempts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trainstack.identity import Run
from trainstack_contract.job_names import TRAINING_JOB_NAME_PATTERN, JobName, submitted_name

UPLOAD = "s3://b/jobs/a.yaml#v1"


def test_the_same_trigger_always_names_the_same_job():
    assert Run(UPLOAD).trial().job_name("trainstack", "gpt") == Run(UPLOAD).trial().job_name("trainstack", "gpt")


def test_another_object_version_names_another_job():
    assert Run(UPLOAD).trial().job_name("trainstack", "gpt") != Run("s3://b/jobs/a.yaml#v2").trial().job_name("trainstack", "gpt")


def test_long_names_shorten_the_spec_name_and_keep_every_suffix():
    name = Run(UPLOAD, resume="exec-2").trial(12).job_name("trainstack-long-prefix", "x" * 32, attempt=3)
    assert len(name) <= 63 and TRAINING_JOB_NAME_PATTERN.match(name)
    assert name.startswith("trainstack-long-prefix-x") and name.endswith("-t12-r" + name.split("-r")[-1])
    assert name.endswith("-a3")


def test_each_trial_of_a_sweep_has_its_own_checkpoint_prefix():
    run = Run(UPLOAD)
    prefixes = {run.trial(index).checkpoint_prefix("gpt", "research") for index in range(3)}
    assert len(prefixes) == 3
    assert run.trial().checkpoint_prefix("gpt", "research") not in prefixes


def test_a_trials_checkpoints_are_in_its_teams_folder():
    trial = Run(UPLOAD).trial()
    assert trial.checkpoint_prefix("gpt", "research").startswith("checkpoints/research/gpt/")
    assert trial.checkpoint_prefix("gpt", "prod") != trial.checkpoint_prefix("gpt", "research")


def test_attempts_and_resumes_of_a_trial_share_its_checkpoints_under_other_job_names():
    original, resumed = Run(UPLOAD).trial(1), Run(UPLOAD, resume="exec-2").trial(1)
    assert original.checkpoint_prefix("gpt", "research") == resumed.checkpoint_prefix("gpt", "research")
    names = {original.job_name("p", "gpt"), original.job_name("p", "gpt", attempt=1), resumed.job_name("p", "gpt")}
    assert len(names) == 3


def test_a_run_owns_exactly_the_jobs_named_with_its_digest_and_prefix():
    run = Run(UPLOAD)
    assert run.owns(run.trial(0).job_name("trainstack", "gpt", attempt=2), "trainstack")
    assert not run.owns(run.trial(0).job_name("trainstack", "gpt"), "other")
    assert not run.owns(Run("s3://b/jobs/b.yaml#v1").trial().job_name("trainstack", "gpt"), "trainstack")


def test_trial_tags_name_the_spec_lineage_team_trial_and_strategy():
    tags = {t["Key"]: t["Value"] for t in Run(UPLOAD).trial(2).tags("gpt", "fsdp", "research")}
    assert tags == {
        "trainstack:spec": "gpt",
        "trainstack:lineage": Run(UPLOAD).trial(2).checkpoint_digest,
        "trainstack:team": "research",
        "trainstack:trial": "2",
        "trainstack:strategy": "fsdp",
    }


def test_each_execution_of_a_lineage_made_only_its_own_jobs():
    first = Run("execution:nightly")
    resumed = Run("execution:nightly", resume="nightly-resume-1")
    first_jobs = [first.trial(0).job_name("trainstack", "gpt"), first.trial(0).job_name("trainstack", "gpt", attempt=1)]
    resumed_jobs = [resumed.trial(0).job_name("trainstack", "gpt"), resumed.trial(0).job_name("trainstack", "gpt", attempt=1)]

    assert all(first.made(j, "trainstack") and not resumed.made(j, "trainstack") for j in first_jobs)
    assert all(resumed.made(j, "trainstack") and not first.made(j, "trainstack") for j in resumed_jobs)
    assert all(first.owns(j, "trainstack") for j in first_jobs + resumed_jobs)  # the Stop handler's lineage test


# Spec names as users write them: letters, digits and hyphens, including pieces that look like the
# suffix's own segments ("t5", "r1", "a2", 12 hex digits), up to lengths the API's limit shortens.
LOOKALIKES = ["gpt", "t5", "r1", "a2", "t12", "0123456789ab", "abcdef", "small", "7b"]
SPEC_NAME = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,60}[a-z0-9])?", fullmatch=True).filter(lambda name: "--" not in name)
SPEC_NAME |= st.builds("-".join, st.lists(st.sampled_from(LOOKALIKES), min_size=1, max_size=8))


@settings(max_examples=300, deadline=None)
@given(
    spec=SPEC_NAME,
    lineage=st.text(min_size=1, max_size=40),
    trial=st.none() | st.integers(min_value=0, max_value=999),
    resume=st.none() | st.text(min_size=1, max_size=20),
    attempt=st.integers(min_value=0, max_value=30),
)
def test_every_job_name_parses_back_to_the_run_trial_resume_and_attempt_that_named_it(spec, lineage, trial, resume, attempt):
    run = Run(lineage, resume)
    name = run.trial(trial).job_name("trainstack", spec, attempt)
    parsed = JobName.parse(name)
    assert parsed is not None
    assert (parsed.digest, parsed.trial, parsed.attempt) == (run.digest, trial, attempt)
    assert run.owns(name, "trainstack") and run.made(name, "trainstack")
    assert not Run(lineage, (resume or "") + "again").made(name, "trainstack")  # another execution's jobs are not its own


def test_the_name_trainstack_gave_is_read_back_from_inside_the_training_job_batch_created():
    name = Run("s3://b/jobs/x.yaml#v1").trial(2).job_name("trainstack", "gpt", attempt=1)
    assert submitted_name(f"AWSBatch{name}88b610a69aa8380ca5b0a7aba3f81cb8") == name
    assert submitted_name(name) == name  # a job trainstack created itself
    assert submitted_name(f"AWSBatch{name}") == f"AWSBatch{name}"  # no attempt suffix: not one of Batch's
