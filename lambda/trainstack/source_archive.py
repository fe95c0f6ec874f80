"""Training code as the tar.gz that script mode expects (pure Python: the stack's source bundle,
`trainstack submit --source` and local mode all pack with it).

SageMaker's framework containers download `sagemaker_submit_directory` and untar it, but CDK
zips folder assets. So the folder is packed here into a tar.gz with fixed timestamps, owners,
modes and order: the same sources give the same bytes, hence the same asset hash, and an
unchanged `training/` never re-uploads or changes the template.
"""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

EXCLUDED_NAMES = {"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".DS_Store"}
EXCLUDED_SUFFIXES = (".pyc", ".pyo", ".egg-info")


def _included(path: Path, root: Path) -> bool:
    parts = path.relative_to(root).parts
    return not any(part in EXCLUDED_NAMES or part.endswith(EXCLUDED_SUFFIXES) for part in parts)


def write_source_tarball(source_dir: Path, destination: Path) -> Path:
    """Pack `source_dir` (its contents at the archive root) into `destination`, deterministically."""
    source_dir = source_dir.resolve()
    files = sorted(p for p in source_dir.rglob("*") if p.is_file() and _included(p, source_dir))
    if not files:
        raise ValueError(f"{source_dir} holds no files to ship as training code")
    buffer = io.BytesIO()
    with (
        gzip.GzipFile(filename="", mode="wb", fileobj=buffer, mtime=0, compresslevel=9) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.GNU_FORMAT) as tar,
    ):
        for path in files:
            info = tarfile.TarInfo(path.relative_to(source_dir).as_posix())
            info.size = path.stat().st_size
            info.mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with path.open("rb") as handle:
                tar.addfile(info, handle)
    destination.parent.mkdir(parents=True, exist_ok=True)
    data = buffer.getvalue()
    if not destination.exists() or destination.read_bytes() != data:
        destination.write_bytes(data)
    return destination
