"""The built-in script on the images' own software: each strategy under real torchrun on the oldest
and the newest image Validate accepts for it, in that image's runtime (its torch and Python, built
by the twin's runtimes module). The versions are not typed here: they are what Validate's own rule
(`runnable_versions`, through tools/image_runtimes.py, which `make test` runs first to build
them) admits, so a change to the script's requirements or to the facts moves them.

The first run of a runtime builds it from the package registries (several GB, minutes); later runs
reuse the cache (~/.cache/trainstack/runtimes, or $TRAINSTACK_RUNTIME_CACHE).
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from tests.training.launch import (
    STEADY_LR,
    TIMEOUT,
    environment,
    job_args,
    losses,
    newest_complete_checkpoint,
    run,
    sigkill_at_step,
    trajectory,
)
from tools.image_runtimes import oldest_and_newest
from trainstack import facts
from trainstack.facts import ImageKind
from trainstack_local import runtimes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(runtimes.INSTALL_TIMEOUT + 4 * TIMEOUT)]

STANDINS = Path(__file__).resolve().parent / "standins"
RUNTIME_LINE = re.compile(r"runtime torch (\S+), Python (\S+)")


def cases(strategy: str) -> list:
    return [pytest.param(kind, version, id=f"{kind}-{version}") for kind, version in oldest_and_newest(strategy)]


def bin_dir(kind: ImageKind, version: str) -> Path:
    return runtimes.ensure(facts.image_version(kind, version).runtime).bin


def ran_on(result, kind: ImageKind, version: str) -> None:
    """The job logged the image's torch and Python, so it ran on the image's software."""
    image = facts.image_version(kind, version).runtime
    torch_version, python = RUNTIME_LINE.search(result.stderr).groups()
    assert torch_version.split("+")[0] == image.torch
    assert python.rsplit(".", 1)[0] == image.python


# Every run here shares these settings, so one uninterrupted run per strategy and runtime is both the
# trajectory the other strategies are compared with and the weights a SIGKILLed run must resume to
# (each torchrun start costs ~10 s of imports on 2 cores).
STEPS = 10
SETTINGS = ("--checkpoint_every", "4", *STEADY_LR)


@dataclass(frozen=True)
class Reference:
    trajectory: list[float]
    model_dir: Path


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted 2-rank run of a strategy on one image's runtime, run once and shared; each run
    checked to have logged the image's torch and Python."""
    found: dict[tuple[str, ImageKind, str], Reference] = {}

    def uninterrupted(strategy: str, kind: ImageKind, version: str) -> Reference:
        if (strategy, kind, version) not in found:
            directory = tmp_path_factory.mktemp(f"{strategy}-{version}")
            result = run(job_args(directory, "--strategy", strategy, *SETTINGS, steps=STEPS), bin_dir=bin_dir(kind, version))
            ran_on(result, kind, version)
            found[strategy, kind, version] = Reference(trajectory(result), directory / "model")
        return found[strategy, kind, version]

    return uninterrupted


def weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(model_dir / "model.pt", weights_only=True)


def test_the_strategies_are_tested_on_the_images_validate_admits_at_each_end():
    # the script's requirements as the facts give them today; a change shows up here first
    assert oldest_and_newest("ddp")[0] == ("dlc", "2.2.0")
    assert oldest_and_newest("fsdp")[0] == ("dlc", "2.7.1")
    assert oldest_and_newest("smddp") == [("dlc", "2.2.0")]
    assert oldest_and_newest("smp")[0] == ("smp", "2.2.0")


@pytest.mark.parametrize(("kind", "version"), cases("ddp"))
def test_ddp_on_two_ranks_matches_one_rank_on_the_image_runtime(tmp_path, kind, version, reference):
    # one process under torchrun, as SageMaker launches a one-GPU job, saving a checkpoint on the way
    # (torch 2.2's checkpoints need a process group even then)
    arguments = job_args(tmp_path, "--strategy", "ddp", "--grad_accum", "2", *SETTINGS, steps=STEPS)
    one = run(arguments, nproc=1, bin_dir=bin_dir(kind, version))
    assert reference("ddp", kind, version).trajectory == pytest.approx(trajectory(one), abs=2e-4)
    assert (tmp_path / "checkpoints" / "step_00000008").is_dir()


