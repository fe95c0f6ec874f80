"""The external checkers over the synthesized templates, run as CI runs them, fully offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKOV = Path(os.environ.get("CHECKOV", ROOT / ".venv-checkov" / "bin" / "checkov"))

pytestmark = pytest.mark.gates


@pytest.fixture(params=["default", "all_options", "queue", "tracking"])
def template_path(request) -> Path:
    return request.getfixturevalue(f"{request.param}_stack").template_path


def test_cfn_lint_reports_no_errors(template_path):
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), "--format", "json", str(template_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    findings = json.loads(result.stdout or "[]")
    errors = [f for f in findings if f["Level"] == "Error"]
    assert errors == [], errors
    assert result.returncode in (0, 4), result.stderr  # 4: warnings only


def test_checkov_reports_no_failed_checks(template_path):
    assert CHECKOV.exists(), f"{CHECKOV} is missing: run `make setup`"
    result = subprocess.run(
        [
            str(CHECKOV),
            "-f",
            str(template_path),
            "--framework",
            "cloudformation",
            "--skip-download",
            "--quiet",
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    report = json.loads(result.stdout)
    failed = [(c["check_id"], c["resource"]) for c in report["results"]["failed_checks"]]
    assert failed == []
    assert report["summary"]["passed"] > 100


def _cdk(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    npx = shutil.which("npx")
    assert npx, "npx is missing: install Node.js"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(home), AWS_EC2_METADATA_DISABLED="true")
    return subprocess.run([npx, "--no-install", "cdk", *args], cwd=ROOT, env=env, capture_output=True, text=True, check=False)


def test_cli_synth_works_without_credentials_and_without_toolchain_warnings(tmp_path):
    result = _cdk("synth", "-q", "-o", str(tmp_path / "out"), home=tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "trainstack.template.json").exists()
    assert "end-of-life" not in result.stderr and "not been tested with node" not in result.stderr  # jsii's banners
    assert "feature flags are not configured" not in result.stderr + result.stdout


def test_jsii_and_the_cli_use_the_node_line_package_json_requires():
    required = int(json.loads((ROOT / "package.json").read_text())["engines"]["node"].removeprefix(">="))
    for node in (os.environ["JSII_NODE"], shutil.which("node")):
        version = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
        assert int(version.strip().removeprefix("v").split(".")[0]) >= required, (node, version)


def test_cli_synth_fails_on_a_bad_setting_with_its_name(tmp_path):
    result = _cdk("synth", "-q", "-o", str(tmp_path / "out"), "-c", "nat_gateway=maybe", home=tmp_path)
    assert result.returncode != 0
    assert "setting 'nat_gateway' = 'maybe': expected true or false" in result.stderr
