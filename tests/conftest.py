"""Test-wide settings. Set before anything imports aws_cdk (jsii reads them at start-up)."""

import os
import sys
from pathlib import Path

import stacks  # noqa: F401  (points jsii at the venv's Node.js before a test module imports aws_cdk)

os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")
# As an activated venv would: its node, npm and npx (Node.js 24) for the tests that run the CDK CLI.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"

import pytest

from tests.synth import ALL_OPTIONS, TRACKING_SERVER_ARN, Synthesized, synthesize


@pytest.fixture(scope="session")
def default_stack() -> Synthesized:
    return synthesize()


@pytest.fixture(scope="session")
def all_options_stack() -> Synthesized:
    return synthesize(**ALL_OPTIONS)


@pytest.fixture(scope="session")
def queue_stack() -> Synthesized:
    """A stack with the team queue: two teams of unequal weight, one with a monthly budget, a non-default
    cap and time limit."""
    return synthesize(
        queue=True,
        queue_shares="research:1,prod:0.5",
        queue_budgets="research:500",
        queue_max_instances=16,
        queue_capacity_wait_seconds=7200,
    )


@pytest.fixture(scope="session")
def tracking_stack() -> Synthesized:
    """A stack with a tracking server: the only one with its artifact store's lookup and the S3 endpoint's PutObject."""
    return synthesize(mlflow_tracking_server_arn=TRACKING_SERVER_ARN)
