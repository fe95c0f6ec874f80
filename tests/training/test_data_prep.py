"""prepare_data.py: token shards from text, byte-level or through a Hugging Face tokenizer read from
local files, in the layout TokenShards reads."""

from __future__ import annotations

import numpy as np
from transformers import AutoTokenizer

from prepare_data import END_OF_TEXT, main
from trainstack_training.data.tokens import TokenShards

TEXT = "The quick brown fox jumps over the lazy dog. " * 40


def _corpus(tmp_path) -> list:
    files = []
    for index, words in enumerate((TEXT, TEXT.upper(), "Pack my box with five dozen liquor jugs. " * 30)):
        path = tmp_path / f"doc{index}.txt"
        path.write_text(words)
        files.append(path)
    return files


def test_a_trained_tokenizer_loads_from_its_folder_with_the_vocabulary_asked_for(tmp_path):
    files = _corpus(tmp_path)
    assert main(["tokenizer", "--output", str(tmp_path / "tok"), "--vocab", "300", *map(str, files)]) == 0
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok", local_files_only=True)
    assert len(tokenizer) <= 300 and tokenizer.eos_token == END_OF_TEXT
    assert tokenizer.decode(tokenizer("jumps over")["input_ids"]) == "jumps over"


def test_tokenizer_shards_hold_every_document_then_its_end_of_text_in_order(tmp_path):
    files = _corpus(tmp_path)
    main(["tokenizer", "--output", str(tmp_path / "tok"), "--vocab", "300", *map(str, files)])
    arguments = ["--tokenizer", str(tmp_path / "tok"), "--output", str(tmp_path / "data"), "--shards", "2"]
    assert main(["tokens", *arguments, *map(str, files)]) == 0
    shards = sorted((tmp_path / "data").iterdir())
    assert [p.name for p in shards] == ["shard_00000.uint16.bin", "shard_00001.uint16.bin"]
    ids = np.concatenate([np.fromfile(p, dtype=np.uint16) for p in shards]).tolist()
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "tok", local_files_only=True)
    documents = tokenizer.decode(ids).split(END_OF_TEXT)
    assert documents == [f.read_text() for f in files] + [""]  # each document ends with the token
    assert len(TokenShards(tmp_path / "data", 16, vocab_size=300)) > 0


def test_byte_level_shards_are_the_files_bytes_joined_by_newlines(tmp_path):
    files = _corpus(tmp_path)
    main(["tokens", "--output", str(tmp_path / "data"), "--shards", "3", *map(str, files)])
    shards = sorted((tmp_path / "data").iterdir())
    assert all(p.name.endswith(".uint8.bin") for p in shards) and len(shards) == 3
    assert b"".join(p.read_bytes() for p in shards) == b"\n".join(f.read_bytes() for f in files)
