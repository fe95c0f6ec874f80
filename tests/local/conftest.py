"""Fixtures shared by the twin's tests."""

from __future__ import annotations

import pytest

from trainstack_local.emulator import training_files
from trainstack_local.pipeline import upload_sample_data
from trainstack_local.serve import tracked_local_aws


@pytest.fixture(scope="module")
def tracked_twin(default_stack, tmp_path_factory):
    """The emulated stack with the twin's MLflow tracking server, as `local serve` and `local run` run
    them, and the sample data uploaded: (stack, twin, tracking server)."""
    workdir = tmp_path_factory.mktemp("tracked")
    with tracked_local_aws(default_stack.json, workdir, files=training_files(workdir)) as (stack, twin, tracking):
        upload_sample_data(stack)
        yield stack, twin, tracking
