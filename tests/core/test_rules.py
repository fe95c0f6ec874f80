"""Every rule, table-driven, with the message it gives. Nothing here touches AWS."""

from __future__ import annotations

import pytest

from tests.core.specs import DDP, SMDDP, SMP, SPECS
from trainstack.rules import check, resolve
from trainstack.spec import parse_spec


@pytest.mark.parametrize("strategy", sorted(SPECS))
def test_the_example_spec_for_each_strategy_passes(strategy):
    assert check(parse_spec(SPECS[strategy]), count_objects=lambda uri: 64) == []


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({**DDP, "instance_type": "ml.p4.24xlarge"}, "instance_type", "unknown training instance type"),
        ({**SMDDP, "instance_type": "ml.p5.48xlarge"}, "distribution", "SMDDP does not support ml.p5.48xlarge"),
        ({**SMDDP, "instance_type": "ml.g5.48xlarge"}, "distribution", "SMDDP does not support ml.g5.48xlarge"),
        ({**SMDDP, "instance_type": "ml.m5.4xlarge"}, "distribution", "smddp needs NVIDIA GPUs"),
        ({**SMDDP, "framework_version": "2.3.0"}, "framework_version", "smddp supports PyTorch 1.10.0 to 2.2.0"),
        ({**SMP, "framework_version": "2.6.0"}, "framework_version", "smp supports PyTorch 2.0.0 to 2.5.1"),
        (
            {**SMP, "image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.1-gpu-py311"},
            "image",
            "SMP v2 needs the SMP image",
        ),
        ({**DDP, "framework_version": "2.3"}, "framework_version", "needs an exact version"),
        ({**DDP, "framework_version": "2.9.0"}, "framework_version", "ddp supports PyTorch 1.13.1 to 2.8.0"),
        (
            {
                **SMP,
                "distribution": {"smdistributed": {"modelparallel": {"enabled": True, "parameters": {"hybrid_shard_degree": 3}}}},
            },
            "distribution.smdistributed.modelparallel.parameters.hybrid_shard_degree",
            "does not divide the world size 16 (2 x 8 GPUs)",
        ),
        (
            {
                **SMP,
                "distribution": {
                    "smdistributed": {"modelparallel": {"enabled": True, "parameters": {"tensor_parallel_degree": 6}}}
                },
            },
            "distribution.smdistributed.modelparallel.parameters.tensor_parallel_degree",
            "does not divide",
        ),
        (
            {**DDP, "instance_type": "ml.g5.12xlarge", "environment": {"FI_PROVIDER": "efa"}},
            "environment.FI_PROVIDER",
            "has no EFA",
        ),
        ({**DDP, "spot": {"enabled": True, "max_wait": "12h"}}, "spot.max_wait", "must be at least max_runtime (86400 s)"),
        ({**DDP, "checkpoints": False}, "checkpoints", "restarts from scratch"),
        ({**DDP, "max_runtime": "29d", "spot": {"enabled": False}}, "max_runtime", "1 second to 28 days"),
        ({**DDP, "warm_pool": "7h"}, "warm_pool", "at most 6 hours"),
        ({**DDP, "hyperparameters": {"lr": float("nan")}}, "hyperparameters.lr", "not JSON-encodable"),
        ({**DDP, "hyperparameters": {"sagemaker_program": "x.py"}}, "hyperparameters.sagemaker_program", "set by trainstack"),
        ({**DDP, "hyperparameters": {"blob": "x" * 3000}}, "hyperparameters.blob", "limit is 2500"),
        ({**DDP, "tags": {"aws:owner": "me"}}, "tags.aws:owner", "reserved"),
        ({**DDP, "tags": {"team#1": "ml"}}, "tags.team#1", "tag keys are 1-128"),
        ({**DDP, "tags": {"team": "ml&ops"}}, "tags.team", "tag values"),
        ({**DDP, "environment": {"1BAD": "x"}}, "environment.1BAD", "variable names"),
        ({**DDP, "inputs": {"train data": {"s3_uri": "s3://bucket/x/"}}}, "inputs.train data", "channel names"),
        ({**DDP, "distribution": {"mpi": {"enabled": True}}}, "distribution.mpi", "runs under torchrun"),
        ({**DDP, "distribution": {"instance_groups": []}}, "distribution.instance_groups", "not supported yet"),
        ({**DDP, "distribution": {"deepspeed": {}}}, "distribution.deepspeed", "unknown distribution key"),
    ],
)
def test_a_broken_rule_names_the_field_and_the_fix(spec, field, message):
    problems = check(parse_spec(spec), count_objects=lambda uri: 64)
    assert any(p.field == field and message in str(p) for p in problems), [str(p) for p in problems]
    assert all(p.fix for p in problems)


def test_sharded_channel_with_fewer_objects_than_instances_is_refused():
    problems = check(parse_spec({**DDP, "instance_count": 4}), count_objects=lambda uri: 3)
    (problem,) = problems
    assert problem.field == "inputs.train.distribution"
    assert "holds 3 objects for 4 instances" in str(problem) and "FullyReplicated" in problem.fix


@pytest.mark.parametrize(
    ("spec", "strategy", "world"),
    [
        (DDP, "ddp", 16),
        ({**DDP, "distribution": None, "strategy": "fsdp"}, "fsdp", 16),
        ({**DDP, "hyperparameters": {"strategy": "fsdp"}}, "fsdp", 16),
        (SMDDP, "smddp", 16),
        ({**SMDDP, "distribution": {"pytorchddp": {"enabled": True}}}, "smddp", 16),
        (SMP, "smp", 16),
        ({**DDP, "distribution": None, "instance_type": "ml.m5.xlarge", "instance_count": 3}, "ddp", 3),
    ],
)
def test_strategy_and_world_size_resolve_from_either_spelling(spec, strategy, world):
    plan = resolve(parse_spec(spec))
    assert (plan.strategy, plan.world_size) == (strategy, world)
