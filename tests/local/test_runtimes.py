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


def test_the_interpreter_is_the_images_python_version_or_the_nearest_one_said_so(monkeypatch, tmp_path):
    fake = tmp_path / "3.12.1" / "bin" / "python3"  # a pyenv with one interpreter, beside this one (3.11)
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho 3.12.1\n")
    fake.chmod(0o755)
    monkeypatch.setattr(runtimes, "PYENV_VERSIONS", tmp_path)
    monkeypatch.setattr(runtimes.shutil, "which", lambda name: None)
    assert runtimes.find_python("3.12") == (str(fake), "3.12.1")
    _, nearest = runtimes.find_python("3.9")
    assert nearest.startswith("3.11.")
    exact = runtimes.ImageRuntime(tmp_path, facts.image_version("dlc", "2.6.0").runtime, "3.12.1")
    assert exact.describe() == "torch 2.6.0, Python 3.12.1"
    substitute = runtimes.ImageRuntime(tmp_path, facts.image_version("dlc", "1.13.1").runtime, nearest)
    assert substitute.describe() == f"torch 1.13.1, Python {nearest} (the image has Python 3.9, which this machine lacks)"
