"""The run identity: what names a run, its trials, their attempts, jobs, checkpoints and tags.

A *run* is one trigger (an uploaded spec's key and version, a data-drop marker, or an execution
name); its *lineage* string names it. Everything derived from it is deterministic, so a redelivered
event or a redriven execution finds the jobs it already made instead of making new ones:

- job names, in the format trainstack_contract.job_names writes and parses (the 12 hex of the
  lineage in them let the Stop handler find a run's jobs);
- each trial's own checkpoint lineage (16 hex), shared by its attempts (re-creations after a capacity
  failure, SageMaker's retries) so they resume, and never by two trials of a sweep, which would
  otherwise restore each other's checkpoints;
- the tags every job carries.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from trainstack.layout import CHECKPOINTS_PREFIX, team_folder
from trainstack_contract.job_names import JOB_DIGEST_LENGTH, RESUME_DIGEST_LENGTH, JobName, training_job_name_prefix

CHECKPOINT_DIGEST_LENGTH = 16
TAG_SPEC = "trainstack:spec"
TAG_LINEAGE = "trainstack:lineage"
TAG_TRIAL = "trainstack:trial"
TAG_STRATEGY = "trainstack:strategy"
# The execution that created the job: Stop stops only its own execution's jobs, never those of a
# duplicate execution of the same trigger that found them already made.
TAG_EXECUTION = "trainstack:execution"
TAG_TEAM = "trainstack:team"  # the team the run belongs to (layout.py): activate it as a cost allocation tag
TAG_KEYS = (TAG_SPEC, TAG_LINEAGE, TAG_TRIAL, TAG_STRATEGY, TAG_EXECUTION, TAG_TEAM)


def _digest(text: str, length: int) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@dataclass(frozen=True)
class Run:
    """One trigger's run: `lineage` is what the trigger says (see workflow.trigger_of).

    `resume` names a later execution that continues an ended lineage (a start with `resume: true`):
    its jobs get names of their own and the lineage's checkpoints, so they resume where the stopped
    or failed jobs left off. Without it, a second execution of a lineage finds the first one's jobs."""

    lineage: str
    resume: str | None = None

    def to_json(self) -> dict[str, str | None]:
        """How the state machine carries the run from Validate to Create."""
        return {"lineage": self.lineage, "resume": self.resume}

    @property
    def digest(self) -> str:
        """In every job name of the run: how a run's jobs are found."""
        return _digest(self.lineage, JOB_DIGEST_LENGTH)

    def trial(self, index: int | None = None) -> Trial:
        """`index` None: the run is a single job, not a sweep."""
        return Trial(self, index)

    def owns(self, job_name: str, name_prefix: str) -> bool:
        """Whether a training job belongs to this run's lineage (the Stop handler's test)."""
        parsed = JobName.parse(job_name)
        return parsed is not None and parsed.digest == self.digest and job_name.startswith(training_job_name_prefix(name_prefix))

    @property
    def resume_digest(self) -> str | None:
        """In the job names of a resume segment (None for the lineage's first execution)."""
        return _digest(self.resume, RESUME_DIGEST_LENGTH) if self.resume else None

    def made(self, job_name: str, name_prefix: str) -> bool:
        """Whether this very execution created the job: of the lineage, and with this execution's
        resume segment."""
        parsed = JobName.parse(job_name)
        return self.owns(job_name, name_prefix) and parsed is not None and parsed.resume == self.resume_digest


@dataclass(frozen=True)
class Trial:
    run: Run
    index: int | None

    @property
    def checkpoint_digest(self) -> str:
        key = self.run.lineage if self.index is None else f"{self.run.lineage}#trial={self.index}"
        return _digest(key, CHECKPOINT_DIGEST_LENGTH)

    def job_name(self, name_prefix: str, spec_name: str, attempt: int = 0) -> str:
        """The name of this trial's job (trainstack_contract.job_names has its format)."""
        return JobName.format(name_prefix, spec_name, self.run.digest, self.index, self.run.resume_digest, attempt)

    def checkpoint_prefix(self, spec_name: str, team: str) -> str:
        """Key prefix (in the artifacts bucket) of this trial's checkpoints, in its team's folder."""
        return f"{team_folder(CHECKPOINTS_PREFIX, team)}{spec_name}/{self.checkpoint_digest}/"

    def tags(self, spec_name: str, strategy: str, team: str, execution: str | None = None) -> list[dict[str, str]]:
        tags = [
            {"Key": TAG_SPEC, "Value": spec_name},
            {"Key": TAG_LINEAGE, "Value": self.checkpoint_digest},
            {"Key": TAG_TEAM, "Value": team},  # cost allocation, and what a team's people may stop
        ]
        if self.index is not None:
            tags.append({"Key": TAG_TRIAL, "Value": str(self.index)})
        tags.append({"Key": TAG_STRATEGY, "Value": strategy})
        if execution is not None:
            tags.append({"Key": TAG_EXECUTION, "Value": execution})
        return tags
