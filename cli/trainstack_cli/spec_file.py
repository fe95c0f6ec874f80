"""The spec file a command names, read as the core reads specs (YAML 1.2), or refused in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainstack.spec import SpecError, spec_data
from trainstack_cli.stack import EXIT_BAD_INPUT, CliError


def read_spec(path: Path) -> tuple[bytes, dict[str, Any]]:
    """The spec file's bytes and the fields they hold, or one line naming the file and the fix."""
    try:
        text = path.read_bytes()
    except OSError as error:
        raise CliError(
            f"{path}: cannot read it ({error.strerror}); give the path of a job spec (YAML or JSON)", EXIT_BAD_INPUT
        ) from None
    try:
        return text, spec_data(text, str(path))
    except SpecError as error:
        raise CliError(error.problems[0], EXIT_BAD_INPUT) from None
