"""A small convolutional classifier for 28x28 single-channel images (the classic MNIST example)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class Classifier(nn.Module):
    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            [
                nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
                nn.Sequential(nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)),
            ]
        )
        self.head = nn.Linear(32 * 7 * 7, num_classes)

    def forward(self, images: torch.Tensor, targets: torch.Tensor | None = None) -> torch.Tensor:
        x = images
        for block in self.blocks:
            x = block(x)
        logits = self.head(x.flatten(1))
        return logits if targets is None else F.cross_entropy(logits, targets)

    def num_parameters(self, exclude_embeddings: bool = True) -> int:
        return sum(p.numel() for p in self.parameters())
