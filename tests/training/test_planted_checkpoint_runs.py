"""The resume under torchrun, on this venv's torch and on the images' own (the oldest and the newest
Validate admits for ddp, whose DCP and torch.load differ: tensors unpickled without weights_only up
to 2.4, DCP's non-tensor values and metadata unpickled unrestricted in all): a ZeRO-1 job resumed from
its checkpoint continues exactly where it stopped, its optimizer state loaded weights-only; and a
pickle planted in that checkpoint (the ZeRO-1 optimizer state, DCP's metadata, a non-tensor value or
a tensor in a .distcp file) stops the resume on every rank, with one line in the failure file naming
the file, and the code it carries never runs. On two hosts, a file planted in one host's copy stops
both.

The first run of an image's runtime builds it (see test_image_runtimes.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.training.launch import BIN, STEADY_LR, TIMEOUT, job_args, losses, restore_checkpoints, run, run_hosts, trajectory
from tests.training.planted import plant
from tests.training.test_image_runtimes import bin_dir, cases
from trainstack_local import runtimes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(runtimes.INSTALL_TIMEOUT + 4 * TIMEOUT)]

PLANT = Path(__file__).resolve().parent / "planted.py"
ZERO1 = ("--strategy", "ddp", "--zero1", "true", "--checkpoint_every", "3", *STEADY_LR)
STOPPED, STEPS = 6, 10  # the first run ends at step 6 (checkpoints at 3 and 6); the resume goes on to 10
RUNTIMES = [pytest.param(None, id="venv"), *(pytest.param(case.values, id=case.id) for case in cases("ddp"))]
OLDEST = RUNTIMES[:2]  # this venv's torch and the oldest image's, whose loading differs most (2.2: tensors too)
PLANTS = ("zero1", "metadata", "bytes", "tensor")
# Every plant on this venv and the oldest image; on the newest, the one every torch unpickles unrestricted
# (DCP's metadata): the suite's time goes where the versions differ.
PLANTED = [pytest.param(image.values[0], what, id=f"{image.id}-{what}") for image in OLDEST for what in PLANTS] + [
    pytest.param(RUNTIMES[-1].values[0], "metadata", id=f"{RUNTIMES[-1].id}-metadata")
]


def _bin(image: tuple | None) -> Path:
    return BIN if image is None else bin_dir(*image)


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """Per runtime, a ZeRO-1 job that ran to step 6 and checkpointed (kept pristine: tests copy it)."""
    found: dict[tuple | None, Path] = {}

    def job(image: tuple | None) -> Path:
        if image not in found:
            directory = tmp_path_factory.mktemp("stopped")
            trajectory(run(job_args(directory, *ZERO1, steps=STOPPED), bin_dir=_bin(image)))
            assert (directory / "checkpoints" / f"step_{STOPPED:08d}" / "zero1_optimizer.pt").is_file()
            found[image] = directory
        return found[image]

    return job


def _copy(source: Path, tmp_path: Path) -> Path:
    shutil.copytree(source, tmp_path / "job")
    return tmp_path / "job"


@pytest.mark.parametrize("image", OLDEST)
def test_a_zero1_job_resumed_from_its_checkpoint_continues_exactly(tmp_path, stopped, image):
    runtime = _bin(image)
    job = _copy(stopped(image), tmp_path)
    resumed = run(job_args(job, *ZERO1, steps=STEPS), bin_dir=runtime)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(losses(resumed.stdout)) == list(range(STOPPED + 1, STEPS + 1))
    uninterrupted = trajectory(run(job_args(tmp_path / "uninterrupted", *ZERO1, steps=STEPS), bin_dir=runtime))
    assert [losses(resumed.stdout)[step] for step in range(STOPPED + 1, STEPS + 1)] == pytest.approx(
        uninterrupted[STOPPED:], abs=2e-4
    )
    expected = torch.load(tmp_path / "uninterrupted" / "model" / "model.pt", weights_only=True)
    actual = torch.load(job / "model" / "model.pt", weights_only=True)
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize(("image", "what"), PLANTED)
def test_a_pickle_planted_in_the_checkpoint_stops_the_resume_and_never_runs(tmp_path, stopped, image, what):
    runtime = _bin(image)
    job = _copy(stopped(image), tmp_path)
    step_dir, marker = job / "checkpoints" / f"step_{STOPPED:08d}", tmp_path / "marker"
    python = sys.executable if image is None else str(runtime / "python")  # the torch that wrote it rewrites it
    planted = subprocess.run([python, str(PLANT), what, str(step_dir), str(marker)], capture_output=True, text=True, check=True)
    file = step_dir / planted.stdout.strip()
    resumed = run(job_args(job, *ZERO1, steps=STEPS), bin_dir=runtime)
    assert not marker.exists(), "the planted pickle ran"
    assert resumed.returncode == 1, resumed.stderr[-3000:]
    assert not losses(resumed.stdout)  # no step trained
    reason = (job / "output" / "failure").read_text()
    assert re.fullmatch(rf"rank \d: UnsafeCheckpointError: {re.escape(str(file))}: refused, not unpickled: .*exec.*", reason), (
        reason
    )


def test_a_pickle_planted_in_one_hosts_copy_stops_every_host(tmp_path):
    # Each host resumes from its own copy of the S3 prefix; the host whose copy is clean must not go on
    # into DCP's collectives alone (and fail later, as a transport error, naming nothing).
    first, second = tmp_path / "first", tmp_path / "second"
    hosts = (0, 1)
    args = [job_args(first / f"host{n}", *STEADY_LR, "--checkpoint_every", "2", steps=4) for n in hosts]
    for node, result in enumerate(run_hosts(args, nproc=1)):
        assert result.returncode == 0, f"host {node}: {result.stderr[-3000:]}"
    restore_checkpoints([first / f"host{n}" / "checkpoints" for n in hosts], [second / f"host{n}" / "checkpoints" for n in hosts])
    marker = tmp_path / "marker"
    planted = (
        second
        / "host1"
        / "checkpoints"
        / "step_00000004"
        / plant("metadata", second / "host1" / "checkpoints" / "step_00000004", marker)
    )
    results = run_hosts([job_args(second / f"host{n}", *STEADY_LR, steps=6) for n in hosts], nproc=1)
    assert not marker.exists(), "the planted pickle ran"
    for node, result in enumerate(results):
        assert result.returncode == 1, f"host {node}: {result.stderr[-3000:]}"
        reason = (second / f"host{node}" / "output" / "failure").read_text()
        assert reason.startswith(
            f"rank {node}: UnsafeCheckpointError: {planted}: refused, not unpickled: it names builtins.exec"
        ), reason
