"""The entry point runs under the real SageMaker training toolkit, from the tar.gz we ship."""

from __future__ import annotations

import pytest
import torch

from stacks.tarball import write_source_tarball
from tests.training.launch import ROOT
from trainstack_local import container

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_toolkit_launches_two_torchrun_processes_from_the_shipped_source_tarball(tmp_path):
    source = write_source_tarball(ROOT / "training", tmp_path / "sourcedir.tar.gz")
    hyperparameters = container.encode_hyperparameters(
        {
            # what the request builder sends for distribution={"torch_distributed": {"enabled": True}}
            "sagemaker_program": "train.py",
            "sagemaker_submit_directory": str(source),
            "sagemaker_torch_distributed_enabled": True,
            "sagemaker_distribution_instance_groups": ["homogeneousCluster"],
            "sagemaker_mpi_num_of_processes_per_host": 2,
            "sagemaker_region": "us-east-1",
            "sagemaker_container_log_level": 20,
            "sagemaker_job_name": "trainstack-toolkit-test",
            # the job's own
            "model": "gpt-tiny",
            "max_steps": 6,
            "log_every": 2,
            "checkpoint_dir": str(tmp_path / "checkpoints"),
        }
    )
    base = container.prepare(tmp_path / "opt" / "ml", hyperparameters, {"train": ROOT / "training" / "sample_data" / "tokens"})
    result = container.run(base, {"OMP_NUM_THREADS": "1"}, timeout=240)
    assert result.succeeded, (result.stdout + result.stderr)[-4000:]
    assert "torchrun" in result.stdout + result.stderr
    assert "step=6 loss=" in result.stdout + result.stderr
    state = torch.load(result.model_dir / "model.pt", weights_only=True)
    assert "wte.weight" in state
    assert (result.model_dir / "config.json").exists()
    assert (tmp_path / "checkpoints" / "step_00000006" / "manifest.json").exists()


@pytest.mark.timeout(300)
def test_a_failing_job_reports_our_reason_through_the_toolkit(tmp_path):
    source = write_source_tarball(ROOT / "training", tmp_path / "sourcedir.tar.gz")
    hyperparameters = container.encode_hyperparameters(
        {"sagemaker_program": "train.py", "sagemaker_submit_directory": str(source), "sagemaker_job_name": "t", "max_step": 3}
    )
    base = container.prepare(tmp_path / "opt" / "ml", hyperparameters, {})
    result = container.run(base, timeout=120)
    assert result.returncode != 0
    assert "unknown hyperparameter 'max_step'" in result.failure_reason
