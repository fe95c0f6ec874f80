"""A spec in SDK 3.x ModelTrainer's names is the job its estimator-named twin is: the same request
(each strategy's golden one), every field read, and a field given both ways refused naming both."""

from __future__ import annotations

import json

import pytest

from tests.core.specs import DDP, MODEL_TRAINER_SPECS, SPECS
from tests.core.test_request import GOLDEN, build
from trainstack.spec import SpecError, load_spec, parse_spec

MODEL_TRAINER_DDP = MODEL_TRAINER_SPECS["ddp"]
PLAN_ARN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/plan-1"


def test_every_strategys_job_is_written_in_model_trainers_names():
    assert sorted(MODEL_TRAINER_SPECS) == sorted(SPECS)


@pytest.mark.parametrize("strategy", sorted(MODEL_TRAINER_SPECS))
def test_model_trainers_names_build_the_reviewed_golden_request(strategy):
    assert build(strategy, MODEL_TRAINER_SPECS[strategy]) == json.loads((GOLDEN / f"{strategy}.json").read_text())


def test_mpi_is_the_estimators_mpi_launcher_with_its_processes_and_options():
    estimator = {
        **DDP,
        "distribution": {"mpi": {"enabled": True, "processes_per_host": 4, "custom_mpi_options": "-x NCCL_DEBUG=INFO -v"}},
    }
    model_trainer = {
        **MODEL_TRAINER_DDP,
        "distributed": {"MPI": {"process_count_per_node": 4, "mpi_additional_options": ["-x", "NCCL_DEBUG=INFO", "-v"]}},
    }
    assert build("ddp", model_trainer) == build("ddp", estimator)


@pytest.mark.parametrize(
    ("model_trainer", "estimator"),
    [
        (
            {"source_code": {"source_dir": "s3://code-bucket/job/sourcedir.tar.gz", "entry_script": "main.py"}},
            {"source_dir": "s3://code-bucket/job/sourcedir.tar.gz", "entry_point": "main.py"},
        ),
        (
            {"compute": {"instance_type": "ml.g5.12xlarge", "volume_size_in_gb": 500}},
            {"instance_type": "ml.g5.12xlarge", "volume_size_gb": 500},
        ),
        (
            {"compute": {"instance_preferences": [{"instance_type": "ml.p5.48xlarge"}, {"instance_type": "ml.p4d.24xlarge"}]}},
            {"instance_types": ["ml.p5.48xlarge", "ml.p4d.24xlarge"]},
        ),
        (
            {
                "compute": {"instance_type": "ml.p5.48xlarge", "training_plan_arn": PLAN_ARN},
                "stopping_condition": {"max_pending_time_in_seconds": 7200},
            },
            {"instance_type": "ml.p5.48xlarge", "training_plan_arn": PLAN_ARN, "max_pending": "2h"},
        ),
        (
            {"input_data_config": [{"channel_name": "train", "data_source": "s3://data-bucket/train/"}]},
            {"inputs": {"train": {"s3_uri": "s3://data-bucket/train/"}}},
        ),
        (
            {
                "input_data_config": [
                    {
                        "channel_name": "eval",
                        "data_source": {"s3_uri": "s3://data-bucket/eval/", "s3_data_type": "S3Prefix"},
                        "input_mode": "File",
                    }
                ]
            },
            {"inputs": {"eval": {"s3_uri": "s3://data-bucket/eval/", "mode": "File"}}},
        ),
        ({"checkpoint_config": None}, {"checkpoints": False}),
        ({"checkpoint_config": {}}, {"checkpoints": True}),
    ],
)
def test_each_model_trainer_field_is_the_specs_own(model_trainer, estimator):
    base = {"name": "job"} if "compute" in model_trainer else {"name": "job", "instance_type": "ml.g5.xlarge"}
    assert parse_spec({**base, **model_trainer}) == parse_spec({**base, **estimator})


def test_a_spec_of_model_trainers_names_reads_from_yaml():
    spec = load_spec(
        """
name: gpt-small
compute: {instance_type: ml.p4d.24xlarge, instance_count: 2}
distributed:
  Torchrun:
    smp: {hybrid_shard_degree: 8}
stopping_condition: {max_runtime_in_seconds: 3600}
"""
    )
    assert (spec.instance_type, spec.instance_count, spec.max_runtime) == ("ml.p4d.24xlarge", 2, 3600)
    assert spec.distribution == {
        "torch_distributed": {"enabled": True},
        "smdistributed": {"modelparallel": {"enabled": True, "parameters": {"hybrid_shard_degree": 8}}},
    }


def _one_problem(data: dict) -> str:
    with pytest.raises(SpecError) as raised:
        parse_spec(data)
    (problem,) = raised.value.problems
    return problem


