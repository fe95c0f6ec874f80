"""`training/` as the S3 file asset that jobs use as `sagemaker_submit_directory`."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Stage
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from stacks.tarball import write_source_tarball


class TrainingSource(Construct):
    """`training/` as a tar.gz file asset. Exposes `asset` and `s3_uri` (the submit directory)."""

    def __init__(self, scope: Construct, construct_id: str, *, source_dir: Path) -> None:
        super().__init__(scope, construct_id)
        staging = Path(Stage.of(self).outdir) / "trainstack-staging" / "sourcedir.tar.gz"
        tarball = write_source_tarball(source_dir, staging)
        self.asset = s3_assets.Asset(self, "Asset", path=str(tarball))
        self.s3_uri = self.asset.s3_object_url
