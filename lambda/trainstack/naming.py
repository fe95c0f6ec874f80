"""Names shared by the infrastructure (IAM scoping) and the job spec (training job names)."""

from __future__ import annotations

import re

DEFAULT_NAME_PREFIX = "trainstack"

# Lower-case so the prefix is also valid in S3 key prefixes and CloudFormation export names; at most
# 20 characters so that training job names "<prefix>-<spec name>-<hash>" fit the 63-character limit.
NAME_PREFIX_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,18}[a-z0-9]$")

# CreateTrainingJob's TrainingJobName constraint (botocore does not check patterns).
TRAINING_JOB_NAME_MAX = 63
TRAINING_JOB_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")


def training_job_name_prefix(name_prefix: str) -> str:
    """Every training job the stack creates starts with this; IAM policies are scoped to it."""
    return f"{name_prefix}-"
