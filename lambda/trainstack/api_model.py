"""Limits and patterns read from botocore's own SageMaker API model (the runtime ships botocore),
so a rule quotes the API rather than a number typed here."""

from __future__ import annotations

import re
from functools import cache
from typing import Any


@cache
def _service() -> Any:
    import botocore.session

    return botocore.session.get_session().get_service_model("sagemaker")


def member_metadata(shape: str, member: str) -> dict[str, Any]:
    """A structure member's constraints: min, max, pattern (for a list, of the list itself)."""
    return dict(_service().shape_for(shape).members[member].metadata)


def matches_pattern(shape: str, member: str, value: str) -> bool:
    pattern = member_metadata(shape, member).get("pattern")
    return pattern is None or re.fullmatch(pattern, value) is not None
