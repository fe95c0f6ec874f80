"""The SageMaker SDK's own answers, for the parity tests: run with .venv-sdk/bin/python, never imported.

    sdk_oracle.py images [--sdk3] < queries.json     # [[region, version, py_version|null, distribution, instance_type], ...]
    sdk_oracle.py hyperparameters < cases.json        # [{estimator keyword arguments}, ...]

Prints a JSON list, one answer per query: an image URI (null where the SDK refuses), or the
hyperparameters the SDK 2.x PyTorch estimator renders. Offline: fake credentials, no metadata
service, telemetry off, an s3:// source_dir so nothing is uploaded.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any

os.environ["SAGEMAKER_SUPPRESS_V2_WARNING"] = "1"
os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
SDK3 = Path(sys.prefix) / "sdk3"


def images(queries: list[list[Any]], sdk3: bool) -> list[str | None]:
    if sdk3:
        sys.path.insert(0, str(SDK3))  # SDK 3.x's `sagemaker` namespace (sagemaker-core) before 2.x's
        from sagemaker.core import common_utils as utils
        from sagemaker.core import image_uris
    else:
        from sagemaker import image_uris, utils
    # Both re-read their JSON tables and botocore's endpoint data on every call; the answers do not
    # change within a run, so each is read once (the parity test stays a few seconds).
    utils._botocore_resolver = functools.cache(utils._botocore_resolver)
    image_uris.config_for_framework = functools.cache(image_uris.config_for_framework)
    answers: list[str | None] = []
    for region, version, py_version, distribution, instance_type in queries:
        try:
            answers.append(
                image_uris.get_training_image_uri(
                    region, "pytorch", version, py_version, distribution=distribution, instance_type=instance_type
                )
            )
        except ValueError:
            answers.append(None)
    return answers


def hyperparameters(cases: list[dict[str, Any]]) -> list[dict[str, str]]:
    import boto3
    import sagemaker
    from sagemaker.pytorch import PyTorch
    from sagemaker.workflow.airflow import training_config

    # The SDK re-validates its config schema on every lookup (a quarter second each); the config
    # below is validated once, when the Session is built.
    sagemaker.utils.validate_sagemaker_config = lambda config: None
    answers = []
    for case in cases:
        case = dict(case)
        region, job_name = case.pop("region"), case.pop("job_name")
        boto_session = boto3.Session(aws_access_key_id="AKIAORACLEORACLE0000", aws_secret_access_key="oracle", region_name=region)
        session = sagemaker.Session(
            boto_session=boto_session,
            sagemaker_config={"SchemaVersion": "1.0", "SageMaker": {"PythonSDK": {"Modules": {"TelemetryOptOut": True}}}},
        )
        estimator = PyTorch(
            **case,
            role="arn:aws:iam::123456789012:role/oracle",
            sagemaker_session=session,
            output_path="s3://oracle-bucket/output",
            code_location="s3://oracle-bucket/code",
        )
        answers.append(training_config(estimator, inputs=None, job_name=job_name)["HyperParameters"])
    return answers


if __name__ == "__main__":
    answer_to, sys.stdout = sys.stdout, sys.stderr  # the SDK logs to stdout; only the answer goes there
    mode, payload = sys.argv[1], json.load(sys.stdin)
    result = images(payload, "--sdk3" in sys.argv) if mode == "images" else hyperparameters(payload)
    json.dump(result, answer_to)
