"""The training code ships as a tar.gz that is byte-for-byte reproducible."""

from __future__ import annotations

import json
import os
import tarfile
from pathlib import Path

import pytest

from trainstack.entrypoint import ENTRY_FILE
from trainstack.source_archive import write_source_tarball

TRAINING = Path(__file__).resolve().parents[2] / "training"


@pytest.fixture
def source(tmp_path):
    root = tmp_path / "training"
    (root / "pkg" / "__pycache__").mkdir(parents=True)
    (root / "train.py").write_text("print('hi')\n")
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
    return root


def test_same_sources_give_the_same_bytes_even_with_new_timestamps(source, tmp_path):
    first = write_source_tarball(source, tmp_path / "a.tar.gz").read_bytes()
    os.utime(source / "train.py", (1_000_000, 1_000_000))
    second = write_source_tarball(source, tmp_path / "b.tar.gz").read_bytes()
    assert first == second


def test_changed_source_changes_the_bytes(source, tmp_path):
    first = write_source_tarball(source, tmp_path / "a.tar.gz").read_bytes()
    (source / "train.py").write_text("print('changed')\n")
    assert write_source_tarball(source, tmp_path / "b.tar.gz").read_bytes() != first


def test_files_sit_at_the_archive_root_without_bytecode(source, tmp_path):
    with tarfile.open(write_source_tarball(source, tmp_path / "s.tar.gz")) as tar:
        assert tar.getnames() == ["pkg/__init__.py", "train.py"]
        assert {member.mtime for member in tar.getmembers()} == {0}


def test_an_empty_folder_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no files"):
        write_source_tarball(tmp_path / "empty", tmp_path / "s.tar.gz")


def test_stack_publishes_the_tarball_as_a_file_asset_and_outputs_its_uri(default_stack):
    assets = (default_stack.directory / "trainstack.assets.json").read_text()
    assert ".tar.gz" in assets
    assert "SourceS3Uri" in default_stack.json["Outputs"]


def test_stack_publishes_the_container_entry_as_a_python_file_asset_and_outputs_its_uri(default_stack):
    assets = json.loads((default_stack.directory / "trainstack.assets.json").read_text())["files"]
    entries = [a for a in assets.values() if a["source"]["path"].endswith(".py")]
    assert len(entries) == 1 and entries[0]["source"]["packaging"] == "file"
    assert (default_stack.directory / entries[0]["source"]["path"]).read_text() == (TRAINING / ENTRY_FILE).read_text()
    uri = json.dumps(default_stack.json["Outputs"]["ContainerEntryS3Uri"])
    (destination,) = entries[0]["destinations"].values()
    assert destination["objectKey"] in uri


def test_the_execution_role_reads_exactly_the_code_tarball_and_the_container_entry_from_the_asset_bucket(default_stack):
    statements = {
        statement.get("Sid"): statement
        for logical_id, policy in default_stack.resources("AWS::IAM::ManagedPolicy").items()
        if logical_id.startswith("RolesSageMakerExecution")
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
    }
    assets = json.loads((default_stack.directory / "trainstack.assets.json").read_text())["files"]
    keys = sorted(
        next(iter(a["destinations"].values()))["objectKey"]
        for a in assets.values()
        if a["source"]["path"].endswith((".py", ".tar.gz"))
    )
    read = statements["ReadTrainingCode"]
    assert read["Action"] == "s3:GetObject" and all(key in json.dumps(read["Resource"]) for key in keys)
    assert "/*" not in json.dumps(read["Resource"])
    listing = statements["ListTrainingCode"]
    assert sorted(listing["Condition"]["StringEquals"]["s3:prefix"]) == keys
    assert not any(
        "cdk-hnb659fds-assets" in json.dumps(s.get("Resource")) and "/*" in json.dumps(s.get("Resource"))
        for s in statements.values()
    )
