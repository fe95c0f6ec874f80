"""Run inside the Lambda's Python (see test_shipped_lambda.py): import every handler from the built
asset, with only boto3 and moto (the local AWS) beside it, and invoke each against moto.

argv: the asset directory. stdin: {"environment": {...}, "spec": {...}}. stdout: one JSON object of
results per handler, plus where pydantic_core was imported from.
"""

from __future__ import annotations

import json
import os
import sys

ASSET = sys.argv[1]
sys.path.insert(0, ASSET)  # the asset first, as Lambda puts /var/task first

PAYLOAD = json.load(sys.stdin)
os.environ.update(
    PAYLOAD["environment"],
    AWS_ACCESS_KEY_ID="testing",
    AWS_SECRET_ACCESS_KEY="testing",
    AWS_DEFAULT_REGION="us-east-1",
    AWS_REGION="us-east-1",
)

import boto3  # noqa: E402  (after the environment, as the runtime does)
import pydantic_core  # noqa: E402
from moto import mock_aws  # noqa: E402

with mock_aws():
    from trainstack.handlers import create, describe, notify, stop, validate

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="trigger")
    s3.put_bucket_versioning(Bucket="trigger", VersioningConfiguration={"Status": "Enabled"})
    version = s3.put_object(Bucket="trigger", Key="jobs/shipped.json", Body=json.dumps(PAYLOAD["spec"]).encode())["VersionId"]
    topic = boto3.client("sns").create_topic(Name="trainstack")["TopicArn"]
    os.environ["TOPIC_ARN"] = topic
    trigger = {"detail": {"bucket": {"name": "trigger"}, "object": {"key": "jobs/shipped.json", "version-id": version}}}

    validated = validate.handler({"input": trigger, "execution": "shipped"})
    trial = {"spec": validated["spec"], "run": validated["run"], "trial": validated["trials"][0], "trial_count": 1}
    created = create.handler(trial)
    described = describe.handler({"job_name": created["job_name"], "poll_seconds": 60})
    notified = notify.handler({"results": [{**described, "status": "Completed"}]})
    stopped = stop.handler({"detail": {"input": json.dumps(trigger), "name": "shipped", "status": "FAILED"}})

print(
    json.dumps(
        {
            "python": f"{sys.version_info.major}.{sys.version_info.minor}",
            "pydantic_core": pydantic_core.__file__,
            "trials": len(validated["trials"]),
            "job_name": created["job_name"],
            "created": created["created"],
            "described": described["job_name"],
            "notified": notified,
            "stopped": stopped["stopped"],
        }
    )
)
