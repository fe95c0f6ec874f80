"""Write training data in the formats train.py reads.

    # byte-level token shards from text files (vocabulary 256: any UTF-8 text, no tokenizer download)
    python training/prepare_data.py tokens --output data/tokens --shards 4 corpus/*.txt
    # 28x28 digit images drawn as jittered seven-segment glyphs (the MNIST-style example)
    python training/prepare_data.py digits --output data/digits --count 512 --seed 0

Upload the output folder under the trigger bucket's datasets/<name>/ and point the job's train
channel at it. Use at least as many shards as instances when the channel is ShardedByS3Key.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from trainstack_training.data.tokens import write_shard

# Segment endpoints (x0, y0, x1, y1) on a 28x28 canvas: a, b, c, d, e, f, g.
SEGMENTS = {
    "a": (9, 5, 19, 5),
    "b": (19, 5, 19, 14),
    "c": (19, 14, 19, 23),
    "d": (9, 23, 19, 23),
    "e": (9, 14, 9, 23),
    "f": (9, 5, 9, 14),
    "g": (9, 14, 19, 14),
}
DIGIT_SEGMENTS = ["abcdef", "bc", "abged", "abgcd", "fgbc", "afgcd", "afgedc", "abc", "abcdefg", "abcdfg"]


def write_tokens(files: list[Path], output: Path, shards: int) -> list[Path]:
    data = np.frombuffer(b"\n".join(path.read_bytes() for path in files), dtype=np.uint8)
    return [write_shard(part, output, f"shard_{index:05d}") for index, part in enumerate(np.array_split(data, shards))]


def draw_digit(digit: int, rng: np.random.Generator) -> np.ndarray:
    canvas = np.zeros((28, 28), dtype=np.float32)
    dx, dy = rng.integers(-3, 4, size=2)
    slant, thickness = rng.uniform(-0.25, 0.25), rng.integers(1, 3)
    for segment in DIGIT_SEGMENTS[digit]:
        x0, y0, x1, y1 = SEGMENTS[segment]
        for t in np.linspace(0.0, 1.0, 24):
            y = y0 + t * (y1 - y0) + dy
            x = x0 + t * (x1 - x0) + dx + slant * (14 - y)
            row, col = round(y), round(x)
            canvas[max(row - thickness, 0) : row + thickness, max(col - thickness, 0) : col + thickness] = 1.0
    canvas += rng.normal(0.0, 0.15, size=canvas.shape)
    return (np.clip(canvas, 0.0, 1.0) * 255).astype(np.uint8)


def write_digits(output: Path, count: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=count).astype(np.int64)
    images = np.stack([draw_digit(int(label), rng) for label in labels])
    output.mkdir(parents=True, exist_ok=True)
    np.save(output / "images.npy", images)
    np.save(output / "labels.npy", labels)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    tokens = commands.add_parser("tokens", help="byte-level token shards from text files")
    tokens.add_argument("--output", type=Path, required=True)
    tokens.add_argument("--shards", type=int, default=4)
    tokens.add_argument("files", type=Path, nargs="+")
    digits = commands.add_parser("digits", help="28x28 seven-segment digit images")
    digits.add_argument("--output", type=Path, required=True)
    digits.add_argument("--count", type=int, default=512)
    digits.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "tokens":
        for path in write_tokens(args.files, args.output, args.shards):
            print(path)
    else:
        write_digits(args.output, args.count, args.seed)
        print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
