"""S3 URIs: split them, and count the objects under one (ShardedByS3Key needs one per instance)."""

from __future__ import annotations

from typing import Any


def split_s3_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` -> (`bucket`, `some/prefix`)."""
    bucket, _, key = uri.removeprefix("s3://").partition("/")
    return bucket, key


def count_objects(s3: Any, uri: str) -> int:
    bucket, prefix = split_s3_uri(uri)
    return sum(page.get("KeyCount", 0) for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix))
