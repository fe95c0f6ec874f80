"""`distribution` as the SageMaker SDK 2.x PyTorch estimator reads it: its keys, each launcher's keys
and the launcher combinations the SDK refuses or silently drops, with a did-you-mean for misspellings."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from trainstack.images import MPI, TORCH_DISTRIBUTED
from trainstack.rules.problems import Problem
from trainstack.rules.resolution import enabled_only
from trainstack.spec import JobSpec

# The keys the SageMaker SDK 2.x PyTorch estimator reads from `distribution`, and from each launcher.
LAUNCHER_KEYS: Mapping[str, frozenset[str]] = {
    "torch_distributed": frozenset({"enabled"}),
    "mpi": frozenset({"enabled", "processes_per_host", "custom_mpi_options"}),
    "pytorchddp": frozenset({"enabled", "custom_mpi_options"}),  # the SDK rewrites it to smdistributed.dataparallel
    "pytorchxla": frozenset({"enabled"}),
    "smdistributed.dataparallel": frozenset({"enabled", "custom_mpi_options"}),
    "smdistributed.modelparallel": frozenset({"enabled", "parameters"}),
}
DISTRIBUTION_KEYS = ("torch_distributed", "smdistributed", "mpi", "pytorchddp", "pytorchxla", "instance_groups")


def distribution_problems(spec: JobSpec) -> list[Problem]:
    """Unknown or malformed keys first; launcher combinations only once every entry is well formed."""
    distribution = spec.distribution or {}
    problems: list[Problem] = []
    for key, value in distribution.items():
        field = f"distribution.{key}"
        if key == "instance_groups":
            problems.append(
                Problem(field, value, "heterogeneous clusters are not supported yet", "use one instance_type with instance_count")
            )
        elif key not in DISTRIBUTION_KEYS:
            guess = _did_you_mean(key, [*DISTRIBUTION_KEYS, *LAUNCHER_KEYS])
            rule = "not a key of the SageMaker SDK's distribution" + (f"; did you mean {guess}?" if guess else "")
            fix = f"write {_spelled(guess)}" if guess else f"use the SDK's keys: {', '.join(DISTRIBUTION_KEYS[:5])}"
            if _means_pytorch_ddp(key) and guess != TORCH_DISTRIBUTED:
                rule = "not a key of the SageMaker SDK's distribution; for PyTorch DDP the key is torch_distributed" + (
                    f" ({guess} is another launcher)" if guess else ""
                )
                fix = f"write {_spelled(TORCH_DISTRIBUTED)}, or strategy: ddp"
            problems.append(Problem(field, value, rule, fix))
        elif not isinstance(value, dict):
            problems.append(Problem(field, value, "must be a mapping", f"write {_spelled(key)}"))
        elif key == "smdistributed":
            for name, launcher in value.items():
                path = f"smdistributed.{name}"
                if path not in LAUNCHER_KEYS:
                    guess = _did_you_mean(name, ["dataparallel", "modelparallel"])
                    rule = "smdistributed takes dataparallel (SMDDP) or modelparallel (SMP v2)"
                    problems.append(
                        Problem(
                            f"{field}.{name}",
                            launcher,
                            rule,
                            f"write {_spelled(f'smdistributed.{guess}')}" if guess else "use one of them",
                        )
                    )
                else:
                    problems += _launcher_problems(path, launcher)
        else:
            problems += _launcher_problems(key, value)
    return problems or _combination_problems(distribution)


def _did_you_mean(key: str, candidates: list[str]) -> str | None:
    def normal(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    normals = {normal(candidate): candidate for candidate in candidates}
    close = difflib.get_close_matches(normal(key), list(normals), n=1, cutoff=0.75)
    return normals[close[0]] if close else None


def _means_pytorch_ddp(key: str) -> bool:
    """A key that names PyTorch's own data parallelism (pytorchx, torch_ddp, torchrun, pytorch) rather
    than XLA's: spelling alone sends `pytorchx` to pytorchxla, which is for XLA devices."""
    text = re.sub(r"[^a-z0-9]", "", key.lower())
    return "xla" not in text and (text.startswith(("pytorch", "torch")) or "ddp" in text)


