"""Every rule, table-driven, with the message it gives. Nothing here touches AWS."""

from __future__ import annotations

import pytest

from tests.core.specs import DDP, SMDDP, SMP, SPECS
from trainstack import facts
from trainstack.rules import check, resolve
from trainstack.rules.smp import SMP_V1_EQUIVALENTS
from trainstack.spec import parse_spec

TORCHRUN = {"torch_distributed": {"enabled": True}}
MPI = {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": "-x NCCL_DEBUG=INFO"}}
PARAMETERS = "distribution.smdistributed.modelparallel.parameters"
SMDDP_LAUNCHER = {"smdistributed": {"dataparallel": {"enabled": True}}}
ALIAS_24 = "PyTorch 2.4.0 (\"2.4\" is the SDK's alias for it) is not in the SDK's torch_distributed versions"
TRN = {
    **DDP,
    "instance_type": "ml.trn1.32xlarge",
    "framework_version": "1.11.0",
    "source_dir": "s3://my-code/neuron/sourcedir.tar.gz",
}


def smp(**parameters):
    return {**SMP, "distribution": {**TORCHRUN, "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}}}}


def fallback(*types, **changes):
    """An on-demand job that may run on any of `types`, in that order (InstancePreferences)."""
    return {**DDP, "instance_type": types[0], "instance_types": list(types), "spot": {"enabled": False}, **changes}


@pytest.mark.parametrize("strategy", sorted(SPECS))
def test_the_example_spec_for_each_strategy_passes(strategy):
    assert check(parse_spec(SPECS[strategy]), count_objects=lambda uri: 64, region="us-east-1") == []


REFUSED = [
    # instance types
    ({**DDP, "instance_type": "ml.p4.24xlarge"}, "instance_type", "not a SageMaker training instance type; did you mean ml.p4d"),
    ({**DDP, "instance_type": "ml.g7.2xlarge"}, "instance_type", "no source trainstack reads gives its accelerator count"),
    ({**DDP, "instance_type": "ml.p2.8xlarge"}, "instance_type", "P2 instances have been deprecated"),
    (fallback("ml.p4d.24xlarge", "ml.p4.24xlarge"), "instance_types[1]", "not a SageMaker training instance type"),
    # capacity: fallback lists, training plans, pending time
    (
        fallback(
            "ml.p5.48xlarge", "ml.p4d.24xlarge", "ml.p4de.24xlarge", "ml.p5e.48xlarge", "ml.p5en.48xlarge", "ml.p3dn.24xlarge"
        ),
        "instance_types",
        "SageMaker takes at most 5 preferences",
    ),
    (fallback("ml.p4d.24xlarge", "ml.p4d.24xlarge"), "instance_types", "an instance type can appear only once"),
    (
        fallback("ml.p5.48xlarge", "ml.p4d.24xlarge", spot={"enabled": True, "max_wait": "48h"}),
        "instance_types",
        "SageMaker refuses it with managed spot training",
    ),
    (fallback("ml.p4d.24xlarge", "ml.g5.48xlarge"), "instance_types", "these types differ in EFA support"),
    (
        fallback("ml.p4d.24xlarge", "ml.p5.48xlarge", distribution=SMDDP_LAUNCHER, framework_version="2.2.0"),
        "instance_types[1] (ml.p5.48xlarge): distribution",
        "SMDDP does not support ml.p5.48xlarge",
    ),
    ({**DDP, "training_plan_arn": "arn:aws:sagemaker:us-east-1:123:plan/x"}, "training_plan_arn", "not a training plan ARN"),
    ({**DDP, "max_pending": "10m"}, "max_pending", "SageMaker allows 1800 to 2419200 seconds of pending"),
    (
        {**DDP, "instance_type": "ml.c5.xlarge", "max_pending": "1h"},
        "max_pending",
        "MaxPendingTimeInSeconds has no effect on CPU-only types (ml.c5.xlarge)",
    ),
    # the shape of `distribution`
    (
        {**DDP, "distribution": {"smdistributed_dataparallel": {"enabled": True}}},
        "distribution.smdistributed_dataparallel",
        "did you mean smdistributed.dataparallel?; write smdistributed: {dataparallel: {enabled: true}}",
    ),
    (  # the seeds' pytorchx means PyTorch DDP: by intent, not the spelling's pytorchxla
        {**DDP, "distribution": {"pytorchx": {"enabled": True}}},
        "distribution.pytorchx",
        "for PyTorch DDP the key is torch_distributed (pytorchxla is another launcher); "
        "write torch_distributed: {enabled: true}, or strategy: ddp",
    ),
    (
        {**DDP, "distribution": {"torch_ddp": {"enabled": True}}},
        "distribution.torch_ddp",
        "for PyTorch DDP the key is torch_distributed (pytorchddp is another launcher); write torch_distributed",
    ),
    (
        {**DDP, "distribution": {"torch-distributed": {"enabled": True}}},
        "distribution.torch-distributed",
        "did you mean torch_distributed?; write torch_distributed: {enabled: true}",
    ),
    ({**DDP, "distribution": {"deepspeed": {}}}, "distribution.deepspeed", "not a key of the SageMaker SDK's distribution; use"),
    ({**DDP, "distribution": {"torch_distributed": True}}, "distribution.torch_distributed", "must be a mapping"),
    (
        {**DDP, "distribution": {"smdistributed": {"dataparallel": None}}},
        "distribution.smdistributed.dataparallel",
        "must be a mapping; write smdistributed: {dataparallel: {enabled: true}}",
    ),
    (
        {**DDP, "distribution": {"torch_distributed": {"enable": True}}},
        "distribution.torch_distributed.enable",
        "did you mean enabled?",
    ),
    (
        {**DDP, "distribution": {"torch_distributed": {"enabled": True, "nodes": 2}}},
        "distribution.torch_distributed.nodes",
        "the SDK reads only enabled here; remove it",
    ),
    ({**DDP, "distribution": {"torch_distributed": {}}}, "distribution.torch_distributed.enabled", "missing enabled as false"),
    (
        {**DDP, "distribution": {"smdistributed": {"modelparalel": {"enabled": True}}}},
        "distribution.smdistributed.modelparalel",
        "write smdistributed: {modelparallel: {enabled: true}}",
    ),
    (
        {**DDP, "distribution": {"smdistributed": {"zero": {"enabled": True}}}},
        "distribution.smdistributed.zero",
        "smdistributed takes dataparallel (SMDDP) or modelparallel (SMP v2); use one of them",
    ),
    (
        {**DDP, "distribution": {"mpi": {"enabled": True, "processes_per_host": 0}}},
        "distribution.mpi.processes_per_host",
        "must be a positive integer",
    ),
    (
        {**DDP, "distribution": {"mpi": {"enabled": True, "custom_mpi_options": 5}}},
        "distribution.mpi.custom_mpi_options",
        "must be a string",
    ),
    (
        {**SMP, "distribution": {**TORCHRUN, "smdistributed": {"modelparallel": {"enabled": True, "parameters": "smp.json"}}}},
        PARAMETERS,
        "must be a mapping of SMP v2 parameters",
    ),
    ({**DDP, "distribution": {"instance_groups": []}}, "distribution.instance_groups", "not supported yet"),
    # launcher combinations
    ({**DDP, "distribution": {**TORCHRUN, "pytorchxla": {"enabled": True}}}, "distribution.pytorchxla", "Training Compiler"),
    (
        {**SMDDP, "distribution": {"pytorchddp": {"enabled": True}, **SMDDP_LAUNCHER}},
        "distribution.pytorchddp",
        "refuses pytorchddp",
    ),
    (
        {
            **SMP,
            "distribution": {
                **TORCHRUN,
                "smdistributed": {"dataparallel": {"enabled": True}, "modelparallel": {"enabled": True}},
            },
        },
        "distribution.smdistributed",
        "cannot both be enabled",
    ),
    (
        {**SMP, "distribution": {"smdistributed": {"modelparallel": {"enabled": True}}}},
        "distribution.smdistributed.modelparallel",
        "add torch_distributed: {enabled: true}",
    ),
    ({**DDP, "distribution": {**MPI, **TORCHRUN}}, "distribution.mpi", "mpi and torch_distributed are two launchers"),
    (
        {**SMDDP, "distribution": {**MPI, **SMDDP_LAUNCHER}},
        "distribution.mpi",
        "mpi and smdistributed.dataparallel are two launchers",
    ),
    # strategies on instance types
    ({**SMDDP, "instance_type": "ml.p5.48xlarge"}, "distribution", "SMDDP does not support ml.p5.48xlarge"),
    ({**SMDDP, "instance_type": "ml.g5.48xlarge"}, "distribution", "SMDDP does not support ml.g5.48xlarge"),
    ({**SMDDP, "instance_type": "ml.m5.4xlarge"}, "distribution", "smddp needs NVIDIA GPUs"),
    (
        {**SMP, "image": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.1-gpu-py311"},
        "image",
        "SMP v2 needs the SMP image",
    ),
    ({**smp(), "instance_type": "ml.g5.xlarge", "instance_count": 1}, "distribution", "needs at least 2 GPUs in the job"),
    # Trainium
    ({**TRN, "source_dir": None}, "instance_type", "built-in training/ entry point runs on CUDA GPUs or CPUs, not on Neuron"),
    ({**TRN, "distribution": MPI}, "distribution", "Trainium runs only torch_distributed"),
    (
        {**TRN, "framework_version": "2.0.0"},
        "framework_version",
        "Trainium (Neuron) has no image for PyTorch 2.0.0; use one of 1.11.0",
    ),
    # versions: exact lists, aliases as the SDK resolves them
    (
        {**DDP, "framework_version": "2.3.1"},
        "framework_version",
        "torch_distributed has no image for PyTorch 2.3.1; use one of 1.13.1",
    ),
    ({**DDP, "framework_version": "2.1.2"}, "framework_version", "torch_distributed has no image for PyTorch 2.1.2"),
    ({**DDP, "framework_version": "2.4"}, "framework_version", ALIAS_24),
    ({**DDP, "framework_version": "2.11.0"}, "framework_version", "torch_distributed has no image for PyTorch 2.11.0"),
    (
        {**SMDDP, "framework_version": "2.3.0"},
        "framework_version",
        "PyTorch 2.3.0 is not in the SDK's SMDDP versions; use one of 1.13.1, 2.0.0",
    ),
    (
        {**SMP, "framework_version": "2.3.0"},
        "framework_version",
        "SMP v2 has no image for PyTorch 2.3.0; use one of 2.0.1, 2.1.2",
    ),
    ({**SMP, "framework_version": "2.4"}, "framework_version", "SMP v2 has no image for PyTorch 2.4"),
    ({**SMDDP, "py_version": "py311"}, "py_version", "pytorch-training image for PyTorch 2.2.0 is built for py310"),
    ({**DDP, "framework_version": "2.6.0", "py_version": "py311"}, "py_version", "write py_version: py312"),
    # SMP v2 parameters
    (smp(partitions=2), f"{PARAMETERS}.partitions", "pipeline parallelism is not in SMP v2"),
    (smp(ddp=True), f"{PARAMETERS}.ddp", "SMP v2 always runs PyTorch FSDP"),
    (smp(sharded_data_parallel_degree=8), f"{PARAMETERS}.sharded_data_parallel_degree", "SMP v2 calls it hybrid_shard_degree"),
    (smp(pipeline_degree=2), f"{PARAMETERS}.pipeline_degree", "not an SMP v2 parameter; SMP v2 takes activation_loading_horizon"),
    (smp(hybrid_shard_degree="8"), f"{PARAMETERS}.hybrid_shard_degree", "positive integer"),
    (smp(sm_activation_offloading="yes"), f"{PARAMETERS}.sm_activation_offloading", "must be true or false"),
    (smp(hybrid_shard_degree=3), f"{PARAMETERS}.hybrid_shard_degree", "does not divide the world size 16 (2 x 8 GPUs)"),
    (smp(tensor_parallel_degree=6), f"{PARAMETERS}.tensor_parallel_degree", "does not divide"),
    (
        smp(hybrid_shard_degree=8, tensor_parallel_degree=4),
        PARAMETERS,
        "hybrid_shard_degree x tensor_parallel_degree does not divide 16",
    ),
    # environment
    ({**DDP, "instance_type": "ml.g5.2xlarge", "environment": {"FI_PROVIDER": "efa"}}, "environment.FI_PROVIDER", "has no EFA"),
    (
        {**DDP, "environment": {f"VAR_{i}": "x" for i in range(98)}},
        "environment",
        "with trainstack's EFA variables the job has 101 environment variables; SageMaker takes 100",
    ),
    ({**DDP, "environment": {"1BAD": "x"}}, "environment.1BAD", "variable names"),
    ({**DDP, "environment": {"BIG": "x" * 513}}, "environment.BIG", "values are at most 512 characters"),
    (
        {**DDP, "environment": {"TRAINSTACK_INJECT_HANG": "1:3"}},
        "environment.TRAINSTACK_INJECT_HANG",
        "TRAINSTACK_* variables are trainstack's test hooks",
    ),
    # stopping, warm pools, hyperparameters, names
    ({**DDP, "spot": {"enabled": True, "max_wait": "12h"}}, "spot.max_wait", "must be at least max_runtime (86400 s)"),
    ({**DDP, "spot": {"enabled": True, "max_wait": "29d"}}, "spot.max_wait", "SageMaker allows at most 28 days"),
    ({**DDP, "checkpoints": False}, "checkpoints", "restarts from scratch"),
    ({**DDP, "max_runtime": "29d", "spot": {"enabled": False}}, "max_runtime", "1 second to 28 days"),
    ({**DDP, "warm_pool": "7h"}, "warm_pool", "at most 6 hours"),
    ({**DDP, "hyperparameters": {"lr": float("nan")}}, "hyperparameters.lr", "not JSON-encodable"),
    ({**DDP, "hyperparameters": {"sagemaker_program": "x.py"}}, "hyperparameters.sagemaker_program", "set by trainstack"),
    ({**DDP, "hyperparameters": {"blob": "x" * 3000}}, "hyperparameters.blob", "limit is 2500"),
    ({**DDP, "entry_point": "x" * 2499}, "entry_point", "encoded value is 2501 characters, the limit is 2500"),  # quoted
    ({**DDP, "source_dir": "s3://b/" + "x" * 2500}, "source_dir", "the limit is 2500"),
    ({**DDP, "hyperparameters": {"k" * 257: 1}}, f"hyperparameters.{'k' * 40}...", "names are at most 256 characters"),
    (
        {**DDP, "hyperparameters": {f"h{i}": i for i in range(89)}},
        "hyperparameters",
        "at most 88 leave room for the 12 trainstack sets",
    ),
    ({**DDP, "tags": {f"tag{i}": "x" for i in range(45)}}, "tags", "at most 44 user tags"),
    ({**DDP, "tags": {"aws:owner": "me"}}, "tags.aws:owner", "reserved"),
    ({**DDP, "tags": {"team#1": "ml"}}, "tags.team#1", "tag keys are 1-128"),
    ({**DDP, "tags": {"team": "ml&ops"}}, "tags.team", "tag values"),
    ({**DDP, "inputs": {"train data": {"s3_uri": "s3://bucket/x/"}}}, "inputs.train data", "channel names"),
    # inputs: the table's channel holds 64 objects
    ({**DDP, "instance_count": 65}, "inputs.train.distribution", "holds 64 objects for 65 instances: some would get no data"),
]


@pytest.mark.parametrize(("spec", "field", "message"), REFUSED, ids=[f"{i}-{row[1]}" for i, row in enumerate(REFUSED)])
def test_a_broken_rule_names_the_field_and_the_fix(spec, field, message):
    problems = check(parse_spec(spec), count_objects=lambda uri: 64)
    assert any(p.field == field and message in str(p) for p in problems), [str(p) for p in problems]
    assert all(p.fix for p in problems)


@pytest.mark.parametrize(
    ("spec", "region", "message"),
    [
        (SMP, "af-south-1", "no smdistributed-modelparallel image for PyTorch 2.3.1 in af-south-1; run in one of ap-northeast-1"),
        ({**DDP, "framework_version": "2.5.1"}, "us-iso-east-1", "no pytorch-training image for PyTorch 2.5.1 in us-iso-east-1"),
        (DDP, "mars-east-1", "no pytorch-training image for PyTorch 2.3.0 in mars-east-1; run in a region docs/support-matrix"),
    ],
)
def test_a_framework_image_missing_in_the_region_is_refused_there(spec, region, message):
    (problem,) = check(parse_spec(spec), region=region)
    assert problem.field == "region" and message in str(problem), str(problem)


@pytest.mark.parametrize(("spec", "region"), [(SMP, "eu-west-1"), (DDP, "af-south-1"), (DDP, "cn-north-1")])
def test_a_framework_image_that_exists_in_the_region_passes(spec, region):
    assert check(parse_spec(spec), region=region) == []


def test_sharded_channel_with_fewer_objects_than_instances_is_refused():
    problems = check(parse_spec({**DDP, "instance_count": 4}), count_objects=lambda uri: 3)
    (problem,) = problems
    assert problem.field == "inputs.train.distribution"
    assert "holds 3 objects for 4 instances" in str(problem) and "FullyReplicated" in problem.fix


def test_every_smp_v1_key_the_sdk_validates_has_a_v2_message():
    assert facts.smp_v1_parameters() <= set(SMP_V1_EQUIVALENTS)


@pytest.mark.parametrize(
    ("spec", "strategy", "world"),
    [
        (DDP, "ddp", 16),
        ({**DDP, "distribution": None, "strategy": "fsdp"}, "fsdp", 16),
        ({**DDP, "hyperparameters": {"strategy": "fsdp"}}, "fsdp", 16),
        (SMDDP, "smddp", 16),
        ({**SMDDP, "distribution": {"pytorchddp": {"enabled": True}}}, "smddp", 16),
        ({**SMDDP, "distribution": {**TORCHRUN, **SMDDP_LAUNCHER}}, "smddp", 16),
        (SMP, "smp", 16),
        ({**DDP, "distribution": MPI}, "ddp", 16),
        ({**DDP, "distribution": {"mpi": {"enabled": True}}, "instance_type": "ml.g5.12xlarge"}, "ddp", 8),
        ({**DDP, "distribution": None, "instance_type": "ml.m5.xlarge", "instance_count": 3}, "ddp", 3),
        ({**TRN, "distribution": TORCHRUN}, "ddp", 64),  # 2 x 32 NeuronCores
    ],
)
def test_strategy_and_world_size_resolve_from_either_spelling(spec, strategy, world):
    resolution = resolve(parse_spec(spec))
    assert (resolution.strategy, resolution.world_size) == (strategy, world)


@pytest.mark.parametrize(
    "distribution",
    [
        {**TORCHRUN, "pytorchxla": {"enabled": False}},
        {**TORCHRUN, "mpi": {"enabled": False}},
        {**TORCHRUN, "smdistributed": {"dataparallel": {"enabled": False}}},
    ],
)
def test_a_launcher_with_enabled_false_is_ignored(distribution):
    spec = parse_spec({**DDP, "distribution": distribution})
    assert check(spec) == []
    assert resolve(spec).distribution == TORCHRUN


def test_mpi_pasted_from_the_sdk_passes_with_the_builtin_script():
    assert check(parse_spec({**DDP, "distribution": MPI}), region="us-east-1") == []


@pytest.mark.parametrize(
    ("spec", "version", "alias", "py_version"),
    [
        ({**DDP, "framework_version": "2.1"}, "2.1.0", "2.1", "py310"),
        ({**SMP, "framework_version": "2.2"}, "2.2.0", "2.2", "py310"),  # through the SMP table's own aliases
        ({**SMP, "framework_version": "2.1"}, "2.1.2", "2.1", "py310"),  # the DLC's "2.1" would be 2.1.0
        ({**DDP, "framework_version": "2.3.0"}, "2.3.0", None, "py311"),
        ({**TRN, "framework_version": "1.11"}, "1.11.0", "1.11", "py38"),
    ],
)
def test_an_alias_resolves_as_the_sdk_resolves_it_and_python_follows_the_version(spec, version, alias, py_version):
    spec = parse_spec(spec)
    assert check(spec) == []
    resolution = resolve(spec)
    assert (resolution.framework.version, resolution.framework.written, resolution.py_version) == (version, alias, py_version)


@pytest.mark.parametrize(
    ("spec", "version", "py_version"),
    [
        ({**DDP, "framework_version": None}, "2.10.0", "py313"),
        ({**SMDDP, "framework_version": None}, "2.2.0", "py310"),
        ({**SMP, "framework_version": None}, "2.5.1", "py311"),
        ({**TRN, "framework_version": None}, "1.11.0", "py38"),
    ],
)
def test_without_a_version_the_newest_the_strategy_supports_is_used(spec, version, py_version):
    resolution = resolve(parse_spec(spec))
    assert (resolution.framework_version, resolution.py_version) == (version, py_version)


def test_a_users_own_image_on_trainium_needs_no_framework_version():
    spec = parse_spec({**TRN, "source_dir": None, "image": "123456789012.dkr.ecr.us-east-1.amazonaws.com/neuron-llm:1"})
    assert check(spec, region="us-east-1") == []
    assert resolve(spec).framework is None


def test_bad_distribution_values_are_refused_without_a_traceback():
    for distribution in (
        {"mpi": None},
        {"smdistributed": {"dataparallel": None}},
        {"smdistributed": []},
        {"mpi": {"enabled": "yes"}},
    ):
        problems = check(parse_spec({**DDP, "distribution": distribution}))
        assert problems and all(p.field.startswith("distribution") for p in problems), distribution


def test_the_training_scripts_test_hooks_cannot_be_set_from_a_spec():
    problems = check(parse_spec({**DDP, "environment": {"TRAINSTACK_INJECT_HANG": "1:3"}}), count_objects=lambda uri: 64)
    assert [str(p) for p in problems] == [
        'environment.TRAINSTACK_INJECT_HANG = "1:3": TRAINSTACK_* variables are trainstack\'s test hooks, which only its '
        "local twin sets; remove the variable"
    ]
