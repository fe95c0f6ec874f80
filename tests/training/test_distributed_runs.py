"""Real torchrun process groups on CPU (gloo): strategies agree with each other, and a job
survives SIGKILL and SIGTERM the way SageMaker spot interruptions and stops deliver them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
import torch

from tests.training.launch import (
    ROOT,
    STEADY_LR,
    TIMEOUT,
    command,
    environment,
    job_args,
    losses,
    newest_complete_checkpoint,
    run,
    sigkill_at_step,
    trajectory,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TIMEOUT + 60)]


@pytest.fixture(scope="module")
def ddp_two_ranks(tmp_path_factory) -> list[float]:
    return trajectory(run(job_args(tmp_path_factory.mktemp("ddp2"), "--strategy", "ddp")))


def test_ddp_on_two_ranks_matches_one_rank_at_the_same_global_batch(tmp_path, ddp_two_ranks):
    one_rank = trajectory(run(job_args(tmp_path, "--strategy", "ddp", "--grad_accum", "2"), nproc=0))
    assert ddp_two_ranks == pytest.approx(one_rank, abs=2e-4)
    assert ddp_two_ranks[-1] < ddp_two_ranks[0] - 0.3  # and it learns


def test_fsdp2_matches_ddp(tmp_path, ddp_two_ranks):
    fsdp = trajectory(run(job_args(tmp_path, "--strategy", "fsdp")))
    assert fsdp == pytest.approx(ddp_two_ranks, abs=2e-4)


def test_fsdp2_reducing_every_micro_step_matches_ddp(tmp_path, ddp_two_ranks):
    # ddp_two_ranks' global batch in two micro-batches per rank, each reduce-scattered as it is done
    arguments = ("--strategy", "fsdp", "--grad_accum", "2", "--micro_batch_size", "2", "--reduce_every_micro_step", "true")
    reducing = trajectory(run(job_args(tmp_path, *arguments)))
    assert reducing == pytest.approx(ddp_two_ranks, abs=2e-4)


def test_zero1_matches_ddp(tmp_path, ddp_two_ranks):
    zero1 = trajectory(run(job_args(tmp_path, "--strategy", "ddp", "--zero1", "true")))
    assert zero1 == pytest.approx(ddp_two_ranks, abs=2e-4)


def test_fsdp2_bf16_with_activation_checkpointing_trains(tmp_path, ddp_two_ranks):
    bf16 = trajectory(run(job_args(tmp_path, "--strategy", "fsdp", "--precision", "bf16", "--activation_checkpointing", "true")))
    assert bf16 == pytest.approx(ddp_two_ranks, abs=0.05)


def _weights(model_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(model_dir / "model.pt", weights_only=True)


def test_a_sigkilled_run_restarted_with_the_same_command_ends_with_the_same_weights(tmp_path):
    steps = ("--checkpoint_every", "5")
    reference = run(job_args(tmp_path / "reference", *steps, steps=20))
    assert reference.returncode == 0, reference.stderr[-3000:]

    interrupted = tmp_path / "interrupted"
    args = job_args(interrupted, *steps, steps=20)
    sigkill_at_step(args, 7, after_checkpoint=5, hold_at=11)
    assert not (interrupted / "model" / "model.pt").exists()
    complete = newest_complete_checkpoint(interrupted / "checkpoints")  # 5, or 10 if its write was done by then
    assert complete in (5, 10)

    resumed = run(args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr and f"step_{complete:08d}" in resumed.stderr
    assert min(losses(resumed.stdout)) == complete + 1  # continues after the newest complete checkpoint
    expected, actual = _weights(tmp_path / "reference" / "model"), _weights(interrupted / "model")
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=1e-6, msg=name)


def _run_until_step_then_signal(args: list[str], nproc: int, step: int, sig: signal.Signals) -> tuple[int, str]:
    process = subprocess.Popen(
        command(args, nproc), env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    for line in process.stdout:
        if line.startswith(f"step={step} "):
            os.killpg(process.pid, sig)
            break
    _, stderr = process.communicate(timeout=120)
    return process.returncode, stderr


def test_sigterm_saves_a_complete_checkpoint_and_exits_cleanly(tmp_path):
    args = job_args(tmp_path, "--checkpoint_every", "1000", steps=100_000)
    returncode, stderr = _run_until_step_then_signal(args, nproc=0, step=5, sig=signal.SIGTERM)
    assert returncode == 0, stderr[-3000:]
    assert "stop requested (SIGTERM)" in stderr
    (checkpoint,) = (tmp_path / "checkpoints").iterdir()
    assert int(checkpoint.name.removeprefix("step_")) >= 5
    assert (checkpoint / "manifest.json").exists()
    assert not (tmp_path / "output" / "failure").exists()


def test_sigterm_to_every_rank_of_a_torchrun_job_leaves_one_complete_checkpoint(tmp_path):
    args = job_args(tmp_path, "--checkpoint_every", "1000", steps=100_000)
    _, stderr = _run_until_step_then_signal(args, nproc=2, step=5, sig=signal.SIGTERM)
    assert stderr.count("stop requested (SIGTERM)") == 1  # rank 0 reports; every rank stopped at the same step
    checkpoints = list((tmp_path / "checkpoints").iterdir())
    assert len(checkpoints) == 1
    manifest = json.loads((checkpoints[0] / "manifest.json").read_text())
    assert {"__0_0.distcp", "__1_0.distcp"} <= set(manifest["files"])


# The same global batch of 8 either way: two ranks, or one rank accumulating two micro-batches.
TWO_RANKS, ONE_RANK = (2, ()), (0, ("--grad_accum", "2"))


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        (TWO_RANKS, ONE_RANK, "data-parallel degree changed from 2 to 1: continuing at example 32"),
        (ONE_RANK, TWO_RANKS, "data-parallel degree changed from 1 to 2: continuing at example 32"),
    ],
    ids=["2-to-1", "1-to-2"],
)
def test_resuming_with_another_data_parallel_degree_continues_at_the_exact_example(
    tmp_path, reference_losses, before, after, message
):
    (nproc_before, extra_before), (nproc_after, extra_after) = before, after
    first = run(job_args(tmp_path, *STEADY_LR, *extra_before, "--checkpoint_every", "4", steps=4), nproc=nproc_before)
    assert first.returncode == 0, first.stderr[-3000:]
    second = run(job_args(tmp_path, *STEADY_LR, *extra_after, "--checkpoint_every", "4", steps=8), nproc=nproc_after)
    assert second.returncode == 0, second.stderr[-3000:]
    assert message in second.stderr
    resumed = losses(second.stdout)
    assert sorted(resumed) == [5, 6, 7, 8]
    assert [resumed[step] for step in resumed] == pytest.approx([reference_losses[step] for step in resumed], abs=2e-4)


def test_a_failure_writes_its_reason_for_sagemaker_and_exits_nonzero(tmp_path):
    result = run([*job_args(tmp_path), "--data_dir", str(tmp_path / "nowhere")], nproc=0)
    assert result.returncode == 1
    reason = (tmp_path / "output" / "failure").read_text()
    assert "DataError" in reason and "no token shards" in reason and str(tmp_path / "nowhere") in reason


def test_a_bad_hyperparameter_fails_before_any_work(tmp_path):
    result = run([*job_args(tmp_path), "--max_step", "3"], nproc=0)
    assert result.returncode == 1
    assert "unknown hyperparameter 'max_step'" in (tmp_path / "output" / "failure").read_text()
    assert not (tmp_path / "checkpoints").exists()


STANDINS = ROOT / "tests" / "training" / "standins"


def _events(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_smddp_without_the_library_fails_with_the_image_to_use(tmp_path):
    result = run([*job_args(tmp_path), "--strategy", "smddp"], nproc=0)
    assert result.returncode == 1
    reason = (tmp_path / "output" / "failure").read_text()
    assert "MissingSageMakerLibraryError" in reason and "pytorch-training" in reason


def test_smddp_imports_the_library_before_initializing_the_smddp_backend(tmp_path):
    log = tmp_path / "calls.jsonl"
    env = environment(PYTHONPATH=f"{STANDINS / 'smddp'}{os.pathsep}{STANDINS}", TRAINSTACK_STANDIN_LOG=str(log))
    result = run(job_args(tmp_path, "--strategy", "smddp", steps=3), env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank in ("0", "1"):
        calls = [e for e in _events(log) if e["rank"] == rank]
        assert [e["event"] for e in calls] == ["import torch_smddp", "init_process_group"]
        assert calls[0]["process_group_initialized"] is False
        assert calls[1]["backend"] == "smddp"


def test_smp_without_the_library_fails_with_the_image_to_use(tmp_path):
    result = run([*job_args(tmp_path), "--strategy", "smp"], nproc=0)
    assert result.returncode == 1
    assert "smdistributed-modelparallel" in (tmp_path / "output" / "failure").read_text()


def test_smp_initializes_after_the_process_group_then_transforms_the_hugging_face_model_before_sharding(tmp_path):
    log = tmp_path / "calls.jsonl"
    parameters = json.dumps({"tensor_parallel_degree": 2, "hybrid_shard_degree": 0})
    env = environment(
        PYTHONPATH=f"{STANDINS / 'smp'}{os.pathsep}{STANDINS}", TRAINSTACK_STANDIN_LOG=str(log), SM_HP_MP_PARAMETERS=parameters
    )
    arguments = ("--strategy", "smp", "--model", "hf:hf_configs/llama-tiny", "--mp_parameters", parameters)
    result = run(job_args(tmp_path, *arguments, steps=3), env=env)
    # Everything up to the FSDP1 wrap ran; FSDP1 itself needs a GPU, which this machine lacks.
    assert result.returncode != 0
    failure = (tmp_path / "output" / "failure").read_text()
    assert "FSDP needs a non-CPU accelerator device" in failure
    # The rank that reached the wrap called both, in order; torchrun may end its peer before it does.
    failed_rank = failure.split(":", 1)[0].removeprefix("rank ")
    for rank in ("0", "1"):
        calls = [e for e in _events(log) if e["rank"] == rank]
        expected = ["tsm.init", "tsm.transform"]
        assert [e["event"] for e in calls] == (expected if rank == failed_rank else expected[: len(calls)])
        for init in calls[:1]:
            assert init["process_group_initialized"] is True
            assert init["mp_parameters"]["tensor_parallel_degree"] == 2
        # the transformers model itself, as SMP v2 requires
        assert all(e["model"] == "LlamaForCausalLM" for e in calls if e["event"] == "tsm.transform")


def test_smp_degrees_that_do_not_divide_the_world_are_refused(tmp_path):
    env = environment(
        PYTHONPATH=f"{STANDINS / 'smp'}{os.pathsep}{STANDINS}", TRAINSTACK_STANDIN_LOG=str(tmp_path / "calls.jsonl")
    )
    result = run([*job_args(tmp_path), "--strategy", "smp", "--mp_parameters", '{"hybrid_shard_degree": 3}'], env=env)
    assert result.returncode != 0
    assert "hybrid_shard_degree = 3 does not divide the world size 2" in (tmp_path / "output" / "failure").read_text()


def test_compiled_blocks_and_fused_adamw_train_as_the_plain_run_does(tmp_path, ddp_two_ranks):
    # The learning rate of steps 1 and 2 does not depend on max_steps (warm-up), so the losses of the
    # first three steps are the 12-step plain run's.
    fast = run(job_args(tmp_path, "--compile", "true", "--fused_adamw", "true", steps=3))
    assert fast.returncode == 0, fast.stderr[-3000:]
    got = losses(fast.stdout)
    assert sorted(got) == [1, 2, 3]
    assert [got[step] for step in sorted(got)] == pytest.approx(ddp_two_ranks[:3], rel=1e-4)


def test_a_checkpoint_interval_saves_by_wall_clock_on_every_rank_at_the_same_step(tmp_path):
    # 40 steps of at least ~15 ms each on 2 cores, a checkpoint due every 0.1 s: some fall between the
    # steps' own checkpoints (none here but the last), whatever this machine's speed
    args = job_args(tmp_path, "--checkpoint_every", "1000", "--checkpoint_interval", "0.1", "--keep_checkpoints", "100", steps=40)
    result = run(args)
    assert result.returncode == 0, result.stderr[-3000:]
    saved = [int(line.split("=")[1]) for line in result.stdout.splitlines() if line.startswith("checkpoint step=")]
    assert saved[-1] == 40 and len(saved) >= 2 and saved == sorted(set(saved))
    for step in saved:  # complete: both ranks' shards under one manifest
        manifest = json.loads((tmp_path / "checkpoints" / f"step_{step:08d}" / "manifest.json").read_text())
        assert {"__0_0.distcp", "__1_0.distcp"} <= set(manifest["files"])


def test_a_time_based_save_asked_for_before_a_step_based_one_is_not_made_again_right_after_it(tmp_path):
    # Due by time at every step (0.001 s), so the vote asks at every step; each answer comes a step
    # later, after the step-based save that served it, and the interval counts from that save.
    args = job_args(tmp_path, "--checkpoint_every", "2", "--checkpoint_interval", "0.001", "--keep_checkpoints", "100", steps=8)
    result = run(args)
    assert result.returncode == 0, result.stderr[-3000:]
    saved = [int(line.split("=")[1]) for line in result.stdout.splitlines() if line.startswith("checkpoint step=")]
    assert saved == [2, 4, 6, 8]  # without the rule: every step from 2 on
