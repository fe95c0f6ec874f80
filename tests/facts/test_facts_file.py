"""facts.json is exactly what the pinned SDK generates, the only home of these facts, and the support
matrix (docs/support-matrix.md) is rendered from it."""

from __future__ import annotations

import re
import subprocess
from importlib import metadata

import botocore
import botocore.session

from tests.facts.conftest import ROOT, sdk_python
from tools.facts import readme
from tools.readme_section import section
from trainstack import facts

CORE = ROOT / "lambda" / "trainstack"


def test_the_committed_facts_file_is_what_the_pinned_sdk_generates(tmp_path):
    generated = tmp_path / "facts.json"
    result = subprocess.run(
        [str(sdk_python()), "-m", "tools.facts.generate", "--output", str(generated)], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert generated.read_text() == facts.FACTS_PATH.read_text(), "run `make facts` and review the diff"


def test_the_facts_come_from_the_botocore_and_toolkit_the_main_venv_runs():
    sources = facts.load().sources
    assert sources["botocore"] == botocore.__version__
    assert sources["sagemaker-training"] == metadata.version("sagemaker-training")


def test_the_support_matrix_page_is_rendered_from_the_facts_file():
    assert section(readme.START, readme.END, readme.DOC) == readme.render(), "run `make facts`"


def test_the_lambda_asset_never_imports_the_sdk():
    imports = re.compile(r"^\s*(from|import)\s+sagemaker\b", re.MULTILINE)
    offenders = [str(path) for path in CORE.rglob("*.py") if imports.search(path.read_text())]
    assert offenders == []


def test_no_image_account_is_typed_anywhere_but_the_facts_file():
    accounts = {
        account
        for kind in facts.IMAGE_KINDS
        for version in facts.versions(kind)
        for account in facts.image_version(kind, version).registries.values()
    }
    sources = [
        *CORE.rglob("*.py"),
        *(ROOT / "stacks").rglob("*.py"),
        *(ROOT / "cli").rglob("*.py"),
        *(ROOT / "local").rglob("*.py"),
    ]
    offenders = [f"{path}: {account}" for path in sources for account in accounts if account in path.read_text()]
    assert offenders == []


def test_the_catalog_holds_every_training_instance_type_the_api_takes():
    enum = botocore.session.get_session().get_service_model("sagemaker").shape_for("TrainingInstanceType").enum
    assert set(enum) == set(facts.instances()) | set(facts.load().unsourced_instances)
