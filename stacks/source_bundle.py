"""`training/` as the S3 file assets jobs use: the `sagemaker_submit_directory` tarball, and the
container entry (PID 1, see trainstack/entrypoint.py) as a file of its own."""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Stage
from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3_assets as s3_assets
from constructs import Construct

from trainstack.entrypoint import ENTRY_FILE
from trainstack.source_archive import write_source_tarball


class TrainingSource(Construct):
    """Exposes `asset` and `s3_uri` (the submit directory tarball), `entry_asset` and `entry_s3_uri`."""

    def __init__(self, scope: Construct, construct_id: str, *, source_dir: Path) -> None:
        super().__init__(scope, construct_id)
        staging = Path(Stage.of(self).outdir) / "trainstack-staging" / "sourcedir.tar.gz"
        tarball = write_source_tarball(source_dir, staging)
        self.asset = s3_assets.Asset(self, "Asset", path=str(tarball))
        self.s3_uri = self.asset.s3_object_url
        # A file asset keeps its extension in the key, which the channel keeps as the file name.
        self.entry_asset = s3_assets.Asset(self, "ContainerEntry", path=str(source_dir / ENTRY_FILE))
        self.entry_s3_uri = self.entry_asset.s3_object_url

    def grant_read(self, grantee: iam.IGrantable) -> None:
        """Exactly these two objects, not the whole CDK asset bucket (Asset.grant_read grants `*`).
        A channel lists its S3 prefix first, so listing is allowed for these two keys only."""
        assets = (self.asset, self.entry_asset)
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ReadTrainingCode",
                actions=["s3:GetObject"],
                resources=[asset.bucket.arn_for_objects(asset.s3_object_key) for asset in assets],
            )
        )
        grantee.grant_principal.add_to_principal_policy(
            iam.PolicyStatement(
                sid="ListTrainingCode",
                actions=["s3:ListBucket"],
                resources=[self.asset.bucket.bucket_arn],
                conditions={"StringEquals": {"s3:prefix": [asset.s3_object_key for asset in assets]}},
            )
        )