@pytest.mark.parametrize(("kind", "version"), cases("ddp"))
def test_zero1_matches_ddp_on_the_image_runtime(tmp_path, kind, version, reference):
    zero1 = run(
        job_args(tmp_path, "--strategy", "ddp", "--zero1", "true", *SETTINGS, steps=STEPS), bin_dir=bin_dir(kind, version)
    )
    assert trajectory(zero1) == pytest.approx(reference("ddp", kind, version).trajectory, abs=2e-4)


@pytest.mark.parametrize(("kind", "version"), cases("fsdp"))
def test_fsdp2_matches_ddp_on_the_image_runtime(kind, version, reference):
    fsdp = reference("fsdp", kind, version).trajectory
    assert fsdp == pytest.approx(reference("ddp", kind, version).trajectory, abs=2e-4)


@pytest.mark.parametrize(
    ("strategy", "kind", "version"),
    [
        pytest.param(strategy, *case.values, id=f"{strategy}-{case.id}")
        for strategy in ("ddp", "fsdp")
        for case in cases(strategy)
    ],
)
def test_a_sigkilled_run_resumes_to_the_uninterrupted_weights_on_the_image_runtime(tmp_path, strategy, kind, version, reference):
    runtime = bin_dir(kind, version)
    args = job_args(tmp_path / "interrupted", "--strategy", strategy, *SETTINGS, steps=STEPS)
    sigkill_at_step(args, 5, bin_dir=runtime, after_checkpoint=4, hold_at=9)
    complete = newest_complete_checkpoint(tmp_path / "interrupted" / "checkpoints")
    resumed = run(args, bin_dir=runtime)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert complete >= 4 and min(losses(resumed.stdout)) == complete + 1  # continued after the newest complete checkpoint
    expected, actual = weights(reference(strategy, kind, version).model_dir), weights(tmp_path / "interrupted" / "model")
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=1e-6, msg=name)


@pytest.mark.parametrize(("kind", "version"), cases("smddp"))
def test_smddp_imports_the_library_before_its_backend_on_the_image_runtime(tmp_path, kind, version):
    log = tmp_path / "calls.jsonl"
    runtime = bin_dir(kind, version)
    env = environment(runtime, PYTHONPATH=f"{STANDINS / 'smddp'}{os.pathsep}{STANDINS}", TRAINSTACK_STANDIN_LOG=str(log))
    result = run(job_args(tmp_path, "--strategy", "smddp", steps=3), env=env, bin_dir=runtime)
    assert result.returncode == 0, result.stderr[-3000:]
    ran_on(result, kind, version)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    for rank in ("0", "1"):
        assert [e["event"] for e in events if e["rank"] == rank] == ["import torch_smddp", "init_process_group"]


@pytest.mark.parametrize(("kind", "version"), cases("smp"))
def test_smp_initializes_after_the_process_group_and_reaches_the_fsdp1_wrap_on_the_image_runtime(tmp_path, kind, version):
    log = tmp_path / "calls.jsonl"
    runtime = bin_dir(kind, version)
    env = environment(runtime, PYTHONPATH=f"{STANDINS / 'smp'}{os.pathsep}{STANDINS}", TRAINSTACK_STANDIN_LOG=str(log))
    result = run(job_args(tmp_path, "--strategy", "smp", "--mp_parameters", "{}", steps=3), env=env, bin_dir=runtime)
    ran_on(result, kind, version)
    # Everything up to the FSDP1 wrap ran on the image's torch; FSDP1 itself needs a GPU, and each
    # torch says so in its own words ("Found no NVIDIA driver", "FSDP needs a non-CPU accelerator").
    assert result.returncode != 0
    assert "torch/distributed/fsdp/fully_sharded_data_parallel.py" in result.stderr, result.stderr[-3000:]
    assert re.search(r"NVIDIA|CUDA|accelerator", (tmp_path / "output" / "failure").read_text())
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert {e["event"] for e in events} == {"tsm.init"}
    assert all(e["process_group_initialized"] for e in events)


def test_without_the_tensorboard_package_the_run_trains_and_says_so_once(tmp_path):
    # SMP's images: no source says they carry tensorboard, so their runtime has none
    (kind, version) = oldest_and_newest("smp")[0]
    assert facts.image_version(kind, version).runtime.has("tensorboard") is None
    runtime = bin_dir(kind, version)
    result = run(job_args(tmp_path, "--strategy", "ddp", "--tensorboard_dir", str(tmp_path / "tb"), steps=3), bin_dir=runtime)
    assert trajectory(result)[-1] > 0
    assert result.stderr.count("no TensorBoard files: this image lacks the tensorboard package") == 1
    assert not (tmp_path / "tb").exists()
