"""Plant a pickle that runs code into a complete checkpoint, as another job writing to the same S3 prefix
could: the file it replaces, rewritten so that the checkpoint stays complete (its manifest lists the
new sizes, and DCP's metadata the new offsets), so nothing but the load itself stands between the
pickle and the resume.

The pickle runs `exec`, which writes `marker`: a load that unpickles it leaves the marker behind.

Runs under any Python with torch (an image's runtime too, whose DCP wrote the checkpoint and so is
the one to read its metadata):

    python tests/training/planted.py zero1|metadata|bytes|tensor STEP_DIR MARKER
"""

from __future__ import annotations

import io
import json
import pickle
import sys
from pathlib import Path

import torch

MANIFEST = "manifest.json"
WHERE = {"zero1": "zero1_optimizer.pt", "metadata": ".metadata"}  # bytes and tensor: the .distcp holding the item


class RunsCode:
    """Unpickling this writes `marker`: what a planted pickle would do, harmlessly."""

    def __init__(self, marker: str | Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):  # exec is a builtin: nothing of this module is needed to unpickle it
        return (exec, (f"open({self.marker!r}, 'w').write('planted code ran')",))


def torch_saved(value: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(value, buffer)
    return buffer.getvalue()


def plant(what: str, step_dir: Path, marker: Path) -> str:
    """Replace one file of the checkpoint (or one item of a .distcp file) with the pickle; returns the
    file's name."""
    if what == "zero1":
        (step_dir / WHERE[what]).write_bytes(torch_saved(RunsCode(marker)))  # as torch.save wrote the real one
    elif what == "metadata":
        (step_dir / WHERE[what]).write_bytes(pickle.dumps(RunsCode(marker)))  # as DCP's pickle.dump wrote the real one
    elif what in ("bytes", "tensor"):
        name = _plant_item(step_dir, marker, tensor=what == "tensor")
        fix_manifest(step_dir, name)
        return name
    else:
        raise ValueError(f"nothing to plant called {what!r}")
    fix_manifest(step_dir, WHERE[what])
    return WHERE[what]


def _plant_item(step_dir: Path, marker: Path, *, tensor: bool) -> str:
    """One item of the state (a tensor, or a value DCP keeps as torch.save'd bytes) becomes the pickle;
    the .distcp file holding it is rewritten, and the offsets in the metadata with it."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = pickle.loads((step_dir / ".metadata").read_bytes())  # the job's own, written by this torch
    kinds = metadata.state_dict_metadata
    index = next(
        i for i in sorted(metadata.storage_data, key=lambda i: i.fqn) if isinstance(kinds[i.fqn], TensorStorageMetadata) == tensor
    )
    name = metadata.storage_data[index].relative_path
    data = (step_dir / name).read_bytes()
    items = sorted(
        ((i, info) for i, info in metadata.storage_data.items() if info.relative_path == name), key=lambda x: x[1].offset
    )
    written = bytearray()
    for i, info in items:
        blob = torch_saved(RunsCode(marker)) if i == index else data[info.offset : info.offset + info.length]
        info.offset, info.length = len(written), len(blob)
        written += blob
    (step_dir / name).write_bytes(bytes(written))
    (step_dir / ".metadata").write_bytes(pickle.dumps(metadata))
    fix_manifest(step_dir, ".metadata")
    return name


def fix_manifest(step_dir: Path, name: str) -> None:
    """The manifest lists `name` at its size now, so that the checkpoint still counts as complete."""
    manifest = json.loads((step_dir / MANIFEST).read_text())
    manifest["files"][name] = (step_dir / name).stat().st_size
    (step_dir / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))


if __name__ == "__main__":
    what, step_dir, marker = sys.argv[1:]
    print(plant(what, Path(step_dir), Path(marker)))
