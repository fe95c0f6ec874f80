"""The SDK oracle: tests/facts/sdk_oracle.py run by the SDK's own venv (.venv-sdk, made by `make sdk`, which `make test` runs)."""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SDK_PYTHON = ROOT / ".venv-sdk" / "bin" / "python"
ORACLE = Path(__file__).with_name("sdk_oracle.py")


def sdk_python() -> Path:
    if not SDK_PYTHON.exists():
        pytest.fail(f"{SDK_PYTHON} is missing: run `make sdk` (it creates the SageMaker SDK venv these tests ask)")
    return SDK_PYTHON


@dataclass
class Oracle:
    process: subprocess.Popen[bytes]
    stdout: IO[bytes]
    stderr: IO[bytes]


def start_oracle(mode: str, payload: Any, *flags: str) -> Oracle:
    """Start the oracle with `payload` on stdin; files, not pipes, so two oracles run side by side."""
    # The files outlive this call: `answers` reads and closes them once the oracle is done.
    stdin, stdout, stderr = (tempfile.TemporaryFile() for _ in range(3))  # noqa: SIM115
    stdin.write(json.dumps(payload).encode())
    stdin.seek(0)
    command = [str(sdk_python()), str(ORACLE), mode, *flags]
    with stdin:
        process = subprocess.Popen(command, stdin=stdin, stdout=stdout, stderr=stderr, cwd=ROOT)
    return Oracle(process, stdout, stderr)


def answers(oracle: Oracle) -> Any:
    returncode = oracle.process.wait(timeout=300)
    with oracle.stdout, oracle.stderr:
        oracle.stdout.seek(0)
        oracle.stderr.seek(0)
        assert returncode == 0, oracle.stderr.read().decode()[-3000:]
        return json.loads(oracle.stdout.read())
