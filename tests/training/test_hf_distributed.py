"""Hugging Face causal LMs (a Llama-style and a GPT-NeoX-style config) under real torchrun process
groups on CPU, trained on shards a tokenizer wrote: the strategies agree, a SIGKILLed run resumes to
the same weights, and the export loads in `transformers` with the trained model's logits."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from prepare_data import main as prepare_data
from tests.training.launch import ROOT, TIMEOUT, job_args, losses, newest_complete_checkpoint, run, sigkill_at_step, trajectory
from trainstack_training.models import build_model

pytestmark = [pytest.mark.slow, pytest.mark.timeout(TIMEOUT + 60)]
MODELS = {"llama": "hf:hf_configs/llama-tiny", "neox": "hf:hf_configs/neox-tiny"}
STEPS = 12


@pytest.fixture(scope="module")
def tokenized(tmp_path_factory) -> Path:
    """Shards of this repository's docs through a 512-token BPE tokenizer trained on them."""
    folder = tmp_path_factory.mktemp("tokenized")
    texts = [str(ROOT / "docs" / "training.md"), str(ROOT / "training" / "sample_data" / "README.md")]
    prepare_data(["tokenizer", "--output", str(folder / "tokenizer"), "--vocab", "512", *texts])
    prepare_data(["tokens", "--tokenizer", str(folder / "tokenizer"), "--output", str(folder / "data"), "--shards", "2", *texts])
    return folder / "data"


def _args(tmp: Path, model: str, data: Path, *extra: str) -> list[str]:
    return job_args(tmp, "--model", model, "--data_dir", str(data), "--checkpoint_every", "4", *extra, steps=STEPS)


def _trajectory(result: subprocess.CompletedProcess[str]) -> list[float]:
    losses_by_step = trajectory(result)
    assert len(losses_by_step) == STEPS
    return losses_by_step


@dataclass(frozen=True)
class Reference:
    losses: list[float]
    directory: Path  # checkpoints/ and model/


@pytest.fixture(scope="module", params=sorted(MODELS))
def ddp_two_ranks(request, tmp_path_factory, tokenized) -> tuple[str, Reference]:
    directory = tmp_path_factory.mktemp(f"ddp2-{request.param}")
    model = MODELS[request.param]
    return model, Reference(_trajectory(run(_args(directory, model, tokenized, "--strategy", "ddp"))), directory)


def test_ddp_on_two_ranks_matches_one_rank_accumulating_twice(tmp_path, tokenized, ddp_two_ranks):
    model, reference = ddp_two_ranks
    one_rank = _trajectory(run(_args(tmp_path, model, tokenized, "--strategy", "ddp", "--grad_accum", "2"), nproc=0))
    assert reference.losses == pytest.approx(one_rank, abs=2e-4)
    assert reference.losses[-1] < reference.losses[0] - 0.15  # and it learns (from ln 512 = 6.24)


def test_fsdp2_per_decoder_layer_matches_ddp(tmp_path, tokenized, ddp_two_ranks):
    model, reference = ddp_two_ranks
    fsdp = _trajectory(run(_args(tmp_path, model, tokenized, "--strategy", "fsdp", "--activation_checkpointing", "true")))
    assert fsdp == pytest.approx(reference.losses, abs=2e-4)


# ZeRO-1 shards the optimizer's state whatever the architecture: one model shows it (suite time).
@pytest.mark.parametrize("ddp_two_ranks", ["llama"], indirect=True)
def test_zero1_with_bf16_autocast_follows_ddp(tmp_path, tokenized, ddp_two_ranks):
    model, reference = ddp_two_ranks
    zero1 = _trajectory(run(_args(tmp_path, model, tokenized, "--strategy", "ddp", "--zero1", "true", "--precision", "bf16")))
    assert zero1 == pytest.approx(reference.losses, abs=0.05)  # bf16 rounding only


def test_the_export_loads_in_transformers_and_reproduces_the_trained_models_logits(ddp_two_ranks):
    model_name, reference = ddp_two_ranks
    trained = build_model(model_name)
    state = {"training": {"model": trained.state_dict()}}
    dcp.load(state, checkpoint_id=reference.directory / "checkpoints" / f"step_{STEPS:08d}", no_dist=True)  # as trained
    trained.load_state_dict(state["training"]["model"])
    exported = AutoModelForCausalLM.from_pretrained(reference.directory / "model", local_files_only=True)
    assert type(exported) is type(trained.hf)
    tokens = torch.randint(0, trained.vocab_size, (2, trained.context_length))
    with torch.no_grad():
        torch.testing.assert_close(exported(input_ids=tokens).logits, trained(tokens), rtol=0, atol=1e-5)


def test_a_sigkilled_run_restarted_with_the_same_command_ends_with_the_same_weights(tmp_path, tokenized, ddp_two_ranks):
    model, reference = ddp_two_ranks
    args = _args(tmp_path, model, tokenized, "--strategy", "ddp")
    sigkill_at_step(args, 5, after_checkpoint=4, hold_at=9)
    complete = newest_complete_checkpoint(tmp_path / "checkpoints")  # 4, or 8 if its write was done by then
    assert complete in (4, 8)

    resumed = run(args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert min(losses(resumed.stdout)) == complete + 1  # continues after the newest complete checkpoint
    expected = load_file(reference.directory / "model" / "model.safetensors")
    actual = load_file(tmp_path / "model" / "model.safetensors")
    assert expected.keys() == actual.keys()
    for name in expected:
        torch.testing.assert_close(actual[name], expected[name], rtol=0, atol=1e-6, msg=name)
