"""Every `distribution` SDK 2.x's PyTorch estimator accepts renders the launcher hyperparameters the
SDK renders (the sagemaker_* keys and mp_parameters the framework containers' toolkit reads)."""

from __future__ import annotations

import pytest

from tests.core.specs import STACK
from tests.facts.conftest import answers, start_oracle
from trainstack.identity import Run
from trainstack.request import build_request
from trainstack.rules import check_or_raise
from trainstack.spec import parse_spec

TORCHRUN = {"torch_distributed": {"enabled": True}}
SOURCE = "s3://my-code-bucket/jobs/sourcedir.tar.gz"
# (label, distribution, instance type, PyTorch version): one per launcher the SDK 2.x knows for PyTorch
CASES = [
    ("torch_distributed", TORCHRUN, "ml.p4d.24xlarge", "2.3.0"),
    ("torch_distributed on Trainium", TORCHRUN, "ml.trn1.32xlarge", "1.11.0"),
    ("smdistributed.dataparallel", {"smdistributed": {"dataparallel": {"enabled": True}}}, "ml.p4d.24xlarge", "2.2.0"),
    (
        "smdistributed.dataparallel with mpi options",
        {"smdistributed": {"dataparallel": {"enabled": True, "custom_mpi_options": "-verbose -x NCCL_DEBUG=INFO"}}},
        "ml.p4de.24xlarge",
        "2.1.0",
    ),
    ("pytorchddp", {"pytorchddp": {"enabled": True, "custom_mpi_options": "-verbose"}}, "ml.p3.16xlarge", "2.0.1"),
    ("SMDDP under torchrun", {**TORCHRUN, "smdistributed": {"dataparallel": {"enabled": True}}}, "ml.p4d.24xlarge", "2.2.0"),
    (
        "smdistributed.modelparallel (SMP v2)",
        {
            **TORCHRUN,
            "smdistributed": {
                "modelparallel": {"enabled": True, "parameters": {"hybrid_shard_degree": 8, "tensor_parallel_degree": 2}}
            },
        },
        "ml.p5.48xlarge",
        "2.4.1",
    ),
    ("SMP v2, no parameters", {**TORCHRUN, "smdistributed": {"modelparallel": {"enabled": True}}}, "ml.p4d.24xlarge", "2.3.1"),
    (
        "mpi with processes_per_host and custom_mpi_options",
        {"mpi": {"enabled": True, "processes_per_host": 8, "custom_mpi_options": "-x FI_EFA_FORK_SAFE=1 --bind-to none"}},
        "ml.p4d.24xlarge",
        "2.3.0",
    ),
    ("mpi alone", {"mpi": {"enabled": True}}, "ml.g5.12xlarge", "2.5.1"),
]


def _launcher_keys(hyperparameters: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in hyperparameters.items() if k.startswith("sagemaker_") or k == "mp_parameters"}


@pytest.fixture(scope="module")
def rendered():
    ours, estimator_arguments = [], []
    for label, distribution, instance_type, version in CASES:
        raw = {
            "name": "parity",
            "entry_point": "train.py",
            "source_dir": SOURCE,
            "framework_version": version,
            "instance_type": instance_type,
            "instance_count": 2,
            "distribution": distribution,
        }
        spec = parse_spec(raw)
        plan = check_or_raise(spec)
        request = build_request(spec, plan, STACK, trial=Run(f"parity:{label}").trial())
        ours.append(_launcher_keys(request["HyperParameters"]))
        estimator_arguments.append(
            {
                "entry_point": "train.py",
                "source_dir": SOURCE,
                "framework_version": version,
                "py_version": plan.py_version,
                "instance_type": instance_type,
                "instance_count": 2,
                "distribution": distribution,
                "region": STACK.region,
                "job_name": request["TrainingJobName"],
            }
        )
    return ours, answers(start_oracle("hyperparameters", estimator_arguments))


@pytest.mark.slow  # builds ten SDK estimators in the SDK's venv (about 7 s)
@pytest.mark.parametrize("index", range(len(CASES)), ids=[label for label, *_ in CASES])
def test_the_launcher_hyperparameters_equal_what_the_sdk_estimator_renders(rendered, index):
    ours, sdk = rendered
    assert ours[index] == _launcher_keys(sdk[index])
