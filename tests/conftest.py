"""Test-wide settings. Set before anything imports aws_cdk (jsii reads it at start-up)."""

import os

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")

import pytest

from tests.synth import ALL_OPTIONS, Synthesized, synthesize


@pytest.fixture(scope="session")
def default_stack() -> Synthesized:
    return synthesize()


@pytest.fixture(scope="session")
def all_options_stack() -> Synthesized:
    return synthesize(**ALL_OPTIONS)
