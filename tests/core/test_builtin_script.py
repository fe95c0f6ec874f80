"""The built-in training script's contract, checked before launch through the script's own typed
config (trainstack_training.config): what it would refuse after the instances are up is refused here."""

from __future__ import annotations

import pytest

from tests.core.specs import DDP, FSDP
from trainstack.preflight import rule_problems
from trainstack.spec import parse_spec

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
        "see the hyperparameters the built-in script takes in the README"
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
    assert problems(hyperparameters=hyperparameters, inputs={"train": {"s3_uri": TRAIN}}) == [
        "hyperparameters.model = \"hf:/opt/ml/input/data/weights/llama\": reads the input channel 'weights', which the "
        "spec does not give (its inputs: train); add inputs.weights with the model's folder (config.json and *.safetensors)"
    ]


def test_a_hugging_face_models_channel_must_reach_every_host_whole():
    hyperparameters = {**DDP["hyperparameters"], "model": "hf:/opt/ml/input/data/weights"}
    weights = {"s3_uri": "s3://my-models/llama/", "distribution": "ShardedByS3Key"}
    assert problems(hyperparameters=hyperparameters, inputs={"train": {"s3_uri": TRAIN}, "weights": weights}) == [
        'inputs.weights.distribution = "ShardedByS3Key": the model\'s weights would be split between the hosts; every '
        "rank needs all of them; use FullyReplicated for the model's channel"
    ]
    assert (
        problems(
            hyperparameters=hyperparameters,
            inputs={"train": {"s3_uri": TRAIN}, "weights": {**weights, "distribution": "FullyReplicated"}},
        )
        == []
    )


@pytest.mark.parametrize(("seq_len", "trained"), [(None, "its config's max_position_embeddings (seq_len unset)"), (1024, "1024")])
def test_a_hugging_face_model_must_train_at_the_sequence_length_it_is_planned_for(seq_len, trained):
    shape = {"layers": 22, "hidden": 2048, "vocab": 32000, "seq_len": 2048}
    hyperparameters = {**DDP["hyperparameters"], "model": "hf:hf_configs/llama-1b"}
    if seq_len:
        hyperparameters["seq_len"] = seq_len
    found = problems(hyperparameters=hyperparameters, model=shape)
    assert found == [
        f"hyperparameters.seq_len{' = ' + str(seq_len) if seq_len else ''}: hf:hf_configs/llama-1b would train at {trained}, "
        "but the plan is for model.seq_len 2048; "
        "set the hyperparameter seq_len to 2048, or model.seq_len to the length you train at"
    ]
    assert problems(hyperparameters={**hyperparameters, "seq_len": 2048}, model=shape) == []


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
