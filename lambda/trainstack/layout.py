"""The S3 key layout shared by the stack (IAM grants, lifecycle rules) and the request builder."""

from __future__ import annotations

# Trigger bucket: users upload job specs (jobs/) and data (datasets/) here.
JOBS_PREFIX = "jobs/"
DATASETS_PREFIX = "datasets/"

# Artifacts bucket: everything a training job writes.
MODELS_PREFIX = "models/"
CHECKPOINTS_PREFIX = "checkpoints/"
TENSORBOARD_PREFIX = "tensorboard/"
SOURCES_PREFIX = "sources/"  # code `trainstack submit --source` packs; jobs read it, never write it

# CloudWatch Logs: where SageMaker writes every training job's output, one stream per host and start.
TRAINING_JOB_LOG_GROUP = "/aws/sagemaker/TrainingJobs"
# CloudWatch metrics: where SageMaker publishes the MetricDefinitions' values and each instance's
# utilization (dimension Host = <job>/algo-N); the same name as the log group, a different thing.
TRAINING_JOB_METRICS_NAMESPACE = "/aws/sagemaker/TrainingJobs"

JOB_WRITABLE_PREFIXES = (MODELS_PREFIX, CHECKPOINTS_PREFIX, TENSORBOARD_PREFIX)

# A team is a boundary: its specs, data, code and every output live in a folder of its own under each
# prefix (`<prefix><team>/`), which its execution role alone may read and write. A stack without a team
# queue has one team; with one, each share is a team.
DEFAULT_TEAM = "default"


def team_folder(prefix: str, team: str) -> str:
    """The team's own folder under one of the prefixes above."""
    return f"{prefix}{team}/"


def team_of_key(key: str) -> str | None:
    """The team whose folder a trigger-bucket key is in (jobs/<team>/..., datasets/<team>/...); None for
    a spec directly under jobs/, which belongs to the stack's default team."""
    for prefix in (JOBS_PREFIX, DATASETS_PREFIX):
        if key.startswith(prefix):
            folder, slash, _ = key[len(prefix) :].partition("/")
            return folder if slash else None
    return None
