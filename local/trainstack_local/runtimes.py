"""Image runtimes: what a framework image runs a job on — its torch, its Python and its packages —
as a virtual environment on this machine, so that the twin's containers run the image's software,
not the developer's.

A SageMaker job runs on its image's torch and Python (trainstack.facts.Runtime lists them per
image). The twin builds one environment per runtime from the package registries on first use (the
Linux torch wheels carry their CUDA libraries and run on a CPU without them being used; about 5 GB
and a few minutes each), caches it outside the repository and reuses it. The interpreter is the
image's Python version from this machine (pyenv's, or on PATH): a job never runs on another Python
than its image's; where that version is missing the job fails, naming the version to install.

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
from trainstack_local import cuda_stubs
from trainstack_local.installer import install_command

ROOT = Path(__file__).resolve().parents[2]
CACHE_VARIABLE = "TRAINSTACK_RUNTIME_CACHE"
DEFAULT_CACHE = Path.home() / ".cache" / "trainstack" / "runtimes"
# What every framework image has to launch a script, pinned as the project's own train extra pins it.
IMAGE_TOOLING = ("sagemaker-training", "sagemaker-pytorch-training", "mpi4py")
INSTALL_TIMEOUT = 1800  # seconds; several GB from the registries
PROBE_TIMEOUT = 60  # seconds for an interpreter to say its version (a busy machine starts Python slowly)
RELEASE = re.compile(r"\d+\.\d+\.\d+")
# How a base is laid out, in its cache key: a base built before its CUDA libraries became stand-ins
# (trainstack_local.cuda_stubs) is not reused, so every machine's runtimes are the same.
BASE_LAYOUT = "cuda stand-ins 1"


class RuntimeUnavailableError(RuntimeError):
    """No environment could be built for an image's runtime (no interpreter, or pip failed)."""


@dataclass(frozen=True)
class ImageRuntime:
    """A built environment standing in for one image's software."""

    path: Path
    image: Runtime
    python: str  # the interpreter's full version of the image's Python, e.g. "3.13.0"

    @property
    def bin(self) -> Path:
        return self.path / "bin"

    def describe(self) -> str:
        """What the job's containers run on."""
        return f"torch {self.image.torch}, Python {self.python}"


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
    key = hashlib.sha256("\n".join([version, *wanted, BASE_LAYOUT]).encode()).hexdigest()[:12]
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
    """An interpreter of the image's Python `version` ("3.13") and its full version ("3.13.0"): pyenv's
    (under $PYENV_ROOT, ~/.pyenv by default), else each python3.13 on PATH, else this one. A candidate that
    does not run is passed over: pyenv's shim of a version that is not selected exits 127."""
    for candidate in _candidates(version):
        full = _version_of(candidate)
        if full is not None and full.rsplit(".", 1)[0] == version:
            return candidate, full
    raise RuntimeUnavailableError(
        f"no Python {version} on this machine for the image's runtime: install it (`pyenv install {version}`) "
        f"or put python{version} on PATH"
    )


def _candidates(version: str) -> list[str]:
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    # Plain releases only: pyenv also names variants such as 3.13.0t (free-threaded) or 3.13-dev.
    installed = [str(p) for p in sorted(pyenv.glob(f"{version}.*/bin/python3")) if RELEASE.fullmatch(p.parents[1].name)]
    directories = os.environ.get("PATH", "").split(os.pathsep)
    on_path = [found for directory in directories if (found := shutil.which(f"python{version}", path=directory))]
    this = [sys.executable] if f"{sys.version_info[0]}.{sys.version_info[1]}" == version else []
    return [*installed, *on_path, *this]


def _version_of(interpreter: str) -> str | None:
    """The interpreter's full version; None when it does not run."""
    try:
        ran = subprocess.run(
            [interpreter, "-c", "import platform; print(platform.python_version())"],
            capture_output=True, text=True, timeout=PROBE_TIMEOUT, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return ran.stdout.strip() if ran.returncode == 0 else None


def _build(path: Path, interpreter: str, wanted: list[str]) -> None:
    """Build in place; `.complete` is written last, so a build cut short is redone from scratch."""
    shutil.rmtree(path, ignore_errors=True)
    subprocess.run([interpreter, "-m", "venv", str(path)], check=True, capture_output=True)
    # uv fetches the wheels side by side: 41 s for torch 2.10.0's base where pip took 131 s. No cache:
    # it would keep a copy of the CUDA libraries, which stand-ins replace just after (4 of the 7 GB).
    command, environment = install_command(["--quiet", "--no-cache", "--python", str(path / "bin" / "python"), *wanted])
    _install(path, wanted, command, environment)
    try:
        cuda_stubs.replace_cuda_libraries(_site_packages(path / "bin" / "python"))
    except cuda_stubs.StubError as error:
        shutil.rmtree(path, ignore_errors=True)
        raise RuntimeUnavailableError(f"could not build the runtime {' '.join(wanted)}: {error}") from None


def _build_layer(layer: Path, base: Path, wanted: list[str]) -> None:
    """A venv that sees the base's packages (a .pth file), with the base's console scripts (train,
    torchrun) run by its own interpreter, so their processes see the layer's packages too."""
    shutil.rmtree(layer, ignore_errors=True)
    base_python = base / "bin" / "python"
    subprocess.run([str(base_python), "-m", "venv", "--without-pip", str(layer)], check=True, capture_output=True)
    site = str(_site_packages(base_python))
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
    # pip, not uv: uv sees only the layer's own site-packages, not the base's through the .pth file, so
    # it would install a second numpy (a newer one, over torch's pin) into every layer.
    pip = [str(layer / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *wanted]
    _install(layer, wanted, pip, dict(os.environ))


def _site_packages(python: Path) -> Path:
    script = "import sysconfig; print(sysconfig.get_path('purelib'))"
    return Path(subprocess.run([str(python), "-c", script], capture_output=True, text=True, check=True).stdout.strip())


def _install(path: Path, wanted: list[str], command: list[str], environment: dict[str, str]) -> None:
    install = subprocess.run(command, env=environment, capture_output=True, text=True, timeout=INSTALL_TIMEOUT, check=False)
    if install.returncode != 0:
        shutil.rmtree(path, ignore_errors=True)
        errors = [line for line in install.stderr.splitlines() if "WARNING: Location" not in line]
        raise RuntimeUnavailableError(f"could not build the runtime {' '.join(wanted)}: {' '.join(errors[-5:])}")
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
