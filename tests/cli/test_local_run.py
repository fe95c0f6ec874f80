"""`trainstack local run`, what `make local` runs: one run on the emulated stack, shown and summed up."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import psutil
import pytest
import yaml

from trainstack import facts
from trainstack_local import runtimes
from trainstack_local.pipeline import DEFAULT_JOB

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

TRAINSTACK = Path(sys.executable).parent / "trainstack"


def local_run(template: Path, tmp_path: Path, *arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [str(TRAINSTACK), "local", "run", *arguments, "--template", str(template), "--output-dir", str(tmp_path / "out")]
    return subprocess.run(command, capture_output=True, text=True, timeout=240, check=False, cwd=tmp_path, env=env)


@pytest.fixture(scope="module")
def template(default_stack, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("template") / "template.json"
    path.write_text(json.dumps(default_stack.json))
    return path


def test_the_default_job_runs_to_a_summary_with_the_final_loss_and_the_model_on_local_disk(template, tmp_path):
    result = local_run(template, tmp_path)

    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^run \S+: SUCCEEDED$", result.stdout, re.MULTILINE)
    assert re.search(r"final loss \d+\.\d{4}$", result.stdout, re.MULTILINE)
    (model,) = re.findall(r"model: (\S+)$", result.stdout, re.MULTILINE)
    with tarfile.open(model) as archive:
        assert "model.pt" in archive.getnames()
    # the software of the image the default job resolves to (framework_version left out: the newest)
    runtime = facts.image_version("dlc", facts.versions("dlc")[-1]).runtime
    (ran_on,) = re.findall(r"runtime: (.+)$", result.stdout, re.MULTILINE)
    assert ran_on.startswith(f"torch {runtime.torch}, Python {runtime.python}.")
    assert result.stderr == ""


def test_a_failing_run_ends_with_its_reason_and_no_emulator_internals(template, tmp_path):
    spec = tmp_path / "failing.yaml"
    default = yaml.safe_load(DEFAULT_JOB.read_text())
    spec.write_text(yaml.safe_dump({**default, "hyperparameters": {**default["hyperparameters"], "data_dir": "/no/such/data"}}))
    result = local_run(template, tmp_path, str(spec))
    assert result.returncode == 1
    assert re.search(r"^run \S+: FAILED \(.*/no/such/data", result.stdout, re.MULTILINE), result.stdout[-2000:]
    assert "FailureEventException" not in result.stderr and "Stepfunctions computation" not in result.stderr
    assert result.stderr == ""


def test_a_job_whose_images_python_this_machine_lacks_fails_the_run_promptly_naming_the_fix(template, tmp_path):
    python = facts.image_version("dlc", facts.versions("dlc")[-1]).runtime.python  # the default job's image's
    # As on a machine without that Python: HOME elsewhere (no ~/.pyenv) and, on PATH, only pyenv's shim
    # for it, which exits 127 where another version is selected, beside the tools the twin runs.
    tools = tmp_path / "bin"
    tools.mkdir()
    shim = tools / f"python{python}"
    shim.write_text(f"#!/bin/sh\necho 'pyenv: python{python}: command not found' >&2\nexit 127\n")
    shim.chmod(0o755)
    for tool in ("ip", "unshare"):
        (tools / tool).symlink_to(shutil.which(tool))
    env = {k: v for k, v in os.environ.items() if k != "PYENV_ROOT"}
    env.update(HOME=str(tmp_path / "home"), PATH=str(tools), TRAINSTACK_RUNTIME_CACHE=str(runtimes.cache_dir()))

    started = time.monotonic()
    result = local_run(template, tmp_path, env=env)

    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    (cause,) = re.findall(r"^run \S+: FAILED \((.*)\)$", result.stdout, re.MULTILINE)
    assert f"no Python {python} on this machine" in cause and f"`pyenv install {python}`" in cause
    assert result.stderr == ""  # no traceback from the twin's job thread
    assert time.monotonic() - started < 120  # ended by the twin, not by the execution's deadline


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_run_ended_by_sigterm_leaves_no_process_behind(template, tmp_path):
    workdir = tmp_path / "work"
    command = [str(TRAINSTACK), "local", "run", "--template", str(template), "--output-dir", str(tmp_path / "out")]
    process = subprocess.Popen(
        [*command, "--workdir", str(workdir)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    started: list[psutil.Process] = []
    try:
        for line in process.stdout:
            if "MLflow tracking server at" in line:
                break
        started = psutil.Process(process.pid).children(recursive=True)  # the server and its uvicorn worker, at least
        process.send_signal(signal.SIGTERM)  # as `timeout` or the end of a CI job ends it
        _, stderr = process.communicate(timeout=240)
        # What it started then, and anything since that names its work folder (the twin's hosts, the server).
        left = [child for child in started if _alive(child)]
        named = [other for other in psutil.process_iter(["cmdline"]) if str(workdir) in " ".join(other.info["cmdline"] or [])]
        left += [other for other in named if _alive(other)]
        assert started and left == []
        assert process.returncode == 128 + signal.SIGTERM, stderr[-3000:]
    finally:  # nothing of a failed test's run stays on the machine
        for leftover in started:
            if _alive(leftover):
                leftover.kill()
        if process.poll() is None:
            process.kill()
