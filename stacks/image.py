"""Optionally, `training/` built into the project's own training image (needs Docker only at deploy)."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import aws_ecr_assets as ecr_assets
from constructs import Construct


class TrainingImage(Construct):
    """Exposes `asset` (its `repository` and `image_uri`). `base_image` is the framework image the
    Dockerfile builds on (its `BASE_IMAGE`), which must be the one of the stack's region."""

    def __init__(
        self, scope: Construct, construct_id: str, *, source_dir: Path, base_image: str, dockerfile: str = "Dockerfile"
    ) -> None:
        super().__init__(scope, construct_id)
        if not (source_dir / dockerfile).is_file():
            raise FileNotFoundError(f"{source_dir / dockerfile} is missing; build_training_image needs it")
        self.asset = ecr_assets.DockerImageAsset(
            self,
            "Asset",
            directory=str(source_dir),
            file=dockerfile,
            build_args={"BASE_IMAGE": base_image},
            platform=ecr_assets.Platform.LINUX_AMD64,
            exclude=["**/__pycache__", "**/*.pyc"],
        )
