"""uv installs from where pip would: pip's configuration (its files and PIP_* variables, as `pip config
list` reports them) becomes uv's options, with pip's rule of the best version across all indexes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

from trainstack_local import installer

ROOT = Path(__file__).resolve().parents[2]


def test_pips_files_and_variables_become_uvs_options_with_pips_precedence(monkeypatch, tmp_path):
    config = tmp_path / "pip.conf"
    config.write_text(
        "[global]\nindex-url = https://global.example/simple\nextra-index-url = file:///a/simple file:///b/simple\n"
        "[install]\nfind-links = /wheels/one /wheels/two\n"
    )
    for variable in [name for name in os.environ if name.startswith("PIP_")]:  # this machine's own, if any
        monkeypatch.delenv(variable)
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.setenv("PIP_INDEX_URL", "https://env.example/simple")  # the environment beats every file
    monkeypatch.setenv("PIP_CONSTRAINT", "/caps/one.txt")

    options = installer.uv_options(installer.pip_configuration())

    assert options[:2] == ["--index-strategy", "unsafe-best-match"]
    assert list(zip(options[2::2], options[3::2], strict=True)) == [
        ("--default-index", "https://env.example/simple"),
        ("--index", "file:///a/simple"),
        ("--index", "file:///b/simple"),
        ("--find-links", "/wheels/one"),
        ("--find-links", "/wheels/two"),
        ("--constraint", "/caps/one.txt"),
    ]


def test_no_index_and_pips_ca_bundle_go_to_uv():
    configured = {":env:.no-index": "true", "global.cert": "/etc/ssl/corporate.pem"}

    assert installer.uv_options(configured) == ["--index-strategy", "unsafe-best-match", "--no-index"]
    assert installer.uv_environment(configured)["SSL_CERT_FILE"] == "/etc/ssl/corporate.pem"


def test_the_makefile_bootstraps_the_uv_pyproject_pins():
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["dev"]
    printed = subprocess.run(
        ["make", "--no-print-directory", "-s", "-f", "Makefile", "-f", "-", "print-uv-pin"],
        input="print-uv-pin:\n\t@echo $(UV_PIN)\n", cwd=ROOT, capture_output=True, text=True, timeout=60, check=True,
    ).stdout.strip()  # fmt: skip
    assert printed in dev and printed.startswith("uv==")


def test_uv_takes_the_torch_wheel_pip_takes(tmp_path):
    """The project pins torch 2.13.0: pip, as this machine configures it, takes one build of it (here
    the CPU wheel its find-links hold, where PyPI's is a CUDA build); uv, told pip's configuration,
    plans the same one into an empty environment."""
    report = tmp_path / "pip.json"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed", "--no-deps",
         "--report", str(report), "torch==2.13.0"],
        capture_output=True, timeout=300, check=True,
    )  # fmt: skip
    (chosen,) = [item["metadata"]["version"] for item in json.loads(report.read_text())["install"]]
    empty = tmp_path / "venv"
    subprocess.run([installer.uv_binary(), "venv", "--quiet", "--python", sys.executable, str(empty)], check=True)
    command, environment = installer.install_command(["--dry-run", "--no-deps", "--python", str(empty), "torch==2.13.0"])
    planned = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300, check=True).stderr

    assert f"+ torch=={chosen}\n" in planned, planned
