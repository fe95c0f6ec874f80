"""The entry point runs under the real SageMaker training toolkit, from the tar.gz we ship."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.training.launch import ROOT, losses
from trainstack.source_archive import write_source_tarball
from trainstack_local import container

pytestmark = pytest.mark.slow


def _encoded(values: dict[str, Any]) -> dict[str, str]:
    """Hyperparameters as the request builder sends them: every value a string holding JSON."""
    return {key: json.dumps(value) for key, value in values.items()}


@pytest.mark.timeout(300)
def test_toolkit_launches_two_torchrun_processes_from_the_shipped_source_tarball(tmp_path):
    source = write_source_tarball(ROOT / "training", tmp_path / "sourcedir.tar.gz")
    hyperparameters = _encoded(
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
    hyperparameters = _encoded(
        {"sagemaker_program": "train.py", "sagemaker_submit_directory": str(source), "sagemaker_job_name": "t", "max_step": 3}
    )
    base = container.prepare(tmp_path / "opt" / "ml", hyperparameters, {})
    result = container.run(base, timeout=120)
    assert result.returncode != 0
    assert "unknown hyperparameter 'max_step'" in result.failure_reason


@pytest.mark.timeout(300)
def test_the_toolkit_runs_with_none_of_this_processs_credentials(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIADEVELOPER")  # a developer's own, which no job of a test may use
    script = "import json, os; open(os.environ['SM_MODEL_DIR'] + '/environment.json', 'w').write(json.dumps(dict(os.environ)))"
    source = tmp_path / "source.tar.gz"
    with tarfile.open(source, "w:gz") as archive:
        (tmp_path / "environment.py").write_text(script + "\n")
        archive.add(tmp_path / "environment.py", arcname="environment.py")
    hyperparameters = _encoded(
        {"sagemaker_program": "environment.py", "sagemaker_submit_directory": str(source), "sagemaker_job_name": "t"}
    )
    result = container.run(container.prepare(tmp_path / "opt" / "ml", hyperparameters, {}), timeout=120)
    assert result.succeeded, (result.stdout + result.stderr)[-3000:]
    given = json.loads((result.model_dir / "environment.json").read_text())
    assert "AWS_ACCESS_KEY_ID" not in given
    assert given["SM_MODEL_DIR"] == str(result.model_dir)  # the toolkit's own variables, from the tree it was given


MPI_PACKAGES = "apt-get install -y --no-install-recommends openmpi-bin openssh-server"
OPT_ML = Path("/opt/ml")


def _require_mpi_launcher_tools() -> None:
    """What the framework images have for the toolkit's MPI launcher: Open MPI, sshd (its
    MasterRunner starts /usr/sbin/sshd) and mpi4py (it runs `python -m mpi4py train.py`). Installed
    through `make system-packages` when missing; a machine that cannot have them fails, never skips."""
    if not (shutil.which("mpirun") and Path("/usr/sbin/sshd").exists()):
        subprocess.run(["make", "--no-print-directory", "system-packages"], cwd=ROOT, check=False)
    if not (shutil.which("mpirun") and Path("/usr/sbin/sshd").exists()):
        pytest.fail(f"the MPI launcher test needs Open MPI and sshd: run `sudo apt-get update && sudo {MPI_PACKAGES}`")
    if importlib.util.find_spec("mpi4py") is None:
        pytest.fail(f"the MPI launcher test needs mpi4py: run `{sys.executable} -m pip install -e '.[train]'`")
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"):
        pytest.fail("the MPI launcher test runs the toolkit as a container's PID 1 (unshare, ip): run it as root")


def _run_in_container(base: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """The toolkit's `train` as PID 1 of its own PID, mount and network namespaces, with `base`
    mounted at /opt/ml: the sshd it starts and the ranks' rendezvous port stay inside and end with
    it, and the toolkit's host-name library (LD_PRELOAD into every rank) finds
    /opt/ml/input/config/resourceconfig.json where it looks for it."""
    OPT_ML.mkdir(parents=True, exist_ok=True)  # only the mount point; each namespace mounts its own tree
    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SM_", "SAGEMAKER_"))}
    env.update(
        SAGEMAKER_TRAINING_MODULE=container.PYTORCH_TOOLKIT_MODULE,
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",  # the toolkit calls mpirun and python by name
        OMP_NUM_THREADS="1",
    )
    setup = f'ip link set lo up && mount --bind "$0" {OPT_ML} && exec "$@"'
    command = [
        "unshare",
        "--fork",
        "--pid",
        "--mount-proc",
        "--net",
        "--kill-child",
        "sh",
        "-c",
        setup,
        str(base),
        str(bin_dir / "train"),
    ]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.timeout(300)
def test_the_mpi_launcher_trains_two_ranks_exactly_like_torchrun(tmp_path, reference_losses):
    _require_mpi_launcher_tools()
    source = write_source_tarball(ROOT / "training", tmp_path / "sourcedir.tar.gz")
    hyperparameters = _encoded(
        {
            # what the request builder sends for distribution={"mpi": {"enabled": True, "processes_per_host": 2}}
            "sagemaker_program": "train.py",
            "sagemaker_submit_directory": str(source),
            "sagemaker_mpi_enabled": True,
            "sagemaker_mpi_num_of_processes_per_host": 2,
            "sagemaker_mpi_custom_mpi_options": "",
            "sagemaker_region": "us-east-1",
            "sagemaker_container_log_level": 20,
            "sagemaker_job_name": "trainstack-mpi-test",
            # the reference run's own (tests/training/conftest.py)
            "model": "gpt-tiny",
            "max_steps": len(reference_losses),
            "log_every": 1,
            "seed": 0,
            "lr": 1e-3,
            "warmup_steps": 2,
            "micro_batch_size": 4,
            "min_lr": 1e-3,  # STEADY_LR
        }
    )
    base = container.prepare(tmp_path / "opt" / "ml", hyperparameters, {"train": ROOT / "training" / "sample_data" / "tokens"})
    result = _run_in_container(base, timeout=240)  # the toolkit sleeps 30 s after mpirun returns
    output = result.stdout + result.stderr
    assert result.returncode == 0 and (base / "output" / "success").exists(), output[-4000:]
    assert "mpirun --host localhost:2 -np 2" in output and "-m mpi4py train.py" in output
    rank0_stdout = "\n".join(line.partition("<stdout>:")[2] for line in output.splitlines() if "mpirank:0," in line)
    trajectory = losses(rank0_stdout)
    assert sorted(trajectory) == sorted(reference_losses)
    assert [trajectory[s] for s in sorted(trajectory)] == pytest.approx(
        [reference_losses[s] for s in sorted(trajectory)], abs=2e-4
    )
    manifest = (base / "checkpoints" / f"step_{len(reference_losses):08d}" / "manifest.json").read_text()
    assert "__0_0.distcp" in manifest and "__1_0.distcp" in manifest  # two ranks of one process group, not two jobs
    assert (base / "model" / "model.pt").exists()
