"""28x28 grey-scale images with integer labels: `images.npy` (uint8, N x 28 x 28) and `labels.npy`."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from trainstack_training.data.tokens import DataError, data_set_name


class ImageSet:
    def __init__(self, directory: Path) -> None:
        images, labels = Path(directory) / "images.npy", Path(directory) / "labels.npy"
        if not images.exists() or not labels.exists():
            raise DataError(f"{directory} needs images.npy and labels.npy (see training/prepare_data.py digits)")
        self.name = data_set_name([images, labels])
        # allow_pickle=False (numpy's default, said here): an object array in a channel is a pickle, refused unread
        self._images = np.load(images, mmap_mode="r", allow_pickle=False)
        self._labels = np.load(labels, mmap_mode="r", allow_pickle=False)
        if self._images.shape[1:] != (28, 28) or len(self._images) != len(self._labels):
            raise DataError(f"{directory}: expected N x 28 x 28 images and N labels")

    def __len__(self) -> int:
        return len(self._labels)

    def batch(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        images = torch.from_numpy(np.stack([self._images[i] for i in indices]).astype(np.float32) / 255.0)
        labels = torch.from_numpy(np.array([self._labels[i] for i in indices], dtype=np.int64))
        return images.unsqueeze(1), labels
