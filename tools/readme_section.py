"""The README's generated sections: text between a start and an end marker comment, written by a
tool and checked by a test that it equals what the tool renders now."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def section(start: str, end: str, readme: Path = README) -> str:
    """The section as the README holds it, markers included."""
    text = readme.read_text()
    return text[text.index(start) : text.index(end) + len(end)]


def write_section(start: str, end: str, rendered: str, readme: Path = README) -> None:
    text = readme.read_text()
    first, last = text.index(start), text.index(end) + len(end)
    readme.write_text(text[:first] + rendered + text[last:])
    print(readme)
