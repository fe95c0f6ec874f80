"""Checkpoints are data, not code: what a resume reads back is loaded as tensors and plain values only.

A checkpoint under `/opt/ml/checkpoints` comes back from an S3 prefix that another job, or anyone
who can write there, may have written. Unpickling runs whatever callables a pickle names, so a
plain `pickle.load` or a `torch.load(weights_only=False)` of a planted file would run its code in
this job. Every load of a checkpoint therefore goes through one of:

- `load_plain`: `torch.load(weights_only=True)`, for the ZeRO-1 optimizer state (tensors, numbers,
  strings, lists and dicts: what the script saves, on every torch from 2.2 on).
- `read_dcp_metadata`: DCP's `.metadata` is a pickle that every torch read (2.2, 2.5, 2.7, 2.10, 2.13)
  loads with a plain `pickle.load` (FileSystemReader.read_metadata). It is read here instead, by an
  unpickler that resolves only DCP's own metadata classes, torch.Size, dtypes and layouts, and
  paths; and each storage entry must name a plain file of the step directory.
- `CheckedReader`: DCP's reader, given that metadata, reading each data file under torch's own
  `TORCH_FORCE_WEIGHTS_ONLY_LOAD` (honoured by torch.load from 2.2 on, even where the caller passes
  weights_only=False). DCP loads each non-tensor value with `torch.load(weights_only=False)` in every
  version read (DefaultLoadPlanner.load_bytes), and on 2.2 each tensor with a `torch.load` that is not
  weights-only either (2.5 on pass weights_only=True), so without it both would unpickle anything.

A refusal is `UnsafeCheckpointError`, one line naming the file and what it holds: the job's failure.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import importlib
import os
import pathlib
import pickle
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import filesystem
from torch.distributed.checkpoint import metadata as dcp_metadata
from torch.futures import Future

METADATA = ".metadata"
FORCE_WEIGHTS_ONLY = "TORCH_FORCE_WEIGHTS_ONLY_LOAD"
FORCE_NO_WEIGHTS_ONLY = "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"  # 2.5+; set together with the other, torch refuses both
RUNS_CODE = "and unpickling it could run code"


class UnsafeCheckpointError(Exception):
    """A file of a checkpoint holds more than tensors and plain data: refused, not loaded."""


def refused(path: Path | str, why: str) -> UnsafeCheckpointError:
    """The refusal of one file, in one line: the job's failure reason."""
    return UnsafeCheckpointError(" ".join(f"{path}: refused, not unpickled: {why}".split()))


