"""What a broken rule reports: the field, the value, the rule broken and the fix."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Problem:
    field: str
    value: Any
    rule: str
    fix: str

    def __str__(self) -> str:
        if self.value is None:  # the rule names the value itself
            return f"{self.field}: {self.rule}; {self.fix}"
        return f"{self.field} = {json.dumps(self.value, default=str)}: {self.rule}; {self.fix}"


class SpecRejectedError(ValueError):
    """The spec breaks one or more rules; nothing was launched."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = problems
