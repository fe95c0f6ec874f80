"""Write training data in the formats train.py reads.

    # byte-level token shards from text files (vocabulary 256: any UTF-8 text, no tokenizer download)
    python training/prepare_data.py tokens --output data/tokens --shards 4 corpus/*.txt
    # the same with a Hugging Face tokenizer from local files (a save_pretrained folder: tokenizer.json ...)
    python training/prepare_data.py tokens --tokenizer my-tokenizer --output data/tokens --shards 4 corpus/*.txt
    # a small byte-level BPE tokenizer trained on your own text, when you have none (offline)
    python training/prepare_data.py tokenizer --output my-tokenizer --vocab 512 corpus/*.txt
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


END_OF_TEXT = "<|endoftext|>"


def write_tokens(files: list[Path], output: Path, shards: int, tokenizer: Path | None = None) -> list[Path]:
    """Byte-level ids, or the tokenizer's with its end-of-text token after each document (if it has one)."""
    if tokenizer is None:
        data = np.frombuffer(b"\n".join(path.read_bytes() for path in files), dtype=np.uint8)
    else:
        data = np.concatenate([np.asarray(ids, dtype=np.int64) for ids in tokenize(files, tokenizer)])
    return [write_shard(part, output, f"shard_{index:05d}") for index, part in enumerate(np.array_split(data, shards))]


def tokenize(files: list[Path], folder: Path) -> list[list[int]]:
    """Each file's ids, ended by the tokenizer's end-of-sequence token when it has one; only local
    files are read (a save_pretrained folder), never the hub."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    end = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    return [tokenizer(path.read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"] + end for path in files]


def train_tokenizer(files: list[Path], output: Path, vocab_size: int) -> Path:
    """A byte-level BPE tokenizer (GPT-2's scheme) trained on the given text, saved so that
    `AutoTokenizer.from_pretrained(output)` loads it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[END_OF_TEXT], initial_alphabet=alphabet)
    core.train([str(path) for path in files], trainer)
    PreTrainedTokenizerFast(tokenizer_object=core, eos_token=END_OF_TEXT).save_pretrained(output)
    return output


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
    tokens = commands.add_parser("tokens", help="token shards from text files (byte-level, or a tokenizer's)")
    tokens.add_argument("--output", type=Path, required=True)
    tokens.add_argument("--shards", type=int, default=4)
    tokens.add_argument("--tokenizer", type=Path, help="a Hugging Face tokenizer folder (local files)")
    tokens.add_argument("files", type=Path, nargs="+")
    tokenizer = commands.add_parser("tokenizer", help="train a byte-level BPE tokenizer on text files")
    tokenizer.add_argument("--output", type=Path, required=True)
    tokenizer.add_argument("--vocab", type=int, default=512)
    tokenizer.add_argument("files", type=Path, nargs="+")
    digits = commands.add_parser("digits", help="28x28 seven-segment digit images")
    digits.add_argument("--output", type=Path, required=True)
    digits.add_argument("--count", type=int, default=512)
    digits.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.command == "tokens":
        for path in write_tokens(args.files, args.output, args.shards, args.tokenizer):
            print(path)
    elif args.command == "tokenizer":
        print(train_tokenizer(args.files, args.output, args.vocab))
    else:
        write_digits(args.output, args.count, args.seed)
        print(args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
