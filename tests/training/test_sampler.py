"""The data plan: which examples each rank reads is a pure function of one position in one data set."""

from __future__ import annotations

import shutil
from pathlib import Path

from trainstack_training.data.sampler import EpochShuffle, ShardPlan, micro_batch_indices
from trainstack_training.data.tokens import TokenShards, data_set_name

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
