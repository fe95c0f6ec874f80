"""The data plan: which examples each rank reads is a pure function of one position in one data set."""

from __future__ import annotations

import shutil
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from trainstack_training.data.sampler import EpochShuffle, ShardPlan, micro_batch_indices
from trainstack_training.data.tokens import DataError, TokenShards, data_set_name, write_shard

SAMPLE_TOKENS = Path(__file__).resolve().parents[2] / "training" / "sample_data" / "tokens"


def _step_examples(world_size: int, grad_accum: int, micro_batch: int, position: int, shuffle: EpochShuffle) -> list[int]:
    examples = []
    for rank in range(world_size):
        plan = ShardPlan(rank, world_size, micro_batch, grad_accum)
        for micro_step in range(grad_accum):
            examples += micro_batch_indices(plan, shuffle, position, micro_step)
    return examples


def test_two_ranks_read_the_same_global_batch_as_one_rank_accumulating_twice():
    shuffle = EpochShuffle(1000, seed=0)
    one = _step_examples(world_size=1, grad_accum=2, micro_batch=4, position=16, shuffle=shuffle)
    two = _step_examples(world_size=2, grad_accum=1, micro_batch=4, position=16, shuffle=shuffle)
    assert sorted(one) == sorted(two)
    assert len(set(one)) == 8


def test_ranks_never_read_the_same_example_within_a_step():
    shuffle = EpochShuffle(1000, seed=1)
    examples = _step_examples(world_size=4, grad_accum=3, micro_batch=2, position=0, shuffle=shuffle)
    assert len(examples) == len(set(examples)) == 24


def test_a_changed_world_size_continues_from_the_same_position():
    shuffle = EpochShuffle(100, seed=2)
    before = ShardPlan(0, 4, 2, 1).global_batch
    consumed = [shuffle(p) for p in range(3 * before)]
    after = _step_examples(world_size=2, grad_accum=2, micro_batch=2, position=3 * before, shuffle=shuffle)
    assert not set(after) & set(consumed)


def test_every_example_is_seen_once_per_epoch_in_a_seeded_order():
    shuffle = EpochShuffle(50, seed=3)
    epoch = [shuffle(p) for p in range(50)]
    assert sorted(epoch) == list(range(50))
    assert [EpochShuffle(50, seed=3)(p) for p in range(50)] == epoch
    assert [shuffle(p) for p in range(50, 100)] != epoch


def test_markers_and_spec_files_beside_the_shards_are_not_data(tmp_path):
    shards = sorted(SAMPLE_TOKENS.glob("*.bin"))[:2]
    for shard in shards:
        shutil.copy(shard, tmp_path / shard.name)
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / "job.yaml").write_text("model: gpt-tiny\n")
    with_markers = TokenShards(tmp_path, seq_len=64, vocab_size=256)
    (tmp_path / "_SUCCESS").unlink()
    (tmp_path / "job.yaml").unlink()
    without = TokenShards(tmp_path, seq_len=64, vocab_size=256)
    assert (with_markers.name, len(with_markers)) == (without.name, len(without)) == (data_set_name(shards), len(without))
    assert with_markers.name.startswith("2 files")


def test_the_shuffle_is_a_permutation_of_every_size():
    for size in [1, 2, 3, 5, 7, 16, 17, 100, 1000, 1023, 1025]:
        shuffle = EpochShuffle(size, seed=size)
        for epoch in range(2):
            assert sorted(shuffle(epoch * size + p) for p in range(size)) == list(range(size)), (size, epoch)


def test_seeds_and_epochs_give_different_orders():
    first = [EpochShuffle(1000, seed=0)(p) for p in range(1000)]
    assert [EpochShuffle(1000, seed=1)(p) for p in range(1000)] != first
    assert [EpochShuffle(1000, seed=0)(p) for p in range(1000, 2000)] != first


def test_the_shuffle_of_a_billion_examples_holds_no_order_in_memory():
    tracemalloc.start()
    shuffle = EpochShuffle(10**9, seed=0)
    picked = [shuffle(p) for p in (0, 1, 10**9 - 1, 10**9, 5 * 10**9 + 7)]
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 64 * 1024  # bytes: no list of a billion indices
    assert all(0 <= index < 10**9 for index in picked) and len(set(picked[:3])) == 3


def test_opening_a_data_set_reads_no_tokens_and_a_batch_checks_its_vocabulary(tmp_path):
    tokens = np.arange(1000, dtype=np.int64) % 300  # ids up to 299: a uint16 shard
    write_shard(tokens, tmp_path, "part-0")
    data = TokenShards(tmp_path, seq_len=9, vocab_size=256)  # opens: nothing was read
    data.batch([0])  # ids 0..9 fit
    with pytest.raises(DataError, match=r"token id 270 in part-0.uint16.bin \(tokens 261..270\) .* vocabulary of 256"):
        data.batch([29])  # tokens 261..270
