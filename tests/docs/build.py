"""The docs site's build as `make docs` runs it: MkDocs in its own process, --strict."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config), "--site-dir", str(site)]
    # As the Makefile exports it: without, Material prints its end-of-life banner on every build.
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(command, env=environment, capture_output=True, text=True, timeout=300, check=False)
