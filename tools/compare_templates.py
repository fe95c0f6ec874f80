"""Whether a refactor left the synthesized stack unchanged: compare two `cdk synth` outputs.

    python tools/compare_templates.py BEFORE_CDK_OUT AFTER_CDK_OUT

Prints whether the templates are equal with asset hashes masked (the Lambda and training-code
assets change with any source edit), whether the state machine's DefinitionString is equal byte for
byte, and whether the logical IDs are the same and in the same order; on a difference, the first
lines of a unified diff. Exits 1 when anything differs.
"""

from __future__ import annotations

import difflib
import json
import re
import sys
from pathlib import Path
from typing import Any

TEMPLATE = "trainstack.template.json"
ASSET_HASH = re.compile(r"[0-9a-f]{64}")


def _masked(template: dict[str, Any]) -> list[str]:
    return ASSET_HASH.sub("<asset hash>", json.dumps(template, sort_keys=True, indent=1)).splitlines()


def _definition(template: dict[str, Any]) -> str:
    (machine,) = [r for r in template["Resources"].values() if r["Type"] == "AWS::StepFunctions::StateMachine"]
    return json.dumps(machine["Properties"]["DefinitionString"], sort_keys=True)


def main() -> int:
    before, after = (json.loads((Path(folder) / TEMPLATE).read_text()) for folder in sys.argv[1:3])
    checks = {
        "template equal, asset hashes masked": _masked(before) == _masked(after),
        "DefinitionString equal byte for byte": _definition(before) == _definition(after),
        "logical IDs equal and in order": list(before["Resources"]) == list(after["Resources"]),
    }
    for name, equal in checks.items():
        print(f"{name}: {equal}")
    if not checks["template equal, asset hashes masked"]:
        print("\n".join(list(difflib.unified_diff(_masked(before), _masked(after), lineterm="", n=1))[:80]))
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
