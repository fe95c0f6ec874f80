"""Health rules in the entry point, on real torchrun groups (CPU, gloo): a diverging run, a NaN, a
layer whose gradients vanish, and a healthy run; per-layer norms and histograms in the outputs."""

from __future__ import annotations

import json
import re

import pytest
import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from tests.training.launch import environment, job_args, run
from trainstack_contract.metric_lines import METRICS
from trainstack_training.checkpoint import MANIFEST

pytestmark = [pytest.mark.slow]
HEALTH_LINE = re.compile(r"^health rule=(\w+) step=(\d+) action=(\w+)", re.MULTILINE)


def _health(**rules) -> str:
    return json.dumps(rules)


def _failure(tmp_path) -> str:
    return (tmp_path / "output" / "failure").read_text()


def _checkpoint_steps(tmp_path) -> list[int]:
    return sorted(int(p.parent.name.removeprefix("step_")) for p in (tmp_path / "checkpoints").rglob(MANIFEST))


def test_a_diverging_run_is_stopped_by_the_exploding_gradient_rule_with_a_checkpoint(tmp_path):
    rules = _health(exploding_gradients={"threshold": 50, "action": "checkpoint_and_stop"})
    result = run(job_args(tmp_path, "--lr", "3", "--warmup_steps", "1", "--grad_clip", "1e9", "--health", rules, steps=40))
    assert result.returncode != 0
    reason = _failure(tmp_path)
    assert "health rule exploding_gradients tripped at step" in reason and "grad_norm=" in reason
    step = int(re.search(r"at step (\d+)", reason).group(1))
    assert step < 40 and step in _checkpoint_steps(tmp_path)


def test_an_injected_nan_stops_at_that_step_on_every_rank(tmp_path):
    env = environment(TRAINSTACK_TWIN="1", TRAINSTACK_INJECT_NAN="1:5")  # rank 1's loss only; the all-reduce spreads it
    result = run(job_args(tmp_path, "--checkpoint_every", "100"), env=env)
    assert result.returncode != 0
    assert "health rule nonfinite tripped at step 5: grad_norm=nan" in _failure(tmp_path)
    for rank in (0, 1):  # both ranks, the same step, without a collective to agree on it
        assert f"trainstack: rank {rank}: health rule nonfinite tripped at step 5" in result.stderr
    assert _checkpoint_steps(tmp_path) == [5]  # saved with step 4's weights: the NaN update was skipped


@pytest.mark.parametrize(
    "strategy", [("--strategy", "ddp", "--zero1", "true"), ("--strategy", "fsdp")]
)  # DDP's path and the wrapped optimizer's; FSDP2's DTensors
def test_with_fused_adamw_a_nan_step_is_skipped_on_the_device_and_named_at_the_next_log_step(tmp_path, strategy):
    env = environment(TRAINSTACK_TWIN="1", TRAINSTACK_INJECT_NAN="1:5")
    arguments = (*strategy, "--fused_adamw", "true", "--log_every", "4", "--checkpoint_every", "100")
    result = run(job_args(tmp_path, *arguments), env=env)
    assert result.returncode != 0
    assert "health rule nonfinite tripped at step 5: grad_norm=nan" in _failure(tmp_path)
    assert _checkpoint_steps(tmp_path) == [8]  # found when step 8 was logged: no host read before
    (checkpoint,) = (tmp_path / "checkpoints").glob("step_00000008")
    dcp_to_torch_save(checkpoint, tmp_path / "saved.pt")
    model = torch.load(tmp_path / "saved.pt", weights_only=False)["training"]["model"]
    assert model and all(torch.isfinite(tensor).all() for tensor in model.values())  # the NaN update never landed


def test_a_layer_whose_gradients_vanish_trips_the_vanishing_gradient_rule(tmp_path):
    rules = _health(vanishing_gradients={"ratio": 1e-3, "window": 2, "action": "stop"})
    env = environment(TRAINSTACK_TWIN="1", TRAINSTACK_FREEZE="blocks.1")  # the test's frozen layer: its gradients scaled to 1e-9
    result = run(job_args(tmp_path, "--health", rules), env=env)
    assert result.returncode != 0
    reason = _failure(tmp_path)
    assert "health rule vanishing_gradients tripped at step 2: layer=blocks.1" in reason
    assert _checkpoint_steps(tmp_path) == []  # `stop` saves nothing


def test_a_healthy_run_trips_nothing_and_reports_per_layer_norms_and_histograms(tmp_path):
    tensorboard = tmp_path / "tensorboard"
    result = run(job_args(tmp_path, "--histogram_every", "4", "--tensorboard_dir", str(tensorboard)))
    assert result.returncode == 0, result.stderr[-3000:]
    assert HEALTH_LINE.findall(result.stdout) == []
    for name in ("train:grad_norm_layer_min", "train:grad_norm_layer_max"):
        assert re.search(METRICS[name], result.stdout), name
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tensorboard), size_guidance={"histograms": 0, "scalars": 0}).Reload()
    histograms = events.Tags()["histograms"]
    assert {"weights/blocks.0", "gradients/blocks.1", "weights/wte"} <= set(histograms)
    assert [e.step for e in events.Histograms("gradients/blocks.0")] == [4, 8, 12]
    assert "grad_norm/blocks.1" in events.Tags()["scalars"]


def test_a_warning_rules_line_is_what_its_metric_definition_publishes(tmp_path):
    rules = _health(loss_not_decreasing={"window": 1, "min_delta": 100})
    result = run(job_args(tmp_path, "--health", rules, steps=4), nproc=0)
    assert result.returncode == 0, result.stderr[-3000:]
    trips = HEALTH_LINE.findall(result.stdout)
    assert trips and all(rule == "loss_not_decreasing" and action == "log" for rule, _, action in trips)
    published = re.findall(METRICS["health:loss_not_decreasing"], result.stdout)
    assert published == [step for _, step, _ in trips]


def _layer_norms(output: str) -> list[tuple[float, float]]:
    pattern = METRICS["train:grad_norm_layer_min"] + ".*" + METRICS["train:grad_norm_layer_max"]
    return [(float(low), float(high)) for low, high in re.findall(pattern, output)]


def test_fsdp2_per_layer_norms_reduced_from_shards_equal_ddps(tmp_path):
    ddp = run(job_args(tmp_path / "ddp", "--strategy", "ddp", steps=2))
    fsdp = run(job_args(tmp_path / "fsdp", "--strategy", "fsdp", steps=2))
    assert ddp.returncode == 0 and fsdp.returncode == 0, (ddp.stderr[-2000:], fsdp.stderr[-2000:])
    (ddp_first, _), (fsdp_first, _) = _layer_norms(ddp.stdout), _layer_norms(fsdp.stdout)
    assert fsdp_first == pytest.approx(ddp_first, rel=1e-3)
