"""The twin's checkpoint sync (sagemaker_twin._upload_tree) while the job prunes its checkpoints: a
step folder deleted between listing the checkpoint directory and listing the folder is skipped, and
the sync goes on (it used to raise, which ended the host's sync thread for the rest of the attempt)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from trainstack_local.sagemaker_twin import _upload_tree


class _Listing:
    """What os.scandir returns, from entries already read."""

    def __init__(self, entries: list[os.DirEntry]) -> None:
        self._entries = iter(entries)

    def __enter__(self) -> _Listing:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def __iter__(self) -> _Listing:
        return self

    def __next__(self) -> os.DirEntry:
        return next(self._entries)

    def close(self) -> None:
        return None


@pytest.fixture
def s3():
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="checkpoints")
        yield client


def test_a_step_folder_pruned_while_the_sync_lists_the_checkpoints_is_skipped_and_the_rest_uploaded(s3, tmp_path, monkeypatch):
    local = tmp_path / "checkpoints"
    for step in ("step_00000001", "step_00000002"):
        (local / step).mkdir(parents=True)
        (local / step / "shard.distcp").write_bytes(b"weights")
    listing = os.scandir

    def pruning_after_the_listing(path):  # the job removes its oldest step just after the sync listed the folder
        if isinstance(path, int):  # shutil.rmtree's own listings, by file descriptor
            return listing(path)
        with listing(path) as entries:
            listed = list(entries)
        if Path(path) == local:
            shutil.rmtree(local / "step_00000001")
        return _Listing(listed)

    monkeypatch.setattr(os, "scandir", pruning_after_the_listing)
    synced: dict[str, tuple[int, int]] = {}
    _upload_tree(s3, local, "s3://checkpoints/run/", synced)
    monkeypatch.undo()

    keys = [item["Key"] for item in s3.list_objects_v2(Bucket="checkpoints")["Contents"]]
    assert keys == ["run/step_00000002/shard.distcp"] and list(synced) == ["step_00000002/shard.distcp"]
