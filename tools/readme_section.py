"""Generated sections of the documentation (README.md and the pages under docs/): text between a
start and an end marker comment, written by a tool and checked by a test that it equals what the
tool renders now. Every caller names the page its section lives on."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parents[1] / "docs"


def section(start: str, end: str, document: Path) -> str:
    """The section as the page holds it, markers included."""
    text = document.read_text()
    return text[text.index(start) : text.index(end) + len(end)]


def write_section(start: str, end: str, rendered: str, document: Path) -> None:
    text = document.read_text()
    first, last = text.index(start), text.index(end) + len(end)
    document.write_text(text[:first] + rendered + text[last:])
    print(document)
