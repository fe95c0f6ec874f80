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
