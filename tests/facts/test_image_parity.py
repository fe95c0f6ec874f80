"""The image trainstack renders equals the one the SageMaker SDK builds (`get_training_image_uri`),
for every strategy, version, region and instance family the facts file covers.

SDK 2.x answers where its tables know the version and region; SDK 3.x answers for what only its
tables add (2.9.0, 2.10.0, new regions). Regions where no image exists are refused by both.
"""

from __future__ import annotations

import pytest

from tests.facts.conftest import answers, start_oracle
from trainstack import facts, images
from trainstack.facts import ImageUnavailableError
from trainstack.images import MPI, SMDATAPARALLEL, TORCH_DISTRIBUTED

TORCHRUN = {"torch_distributed": {"enabled": True}}
# strategy -> (distribution as the SDK takes it, launchers, instance types covering each family)
CPU_AND_GPU = ["ml.m5.xlarge", "ml.c5.4xlarge", "ml.g5.12xlarge", "ml.g5.48xlarge", "ml.p4d.24xlarge", "ml.p5.48xlarge"]
STRATEGIES = {
    "ddp": (TORCHRUN, {TORCH_DISTRIBUTED}, CPU_AND_GPU),
    "mpi": ({"mpi": {"enabled": True, "processes_per_host": 8}}, {MPI}, CPU_AND_GPU),
    "smddp": ({"smdistributed": {"dataparallel": {"enabled": True}}}, {SMDATAPARALLEL}, ["ml.p3.16xlarge", "ml.p4d.24xlarge"]),
    "smp": (
        {**TORCHRUN, "smdistributed": {"modelparallel": {"enabled": True}}},
        {TORCH_DISTRIBUTED},
        ["ml.g5.48xlarge", "ml.p4d.24xlarge", "ml.p5.48xlarge", "ml.p5en.48xlarge"],
    ),
    "trn": (TORCHRUN, {TORCH_DISTRIBUTED}, ["ml.trn1.2xlarge", "ml.trn1.32xlarge", "ml.trn1n.32xlarge"]),
}


def _ours(kind: facts.ImageKind, version: str, region: str, instance_type: str) -> str | None:
    try:
        instance = facts.instance(instance_type)
        return images.image_uri(kind, version, facts.default_py_version(kind, version), region, instance)
    except ImageUnavailableError:
        return None


def _cases() -> list[tuple[str, list, str | None, str]]:
    """(label, SDK query, our URI, the exact version the query's version text stands for)."""
    cases = []
    regions = sorted(facts.load().regions)
    for strategy, (distribution, launchers, instance_types) in STRATEGIES.items():
        for instance_type in instance_types:
            kind = images.image_kind("smp" if strategy == "smp" else "ddp", facts.instance(instance_type))
            versions = images.supported_versions(kind, frozenset(launchers))
            aliases = {alias: exact for alias, exact in facts.aliases_of(kind).items() if exact in versions}
            for written, exact in [*((v, v) for v in versions), *aliases.items()]:
                for region in regions:
                    # py_version None: the SDK picks the image's Python itself, which ours must match.
                    query = [region, written, None, distribution, instance_type]
                    ours = _ours(kind, exact, region, instance_type)
                    cases.append((f"{strategy} {written} {instance_type} {region}", query, ours, exact))
    return cases


@pytest.fixture(scope="module")
def parity():
    cases = _cases()
    queries = [query for _, query, _, _ in cases]
    sdk2, sdk3 = start_oracle("images", queries), start_oracle("images", queries, "--sdk3")
    return cases, answers(sdk2), answers(sdk3)


def test_every_covered_image_equals_the_sdks(parity):
    cases, sdk2, sdk3 = parity
    mismatches = []
    for (label, query, ours, exact), from2, from3 in zip(cases, sdk2, sdk3, strict=True):
        expected = from2 if from2 is not None else from3
        if expected is not None and query[1] != exact:  # an alias: the SDK keeps it in the tag, ours names the version
            expected = expected.replace(f":{query[1]}-", f":{exact}-")
        if ours != expected:
            mismatches.append(f"{label}: trainstack {ours}, SDK {expected}")
    assert not mismatches, f"{len(mismatches)} of {len(cases)} differ:\n" + "\n".join(mismatches[:20])


def test_parity_covers_every_strategy_both_partitions_and_refusals(parity):
    cases, sdk2, sdk3 = parity
    answered = [label for (label, _, ours, _), from2, from3 in zip(cases, sdk2, sdk3, strict=True) if ours and (from2 or from3)]
    assert {label.split()[0] for label in answered} == set(STRATEGIES)
    assert any(label.endswith("cn-north-1") for label in answered)
    assert any(label.startswith("smp") and label.endswith("af-south-1") for label, _, ours, _ in cases if ours is None)
    assert any(label.startswith("ddp 2.10.0") for label in answered)  # from SDK 3.x's table