@pytest.mark.parametrize(
    ("model_trainer", "estimator", "names"),
    [
        (
            {"compute": {"instance_type": "ml.p4d.24xlarge"}},
            {"instance_type": "ml.p4d.24xlarge"},
            ("compute.instance_type", "instance_type"),
        ),
        ({"compute": {"instance_count": 2}}, {"instance_count": 2}, ("compute.instance_count", "instance_count")),
        ({"compute": {"volume_size_in_gb": 200}}, {"volume_size_gb": 200}, ("compute.volume_size_in_gb", "volume_size_gb")),
        (
            {"compute": {"keep_alive_period_in_seconds": 60}},
            {"warm_pool": "1m"},
            ("compute.keep_alive_period_in_seconds", "warm_pool"),
        ),
        (
            {"compute": {"enable_managed_spot_training": True}},
            {"spot": {"enabled": True}},
            ("compute.enable_managed_spot_training", "spot.enabled"),
        ),
        (
            {"compute": {"training_plan_arn": PLAN_ARN}},
            {"training_plan_arn": PLAN_ARN},
            ("compute.training_plan_arn", "training_plan_arn"),
        ),
        (
            {"compute": {"instance_preferences": [{"instance_type": "ml.p5.48xlarge"}]}},
            {"instance_types": ["ml.p5.48xlarge"]},
            ("compute.instance_preferences", "instance_types"),
        ),
        (
            {"source_code": {"source_dir": "s3://b/s.tar.gz"}},
            {"source_dir": "s3://b/s.tar.gz"},
            ("source_code.source_dir", "source_dir"),
        ),
        ({"source_code": {"entry_script": "a.py"}}, {"entry_point": "a.py"}, ("source_code.entry_script", "entry_point")),
        (
            {"stopping_condition": {"max_runtime_in_seconds": 60}},
            {"max_runtime": "1m"},
            ("stopping_condition.max_runtime_in_seconds", "max_runtime"),
        ),
        (
            {"stopping_condition": {"max_wait_time_in_seconds": 7200}},
            {"spot": {"enabled": True, "max_wait": "2h"}},
            ("stopping_condition.max_wait_time_in_seconds", "spot.max_wait"),
        ),
        (
            {"stopping_condition": {"max_pending_time_in_seconds": 3600}},
            {"max_pending": "1h"},
            ("stopping_condition.max_pending_time_in_seconds", "max_pending"),
        ),
        (
            {"distributed": {"Torchrun": {}}},
            {"distribution": {"torch_distributed": {"enabled": True}}},
            ("distributed", "distribution"),
        ),
        ({"distributed": {"Torchrun": {}}}, {"strategy": "ddp"}, ("distributed", "strategy")),
        (
            {"input_data_config": [{"channel_name": "train", "data_source": "s3://b/train/"}]},
            {"inputs": {"train": {"s3_uri": "s3://b/train/"}}},
            ("input_data_config", "inputs"),
        ),
        ({"checkpoint_config": {}}, {"checkpoints": True}, ("checkpoint_config", "checkpoints")),
    ],
)
def test_a_field_given_in_both_names_is_refused_naming_both(model_trainer, estimator, names):
    problem = _one_problem({"name": "job", "instance_type": "ml.g5.xlarge", **estimator, **model_trainer})

    model_trainers, specs = names
    assert f"{model_trainers} (ModelTrainer's" in problem and f"and {specs} (" in problem


@pytest.mark.parametrize(
    ("model_trainer", "named"),
    [
        ({"source_code": {"command": "python a.py"}}, "source_code.command: not supported"),
        ({"source_code": {"ignore_patterns": [".git"]}}, "source_code.ignore_patterns: not supported"),
        ({"compute": {"instance_groups": []}}, "compute.instance_groups: not supported (heterogeneous clusters"),
        ({"checkpoint_config": {"s3_uri": "s3://b/ckpt/"}}, "checkpoint_config.s3_uri: not supported (each run's checkpoints"),
        (
            {"checkpoint_config": {"local_path": "/tmp/ckpt"}},
            "checkpoint_config.local_path: the built-in script and restarts use",
        ),
        ({"distributed": {"torchrun": {}}}, "distributed: one of ModelTrainer's distributed configs by its class name"),
        (
            {"distributed": {"Torchrun": {"process_count_per_node": 2}}},
            "distributed.Torchrun.process_count_per_node: not supported",
        ),
        (
            {"input_data_config": [{"channel_name": "t", "data_source": "s3://b/t/", "content_type": "x"}]},
            "input_data_config[0].content_type",
        ),
        (
            {"stopping_condition": {"max_runtime": 60}},
            "stopping_condition.max_runtime: not a ModelTrainer stopping_condition field",
        ),
    ],
)
def test_what_trainstack_would_not_honour_is_refused_not_dropped(model_trainer, named):
    assert named in _one_problem({"name": "job", "instance_type": "ml.g5.xlarge", **model_trainer})
