"""Hyperparameters: SageMaker's strings become one typed config, or a clear refusal."""

from __future__ import annotations

import json

import pytest

from trainstack_contract.config import ConfigError, parse_config


def test_arguments_are_typed_from_sagemaker_strings():
    config = parse_config(["--max_steps", "20", "--lr", "0.001", "--zero1", "true", "--model", "gpt-tiny"], {})
    assert (config.max_steps, config.lr, config.zero1, config.model) == (20, 0.001, True, "gpt-tiny")


def test_by_default_the_step_timeout_is_derived_and_efa_is_required():
    config = parse_config([], {})
    assert (config.step_timeout, config.startup_timeout, config.require_efa_transport) == (0.0, 1800.0, True)


def test_watchdog_hyperparameters_are_typed_from_sagemaker_strings():
    config = parse_config(["--step_timeout", "600", "--startup_timeout", "3600", "--require_efa_transport", "false"], {})
    assert (config.step_timeout, config.startup_timeout, config.require_efa_transport) == (600.0, 3600.0, False)


def test_dashes_are_accepted_as_underscores_and_equals_form_works():
    config = parse_config(["--micro-batch-size=4", "--grad-accum", "2"], {})
    assert (config.micro_batch_size, config.grad_accum) == (4, 2)


def test_sm_hps_is_read_and_arguments_win():
    environ = {"SM_HPS": json.dumps({"max_steps": 7, "seed": 3})}
    config = parse_config(["--seed", "5"], environ)
    assert (config.max_steps, config.seed) == (7, 5)


@pytest.mark.parametrize(
    ("environ", "strategy"),
    [
        ({}, "ddp"),
        ({"SM_HP_MP_PARAMETERS": '{"hybrid_shard_degree": 2}'}, "smp"),
        ({"SM_HP_MP_PARAMETERS": "{}"}, "ddp"),
        (
            {
                "SM_TRAINING_ENV": json.dumps(
                    {"additional_framework_parameters": {"sagemaker_distributed_dataparallel_enabled": True}}
                )
            },
            "smddp",
        ),
    ],
)
def test_strategy_defaults_from_how_the_container_was_launched(environ, strategy):
    assert parse_config([], environ).strategy == strategy


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max_step", "5"], "unknown hyperparameter 'max_step'"),
        (["--max_steps", "five"], "'max_steps' = 'five': expected int"),
        (["--strategy", "zero3"], "'strategy' = 'zero3': choose one of ddp, smddp, smp, fsdp"),
        (["--precision", "fp8"], "'precision' = 'fp8'"),
        (["--zero1", "true", "--strategy", "fsdp"], "'zero1' is for ddp/smddp"),
        (["--cpu_offload", "true"], "'cpu_offload' needs strategy 'fsdp'"),
        (["--reduce_every_micro_step", "true"], "'reduce_every_micro_step' is for fsdp/smp"),
        (["--mp_parameters", "{1}"], "'mp_parameters'"),
        (["--mp_parameters", "degree"], "'mp_parameters'"),
        (["--grad_accum", "0"], "'grad_accum' = 0"),
        (["--step_timeout", "-1"], "'step_timeout' = -1.0: seconds, or 0"),
        (["--checkpoint_interval", "-5"], "'checkpoint_interval' = -5.0: seconds, or 0 to checkpoint by steps only"),
        (["--startup_timeout", "0"], "'startup_timeout' = 0.0: must be positive"),
        (["--activation_checkpointing", "maybe"], "expected bool"),
        (["positional"], "unexpected argument"),
    ],
)
def test_bad_hyperparameters_are_refused_with_the_name(argv, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_config(argv, {})


def test_config_is_logged_as_one_json_object():
    assert json.loads(parse_config([], {}).to_json())["strategy"] == "ddp"


@pytest.mark.parametrize(
    "text",
    [
        '{"hybrid_shard_degree": 2, "sm_activation_offloading": true}',  # SM_HP_MP_PARAMETERS
        "hybrid_shard_degree=2,sm_activation_offloading=true",  # how the toolkit renders a dict argument
    ],
)
def test_smp_parameters_arrive_as_json_or_as_the_toolkit_renders_them(text):
    config = parse_config(["--strategy", "smp", "--mp_parameters", text], {})
    assert config.smp_parameters == {"hybrid_shard_degree": 2, "sm_activation_offloading": True}


SHARDED = {"train": {"TrainingInputMode": "File", "S3DistributionType": "ShardedByS3Key"}}


def test_data_distribution_is_the_train_channels_as_the_toolkit_passes_it():
    environ = {"SM_INPUT_DATA_CONFIG": json.dumps(SHARDED), "SM_CHANNEL_TRAIN": "/opt/ml/input/data/train"}
    assert parse_config([], environ).data_distribution == "ShardedByS3Key"


def test_data_distribution_is_read_from_inputdataconfig_json_without_the_toolkit(tmp_path):
    (tmp_path / "inputdataconfig.json").write_text(json.dumps(SHARDED))
    environ = {"SM_INPUT_CONFIG_DIR": str(tmp_path)}
    assert parse_config(["--data_dir", "/opt/ml/input/data/train/"], environ).data_distribution == "ShardedByS3Key"


def test_a_data_dir_that_is_no_channel_is_fully_replicated():
    environ = {"SM_INPUT_DATA_CONFIG": json.dumps(SHARDED), "SM_CHANNEL_TRAIN": "/opt/ml/input/data/train"}
    assert parse_config(["--data_dir", "/fsx/corpus"], environ).data_distribution == "FullyReplicated"


def test_an_unknown_data_distribution_is_refused():
    with pytest.raises(ConfigError, match="'data_distribution' = 'Sharded'"):
        parse_config(["--data_distribution", "Sharded"], {})


@pytest.mark.parametrize(
    ("argv", "environ"),
    [(["--fused_adamw", "false"], {}), ([], {"SM_HPS": json.dumps({"fused_adamw": False})})],
    ids=["argument", "sm_hps"],
)
def test_fused_adamw_false_is_the_boolean_false(argv, environ):
    # As text, "false" is truthy: the trainer took it for "fused" and ran the fused kernel on CUDA anyway.
    assert parse_config(argv, environ).fused_adamw is False


def test_fused_adamw_is_true_when_asked_and_unset_leaves_the_choice_to_the_device():
    assert parse_config(["--fused_adamw", "true"], {}).fused_adamw is True
    assert parse_config([], {}).fused_adamw is None


def test_a_fused_adamw_that_is_no_boolean_is_refused():
    with pytest.raises(ConfigError, match="'fused_adamw' = 'sometimes': expected bool"):
        parse_config(["--fused_adamw", "sometimes"], {})
