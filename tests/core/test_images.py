"""Framework images: the Neuron DLC on Trainium, a user's own image anywhere, per-region accounts and
domains, SMP's CUDA suffix by instance type (tests/facts checks all of them against the SDK)."""

from __future__ import annotations

import pytest

from tests.core.specs import DDP, STACK
from trainstack import facts, images
from trainstack.identity import Run
from trainstack.request import build_request
from trainstack.rules import check_or_raise
from trainstack.spec import parse_spec

TRN = {
    **DDP,
    "instance_type": "ml.trn1.32xlarge",
    "framework_version": None,
    "source_dir": "s3://my-code/neuron/sourcedir.tar.gz",
}


def build(raw: dict) -> dict:
    spec = parse_spec(raw)
    return build_request(spec, check_or_raise(spec, lambda uri: 64, STACK.region), STACK, trial=Run("images").trial())


def test_trainium_with_its_own_script_runs_the_neuron_dlc_on_every_neuroncore():
    request = build(TRN)
    assert request["AlgorithmSpecification"]["TrainingImage"] == (
        "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training-neuron:1.11.0-neuron-py38-sdk2.4.0-ubuntu20.04"
    )
    assert request["HyperParameters"]["sagemaker_torch_distributed_enabled"] == "true"
    assert request["Environment"] == {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "RDMAV_FORK_SAFE": "1"}


def test_trainium_with_a_users_image_renders_that_image_and_its_own_entry():
    image = "123456789012.dkr.ecr.us-east-1.amazonaws.com/neuron-llm:7"
    request = build({**TRN, "source_dir": None, "image": image})
    assert request["AlgorithmSpecification"]["TrainingImage"] == image
    assert "ContainerEntrypoint" not in request["AlgorithmSpecification"]
    assert request["ResourceConfig"]["InstanceType"] == "ml.trn1.32xlarge"


@pytest.mark.parametrize(
    ("region", "uri"),
    [
        ("af-south-1", "626614931356.dkr.ecr.af-south-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311"),
        ("cn-north-1", "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/pytorch-training:2.3.0-gpu-py311"),
        ("us-gov-west-1", "442386744353.dkr.ecr.us-gov-west-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311"),
    ],
)
def test_each_region_pulls_from_its_own_account_and_domain(region, uri):
    assert images.image_uri("dlc", "2.3.0", "py311", region, facts.instance("ml.p4d.24xlarge")) == uri


@pytest.mark.parametrize(("instance_type", "suffix"), [("ml.p4d.24xlarge", "cu118"), ("ml.p5.48xlarge", "cu121")])
def test_smp_picks_its_cuda_build_by_instance_type_as_the_sdk_does(instance_type, suffix):
    uri = images.image_uri("smp", "2.0.1", "py310", "us-east-1", facts.instance(instance_type))
    assert uri.endswith(f"smdistributed-modelparallel:2.0.1-gpu-py310-{suffix}")


def test_a_cpu_type_gets_the_cpu_build():
    uri = images.image_uri("dlc", "2.10.0", "py313", "us-east-1", facts.instance("ml.c5.4xlarge"))
    assert uri.endswith("pytorch-training:2.10.0-cpu-py313")


@pytest.mark.parametrize(
    ("uri", "exists"),
    [
        ("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311", True),
        ("727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn/pytorch-training:2.3.0-cpu-py311", True),
        ("658645717510.dkr.ecr.us-east-1.amazonaws.com/smdistributed-modelparallel:2.0.1-gpu-py310-cu121", True),
        ("763104351884.dkr.ecr.af-south-1.amazonaws.com/pytorch-training:2.3.0-gpu-py311", False),  # af-south-1's account differs
        ("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.1-gpu-py311", False),  # no such version
        ("763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-gpu-py310", False),  # wrong Python
        ("658645717510.dkr.ecr.af-south-1.amazonaws.com/smdistributed-modelparallel:2.3.1-gpu-py311-cu121", False),
        ("123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1", False),
    ],
)
def test_only_images_the_facts_list_exist(uri, exists):
    assert (images.framework_image_version(uri) is not None) is exists
