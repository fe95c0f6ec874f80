"""Every command that takes a file, given one it cannot use (missing, a folder, not text, not YAML or
JSON, the wrong shape), says so in one line naming the file and the fix, and exits 2 (bad input)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.outputs import STACK_OUTPUTS
from trainstack_cli.main import main
from trainstack_cli.stack import EXIT_BAD_INPUT
from trainstack_local.prerequisites import namespace_problem

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "gpt-small.yaml"
OUTPUTS = {"trainstack": STACK_OUTPUTS}


def missing(folder: Path) -> Path:
    return folder / "missing.yaml"


def a_folder(folder: Path) -> Path:
    (folder / "folder.yaml").mkdir()
    return folder / "folder.yaml"


def not_text(folder: Path) -> Path:
    (folder / "latin-1.yaml").write_bytes("name: café\n".encode("latin-1"))
    return folder / "latin-1.yaml"


def not_yaml(folder: Path) -> Path:
    (folder / "broken.yaml").write_text("name: x\ninputs: {train: [\n")
    return folder / "broken.yaml"


def a_list(folder: Path) -> Path:
    (folder / "list.yaml").write_text("- name: x\n- name: y\n")
    return folder / "list.yaml"


def outputs_as_a_list(folder: Path) -> Path:
    (folder / "outputs.json").write_text(json.dumps(["trainstack"]))
    return folder / "outputs.json"


def outputs_of_no_mapping(folder: Path) -> Path:
    (folder / "outputs.json").write_text(json.dumps({"trainstack": ["TriggerBucketName"]}))
    return folder / "outputs.json"


def outputs_of_two_stacks(folder: Path) -> Path:
    (folder / "outputs.json").write_text(json.dumps({"a": OUTPUTS["trainstack"], "b": OUTPUTS["trainstack"]}))
    return folder / "outputs.json"


def outputs_without_the_stacks_values(folder: Path) -> Path:
    (folder / "outputs.json").write_text(json.dumps({"trainstack": {"TriggerBucketName": "trigger"}}))
    return folder / "outputs.json"


# Each with the words of its fix.
BAD_SPECS = {
    missing: "give the path of a job spec",
    a_folder: "give the path of a job spec",
    not_text: "save it as UTF-8",
    not_yaml: "line 3, column 1",  # where the parser stopped
    a_list: "a job spec is a mapping of fields",
}
BAD_OUTPUTS = [missing, a_folder, not_text, not_yaml, outputs_as_a_list, outputs_of_no_mapping, outputs_of_two_stacks]


def good_outputs(folder: Path) -> str:
    (folder / "cdk-outputs.json").write_text(json.dumps(OUTPUTS))
    return str(folder / "cdk-outputs.json")


def a_template(folder: Path) -> str:
    (folder / "template.json").write_text("{}")
    return str(folder / "template.json")


SPEC_COMMANDS: dict[str, Callable[[str, Path], list[str]]] = {
    "validate": lambda spec, _: ["validate", spec],
    "render": lambda spec, _: ["render", spec],
    "plan": lambda spec, _: ["plan", spec],
    "submit": lambda spec, folder: ["submit", spec, "--outputs", good_outputs(folder), "--region", "us-east-1"],
    "local run": lambda spec, folder: ["local", "run", spec, "--template", a_template(folder)],
}
OUTPUTS_COMMANDS: dict[str, Callable[[str], list[str]]] = {
    "render": lambda outputs: ["render", str(EXAMPLE), "--outputs", outputs],
    "redrive": lambda outputs: ["redrive", "--outputs", outputs],
    "submit": lambda outputs: ["submit", str(EXAMPLE), "--outputs", outputs, "--region", "us-east-1"],
    "runs": lambda outputs: ["runs", "--outputs", outputs, "--region", "us-east-1"],
    "status": lambda outputs: ["status", "run-1", "--outputs", outputs, "--region", "us-east-1"],
    "logs": lambda outputs: ["logs", "run-1", "--outputs", outputs, "--region", "us-east-1"],
    "stop": lambda outputs: ["stop", "run-1", "--outputs", outputs, "--region", "us-east-1"],
    "resume": lambda outputs: ["resume", "run-1", "--outputs", outputs, "--region", "us-east-1"],
    "queue": lambda outputs: ["queue", "--outputs", outputs, "--region", "us-east-1"],
}


def refused_in_one_line(argv: list[str], capsys) -> str:
    """The command's one line on stderr, once it exited 2."""
    code = main(argv)
    error = capsys.readouterr().err
    assert code == EXIT_BAD_INPUT, error
    (line,) = error.strip().splitlines()
    return line


@pytest.fixture
def offline(monkeypatch):
    """No AWS is reached: a command that got past its file would fail otherwise, not exit 2."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    for name in ("AWS_PROFILE", "TRAINSTACK_STACK", "TRAINSTACK_OUTPUTS"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("bad", BAD_SPECS)
@pytest.mark.parametrize("command", SPEC_COMMANDS)
def test_a_spec_file_it_cannot_use_is_one_line_naming_it_and_the_fix(command, bad, tmp_path, capsys, offline):
    if command == "local run" and namespace_problem():
        pytest.skip(f"local run checks this machine first: {namespace_problem()}")
    spec = bad(tmp_path)

    line = refused_in_one_line(SPEC_COMMANDS[command](str(spec), tmp_path), capsys)

    assert f"{spec}: " in line and BAD_SPECS[bad] in line


@pytest.mark.parametrize("bad", BAD_OUTPUTS)
@pytest.mark.parametrize("command", OUTPUTS_COMMANDS)
def test_an_outputs_file_it_cannot_use_is_one_line_naming_it_and_the_fix(command, bad, tmp_path, capsys, offline):
    outputs = bad(tmp_path)

    line = refused_in_one_line(OUTPUTS_COMMANDS[command](str(outputs)), capsys)

    assert str(outputs) in line
    assert "`cdk deploy --outputs-file`" in line or "--stack" in line, line


def test_render_with_outputs_that_lack_the_stacks_values_names_the_missing_one(tmp_path, capsys):
    outputs = outputs_without_the_stacks_values(tmp_path)

    line = refused_in_one_line(["render", str(EXAMPLE), "--outputs", str(outputs)], capsys)

    assert f"{outputs}: " in line and "ExecutionRoleArn" in line and "`cdk deploy --outputs-file`" in line


def test_a_stack_command_whose_outputs_lack_the_stacks_values_says_to_redeploy(tmp_path, capsys, offline):
    outputs = outputs_without_the_stacks_values(tmp_path)

    code = main(["queue", "--outputs", str(outputs), "--region", "us-east-1"])

    (line,) = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and "ExecutionRoleArn" in line and "deploy it with this version" in line


@pytest.mark.parametrize("command", ["run", "serve"])
@pytest.mark.parametrize("bad", [a_folder, not_yaml])
def test_a_template_it_cannot_use_says_to_synthesize_it(command, bad, tmp_path, capsys):
    if namespace_problem():
        pytest.skip(f"local checks this machine first: {namespace_problem()}")
    template = bad(tmp_path)

    line = refused_in_one_line(["local", command, "--template", str(template)], capsys)

    assert f"{template}: " in line and "make synth" in line
