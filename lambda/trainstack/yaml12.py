"""Spec text read as YAML 1.2 reads it: the core schema, on PyYAML.

PyYAML implements YAML 1.1, where `on`, `off`, `yes`, `no`, `y` and `n` are booleans (so a spec's
`restarts: {on: [...]}` had the key true), `017` is octal, `1_000` and `1:30` are numbers, `1e3` is
text and `2026-01-01` a date. In the 1.2 core schema only true/false (True, TRUE, False, FALSE) are
booleans, null is null/Null/NULL/~ or nothing, integers are decimal, 0o octal or 0x hex, and floats
need no dot; JSON reads the same either way. Not a YAML 1.2 library (ruamel.yaml): the Lambda
asset's dependencies stay boto3, pydantic and PyYAML, and the schema is only which plain scalars
resolve to which type, which a PyYAML loader subclass states.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

_TAG = "tag:yaml.org,2002:"
# (type, pattern, the first characters it can start with), in the 1.2 spec's order: a plain
# scalar takes the first type it matches, so "12" is an int although the float pattern admits it.
_CORE_SCHEMA = (
    ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
    ("bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    ("int", r"[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+", list("-+0123456789")),
    (
        "float",
        r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)",
        list("-+.0123456789"),
    ),
    # `<<` merge keys are no part of the core schema, but YAML 1.2 readers (ruamel.yaml, yaml-cpp,
    # Go's yaml.v3) keep them: a spec that reuses a block through an anchor reads as it did.
    ("merge", r"<<", ["<"]),
)


class YamlError(ValueError):
    """The text is not YAML; one line saying why and where."""


def _int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    # PyYAML's own reads a leading 0 as octal and allows 1.1's underscores and base 60.
    text = loader.construct_scalar(node)
    for prefix, base in (("0o", 8), ("0x", 16)):
        if text.startswith(prefix):
            return int(text[len(prefix) :], base)
    return int(text)


class CoreSchemaLoader(yaml.SafeLoader):
    """PyYAML's safe loader with the 1.2 core schema's types, and none of 1.1's others: an explicit
    !!timestamp, !!binary or !!set is refused, as a value JSON could not carry."""

    yaml_implicit_resolvers: dict[Any, list[tuple[str, re.Pattern[str]]]] = {}  # noqa: RUF012 (PyYAML's class registry)
    yaml_constructors = {  # noqa: RUF012
        tag: constructor
        for tag, constructor in yaml.SafeLoader.yaml_constructors.items()
        if tag is None or tag.removeprefix(_TAG) in ("null", "bool", "float", "str", "seq", "map")
    }


class SpecDumper(yaml.SafeDumper):
    """PyYAML's safe dumper quoting any text that YAML 1.1 or 1.2 would read as another type: what
    it writes reads back the same in both (a stack deployed before this reads 1.1)."""


for _name, _pattern, _first in _CORE_SCHEMA:
    for _kind in (CoreSchemaLoader, SpecDumper):
        _kind.add_implicit_resolver(_TAG + _name, re.compile(rf"^(?:{_pattern})$"), _first)
CoreSchemaLoader.add_constructor(_TAG + "int", _int)


def load(text: str | bytes) -> Any:
    """The document `text` holds, read with the YAML 1.2 core schema; YamlError otherwise."""
    try:
        return yaml.load(text, Loader=CoreSchemaLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise YamlError(", ".join(part for part in (error.context, error.problem) if part) + where) from None
    except yaml.reader.ReaderError as error:
        if error.encoding == "unicode":  # decoded text, with a control character YAML does not allow
            raise YamlError(f"the character #x{error.character:04x} at position {error.position} is not allowed") from None
        raise YamlError(f"not {error.encoding.upper()} text at byte {error.position}; save it as UTF-8") from None
    except (yaml.YAMLError, ValueError) as error:  # ValueError: an explicit !!int or !!float of no number
        raise YamlError(" ".join(str(error).split())) from None


def dump(data: Any) -> str:
    """`data` as YAML text that reads back as `data`, in key order."""
    return yaml.dump(data, Dumper=SpecDumper, sort_keys=False)
