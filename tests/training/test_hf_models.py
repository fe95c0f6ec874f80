"""Hugging Face causal LMs (`model: hf:<path>`) in the built-in script: built from local files only,
sharded and checkpointed per decoder layer like the built-in GPT, exported with save_pretrained."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
from transformers import AutoModelForCausalLM, GPT2Config

from tests.training.launch import job_args, run
from trainstack_contract.config import ConfigError, TrainConfig
from trainstack_training.health import layer_of
from trainstack_training.models import build_model
from trainstack_training.models.hf import HFCausalLM
from trainstack_training.strategies.memory import apply_block_wrappers

LLAMA = "hf:hf_configs/llama-tiny"
NEOX = "hf:hf_configs/neox-tiny"


def test_a_config_folder_builds_a_random_init_model_whose_blocks_are_its_decoder_layers():
    model = build_model(LLAMA)
    assert isinstance(model, HFCausalLM) and model.source.startswith("random init")
    assert model.blocks is model.hf.model.layers and len(model.blocks) == 2
    assert (model.vocab_size, model.context_length) == (512, 64)
    # the layers are registered once, under the Hugging Face model
    assert all(name.startswith("hf.") for name, _ in model.named_parameters())


def test_the_seed_decides_the_initial_weights_on_every_rank():
    torch.manual_seed(3)
    first = build_model(NEOX).state_dict()
    torch.manual_seed(3)
    second = build_model(NEOX).state_dict()
    torch.manual_seed(4)
    other = build_model(NEOX).state_dict()
    assert all(torch.equal(first[name], second[name]) for name in first)
    assert not torch.equal(
        first["hf.gpt_neox.layers.0.mlp.dense_h_to_4h.weight"], other["hf.gpt_neox.layers.0.mlp.dense_h_to_4h.weight"]
    )


def test_a_folder_with_safetensors_starts_from_those_weights(tmp_path):
    torch.manual_seed(1)
    saved = build_model(LLAMA)
    saved.hf.save_pretrained(tmp_path / "weights")
    torch.manual_seed(2)  # another seed: only the weights on disk can make the two equal
    loaded = build_model(f"hf:{tmp_path / 'weights'}")
    assert loaded.source.startswith("weights from")
    for name, tensor in saved.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor, rtol=0, atol=0, msg=name)


def test_the_loss_is_the_cross_entropy_of_the_logits_against_the_given_targets():
    model = build_model(NEOX)
    tokens = torch.randint(0, 512, (2, 9))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    logits = model(inputs)
    expected = torch.nn.functional.cross_entropy(logits.reshape(-1, 512), targets.reshape(-1))
    assert model(inputs, targets).item() == pytest.approx(expected.item(), rel=1e-6)


def test_a_path_without_a_config_is_one_line_naming_the_field_and_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"hyperparameter 'model' = 'hf:.*nowhere': no config.json at .*give a folder"):
        build_model(f"hf:{tmp_path / 'nowhere'}")


def test_an_empty_hf_name_is_refused_by_the_config_that_validate_parses():
    with pytest.raises(ConfigError, match=r"hyperparameter 'model' = 'hf:'.*hf:<folder or config.json>"):
        TrainConfig(model="hf:")


def test_tensor_parallelism_on_the_builtin_gpt_is_refused_before_anything_is_billed():
    with pytest.raises(ConfigError, match=r"tsm\.transform parallelizes Hugging Face models only"):
        TrainConfig(strategy="smp", model="gpt-tiny", mp_parameters='{"tensor_parallel_degree": 2}')
    assert TrainConfig(strategy="smp", model=LLAMA, mp_parameters='{"tensor_parallel_degree": 2}').model == LLAMA


def test_tensor_parallelism_on_an_architecture_smp_does_not_transform_names_the_ones_it_does(tmp_path):
    GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=64, n_positions=16).save_pretrained(tmp_path / "gpt2")
    model = build_model(f"hf:{tmp_path / 'gpt2'}")
    with pytest.raises(ConfigError, match=r"no tensor parallelism for model_type 'gpt2' \(it has for gpt_neox, llama"):
        model.tensor_parallel(lambda hf: hf)


def test_export_writes_what_transformers_loads_with_the_same_logits(tmp_path):
    model = build_model(LLAMA)
    model.export(model.state_dict(), tmp_path, {"model": LLAMA})
    assert {"config.json", "model.safetensors", "trainstack.json"} <= {p.name for p in tmp_path.iterdir()}
    assert json.loads((tmp_path / "trainstack.json").read_text()) == {"model": LLAMA}
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path, local_files_only=True)
    tokens = torch.randint(0, 512, (2, 16))
    torch.testing.assert_close(reloaded(input_ids=tokens).logits, model(tokens), rtol=0, atol=1e-6)


def test_the_image_installs_the_same_hugging_face_pins_the_tests_run_with():
    root = Path(__file__).resolve().parents[2]
    image = {
        line.strip()
        for line in (root / "training" / "image-requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    train_extra = set(tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"])
    assert image and image <= train_extra


def test_the_flops_count_the_output_head_whether_or_not_it_shares_the_embedding(tmp_path):
    untied = build_model(LLAMA)
    config = json.loads(
        (Path(__file__).resolve().parents[2] / "training" / "hf_configs" / "llama-tiny" / "config.json").read_text()
    )
    (tmp_path / "tied").mkdir()
    (tmp_path / "tied" / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
    tied = build_model(f"hf:{tmp_path / 'tied'}")
    embedding = 512 * 64  # vocab x hidden
    # untied: the input embedding is a lookup, left out; tied: the same matrix is the head's matmul, kept
    assert untied.num_parameters() == untied.num_parameters(exclude_embeddings=False) - embedding
    assert tied.num_parameters() == tied.num_parameters(exclude_embeddings=False)
    assert tied.num_parameters() == untied.num_parameters()  # the same matmuls either way


def test_a_gpt2_style_model_shards_and_checkpoints_per_layer_of_its_transformer_h(tmp_path):
    no_dropout = {"resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0}
    GPT2Config(n_layer=3, n_embd=32, n_head=2, vocab_size=64, n_positions=16, **no_dropout).save_pretrained(tmp_path / "gpt2")
    model = build_model(f"hf:{tmp_path / 'gpt2'}")
    assert model.blocks is model.hf.transformer.h and len(model.blocks) == 3
    tokens = torch.randint(0, 64, (2, 9))
    plain = model(tokens[:, :-1], tokens[:, 1:])
    apply_block_wrappers(model, TrainConfig(model=LLAMA, activation_checkpointing=True))
    assert all(isinstance(block, CheckpointWrapper) for block in model.hf.transformer.h)
    assert model(tokens[:, :-1], tokens[:, 1:]).item() == pytest.approx(plain.item(), rel=1e-6)
    assert layer_of("hf.transformer.h.2.mlp.c_fc.weight") == "hf.transformer.h.2"


def test_pickled_weights_without_safetensors_are_refused_not_silently_replaced_by_random_ones(tmp_path):
    build_model(LLAMA).hf.config.save_pretrained(tmp_path)
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(ConfigError, match=r"pytorch_model\*\.bin weights \(pickles\) but no \*\.safetensors; convert them"):
        build_model(f"hf:{tmp_path}")


def test_a_sequence_longer_than_the_models_context_fails_the_job_with_one_line(tmp_path):
    result = run([*job_args(tmp_path, "--model", LLAMA, "--seq_len", "65"), "--model_dir", str(tmp_path / "model")], nproc=0)
    assert result.returncode == 1
    assert (
        (tmp_path / "output" / "failure")
        .read_text()
        .startswith(f"rank 0: invalid hyperparameters: hyperparameter 'seq_len' = 65: longer than {LLAMA}'s context of 64 tokens")
    )
