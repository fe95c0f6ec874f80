"""The stack's name prefix: shared by the infrastructure (resource names, IAM scoping) and the
job names (trainstack_contract.job_names)."""

from __future__ import annotations

import re

DEFAULT_NAME_PREFIX = "trainstack"

# Lower-case so the prefix is also valid in S3 key prefixes and CloudFormation export names; at most
# 20 characters so that training job names "<prefix>-<spec name>-<hash>" fit the 63-character limit.
NAME_PREFIX_PATTERN = re.compile(r"^[a-z][a-z0-9-]{0,18}[a-z0-9]$")
