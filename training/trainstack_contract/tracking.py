"""Where a job tracks its experiment, and how its MLflow run is named and linked: one home for the
request builder (which sets MlflowConfig and these variables), the built-in script (which reads
them), the twin and the CLI; and what kind of MLflow resource an ARN names, for the rules, the
stack and the run report (which the Notify Lambda imports: nothing here pulls the spec's models).

SageMaker documents no variable that it sets in the container for MlflowConfig (neither the API
reference, the SageMaker SDK 3.x nor the training toolkit mention one), so the request passes the
MLflow client's own standard variables in the job's Environment: the tracking URI is the tracking
server's (or MLflow App's) ARN, which the `sagemaker-mlflow` plugin resolves to the server's
endpoint and signs with the job's credentials.

One MLflow run per training job: its name is the job's name (MlflowConfig.MlflowRunName, the same
string), and tags link the runs of one trial across resume segments and restart attempts. Why not
one run for all of them: a resumed or restarted job trains again the steps after its checkpoint, so
a shared run would hold two values for those steps; separate runs keep each segment's curve exact,
and the next starts at the step it resumed from.
"""

from __future__ import annotations

from trainstack_contract.job_names import JobName

TRACKING_URI = "MLFLOW_TRACKING_URI"
EXPERIMENT_NAME = "MLFLOW_EXPERIMENT_NAME"

# The two kinds of SageMaker managed MLflow resource a job may log to, as their ARNs name them.
MLFLOW_APP = "mlflow-app"  # ...:mlflow-app/<id>
MLFLOW_TRACKING_SERVER = "mlflow-tracking-server"  # ...:mlflow-tracking-server/<name>

LINEAGE_TAG = "trainstack.lineage"  # the run's 12-hex digest: every job of one run shares it
TRIAL_TAG = "trainstack.trial"
SEGMENT_TAG = "trainstack.resume_segment"  # "" for the first segment
ATTEMPT_TAG = "trainstack.attempt"
JOB_TAG = "trainstack.training_job"


def resource_type(arn: str) -> str:
    """The resource type of an ARN (`arn:aws:sagemaker:<region>:<account>:<type>/<name>`)."""
    return arn.split(":", 5)[5].split("/", 1)[0]


def resource_name(arn: str) -> str:
    """What follows the resource type: a tracking server's name (DescribeMlflowTrackingServer's and
    CreatePresignedMlflowTrackingServerUrl's TrackingServerName), an MLflow App's id."""
    return arn.split(":", 5)[5].split("/", 1)[1]


def is_mlflow_app(arn: str) -> bool:
    return resource_type(arn) == MLFLOW_APP


def run_tags(job_name: str) -> dict[str, str]:
    """The tags that link a job's MLflow run to the other jobs of its trial (none for a name trainstack
    did not write)."""
    parsed = JobName.parse(job_name)
    if parsed is None:
        return {JOB_TAG: job_name}
    return {
        JOB_TAG: job_name,
        LINEAGE_TAG: parsed.digest,
        TRIAL_TAG: "" if parsed.trial is None else str(parsed.trial),
        SEGMENT_TAG: parsed.resume or "",
        ATTEMPT_TAG: str(parsed.attempt),
    }
