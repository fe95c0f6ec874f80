"""Job specs used across the core tests: one per strategy, as users write them."""

from __future__ import annotations

from trainstack.stack_context import StackContext

STACK = StackContext(
    region="us-east-1",
    role_arn="arn:aws:iam::123456789012:role/trainstack-RolesSageMakerExecution",
    artifacts_bucket="trainstack-artifacts",
    key_arn="arn:aws:kms:us-east-1:123456789012:key/11111111-2222-3333-4444-555555555555",
    subnet_ids=("subnet-0123456789abcdef0",),
    security_group_ids=("sg-0123456789abcdef0",),
    source_s3_uri="s3://cdk-hnb659fds-assets-123456789012-us-east-1/abc.tar.gz",
    entry_s3_uri="s3://cdk-hnb659fds-assets-123456789012-us-east-1/0123abcd.py",
)

DDP = {
    "name": "gpt-small",
    "instance_type": "ml.p4d.24xlarge",
    "instance_count": 2,
    "framework_version": "2.3.0",
    "distribution": {"torch_distributed": {"enabled": True}},
    "hyperparameters": {"model": "gpt-125m", "max_steps": 2000, "precision": "bf16"},
    "inputs": {
        "train": {"s3_uri": "s3://trainstack-trigger/datasets/owt/", "mode": "FastFile", "distribution": "ShardedByS3Key"}
    },
    "spot": {"enabled": True, "max_wait": "48h"},
    "warm_pool": "30m",
    "max_runtime": "24h",
}
FSDP = {**DDP, "distribution": None, "strategy": "fsdp", "instance_type": "ml.p5e.48xlarge", "framework_version": "2.7.1"}
SMDDP = {**DDP, "distribution": {"smdistributed": {"dataparallel": {"enabled": True}}}, "framework_version": "2.2.0"}
SMP = {
    **DDP,
    "framework_version": "2.3.1",
    "distribution": {
        "torch_distributed": {"enabled": True},
        "smdistributed": {
            "modelparallel": {"enabled": True, "parameters": {"hybrid_shard_degree": 8, "tensor_parallel_degree": 2}}
        },
    },
}
# The project image (`make image`): the built-in script on an image of the user's, with transformers.
PROJECT_IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/trainstack-training:latest"
SPECS = {"ddp": DDP, "fsdp": FSDP, "smddp": SMDDP, "smp": SMP}
