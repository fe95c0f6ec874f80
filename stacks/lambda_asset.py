"""The Lambda asset: the core package, the contract package it shares with the built-in training
script (trainstack_contract, torch-free), and the pinned dependencies as Linux wheels, without Docker.

pip installs the wheels for the Lambda platform (`--platform manylinux2014_x86_64
--only-binary=:all:`), once per set of requirements (cached under build/), and the core package
is copied beside them on every synth. The requirements are read from pyproject.toml, so the
Lambda runs exactly the versions the tests run.

The asset carries bytecode for the runtime's Python: Lambda's /var/task is read-only, so without it
every cold start compiles each module it imports, pydantic's included (`make bench-lambda` shows
the difference). The asset is the same wherever it is built, so that one commit gives one asset hash:
the bytecode is compiled with `unchecked-hash` invalidation (no timestamps; never re-checked against
the source) and names each source where Lambda unpacks it (/var/task/...), not the build folder it
was compiled in; and a machine without the runtime's Python builds no asset at all, rather than one
without bytecode.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from functools import cache
from pathlib import Path

import botocore
import botocore.loaders

from trainstack.handlers.environment import LAMBDA_TASK_ROOT, SERVICE_MODELS_DIR

ROOT = Path(__file__).resolve().parent.parent
# The newest Lambda Python runtime whose interpreter these machines have (pyenv's 3.13), so the
# asset as shipped — compiled pydantic_core included — is imported and run in the tests
# (tests/infra/test_shipped_lambda.py). 3.14 exists on Lambda, but nothing here could run its wheels.
LAMBDA_PYTHON = "3.13"
PLATFORM = "manylinux2014_x86_64"
PROVIDED_BY_RUNTIME = ("boto3", "botocore")  # the Lambda Python runtime ships these
# ...but of a version AWS does not state, so the asset carries the API models of the services whose
# recent operations the handlers call, from the pinned botocore the tests validate against: Batch
# (service jobs, 2025) and SageMaker (CreateTrainingJob's MlflowConfig). The runtime's botocore reads
# them first (AWS_DATA_PATH, set in the functions' environment). Only these two: a newer model of a
# service whose calls need newer botocore code (S3's checksums) could break an older runtime.
SHIPPED_SERVICE_MODELS = ("batch", "sagemaker")
# The packages the functions import, shipped whole: the core, and the contract it shares with the
# built-in script (the same package the job's source directory carries).
PACKAGES = (ROOT / "lambda" / "trainstack", ROOT / "training" / "trainstack_contract")
# What _compile writes, in the folders' key: none compiled another way (naming its build folder) is reused.
BYTECODE = f"unchecked-hash bytecode of sources under {LAMBDA_TASK_ROOT}"
NO_RUNTIME_PYTHON = (
    f"trainstack: no Python {LAMBDA_PYTHON} here to compile the Lambda asset's bytecode with (the asset, and the "
    f"template's hash of it, would differ from every other machine's without it): `pyenv install {LAMBDA_PYTHON}`"
)


@cache  # the answer does not change within a process
def runtime_python() -> Path | None:
    """The Lambda runtime's Python on this machine: pyenv's, or one on PATH that runs (a pyenv shim
    may not); None where there is none."""
    pyenv = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    candidates = sorted(pyenv.glob(f"versions/{LAMBDA_PYTHON}.*/bin/python"))
    candidates += [Path(found)] if (found := shutil.which(f"python{LAMBDA_PYTHON}")) else []
    for candidate in candidates:
        if subprocess.run([str(candidate), "--version"], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def lambda_requirements() -> list[str]:
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return [d for d in dependencies if not d.startswith(PROVIDED_BY_RUNTIME)]


def build_lambda_asset(build_dir: Path = ROOT / "build") -> Path:
    """The asset folder for the current sources: content-addressed under `build_dir`, so an unchanged
    tree reuses it, and processes that synthesize at once (tests beside a CLI synth) never rebuild or
    remove a folder another one is reading; each is built aside and renamed into place. Without the
    runtime's Python, SystemExit with one line naming the fix."""
    python = runtime_python()
    if python is None:
        raise SystemExit(NO_RUNTIME_PYTHON)
    requirements = lambda_requirements()
    key = hashlib.sha256("\n".join([LAMBDA_PYTHON, PLATFORM, BYTECODE, *requirements]).encode()).hexdigest()[:16]
    dependencies = build_dir / f"lambda-deps-{key}"
    if not dependencies.is_dir():
        with _staging(dependencies) as staging:
            subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(staging), "--platform",
                 PLATFORM, "--only-binary=:all:", "--implementation", "cp", "--python-version", LAMBDA_PYTHON, *requirements],
                check=True,
            )  # fmt: skip
            _compile(python, staging, staging)
    asset = build_dir / f"lambda-asset-{key}-{_sources_digest()}"
    if not asset.is_dir():
        with _staging(asset) as staging:
            shutil.copytree(dependencies, staging, ignore=shutil.ignore_patterns("RECORD"))
            for package in PACKAGES:
                shutil.copytree(package, staging / package.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                _compile(python, staging / package.name, staging)
            _copy_service_models(staging / SERVICE_MODELS_DIR)
    return asset


def _copy_service_models(target: Path) -> None:
    """Each shipped service's model and paginators as botocore lays them out (<service>/<api version>/),
    written as plain JSON, which every botocore reads (older ones read no .json.gz)."""
    loader = botocore.loaders.create_loader()
    for service in SHIPPED_SERVICE_MODELS:
        version = loader.determine_latest_version(service, "service-2")
        folder = target / service / version
        folder.mkdir(parents=True)
        for kind in ("service-2", "paginators-1"):
            data = loader.load_service_model(service, kind, version)
            (folder / f"{kind}.json").write_text(json.dumps(data, separators=(",", ":")))


def _sources_digest() -> str:
    digest = hashlib.sha256(botocore.__version__.encode())  # the shipped service models are its
    for package in PACKAGES:
        for path in sorted(p for p in package.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            digest.update(f"{path.relative_to(package.parent)}\0".encode() + path.read_bytes())
    return digest.hexdigest()[:16]


@contextmanager
def _staging(final: Path) -> Iterator[Path]:
    """A folder to build `final` in, renamed to it when done (left to whoever renamed first)."""
    staging = final.with_name(f"{final.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    staging.parent.mkdir(parents=True, exist_ok=True)
    try:
        yield staging
        with suppress(OSError):  # another process put an identical folder there first
            staging.rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _compile(python: Path, folder: Path, root: Path) -> None:
    """Bytecode for every source under `folder`, of the asset built in `root`: each names its source
    as Lambda will find it (LAMBDA_TASK_ROOT/<path in the asset>), so no build folder, which holds this
    process's id, ends up in the asset."""
    subprocess.run(
        [str(python), "-m", "compileall", "-q", "-j", "0", "--invalidation-mode", "unchecked-hash",
         "-s", str(root), "-p", LAMBDA_TASK_ROOT, str(folder)],
        check=True,
    )  # fmt: skip
