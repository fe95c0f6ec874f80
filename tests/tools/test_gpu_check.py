"""The GPU check: its dry run goes through the real command on the CPU, needing nothing a bare GPU
machine may lack, and writes every run's row with numbers; a failing run fails the command; a
machine without what the runs need is told what, before anything runs."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tools.gpu_check import CHECKPOINT_VARIANTS, RATIOS, SAVE_CALL_RATIO, VARIANT_NAMES, Device, matching_instance_type
from trainstack import facts
from trainstack.planner.memory import GIB, memory_per_gpu
from trainstack.planner.parallelism import Layout
from trainstack.planner.speed import flops_per_token
from trainstack.planner.workload import _builtin, gpt_architecture
from trainstack_contract.config import parse_config
from trainstack_contract.model_sizes import GPT_SIZES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
ROOT = Path(__file__).resolve().parents[2]
BARE_MACHINE_LACKS = ("pydantic", "yaml", "boto3", "botocore")
# Imported first by every Python process the check starts (the tool, torchrun, the script): a module a bare
# GPU machine may lack cannot be imported, and each attempt is written down.
BLOCKER = textwrap.dedent(
    f"""
    import os, sys

    class BareMachine:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in {BARE_MACHINE_LACKS!r}:
                with open(os.environ["BLOCKED_IMPORTS"], "a") as attempts:
                    attempts.write(name + "\\n")
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, BareMachine())
    """
)
THROUGHPUT_FIELDS = ("tokens_per_sec", "step_time_s", "mfu", "peak_memory_gib", "planned_memory_gib", "memory_ratio")
PLAN_FIELDS = ("planned_tokens_per_sec", "speed_ratio")
CHECKPOINT_FIELDS = ("save_call_s", "after_save_ratio", "write_overlapped_steps", "planned_checkpoint_gib")


def gpu_check(out: Path, *arguments: str, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(ROOT / "tools" / "gpu_check.py"), "--out", str(out), *arguments]
    # nine CPU runs: minutes more on a busy machine
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=480)


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path, list[str]]:
    """One whole dry run, every Python process of it on a machine without pydantic, yaml or boto3."""
    folder = tmp_path_factory.mktemp("dry-run")
    (folder / "site").mkdir()
    (folder / "site" / "sitecustomize.py").write_text(BLOCKER)
    environ = {**os.environ, "PYTHONPATH": str(folder / "site"), "BLOCKED_IMPORTS": str(folder / "blocked.txt")}
    result = gpu_check(folder / "out", "--dry-run", environ=environ)
    blocked = (folder / "blocked.txt").read_text().split() if (folder / "blocked.txt").exists() else []
    return result, folder / "out", blocked


def test_the_dry_run_completes_on_a_machine_without_pydantic_yaml_or_boto3(dry_run):
    result, _, blocked = dry_run
    assert result.returncode == 0, result.stderr[-3000:]
    # The planner's import of the spec reached for pydantic and was refused: the block was in force.
    assert "pydantic" in blocked


def test_every_run_has_its_row_with_numbers_in_the_json(dry_run):
    _, out, _ = dry_run
    report = json.loads((out / "gpu-check.json").read_text())
    runs = {run["variant"]: run for run in report["runs"]}

    assert report["dry_run"] is True and report["instance_type"] == "ml.p5.48xlarge"
    assert list(runs) == list(VARIANT_NAMES) and {run["model"] for run in report["runs"]} == {"gpt-tiny"}
    for name, run in runs.items():
        fields = THROUGHPUT_FIELDS + PLAN_FIELDS + (CHECKPOINT_FIELDS if name in CHECKPOINT_VARIANTS else ())
        assert run["status"] == "ok" and run["error"] == "", name
        assert all(isinstance(run[field], int | float) for field in fields), (name, {f: run[f] for f in fields})
        assert run["intervals"] >= 2 and run["hyperparameters"]["precision"] == "bf16", name
    assert runs["ddp rules off"]["hyperparameters"]["health"] != "{}"
    assert runs["ddp sync checkpoint"]["write_overlapped_steps"] == 0  # the loop waited for the whole write
    ratios = report["ratios"]["gpt-tiny"]
    assert all(isinstance(ratios[name], float) for name, _, _ in (*RATIOS, SAVE_CALL_RATIO))


def test_the_table_shows_every_run_and_the_ratios(dry_run):
    result, out, _ = dry_run
    text = (out / "gpu-check.txt").read_text()
    rows = [re.split(r"\s{2,}", line) for line in text.splitlines() if line.startswith("gpt-tiny  ")]
    runs = {cells[1]: cells for cells in rows if len(cells) > 2 and cells[1] in VARIANT_NAMES}
    assert sorted(runs) == sorted(VARIANT_NAMES)
    for cells in runs.values():
        assert cells[2] == "ok" and all(re.fullmatch(r"-?[0-9.]+%?", cell) for cell in cells[3:]), cells
    (ratios,) = [cells for cells in rows if cells[1] not in VARIANT_NAMES]
    # signed: on a CPU a save can time below the steps' noise
    assert len(ratios) == 1 + len(RATIOS) + 1 and all(re.fullmatch(r"-?[0-9.]+", cell) for cell in ratios[1:])
    assert "DRY RUN" in text and "planned as on ml.p5.48xlarge" in text
    assert text in result.stdout  # printed as well


def test_mfu_and_the_memory_estimate_are_the_planners_own(dry_run):
    _, out, _ = dry_run
    report = json.loads((out / "gpu-check.json").read_text())
    (ddp,) = [run for run in report["runs"] if run["variant"] == "ddp"]
    config = parse_config([f"--{name}={value}" for name, value in ddp["hyperparameters"].items()], {})
    workload = _builtin(config, gpt_architecture("gpt-tiny"), 0)
    p5 = facts.instance("ml.p5.48xlarge")

    assert workload.seq_len == GPT_SIZES["gpt-tiny"].block_size
    assert ddp["mfu"] == pytest.approx(ddp["tokens_per_sec"] * flops_per_token(workload) / (p5.bf16_tflops * 1e12))
    layout = Layout("ddp", p5, nodes=1, gpus_per_node=1, shard=1)
    assert ddp["planned_memory_gib"] == pytest.approx(memory_per_gpu(workload, layout).total / GIB)


def test_a_run_the_script_fails_fails_the_check_with_the_scripts_reason(tmp_path):
    result = gpu_check(tmp_path, "--dry-run", "--variants", "ddp,fsdp", "--fail-run", "fsdp")

    assert result.returncode == 1
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    runs = {run["variant"]: run for run in report["runs"]}
    assert runs["ddp"]["status"] == "ok"
    assert runs["fsdp"]["status"] == "failed" and "seq_len" in runs["fsdp"]["error"]
    assert runs["fsdp"]["tokens_per_sec"] is None
    assert "gpt-tiny / fsdp: rank 0: invalid hyperparameters" in (tmp_path / "gpu-check.txt").read_text()
    assert "gpu-check: gpt-tiny / fsdp failed:" in result.stderr


def test_without_a_gpu_the_check_names_what_is_missing_before_anything_runs(tmp_path):
    environ = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    result = gpu_check(tmp_path / "out", "--models", "gpt-125m", environ=environ)

    assert result.returncode == 3
    missing = [line for line in result.stderr.splitlines() if line.startswith("gpu-check: missing: ")]
    assert any(line.startswith("gpu-check: missing: CUDA: ") for line in missing), result.stderr
    assert any("pass --instance-type" in line for line in missing), result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("name", "memory_gib", "instance_type"),
    [
        ("NVIDIA H100 80GB HBM3", 79.1, "ml.p5.48xlarge"),
        ("NVIDIA H200", 139.8, "ml.p5e.48xlarge"),
        ("NVIDIA A100-SXM4-40GB", 39.4, "ml.p4d.24xlarge"),
        ("NVIDIA A100-SXM4-80GB", 79.2, "ml.p4de.24xlarge"),
        ("NVIDIA L40S", 44.4, "ml.g6e.48xlarge"),
        ("NVIDIA L4", 22.0, "ml.g6.48xlarge"),
    ],
)
def test_the_gpu_is_matched_to_the_training_instance_type_that_has_it(name, memory_gib, instance_type):
    assert matching_instance_type(Device(name, memory_gib, "gpu")) == instance_type
