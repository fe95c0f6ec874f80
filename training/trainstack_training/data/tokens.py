"""Token shards: flat arrays of token ids in `<name>.<dtype>.bin` files, memory-mapped.

The dtype travels in the file name, not in a side file, so each shard describes itself even when
SageMaker's ShardedByS3Key hands a node only some of the objects. A training example is a window
of `seq_len + 1` tokens inside one shard (inputs and next-token targets).
"""

from __future__ import annotations

import re
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


class TokenShards:
    """Fixed-length next-token examples over every shard in a directory."""

    def __init__(self, directory: Path, seq_len: int, vocab_size: int) -> None:
        paths = sorted(p for p in Path(directory).glob("*.bin") if SHARD_PATTERN.match(p.name))
        if not paths:
            raise DataError(f"no token shards (*.uint8.bin, *.uint16.bin, *.uint32.bin) in {directory}")
        self.seq_len = seq_len
        self._shards = [np.memmap(p, dtype=SHARD_PATTERN.match(p.name)["dtype"], mode="r") for p in paths]
        self._counts = [max(0, (len(s) - 1) // seq_len) for s in self._shards]
        self._starts = np.cumsum([0, *self._counts])
        if self._starts[-1] == 0:
            raise DataError(f"shards in {directory} hold fewer than seq_len + 1 = {seq_len + 1} tokens each")
        largest = max(int(s.max()) for s in self._shards)
        if largest >= vocab_size:
            raise DataError(f"token id {largest} in {directory} does not fit the model's vocabulary of {vocab_size}")

    def __len__(self) -> int:
        return int(self._starts[-1])

    def batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        rows = []
        for index in indices:
            shard = int(np.searchsorted(self._starts, index, side="right") - 1)
            offset = (index - int(self._starts[shard])) * self.seq_len
            rows.append(torch.from_numpy(self._shards[shard][offset : offset + self.seq_len + 1].astype(np.int64)))
        window = torch.stack(rows)
        return window[:, :-1].contiguous(), window[:, 1:].contiguous()
