"""What the twin installs for an image's runtime, read from the facts: its torch and numpy major,
the launch tooling at the train extra's pins, and only the packages the image has."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainstack import facts
from trainstack_local import runtimes
from trainstack_local.registry import project_image

TRAINING = Path(__file__).resolve().parents[2] / "training"


def test_an_images_runtime_has_its_torch_its_numpy_major_and_the_launch_tooling():
    pins = runtimes.train_extra_pins()
    assert runtimes.base_requirements(facts.image_version("dlc", "2.2.0").runtime) == [
        "torch==2.2.0",
        "numpy<2",
        pins["sagemaker-training"],
        pins["sagemaker-pytorch-training"],
        pins["mpi4py"],
    ]
    assert runtimes.base_requirements(facts.image_version("dlc", "2.10.0").runtime)[:2] == ["torch==2.10.0", "numpy>=2,<3"]


@pytest.mark.parametrize(
    ("kind", "version", "packages"),
    [
        ("dlc", "2.1.0", []),  # the 2.1.0 DLC has no tensorboard
        ("dlc", "2.3.0", ["tensorboard==2.21.0"]),
        ("smp", "2.4.1", ["transformers==4.44.2"]),  # no source says SMP's images carry tensorboard
    ],
)
def test_only_the_packages_the_image_has_are_installed(kind, version, packages):
    assert runtimes.image_packages(facts.image_version(kind, version).runtime) == packages


def test_the_project_image_adds_its_requirements_files_pins_over_its_base():
    image = project_image(TRAINING / "Dockerfile")
    pins = [line for line in (TRAINING / "image-requirements.txt").read_text().splitlines() if line and not line.startswith("#")]
    assert image.extra_packages == tuple(pins)
    assert image.runtime == facts.image_version("dlc", facts.versions("dlc")[-1]).runtime


def _interpreter(path: Path, prints: str = "", exits: int = 0) -> Path:
    """A stand-in interpreter that prints a version (as `python -c ...platform.python_version()` would)
    and exits with `exits`: pyenv's shim for a version that is not selected exits 127."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho {prints}\nexit {exits}\n")
    path.chmod(0o755)
    return path


def test_the_interpreter_is_pyenvs_of_the_images_python_under_pyenv_root(monkeypatch, tmp_path):
    found = _interpreter(tmp_path / "pyenv" / "versions" / "3.12.1" / "bin" / "python3", "3.12.1")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert runtimes.find_python("3.12") == (str(found), "3.12.1")


def test_an_interpreter_that_does_not_run_is_passed_over(monkeypatch, tmp_path):
    _interpreter(tmp_path / "shims" / "python3.12", exits=127)
    found = _interpreter(tmp_path / "bin" / "python3.12", "3.12.4")
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "no-pyenv"))
    monkeypatch.setenv("PATH", f"{tmp_path / 'shims'}:{tmp_path / 'bin'}")
    assert runtimes.find_python("3.12") == (str(found), "3.12.4")


def test_without_the_images_python_the_error_is_one_line_naming_the_fix(monkeypatch, tmp_path):
    _interpreter(tmp_path / "shims" / "python3.12", exits=127)
    _interpreter(tmp_path / "pyenv" / "versions" / "3.10.13" / "bin" / "python3", "3.10.13")  # another version only
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path / "pyenv"))
    monkeypatch.setenv("PATH", str(tmp_path / "shims"))
    with pytest.raises(runtimes.RuntimeUnavailableError) as raised:
        runtimes.find_python("3.12")
    assert "\n" not in str(raised.value)
    assert "no Python 3.12" in str(raised.value) and "`pyenv install 3.12`" in str(raised.value)


def test_a_runtime_names_its_torch_and_its_python(tmp_path):
    runtime = runtimes.ImageRuntime(tmp_path, facts.image_version("dlc", "2.6.0").runtime, "3.12.1")
    assert runtime.describe() == "torch 2.6.0, Python 3.12.1"
