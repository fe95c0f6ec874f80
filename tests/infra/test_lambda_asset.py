"""The Lambda asset is the same wherever it is built, so one commit gives one asset hash: a machine
without the runtime's Python builds none, rather than one without bytecode."""

from __future__ import annotations

import pytest
from aws_cdk import FileSystem

from stacks import lambda_asset
from stacks.lambda_asset import NO_RUNTIME_PYTHON, build_lambda_asset


def test_a_machine_without_the_runtimes_python_builds_no_asset_and_says_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.setattr(lambda_asset, "runtime_python", lambda: None)

    with pytest.raises(SystemExit) as stopped:
        build_lambda_asset(tmp_path)

    assert str(stopped.value) == NO_RUNTIME_PYTHON and "\n" not in NO_RUNTIME_PYTHON
    assert "pyenv install 3.13" in NO_RUNTIME_PYTHON
    assert list(tmp_path.iterdir()) == []  # nothing built, not even the dependencies


@pytest.mark.slow  # installs the dependencies' wheels into a second build folder
def test_the_asset_built_in_another_folder_has_the_same_hash(tmp_path):
    here, elsewhere = build_lambda_asset(), build_lambda_asset(tmp_path / "build")

    assert elsewhere != here and any(elsewhere.rglob("*.pyc"))
    # The hash CDK gives the asset: its files' paths and bytes (bytecode naming a build folder differed).
    assert FileSystem.fingerprint(str(elsewhere)) == FileSystem.fingerprint(str(here))
