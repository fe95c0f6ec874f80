"""Frameworks and images: whether the strategy fits the instance, Trainium's launchers, the PyTorch
version and Python version against the SDK's launcher lists and the images that exist, and whether
the image exists in the job's region."""

from __future__ import annotations

from trainstack import facts, images
from trainstack.facts import ImageUnavailableError
from trainstack.images import MPI, SMDATAPARALLEL, TORCH_DISTRIBUTED
from trainstack.rules.problems import Problem
from trainstack.rules.resolution import Resolution
from trainstack.spec import PROJECT_IMAGE, JobSpec
from trainstack.stack_context import StackContext


def strategy_problems(spec: JobSpec, resolution: Resolution) -> list[Problem]:
    instance, field = resolution.instance, "strategy" if spec.strategy else "distribution"
    problems = []
    if resolution.strategy in ("smddp", "smp") and instance.kind != "gpu":
        problems.append(
            Problem(
                field,
                resolution.strategy,
                f"{resolution.strategy} needs NVIDIA GPUs; {instance.name} has none",
                "choose a ml.p4d/p5-class instance or strategy ddp",
            )
        )
    elif resolution.strategy == "smddp" and instance.name not in facts.smddp_instance_types():
        supported = ", ".join(facts.smddp_instance_types())
        problems.append(
            Problem(
                field,
                "smddp",
                f"SMDDP does not support {instance.name}",
                f"use {supported}, or strategy ddp / fsdp (NCCL over EFA) on {instance.name}",
            )
        )
    if resolution.strategy == "smp" and spec.image and images.repository("smp") not in spec.image:
        problems.append(
            Problem(
                "image",
                spec.image,
                "SMP v2 needs the SMP image; the plain DLC lacks torch.sagemaker",
                "omit image to use the SMP image for framework_version",
            )
        )
    if resolution.strategy in ("smddp", "smp") and resolution.world_size < 2:
        problems.append(
            Problem(
                field, resolution.strategy, "needs at least 2 GPUs in the job", "use a multi-GPU instance or instance_count >= 2"
            )
        )
    return problems


def trainium_problems(spec: JobSpec, resolution: Resolution) -> list[Problem]:
    if not resolution.instance.neuron:
        return []
    allowed = facts.trainium_distributions()
    if set(resolution.distribution) - set(allowed):
        return [
            Problem(
                "strategy" if spec.strategy else "distribution",
                spec.strategy or spec.distribution,
                f"Trainium runs only {', '.join(allowed)} (the SDK's Trainium launchers)",
                "use torch_distributed: {enabled: true} with a Neuron (torch-neuronx) script",
            )
        ]
    if spec.source_dir is None and spec.image is None:
        return [
            Problem(
                "instance_type",
                spec.instance_type,
                "trainstack's built-in training/ entry point runs on CUDA GPUs or CPUs, not on Neuron devices: "
                "the job would be billed and find nothing to train on",
                "give source_dir with a Neuron (torch-neuronx) script, or your own image",
            )
        ]
    return []


def _launcher_name(resolution: Resolution) -> str:
    if resolution.image_kind == "neuron":
        return "Trainium (Neuron)"
    if resolution.image_kind == "smp":
        return "SMP v2"
    return {SMDATAPARALLEL: "SMDDP", MPI: "mpi"}.get(
        next(iter(resolution.launchers - {TORCH_DISTRIBUTED}), ""), "torch_distributed"
    )


def version_problems(spec: JobSpec, resolution: Resolution) -> list[Problem]:
    if spec.image:
        return []
    supported = images.supported_versions(resolution.image_kind, resolution.launchers)
    name, written = _launcher_name(resolution), spec.framework_version
    if resolution.framework is None:
        exact = facts.resolve_version(resolution.image_kind, written) if written else None
        if exact is None:
            rule = f"{name} has no image for PyTorch {written}" if supported else f"{name} has no image for any version"
        else:  # an image exists, but the SDK's launcher list leaves the version out
            alias = f' ("{written}" is the SDK\'s alias for it)' if exact != written else ""
            rule = f"PyTorch {exact}{alias} is not in the SDK's {name} versions"
        fix = f"use one of {', '.join(supported)}" if supported else "choose another instance type or strategy"
        return [Problem("framework_version", written, rule, fix)]
    version = resolution.framework.version
    entry = facts.image_version(resolution.image_kind, version)
    if spec.py_version is not None and spec.py_version not in entry.py_versions:
        valid = " or ".join(entry.py_versions)
        return [
            Problem(
                "py_version",
                spec.py_version,
                f"the {images.repository(resolution.image_kind)} image for PyTorch {version} is built for {valid}",
                f"write py_version: {valid}, or leave it out",
            )
        ]
    return []


def image_in_region_problems(spec: JobSpec, resolution: Resolution, region: str) -> list[Problem]:
    if spec.image or resolution.framework is None or resolution.py_version is None:
        return []
    try:
        images.image_uri(resolution.image_kind, resolution.framework.version, resolution.py_version, region, resolution.instance)
    except ImageUnavailableError as error:
        if region not in facts.load().regions:
            fix = "run in a region docs/support-matrix.md lists, or give image"
        else:
            fix = f"run in one of {', '.join(error.choices)}" + (
                ", or use strategy ddp / fsdp" if resolution.image_kind == "smp" else ""
            )
        return [Problem("region", region, error.reason, fix)]
    return []


def project_image_problems(spec: JobSpec, stack: StackContext | None) -> list[Problem]:
    """`image: project` needs a stack with the project image (the offline CLI, knowing no stack,
    leaves the question to Validate)."""
    if spec.image != PROJECT_IMAGE or stack is None or stack.project_image_uri:
        return []
    return [
        Problem(
            "image",
            PROJECT_IMAGE,
            "the stack has no project image",
            "deploy it with `cdk deploy -c build_training_image=true -c region=<region>` (the local twin's stack has it), "
            "or give the image's URI",
        )
    ]
