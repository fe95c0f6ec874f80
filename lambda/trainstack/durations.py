"""Human durations (`30m`, `48h`, `2d`, `90s`, or plain seconds) to seconds."""

from __future__ import annotations

import re

_PATTERN = re.compile(r"^\s*(\d+)\s*([smhd]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str | int) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; use e.g. 30m, 48h, 2d")
    if isinstance(value, int):
        return value
    match = _PATTERN.match(str(value))
    if not match:
        raise ValueError(f"{value!r} is not a duration; use e.g. 30m, 48h, 2d")
    return int(match[1]) * _UNITS[match[2]]
