"""The built-in training script's contract, checked before launch through the script's own typed
config (trainstack_contract.config): what it would refuse after the instances are up is refused here."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.core.specs import DDP, FSDP, PROJECT_IMAGE, SMDDP, SMP
from trainstack import facts
from trainstack.preflight import rule_problems
from trainstack.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
TRAIN = "s3://trainstack-trigger/datasets/owt/"


def problems(**changes) -> list[str]:
    return [str(p) for p in rule_problems(parse_spec({**DDP, "spot": {"enabled": False}, "warm_pool": None, **changes}))]


def test_the_example_job_keeps_the_scripts_contract():
    assert problems() == []


@pytest.mark.parametrize(
    ("hyperparameters", "message"),
    [
        ({"max_step": 3}, "unknown hyperparameter 'max_step'; known: activation_checkpointing"),
        ({"model": "llama-7b"}, "hyperparameter 'model' = 'llama-7b': choose one of gpt-tiny"),
        ({"lr": "fast"}, "hyperparameter 'lr' = 'fast': expected float"),
        ({"precision": "fp8"}, "hyperparameter 'precision' = 'fp8': choose one of fp32, bf16, fp16"),
        ({"cpu_offload": True}, "hyperparameter 'cpu_offload' needs strategy 'fsdp'"),
    ],
    ids=["unknown", "model", "type", "choice", "combination"],
)
def test_a_hyperparameter_the_script_would_refuse_is_refused_with_its_message(hyperparameters, message):
    found = problems(hyperparameters={**DDP["hyperparameters"], **hyperparameters})
    assert any(p.startswith("hyperparameters: ") and message in p for p in found), found


def test_a_sweep_trial_the_script_would_refuse_is_named():
    found = problems(sweep={"max_concurrency": 2, "trials": [{"lr": 1e-4}, {"micro_batch_size": 0}]})
    assert found == [
        "sweep trial 1 (micro_batch_size=0): hyperparameter 'micro_batch_size' = 0: must be at least 1; "
        "see the hyperparameters the built-in script takes in docs/training.md"
    ]


def test_a_pipe_channel_is_refused_for_the_builtin_script():
    found = problems(inputs={"train": {"s3_uri": TRAIN, "mode": "Pipe"}})
    assert found == [
        'inputs.train.mode = "Pipe": the built-in training script reads files; Pipe streams records through a FIFO '
        "it cannot read; use FastFile (streams from S3 on demand) or File"
    ]


def test_a_users_own_script_may_read_pipe_and_take_any_hyperparameter():
    own = {"source_dir": "s3://my-code/x/sourcedir.tar.gz", "hyperparameters": {"max_step": 3}}
    assert problems(inputs={"train": {"s3_uri": TRAIN, "mode": "Pipe"}}, **own) == []


def test_a_hugging_face_model_in_a_channel_the_spec_does_not_give_is_refused():
    hyperparameters = {**DDP["hyperparameters"], "model": "hf:/opt/ml/input/data/weights/llama"}
    assert problems(hyperparameters=hyperparameters, inputs={"train": {"s3_uri": TRAIN}}, image=PROJECT_IMAGE) == [
        "hyperparameters.model = \"hf:/opt/ml/input/data/weights/llama\": reads the input channel 'weights', which the "
        "spec does not give (its inputs: train); add inputs.weights with the model's folder (config.json and *.safetensors)"
    ]


def test_a_hugging_face_models_channel_must_reach_every_host_whole():
    hyperparameters = {**DDP["hyperparameters"], "model": "hf:/opt/ml/input/data/weights"}
    weights = {"s3_uri": "s3://my-models/llama/", "distribution": "ShardedByS3Key"}
    assert problems(
        hyperparameters=hyperparameters, inputs={"train": {"s3_uri": TRAIN}, "weights": weights}, image=PROJECT_IMAGE
    ) == [
        'inputs.weights.distribution = "ShardedByS3Key": the model\'s weights would be split between the hosts; every '
        "rank needs all of them; use FullyReplicated for the model's channel"
    ]
    assert (
        problems(
            hyperparameters=hyperparameters,
            inputs={"train": {"s3_uri": TRAIN}, "weights": {**weights, "distribution": "FullyReplicated"}},
            image=PROJECT_IMAGE,
        )
        == []
    )


@pytest.mark.parametrize(("seq_len", "trained"), [(None, "its config's max_position_embeddings (seq_len unset)"), (1024, "1024")])
def test_a_hugging_face_model_must_train_at_the_sequence_length_it_is_planned_for(seq_len, trained):
    shape = {"layers": 22, "hidden": 2048, "vocab": 32000, "seq_len": 2048}
    hyperparameters = {**DDP["hyperparameters"], "model": "hf:hf_configs/llama-1b"}
    if seq_len:
        hyperparameters["seq_len"] = seq_len
    found = problems(hyperparameters=hyperparameters, model=shape, image=PROJECT_IMAGE)
    assert found == [
        f"hyperparameters.seq_len{' = ' + str(seq_len) if seq_len else ''}: hf:hf_configs/llama-1b would train at {trained}, "
        "but the plan is for model.seq_len 2048; "
        "set the hyperparameter seq_len to 2048, or model.seq_len to the length you train at"
    ]
    assert problems(hyperparameters={**hyperparameters, "seq_len": 2048}, model=shape, image=PROJECT_IMAGE) == []


@pytest.mark.parametrize(("instance_type", "refused"), [("ml.c5.18xlarge", True), ("ml.p5e.48xlarge", False)])
def test_offloading_to_the_host_is_refused_on_an_instance_without_a_gpu(instance_type, refused):
    hyperparameters = {**FSDP["hyperparameters"], "cpu_offload": True}
    offloading = {**FSDP, "spot": {"enabled": False}, "warm_pool": None, "instance_type": instance_type}
    offloading["hyperparameters"] = hyperparameters
    found = [str(p) for p in rule_problems(parse_spec(offloading))]
    assert found == (
        [
            f"hyperparameters.cpu_offload = true: FSDP2 offloads to pinned host memory, which needs a GPU; {instance_type} "
            "has none; set cpu_offload false, or choose GPU instances"
        ]
        if refused
        else []
    )


# ---- the image's runtime: what the script needs of the framework image's torch and packages ----


def test_a_strategy_whose_torch_the_image_lacks_is_refused_naming_framework_version():
    assert problems(strategy="fsdp", distribution=None, framework_version="2.3.0", instance_type="ml.p5e.48xlarge") == [
        'framework_version = "2.3.0": strategy fsdp needs torch 2.7 or newer (FSDP2 runs without a GPU from torch 2.7; '
        "from 2.4 to 2.6 it runs on CUDA only, where it is untested); the pytorch-training image for PyTorch 2.3.0 has torch "
        "2.3.0; use framework_version 2.7.1 or newer (2.7.1, 2.8.0, 2.9.0, 2.10.0), or leave it out for 2.10.0"
    ]


def test_an_image_older_than_the_scripts_checkpoints_is_refused():
    found = problems(framework_version="2.1.0")
    assert len(found) == 1 and found[0].startswith('framework_version = "2.1.0": the built-in script needs torch 2.2 or newer')
    assert "use framework_version 2.2.0 or newer" in found[0]


@pytest.mark.parametrize("spec", [DDP, FSDP, SMDDP, SMP], ids=["ddp", "fsdp", "smddp", "smp"])
def test_leaving_framework_version_out_picks_an_image_the_script_runs_on(spec):
    defaulted = {**spec, "spot": {"enabled": False}, "warm_pool": None, "framework_version": None}
    assert [str(p) for p in rule_problems(parse_spec(defaulted))] == []


def test_a_hugging_face_model_on_a_framework_image_is_refused_naming_the_project_image():
    hyperparameters = {**DDP["hyperparameters"], "model": "hf:hf_configs/llama-tiny"}
    found = problems(hyperparameters=hyperparameters, framework_version=None)
    assert found == [
        'hyperparameters.model = "hf:hf_configs/llama-tiny": no framework image installs transformers 5, the release the '
        "script is written for; the pytorch-training image for PyTorch 2.10.0 has none; write `image: project`: the "
        "stack's project image installs the pinned transformers (`-c build_training_image=true`; the local twin's stack has it)"
    ]
    assert problems(hyperparameters=hyperparameters, image=PROJECT_IMAGE) == []
    assert problems(hyperparameters=hyperparameters, image="project") == []


def test_an_smp_image_with_its_own_transformers_4_does_not_satisfy_the_hugging_face_model():
    assert facts.image_version("smp", "2.3.1").runtime.packages["transformers"] == "4.40.1"
    found = [str(p) for p in rule_problems(parse_spec({**SMP, "hyperparameters": {"model": "hf:hf_configs/llama-tiny"}}))]
    assert any("no framework image installs transformers 5" in p for p in found), found


@pytest.mark.parametrize("path", ["local/trainstack_local/default_job.yaml", "examples/gpt-small.yaml"])
@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_the_default_job_and_the_example_either_run_on_their_image_or_are_refused_on_framework_version(path, strategy):
    spec = {**yaml.safe_load((ROOT / path).read_text()), "distribution": None, "strategy": strategy}
    found = rule_problems(parse_spec(spec))
    assert all(p.field == "framework_version" for p in found), found
    if not found:  # what they resolve to is an image whose torch the image-runtime tests train on
        resolved = facts.resolve_version("dlc", spec.get("framework_version") or facts.versions("dlc")[-1])
        assert resolved == "2.10.0"
