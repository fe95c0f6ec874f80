"""The README documents every setting the stack reads."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from stacks.settings import StackSettings

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def test_readme_settings_table_lists_every_setting():
    for field in fields(StackSettings):
        assert f"| `{field.name}` |" in README, field.name


def test_readme_shows_the_two_commands():
    assert "make local" in README and "make test" in README
