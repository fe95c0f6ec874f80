"""Training job names: the one format trainstack writes and the one parser that reads it back.

    <name prefix>-<spec name>-<12 hex of the run's lineage>[-t<trial>][-r<6 hex of the resume segment>][-a<attempt>]

At most 63 characters (CreateTrainingJob's limit): the spec name is shortened, never the suffix.
The run identity (trainstack.identity) computes the digests; the Stop function, the CLI and the
tests read names back with `JobName.parse`. Every job of a stack starts with its name prefix, which
IAM policies are scoped to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# CreateTrainingJob's TrainingJobName constraint (botocore does not check patterns).
TRAINING_JOB_NAME_MAX = 63
TRAINING_JOB_NAME_PATTERN = re.compile(rf"^[a-zA-Z0-9](-*[a-zA-Z0-9]){{0,{TRAINING_JOB_NAME_MAX - 1}}}$")
JOB_DIGEST_LENGTH = 12
RESUME_DIGEST_LENGTH = 6

# The suffix `JobName.format` writes, read back from the end of a name: the spec part before it is
# free text (it may itself hold "-t5" or hex), so only an anchored suffix is unambiguous.
JOB_NAME_SUFFIX = re.compile(
    rf"-(?P<digest>[0-9a-f]{{{JOB_DIGEST_LENGTH}}})(?:-t(?P<trial>\d+))?(?:-r(?P<resume>[0-9a-f]{{{RESUME_DIGEST_LENGTH}}}))?"
    r"(?:-a(?P<attempt>\d+))?$"
)


# AWS Batch's service jobs for SageMaker Training (the team queue) create the training job as
# AWSBatch<job name><32 hex of the attempt>: the job name trainstack gave sits inside it.
BATCH_TRAINING_JOB_PREFIX = "AWSBatch"
BATCH_ATTEMPT_SUFFIX = re.compile(r"[0-9a-f]{32}$")


def submitted_name(training_job_name: str) -> str:
    """The job name trainstack gave a training job: the name itself, or the one inside Batch's."""
    suffix = BATCH_ATTEMPT_SUFFIX.search(training_job_name)
    if training_job_name.startswith(BATCH_TRAINING_JOB_PREFIX) and suffix:
        return training_job_name[len(BATCH_TRAINING_JOB_PREFIX) : suffix.start()]
    return training_job_name


def training_job_name_prefix(name_prefix: str) -> str:
    """Every training job the stack creates starts with this; IAM policies are scoped to it."""
    return f"{name_prefix}-"


@dataclass(frozen=True)
class JobName:
    """What a job name says of its run."""

    head: str  # the name prefix and the (possibly shortened) spec name
    digest: str  # the run's
    trial: int | None
    resume: str | None  # the resume segment's digest
    attempt: int

    @classmethod
    def parse(cls, job_name: str) -> JobName | None:
        match = JOB_NAME_SUFFIX.search(job_name)
        if match is None:
            return None
        trial, attempt = match["trial"], match["attempt"]
        return cls(
            job_name[: match.start()], match["digest"], None if trial is None else int(trial), match["resume"], int(attempt or 0)
        )

    @staticmethod
    def format(name_prefix: str, spec_name: str, digest: str, trial: int | None, resume: str | None, attempt: int) -> str:
        """The name of a job: deterministic, and within the API's limit."""
        suffix = (
            digest
            + (f"-t{trial}" if trial is not None else "")
            + (f"-r{resume}" if resume else "")
            + (f"-a{attempt}" if attempt else "")
        )
        head = f"{training_job_name_prefix(name_prefix)}{spec_name}"[: TRAINING_JOB_NAME_MAX - len(suffix) - 1].rstrip("-")
        return f"{head}-{suffix}"
