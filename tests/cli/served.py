"""`trainstack local serve` started as a user starts it: a subprocess on a free loopback port, reached
only over HTTP with the environment it prints; what the served tests share."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from trainstack.polling import poll_until

BIN = Path(sys.executable).parent


@dataclass
class Served:
    environment: dict[str, str]
    outputs: dict[str, str]
    printed: list[str]  # what `local serve` printed after its environment, line by line
    log: Path  # what `local serve` wrote to its standard error

    def trainstack(self, *arguments: str, **overrides: str) -> subprocess.CompletedProcess:
        return run([str(BIN / "trainstack"), *arguments], {**self.environment, **overrides})

    def aws(self, *arguments: str) -> subprocess.CompletedProcess:
        return run([str(BIN / "aws"), *arguments], self.environment)

    def aws_json(self, *arguments: str) -> dict:
        result = self.aws(*arguments, "--output", "json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def status(self, run: str) -> dict:
        result = self.trainstack("status", run, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def wait_until(self, run: str, done, timeout: float = 300) -> dict:
        return poll_until(lambda: self.status(run), done, timeout=timeout, interval=1, what=f"run {run} to get there")

    def run_of_upload(self, key: str) -> str:
        """The run an upload of `key` to the trigger bucket started, once Step Functions lists it."""
        machine = self.outputs["StateMachineArn"]

        def started() -> list[str]:
            executions = self.aws_json("stepfunctions", "list-executions", "--state-machine-arn", machine)["executions"]
            inputs = {
                e["name"]: self.aws_json("stepfunctions", "describe-execution", "--execution-arn", e["executionArn"])["input"]
                for e in executions
            }
            return [name for name, text in inputs.items() if key in text]

        (run,) = poll_until(started, timeout=60, interval=1, what=f"the upload of {key} to start a run")
        return run


def run(command: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300, check=False)


def client_environment() -> dict[str, str]:
    """This machine's environment without anything AWS: only what `local serve` prints is used."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "TRAINSTACK_"))}
    return {**kept, "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull, "NO_COLOR": "1"}


@contextmanager
def serving(template: dict[str, Any], workdir: Path, *arguments: str) -> Iterator[Served]:
    """`trainstack local serve` of the template, with `arguments` (e.g. --quota), until the block ends."""
    template_path = workdir / "template.json"
    template_path.write_text(json.dumps(template))
    log = (workdir / "serve.log").open("w")
    command = [str(BIN / "trainstack"), "local", "serve", "--template", str(template_path), "--workdir", str(workdir / "twin")]
    process = subprocess.Popen([*command, *arguments], stdout=subprocess.PIPE, stderr=log, text=True, env=client_environment())
    environment = client_environment()
    for line in process.stdout:
        if line.startswith("export "):
            name, _, value = line.removeprefix("export ").strip().partition("=")
            environment[name] = value
        if line.startswith("# trainstack local: serving"):
            break
    else:
        pytest.fail(f"local serve ended: {(workdir / 'serve.log').read_text()[-3000:]}")
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.extend(line.rstrip("\n") for line in process.stdout), daemon=True)
    reader.start()
    stacks = run([str(BIN / "aws"), "cloudformation", "describe-stacks", "--output", "json"], environment)
    assert stacks.returncode == 0, stacks.stderr
    (stack,) = json.loads(stacks.stdout)["Stacks"]
    yield Served(environment, {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}, printed, workdir / "serve.log")
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=120) == 0
