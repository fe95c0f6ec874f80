"""Two SageMaker hosts on this machine: one torchrun per host, each with its own checkpoint_dir
(every instance has its own /opt/ml/checkpoints), and a restart that receives the union of both
hosts' files, as SageMaker's sync to one S3 prefix and restore onto every host deliver it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch.distributed.checkpoint as dcp

from tests.training.launch import ROOT, STEADY_LR, TIMEOUT, environment, job_args, losses, restore_checkpoints, run_hosts
from trainstack_training.data.tokens import data_set_name

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2 * TIMEOUT + 60)]

HOSTS = (0, 1)
SAMPLE_SHARDS = sorted((ROOT / "training" / "sample_data" / "tokens").glob("*.bin"))


def _host(root: Path, node: int) -> Path:
    return root / f"host{node}"


def _ok(results: list[subprocess.CompletedProcess[str]]) -> list[subprocess.CompletedProcess[str]]:
    for node, result in enumerate(results):
        assert result.returncode == 0, f"host {node}: {result.stderr[-3000:]}"
    return results


def _trajectory(result: subprocess.CompletedProcess[str]) -> list[float]:
    trajectory = losses(result.stdout)
    return [trajectory[step] for step in sorted(trajectory)]


def _restore(first: Path, root: Path) -> None:
    """The union of the first run's hosts' checkpoints, restored onto each fresh host under root."""
    restore_checkpoints([_host(first, n) / "checkpoints" for n in HOSTS], [_host(root, n) / "checkpoints" for n in HOSTS])


def _run(root: Path, *extra: str, steps: int, envs: list[dict[str, str]] | None = None) -> list[subprocess.CompletedProcess[str]]:
    return _ok(run_hosts([job_args(_host(root, n), *STEADY_LR, *extra, steps=steps) for n in HOSTS], nproc=1, envs=envs))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory) -> tuple[Path, list[subprocess.CompletedProcess[str]]]:
    root = tmp_path_factory.mktemp("two-hosts")
    return root, _run(root, "--checkpoint_every", "2", "--keep_checkpoints", "2", steps=6)


def test_two_hosts_train_exactly_like_two_ranks_on_one_host(first_run, reference_losses):
    _, (host0, _) = first_run
    assert _trajectory(host0) == pytest.approx([reference_losses[step] for step in range(1, 7)], abs=2e-4)


def test_every_host_keeps_only_the_last_k_checkpoints(first_run):
    root, _ = first_run
    for node in HOSTS:
        assert sorted(p.name for p in (_host(root, node) / "checkpoints").iterdir()) == ["step_00000004", "step_00000006"]


def test_each_host_holds_its_own_ranks_files_under_one_manifest_that_names_every_rank(first_run):
    root, _ = first_run
    copies = [_host(root, node) / "checkpoints" / "step_00000006" for node in HOSTS]
    assert {p.name for p in copies[0].iterdir()} == {".metadata", "__0_0.distcp", "manifest.json"}
    assert {p.name for p in copies[1].iterdir()} == {"__1_0.distcp", "manifest.json"}
    manifests = [(copy / "manifest.json").read_text() for copy in copies]
    assert manifests[0] == manifests[1]
    assert set(json.loads(manifests[0])["files"]) == {".metadata", "__0_0.distcp", "__1_0.distcp"}


def test_a_restored_job_resumes_every_host_from_the_newest_step_and_continues_exactly(first_run, tmp_path, reference_losses):
    _restore(first_run[0], tmp_path)
    host0, host1 = _run(tmp_path, steps=8)
    for node, result in zip(HOSTS, (host0, host1), strict=True):
        assert f"node {node} (" in result.stderr
        assert f"host{node}/checkpoints/step_00000006 at step 6, example position 48" in result.stderr
    assert sorted(losses(host0.stdout)) == [7, 8]
    assert _trajectory(host0) == pytest.approx([reference_losses[7], reference_losses[8]], abs=2e-4)


def test_a_shard_missing_from_one_restored_host_makes_every_host_fall_back_a_checkpoint(first_run, tmp_path, reference_losses):
    _restore(first_run[0], tmp_path)
    (_host(tmp_path, 1) / "checkpoints" / "step_00000006" / "__1_0.distcp").unlink()  # host 1's restore is partial
    host0, host1 = _run(tmp_path, steps=8)
    assert "step_00000006 is incomplete on host" in host0.stderr and "(node 1): missing __1_0.distcp" in host0.stderr
    for node, result in zip(HOSTS, (host0, host1), strict=True):
        assert f"host{node}/checkpoints/step_00000004 at step 4, example position 32" in result.stderr
    assert sorted(losses(host0.stdout)) == [5, 6, 7, 8]
    assert _trajectory(host0) == pytest.approx([reference_losses[step] for step in range(5, 9)], abs=2e-4)


# ShardedByS3Key: each host's train channel holds its own objects. Markers arrive like any object.
SHARDED_CHANNEL = {"train": {"TrainingInputMode": "File", "S3DistributionType": "ShardedByS3Key", "RecordWrapperType": "None"}}


def _channel(folder: Path, shards: list[Path], markers: bool = False) -> Path:
    folder.mkdir(parents=True)
    for shard in shards:
        shutil.copy(shard, folder / shard.name)
    if markers:
        (folder / "_SUCCESS").write_text("")
        (folder / "job.yaml").write_text("model: gpt-tiny\n")
    return folder


def _sharded_envs(root: Path, shard_sets: list[list[Path]]) -> list[dict[str, str]]:
    """The toolkit's contract: the channel's folder in SM_CHANNEL_TRAIN, its distribution in SM_INPUT_DATA_CONFIG."""
    return [
        environment(
            SM_CHANNEL_TRAIN=str(_channel(root / f"channel{node}", shards, markers=node == 0)),
            SM_INPUT_DATA_CONFIG=json.dumps(SHARDED_CHANNEL),
        )
        for node, shards in enumerate(shard_sets)
    ]


def _saved_data_positions(root: Path, step: str, scratch: Path) -> dict[str, dict[str, int]]:
    """The data positions in the union of the hosts' copies (DCP may store them in any rank's file)."""
    restore_checkpoints([_host(root, n) / "checkpoints" / step for n in HOSTS], [scratch])
    state = {"training": {"progress": {"data": ""}}}
    dcp.load(state, checkpoint_id=str(scratch), no_dist=True)
    return json.loads(state["training"]["progress"]["data"])


@pytest.fixture(scope="module")
def sharded_runs(tmp_path_factory) -> dict[str, object]:
    """First run: host 0 holds shards 0-1 (and the markers), host 1 shards 2-3. The restart gives
    host 0 the shards host 1 had, and host 1 a shard set no host had (shard 1 alone)."""
    first, second = tmp_path_factory.mktemp("sharded-first"), tmp_path_factory.mktemp("sharded-restart")
    before = [SAMPLE_SHARDS[:2], SAMPLE_SHARDS[2:]]
    after = [SAMPLE_SHARDS[2:], SAMPLE_SHARDS[1:2]]
    first_results = _run(first, "--checkpoint_every", "4", steps=4, envs=_sharded_envs(first, before))
    _restore(first, second)
    restart_results = _run(second, steps=6, envs=_sharded_envs(second, after))
    names = {"A": data_set_name(before[0]), "B": data_set_name(before[1]), "C": data_set_name(after[1])}
    return {"first": first, "second": second, "names": names, "first_results": first_results, "restart": restart_results}


def test_with_sharded_data_each_host_reads_its_own_shards_and_markers_are_not_data(sharded_runs):
    names, (host0, host1) = sharded_runs["names"], sharded_runs["first_results"]
    assert "node 0 (" in host0.stderr and f"data set {names['A']}," in host0.stderr  # 2 files: markers left out
    assert f"data set {names['B']}," in host1.stderr
    assert names["A"].startswith("2 files")


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_the_checkpoint_keeps_every_hosts_position_keyed_by_its_shard_set(sharded_runs, tmp_path):
    names = sharded_runs["names"]
    saved = _saved_data_positions(sharded_runs["first"], "step_00000004", tmp_path / "first")
    assert saved == {
        names["A"]: {"position": 16, "readers": 1, "batch": 4},
        names["B"]: {"position": 16, "readers": 1, "batch": 4},
    }
    restarted = _saved_data_positions(sharded_runs["second"], "step_00000006", tmp_path / "restart")
    assert restarted == {
        names["B"]: {"position": 24, "readers": 1, "batch": 4},
        names["C"]: {"position": 8, "readers": 1, "batch": 4},
    }


def test_a_shard_set_continues_on_whichever_host_holds_it_and_a_new_one_starts_fresh(sharded_runs):
    names, (host0, host1) = sharded_runs["names"], sharded_runs["restart"]
    assert f"data set {names['B']}," in host0.stderr and "at step 4, example position 16" in host0.stderr
    assert f"data set {names['C']} is new to this checkpoint" in host1.stderr and "reading it from its start" in host1.stderr
