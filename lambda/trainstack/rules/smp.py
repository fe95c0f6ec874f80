"""SMP v2's parameters: the keys `torch.sagemaker.init()` reads and their types, the SMP v1 keys it
no longer reads (each with what it became), and the parallel degrees against the world size."""

from __future__ import annotations

from collections.abc import Mapping

from trainstack import facts
from trainstack.rules.problems import Problem
from trainstack.rules.resolution import Resolution
from trainstack.spec import JobSpec

# What an SMP v1 parameter became in SMP v2, for the message that refuses it. The v1 keys the SDK
# validates come from the facts file (a test checks each has an entry here); the rest are SMP v1
# documentation keys the SDK passes through unchecked.
NO_PIPELINE = "pipeline parallelism is not in SMP v2; shard with hybrid_shard_degree and split layers with tensor_parallel_degree"
SMP_V1_EQUIVALENTS: Mapping[str, str] = {
    **dict.fromkeys(
        (
            "partitions",
            "pipeline",
            "microbatches",
            "active_microbatches",
            "auto_partition",
            "default_partition",
            "contiguous",
            "memory_weight",
            "partition_file",
            "load_partition",
            "placement_strategy",
        ),
        NO_PIPELINE,
    ),
    **dict.fromkeys(
        ("ddp", "ddp_port", "ddp_dist_backend", "horovod"),
        "SMP v2 always runs PyTorch FSDP under torchrun; set hybrid_shard_degree for its data-parallel sharding",
    ),
    "optimize": "SMP v2 has no speed/memory switch; use sm_activation_offloading and activation_loading_horizon",
    "deterministic_server": "not in SMP v2; set random_seed for reproducible tensor/expert-parallel modules",
    "sharded_data_parallel_degree": "SMP v2 calls it hybrid_shard_degree",
    "offload_activations": "SMP v2 calls it sm_activation_offloading",
    "shard_optimizer_state": "SMP v2 shards optimizer state with FSDP; set hybrid_shard_degree",
    "delayed_parameter_initialization": "SMP v2 has no such key; create the model on the meta device in the script",
    **dict.fromkeys(
        ("fp16", "bf16", "fp16_params"),
        "SMP v2 has no precision key; set precision in the script (FSDP mixed precision)",
    ),
}


def parameter_problems(resolution: Resolution) -> list[Problem]:
    """SMP v2 reads its parameters in `torch.sagemaker.init()`, after the cluster is billed: check them first."""
    prefix = "distribution.smdistributed.modelparallel.parameters"
    known = facts.smp_parameters()
    problems = []
    for key, value in resolution.smp_parameters.items():
        if key in SMP_V1_EQUIVALENTS or key in facts.smp_v1_parameters():
            equivalent = SMP_V1_EQUIVALENTS.get(key, NO_PIPELINE)
            problems.append(Problem(f"{prefix}.{key}", value, "an SMP v1 parameter, which SMP v2 does not read", equivalent))
        elif key not in known:
            problems.append(
                Problem(f"{prefix}.{key}", value, "not an SMP v2 parameter", f"SMP v2 takes {', '.join(sorted(known))}")
            )
        elif known[key] == "bool" and not isinstance(value, bool):
            problems.append(Problem(f"{prefix}.{key}", value, "must be true or false", f"write {key}: true"))
        elif known[key] == "int" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            problems.append(Problem(f"{prefix}.{key}", value, "must be a positive integer", f"e.g. {key}: 2"))
    return problems


def _degree(resolution: Resolution, name: str, default: int) -> int:
    value = resolution.smp_parameters.get(name, default)
    return (
        value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
    )  # bad types: parameter_problems


def degree_problems(spec: JobSpec, resolution: Resolution) -> list[Problem]:
    problems = []
    hybrid = _degree(resolution, "hybrid_shard_degree", 0)
    tensor = _degree(resolution, "tensor_parallel_degree", 1)
    for name, degree in (("hybrid_shard_degree", hybrid), ("tensor_parallel_degree", tensor)):
        if degree and resolution.world_size % degree:
            field = f"distribution.smdistributed.modelparallel.parameters.{name}"
            problems.append(
                Problem(
                    field,
                    degree,
                    f"does not divide the world size {resolution.world_size} "
                    f"({spec.instance_count} x {resolution.instance.accelerators} GPUs)",
                    "choose a divisor of the world size",
                )
            )
    if not problems and hybrid and tensor > 1 and resolution.world_size % (hybrid * tensor):
        problems.append(
            Problem(
                "distribution.smdistributed.modelparallel.parameters",
                resolution.smp_parameters,
                f"hybrid_shard_degree x tensor_parallel_degree does not divide {resolution.world_size}",
                "make their product divide the world size",
            )
        )
    return problems
