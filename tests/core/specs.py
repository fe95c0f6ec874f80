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

# The same jobs in SDK 3.x ModelTrainer's names (trainstack/model_trainer_names.py): each builds its
# strategy's golden request. SDK 3.x has no SMDDP config: that job keeps trainstack's shorthand.
_MODEL_TRAINER_DDP = {
    "name": "gpt-small",
    "framework_version": "2.3.0",
    "compute": {
        "instance_type": "ml.p4d.24xlarge",
        "instance_count": 2,
        "enable_managed_spot_training": True,
        "keep_alive_period_in_seconds": 1800,
    },
    "distributed": {"Torchrun": {}},
    "hyperparameters": {"model": "gpt-125m", "max_steps": 2000, "precision": "bf16"},
    "input_data_config": [
        {
            "channel_name": "train",
            "data_source": {
                "s3_data_source": {
                    "s3_data_type": "S3Prefix",
                    "s3_uri": "s3://trainstack-trigger/datasets/owt/",
                    "s3_data_distribution_type": "ShardedByS3Key",
                }
            },
            "input_mode": "FastFile",
        }
    ],
    "stopping_condition": {"max_runtime_in_seconds": 86400, "max_wait_time_in_seconds": 172800},
    "checkpoint_config": {"local_path": "/opt/ml/checkpoints"},
}
MODEL_TRAINER_SPECS = {
    "ddp": _MODEL_TRAINER_DDP,
    "fsdp": {
        **_MODEL_TRAINER_DDP,
        "distributed": None,  # ModelTrainer's default: no distributed config
        "strategy": "fsdp",
        "compute": {**_MODEL_TRAINER_DDP["compute"], "instance_type": "ml.p5e.48xlarge"},
        "framework_version": "2.7.1",
    },
    "smddp": {**_MODEL_TRAINER_DDP, "distributed": None, "strategy": "smddp", "framework_version": "2.2.0"},
    "smp": {
        **_MODEL_TRAINER_DDP,
        "framework_version": "2.3.1",
        "distributed": {"Torchrun": {"smp": {"hybrid_shard_degree": 8, "tensor_parallel_degree": 2}}},
    },
}
