"""Token shards: flat arrays of token ids in `<name>.<dtype>.bin` files, memory-mapped.

The dtype travels in the file name, not in a side file, so each shard describes itself even when
SageMaker's ShardedByS3Key hands a node only some of the objects. Only files named like a shard are
data: markers and spec files that arrive in the same channel (`_SUCCESS`, `job.yaml`) are not. A
training example is a window of `seq_len + 1` tokens inside one shard (inputs and next-token targets).
Opening a data set reads no tokens (only file names and sizes), whatever its size; token ids are
checked against the vocabulary in the batches that read them.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

SHARD_PATTERN = re.compile(r"^(?P<stem>.+)\.(?P<dtype>uint8|uint16|uint32)\.bin$")


class DataError(ValueError):
    """The data directory is missing, empty or malformed."""


def write_shard(tokens: np.ndarray, directory: Path, stem: str) -> Path:
    """Write one shard; the smallest dtype that holds the largest token id is chosen."""
    largest = int(tokens.max()) if tokens.size else 0
    dtype = next(d for d in (np.uint8, np.uint16, np.uint32) if largest <= np.iinfo(d).max)
    path = directory / f"{stem}.{np.dtype(dtype).name}.bin"
    directory.mkdir(parents=True, exist_ok=True)
    tokens.astype(dtype).tofile(path)
    return path


def data_set_name(paths: Sequence[Path]) -> str:
    """Names a data set by its files' names and sizes: the same files give the same name on any host
    and after any restart, so a node given the same shard set again is recognised (nothing is read)."""
    listing = "".join(f"{p.name}\0{p.stat().st_size}\n" for p in sorted(paths, key=lambda p: p.name))
    return f"{len(paths)} files sha256:{hashlib.sha256(listing.encode()).hexdigest()[:16]}"


class TokenShards:
    """Fixed-length next-token examples over every shard in a directory."""

    def __init__(self, directory: Path, seq_len: int, vocab_size: int) -> None:
        paths = sorted(p for p in Path(directory).glob("*.bin") if SHARD_PATTERN.match(p.name))
        if not paths:
            raise DataError(f"no token shards (*.uint8.bin, *.uint16.bin, *.uint32.bin) in {directory}")
        self.seq_len = seq_len
        self.name = data_set_name(paths)
        self._shards = [np.memmap(p, dtype=SHARD_PATTERN.match(p.name)["dtype"], mode="r") for p in paths]
        self._counts = [max(0, (len(s) - 1) // seq_len) for s in self._shards]
        self._starts = np.cumsum([0, *self._counts])
        if self._starts[-1] == 0:
            raise DataError(f"shards in {directory} hold fewer than seq_len + 1 = {seq_len + 1} tokens each")
        # Start-up reads no data: a shard whose dtype cannot hold an id beyond the vocabulary needs no
        # check; the others are checked per batch, on the tokens that batch reads anyway.
        self.vocab_size = vocab_size
        self._paths = paths
        self._unchecked = [np.iinfo(s.dtype).max >= vocab_size for s in self._shards]

    def __len__(self) -> int:
        return int(self._starts[-1])

    def batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        rows = []
        for index in indices:
            shard = int(np.searchsorted(self._starts, index, side="right") - 1)
            offset = (index - int(self._starts[shard])) * self.seq_len
            tokens = self._shards[shard][offset : offset + self.seq_len + 1]
            if self._unchecked[shard] and int(tokens.max()) >= self.vocab_size:
                raise DataError(
                    f"token id {int(tokens.max())} in {self._paths[shard].name} (tokens {offset}..{offset + self.seq_len}) "
                    f"does not fit the model's vocabulary of {self.vocab_size}"
                )
            rows.append(torch.from_numpy(tokens.astype(np.int64)))
        window = torch.stack(rows)
        return window[:, :-1].contiguous(), window[:, 1:].contiguous()
