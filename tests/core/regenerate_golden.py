"""Rewrite the golden requests after an intended builder change; review the diff before committing."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.core.specs import SPECS
from tests.core.test_request import GOLDEN, build

for strategy in SPECS:
    (GOLDEN / f"{strategy}.json").write_text(json.dumps(build(strategy), indent=2, sort_keys=True) + "\n")
    print(GOLDEN / f"{strategy}.json")
