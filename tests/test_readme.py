"""The docs document every setting the stack reads (docs/deploying.md, "Settings"), the README shows the two
commands, and every job-spec example the README and the pages under docs/ show validates."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from stacks.settings import StackSettings
from trainstack.spec import JobSpec
from trainstack_cli.main import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DEPLOYING = (ROOT / "docs" / "deploying.md").read_text()


def test_the_settings_table_lists_every_setting():
    settings = DEPLOYING[DEPLOYING.index("## Settings") :]
    for field in fields(StackSettings):
        assert f"| `{field.name}` |" in settings, field.name


def test_readme_shows_the_two_commands():
    assert "make local" in README and "make test" in README


def test_the_readme_stays_a_front_page():
    # Issue #37: what it is, the two commands and what they need, a deploy, one spec, where to read on;
    # everything else lives in docs/.
    assert len(README.splitlines()) <= 200


# -- the job-spec examples the README and docs/ show --------------------------------------------------
# The rule: a ```yaml block with a job-spec field at its top level is a spec (it has `name`) or a
# fragment of one; a fragment is validated after the README's own example spec (examples/gpt-small.yaml),
# its fields replacing the example's. Both as written: the text itself goes to `trainstack validate`.
BASE_SPEC = ROOT / "examples" / "gpt-small.yaml"
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Example:
    where: str  # file:line, for the test's id
    text: str

    @property
    def is_fragment(self) -> bool:
        return not re.search(r"^name:", self.text, re.MULTILINE)


def spec_examples() -> list[Example]:
    examples = []
    for document in DOCUMENTS:
        text = document.read_text()
        for block in YAML_BLOCK.finditer(text):
            keys = set(re.findall(r"^([A-Za-z_]\w*):", block.group(1), re.MULTILINE))
            if keys & set(JobSpec.model_fields):
                line = text.count("\n", 0, block.start()) + 1
                examples.append(Example(f"{document.relative_to(ROOT)}:{line}", block.group(1)))
    return examples


EXAMPLES = spec_examples()


def test_the_rule_finds_the_spec_examples_of_the_readme_and_of_docs():
    pages = {"README.md", "docs/deploying.md", "docs/restarts.md", "docs/team-queue.md", "docs/tracking.md", "docs/training.md"}
    assert {example.where.split(":")[0] for example in EXAMPLES} >= pages


@pytest.mark.parametrize("example", EXAMPLES, ids=[example.where for example in EXAMPLES])
def test_every_documented_spec_example_validates_as_written(example, tmp_path, capsys):
    spec = tmp_path / "example.yaml"
    # PyYAML keeps a repeated key's last value: the fragment's fields replace the example spec's.
    spec.write_text(BASE_SPEC.read_text() + "\n" + example.text if example.is_fragment else example.text)

    assert main(["validate", str(spec)]) == 0, capsys.readouterr().err