def load_plain(path: Path) -> Any:
    """A torch.save'd file of tensors and plain values, on the CPU; anything else is refused unread."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise refused(path, f"{_weights_only_refusal(error)}, {RUNS_CODE}") from None


def read_dcp_metadata(step_dir: Path) -> Any:
    """DCP's metadata of one checkpoint, unpickled with only DCP's own metadata types allowed."""
    path = step_dir / METADATA
    with path.open("rb") as file:
        try:
            metadata = _MetadataUnpickler(file).load()
        except pickle.UnpicklingError as error:
            raise refused(path, f"{error}, {RUNS_CODE}") from None
        except Exception as error:  # malformed: nothing but the allowed types was built, so nothing ran
            raise refused(path, f"it is not DCP's metadata ({type(error).__name__}: {error})") from None
    if not isinstance(metadata, dcp_metadata.Metadata) or not isinstance(metadata.storage_data, dict):
        raise refused(path, f"it is not DCP's metadata (it holds a {type(metadata).__name__})")
    for info in metadata.storage_data.values():
        name = getattr(info, "relative_path", None)
        if not isinstance(info, filesystem._StorageInfo) or not _plain_file(step_dir, name):
            raise refused(path, f"it names {name!r} as a data file, which is no file of {step_dir.name}")
    return metadata


class CheckedReader(dcp.FileSystemReader):
    """DCP's file-system reader over metadata read by `read_dcp_metadata`, loading every value weights-only.

    Files are read one at a time so that a refusal names its file. DCP raises a rank's error inside a
    CheckpointException on every rank; `Checkpointer.load` takes this one back out of it.
    """

    def __init__(self, step_dir: Path, metadata: Any) -> None:
        super().__init__(step_dir)
        self._metadata = metadata

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        # What FileSystemReader.read_metadata does after its pickle.load (2.5+: each load stamps its id).
        metadata = self._metadata
        if hasattr(self, "load_id") and hasattr(dcp_metadata, "StorageMeta"):
            if getattr(metadata, "storage_meta", None) is None:
                metadata.storage_meta = dcp_metadata.StorageMeta()
            metadata.storage_meta.load_id = self.load_id
        return metadata

    def read_data(self, plan: Any, planner: Any) -> Future[None]:
        by_file: dict[str, list[Any]] = {}
        for item in plan.items:
            by_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        for name, items in by_file.items():
            try:
                with _weights_only_loads():
                    super().read_data(dataclasses.replace(plan, items=items), planner).wait()
            except pickle.UnpicklingError as error:
                raise refused(Path(self.path) / name, f"{_weights_only_refusal(error)}, {RUNS_CODE}") from None
        done: Future[None] = Future()
        done.set_result(None)
        return done


def refusal_in(error: BaseException) -> UnsafeCheckpointError | None:
    """The refusal a DCP CheckpointException carries from any rank, if it carries one."""
    if isinstance(error, UnsafeCheckpointError):
        return error
    for failure in getattr(error, "failures", {}).values():  # rank -> (exception, traceback)
        if isinstance(failure[0], UnsafeCheckpointError):
            return failure[0]
    return None


@contextlib.contextmanager
def _weights_only_loads() -> Iterator[None]:
    """Every torch.load meanwhile is weights-only, whatever its caller asked (torch's own switch)."""
    saved = {name: os.environ.get(name) for name in (FORCE_WEIGHTS_ONLY, FORCE_NO_WEIGHTS_ONLY)}
    os.environ[FORCE_WEIGHTS_ONLY] = "1"
    os.environ.pop(FORCE_NO_WEIGHTS_ONLY, None)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _weights_only_refusal(error: pickle.UnpicklingError) -> str:
    """torch's reason in a few words ("Unsupported global: GLOBAL builtins.exec ..."), without its advice
    to load the file anyway."""
    detail = str(error).split("WeightsUnpickler error:", 1)[-1].strip()
    detail = re.split(r"\.? Please use|\n", detail, maxsplit=1)[0].strip()
    return f"it holds more than tensors and plain data ({detail})"


def _plain_file(step_dir: Path, name: object) -> bool:
    """A file directly in the step directory (DCP names its files __<rank>_<n>.distcp)."""
    return isinstance(name, str) and Path(name).name == name and name not in ("", ".", "..") and (step_dir / name).is_file()


# Module -> names whose objects DCP's metadata holds, in the torch versions the images run (2.2 keeps
# TensorProperties with sharded tensors). An entry a version lacks is skipped.
_METADATA_CLASSES = {
    "torch.distributed.checkpoint.metadata": (
        "Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "ChunkStorageMetadata", "TensorProperties",
        "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING",
    ),
    "torch.distributed.checkpoint.filesystem": ("_StorageInfo", "_StoragePrefix"),
    "torch.distributed._shard.sharded_tensor.metadata": ("TensorProperties", "MEM_FORMAT_ENCODING"),
}  # fmt: skip


def _allowed_globals() -> dict[tuple[str, str], Any]:
    """(module, name) -> object: as each object names itself when pickled here, and as DCP's modules name
    it (a checkpoint pickled by another torch may name a class where that torch kept it)."""
    allowed: dict[tuple[str, str], Any] = {}
    objects = [torch.Size, torch.serialization._get_layout, collections.OrderedDict]
    objects += [pathlib.PurePosixPath, pathlib.PosixPath]  # StorageMeta.checkpoint_id: the directory saved to (2.5+)
    for module_name, names in _METADATA_CLASSES.items():
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in names:
            if hasattr(module, name):
                allowed[module_name, name] = getattr(module, name)
                objects.append(getattr(module, name))
    allowed.update({(obj.__module__, obj.__qualname__): obj for obj in objects})
    return allowed


class _MetadataUnpickler(pickle.Unpickler):
    """Resolves only the globals DCP's metadata holds; a pickle that names anything else is refused
    before anything it names is imported or called."""

    _allowed: dict[tuple[str, str], Any] | None = None

    def find_class(self, module: str, name: str) -> Any:
        if _MetadataUnpickler._allowed is None:
            _MetadataUnpickler._allowed = _allowed_globals()
        if (module, name) in _MetadataUnpickler._allowed:
            return _MetadataUnpickler._allowed[module, name]
        if module == "torch" and isinstance(vars(torch).get(name), torch.dtype):  # pickled by name: torch.float32
            return vars(torch)[name]
        raise pickle.UnpicklingError(f"it names {module}.{name}, which DCP's metadata never holds")

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("it refers to objects outside the file, which DCP's metadata never does")
