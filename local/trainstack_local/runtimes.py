"""Image runtimes: what a framework image runs a job on — its torch, its Python and its packages —
as a virtual environment on this machine, so that the twin's containers run the image's software,
not the developer's.

A SageMaker job runs on its image's torch and Python (trainstack.facts.Runtime lists them per
image). The twin builds one environment per runtime from the package registries on first use (the
Linux torch wheels carry their CUDA libraries and run on a CPU without them being used; about 5 GB
and a few minutes each), caches it outside the repository and reuses it. The interpreter is the
image's Python version from this machine (pyenv has 3.10 to 3.13 here); where that version is
missing, the nearest one is used and `ImageRuntime.describe` says so, never silently.

Besides torch and numpy (the image's major version), every runtime has what the framework images
provide to run a script: the SageMaker training toolkit, the PyTorch container's launcher and
mpi4py, at the pins of pyproject.toml's `train` extra; tensorboard only where the image has it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from trainstack.facts import Runtime

ROOT = Path(__file__).resolve().parents[2]
CACHE_VARIABLE = "TRAINSTACK_RUNTIME_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "trainstack" / "runtimes"
# What every framework image has to launch a script, pinned as the project's own train extra pins it.
IMAGE_TOOLING = ("sagemaker-training", "sagemaker-pytorch-training", "mpi4py")
PYENV_VERSIONS = Path.home() / ".pyenv" / "versions"
INSTALL_TIMEOUT = 1800  # seconds; several GB from the registries


class RuntimeUnavailableError(RuntimeError):
    """No environment could be built for an image's runtime (no interpreter, or pip failed)."""


@dataclass(frozen=True)
class ImageRuntime:
    """A built environment standing in for one image's software."""

    path: Path
    image: Runtime
    python: str  # the interpreter's full version, e.g. "3.11.7"

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    @property
    def exact(self) -> bool:
        return self.python.rsplit(".", 1)[0] == self.image.python

    def describe(self) -> str:
        """What the job's containers run on, with any difference from the image said."""
        text = f"torch {self.image.torch}, Python {self.python}"
        if not self.exact:
            text += f" (the image has Python {self.image.python}, which this machine lacks)"
        return text


def train_extra_pins() -> dict[str, str]:
    """pyproject.toml's `train` extra as name -> requirement, the pins the images' tooling follows."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["train"]
    return {re.split(r"[=<>!~ \[]", requirement, maxsplit=1)[0].lower(): requirement for requirement in extra}


def base_requirements(image: Runtime) -> list[str]:
    """What every runtime of this torch and numpy has: the launch tooling the framework images carry."""
    pins = train_extra_pins()
    numpy = {"1": "numpy<2", "2": "numpy>=2,<3"}.get(image.numpy_major, "numpy")
    return [f"torch=={image.torch}", numpy, *(pins[name] for name in IMAGE_TOOLING)]


def image_packages(image: Runtime, extra: Sequence[str] = ()) -> list[str]:
    """The image's own packages on top: tensorboard and transformers where the facts list them (a
    package no source lists for the image, None, is left out: the script must do without it), and
    `extra`, what a project image adds."""
    found = [train_extra_pins()["tensorboard"]] if image.has("tensorboard") else []
    transformers = image.packages.get("transformers")
    if isinstance(transformers, str):  # the SMP v2 images carry a transformers release of their own
        found.append(f"transformers=={transformers}")
    return [*found, *extra]


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_VARIABLE) or DEFAULT_CACHE)


def ensure(image: Runtime, extra: Sequence[str] = ()) -> ImageRuntime:
    """The environment for `image`, built on first use and reused after: torch, numpy and the
    tooling in a base shared by every image of the same torch and Python (the several GB), the
    image's own packages and `extra` (what a project image installs) in a small layer over it, as
    an image's layers sit on its base."""
    interpreter, version = find_python(image.python)
    wanted = base_requirements(image)
    key = hashlib.sha256("\n".join([version, *wanted]).encode()).hexdigest()[:12]
    path = cache_dir() / f"torch{image.torch}-py{version}-{key}"
    _once(path, lambda: _build(path, interpreter, wanted))
    packages = image_packages(image, extra)
    if not packages:
        return ImageRuntime(path, image, version)
    layer_key = hashlib.sha256("\n".join([path.name, *packages]).encode()).hexdigest()[:12]
    layer = cache_dir() / f"{path.name}-layer-{layer_key}"
    _once(layer, lambda: _build_layer(layer, path, packages))
    return ImageRuntime(layer, image, version)


def _once(path: Path, build: Callable[[], None]) -> None:
    if not (path / ".complete").exists():
        with _locked(path.with_name(path.name + ".lock")):
            if not (path / ".complete").exists():
                build()


def find_python(version: str) -> tuple[str, str]:
    """An interpreter of `version` ("3.11") and its full version; the nearest one there is otherwise."""
    candidates: dict[str, str] = {}
    for found in sorted(PYENV_VERSIONS.glob("3.*/bin/python3")):
        candidates.setdefault(found.parent.parent.name.rsplit(".", 1)[0], str(found))
    for minor in range(8, 20):
        path = shutil.which(f"python3.{minor}")
        if path:
            candidates.setdefault(f"3.{minor}", path)
    candidates.setdefault(f"{sys.version_info[0]}.{sys.version_info[1]}", sys.executable)
    wanted = int(version.split(".")[1])
    chosen = min(candidates, key=lambda v: (abs(int(v.split(".")[1]) - wanted), -int(v.split(".")[1])))
    interpreter = candidates[chosen]
    full = subprocess.run(
        [interpreter, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return interpreter, full


def _build(path: Path, interpreter: str, wanted: list[str]) -> None:
    """Build in place; `.complete` is written last, so a build cut short is redone from scratch."""
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run([interpreter, "-m", "venv", str(path)], check=True, capture_output=True)
    _install(path, wanted)


def _build_layer(layer: Path, base: Path, wanted: list[str]) -> None:
    """A venv that sees the base's packages (a .pth file), with the base's console scripts (train,
    torchrun) run by its own interpreter, so their processes see the layer's packages too."""
    shutil.rmtree(layer, ignore_errors=True)
    base_python = base / "bin" / "python"
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(layer)], check=True, capture_output=True)
    site = subprocess.run(
        [str(base_python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    layer_site = Path(site.replace(str(base), str(layer)))
    (layer_site / "image-base.pth").write_text(site + "\n")
    for script in sorted((base / "bin").iterdir()):
        target = layer / "bin" / script.name
        if target.exists() or script.is_symlink() or not script.is_file():
            continue
        text = script.read_bytes()
        shebang = f"#!{base_python}".encode()
        if text.startswith(shebang):
            target.write_bytes(f"#!{layer / 'bin' / 'python'}".encode() + text[len(shebang) :])
            target.chmod(0o755)
    _install(layer, wanted)


def _install(path: Path, wanted: list[str]) -> None:
    install = subprocess.run(
        [str(path / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *wanted],
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        check=False,
    )
    if install.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        errors = [line for line in install.stderr.splitlines() if "WARNING: Location" not in line]
        raise RuntimeUnavailableError(f"pip could not build the runtime {' '.join(wanted)}: {' '.join(errors[-5:])}")
    (path / ".complete").write_text("\n".join(wanted) + "\n")


@contextlib.contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """One builder per runtime across processes (tests and a served twin may ask at once)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