def _spelled(path: str) -> str:
    """How a (dotted) distribution key is written in a spec."""
    head, _, tail = path.partition(".")
    return f"{head}: {{{tail}: {{enabled: true}}}}" if tail else f"{head}: {{enabled: true}}"


def _launcher_problems(path: str, launcher: Any) -> list[Problem]:
    field = f"distribution.{path}"
    if not isinstance(launcher, dict):
        return [Problem(field, launcher, "must be a mapping", f"write {_spelled(path)}")]
    allowed = LAUNCHER_KEYS[path]
    problems = []
    for key, value in launcher.items():
        if key not in allowed:
            guess = _did_you_mean(key, sorted(allowed))
            rule = f"the SDK reads only {', '.join(sorted(allowed))} here" + (f"; did you mean {guess}?" if guess else "")
            problems.append(Problem(f"{field}.{key}", value, rule, f"rename it to {guess}" if guess else "remove it"))
    enabled = launcher.get("enabled")
    if not isinstance(enabled, bool):
        problems.append(
            Problem(
                f"{field}.enabled",
                enabled,
                "must be true or false (the SDK reads a missing enabled as false, a silent no-op)",
                "write enabled: true, or enabled: false to leave this launcher off",
            )
        )
    options = launcher.get("custom_mpi_options", "")
    if not isinstance(options, str):
        problems.append(
            Problem(f"{field}.custom_mpi_options", options, "must be a string of mpirun options", 'e.g. "-x NCCL_DEBUG=INFO"')
        )
    processes = launcher.get("processes_per_host", 1)
    if not isinstance(processes, int) or isinstance(processes, bool) or processes < 1:
        problems.append(
            Problem(f"{field}.processes_per_host", processes, "must be a positive integer", "e.g. 8 (one process per GPU)")
        )
    parameters = launcher.get("parameters", {})
    if not isinstance(parameters, dict):
        problems.append(
            Problem(f"{field}.parameters", parameters, "must be a mapping of SMP v2 parameters", "e.g. {hybrid_shard_degree: 8}")
        )
    return problems


def _combination_problems(distribution: Mapping[str, Any]) -> list[Problem]:
    """Launcher combinations the SDK refuses or silently drops. Runs on well-formed entries only."""
    if distribution.get("pytorchxla", {}).get("enabled"):
        return [
            Problem(
                "distribution.pytorchxla",
                distribution["pytorchxla"],
                "the SDK runs PyTorch/XLA only with SageMaker Training Compiler, which trainstack does not configure",
                "use torch_distributed, or enabled: false",
            )
        ]
    smdistributed_enabled = any(launcher.get("enabled") is True for launcher in distribution.get("smdistributed", {}).values())
    if distribution.get("pytorchddp", {}).get("enabled") is True and smdistributed_enabled:
        return [
            Problem(
                "distribution.pytorchddp",
                distribution["pytorchddp"],
                "the SDK refuses pytorchddp (its old name for smdistributed.dataparallel) together with smdistributed",
                "keep one of them",
            )
        ]
    enabled = enabled_only(distribution)
    smdistributed = enabled.get("smdistributed", {})
    if len(smdistributed) > 1:
        return [
            Problem(
                "distribution.smdistributed",
                distribution["smdistributed"],
                "SMDDP and SMP v2 cannot both be enabled (the SDK takes one smdistributed strategy)",
                "enable one of dataparallel or modelparallel",
            )
        ]
    if "modelparallel" in smdistributed and TORCH_DISTRIBUTED not in enabled:
        return [
            Problem(
                "distribution.smdistributed.modelparallel",
                distribution["smdistributed"]["modelparallel"],
                "SMP v2 runs under torchrun; without torch_distributed the SDK picks the plain DLC and SMP v1's mpirun",
                "add torch_distributed: {enabled: true}",
            )
        ]
    if MPI in enabled and (TORCH_DISTRIBUTED in enabled or smdistributed):
        other = TORCH_DISTRIBUTED if TORCH_DISTRIBUTED in enabled else f"smdistributed.{next(iter(smdistributed))}"
        return [
            Problem(
                "distribution.mpi",
                distribution["mpi"],
                f"mpi and {other} are two launchers; the SDK drops one of them without a word",
                f"keep mpi or {other}",
            )
        ]
    return []
