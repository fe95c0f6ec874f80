"""The metric lines the built-in script prints on rank 0, and the regexes that read them.

Every log interval prints one line of `key=value` pairs, e.g.

    step=20 loss=4.9305 lr=3.000e-05 grad_norm=2.7089 tokens_per_sec=45815.8 step_time=0.0224 mfu=0.4120

a health rule that trips prints `health rule=<rule> step=<step> action=<action> ...`, and each
checkpoint complete on every rank prints `checkpoint step=<step>` (so the pipeline knows, from the
job's final metrics alone, where a restart resumes and how many steps a failure cost). The
request builder turns `METRICS` into CreateTrainingJob's `MetricDefinitions`: SageMaker scans the
job's log with each regex and publishes the first group as a CloudWatch metric. Format and regexes
live here together, and a test runs the regexes over real training output.
"""

from __future__ import annotations

from collections.abc import Mapping

from trainstack_contract.health_rules import RULES

# How each key prints; the regexes below expect exactly these shapes.
FORMATS = {
    "step": "{:d}",
    "loss": "{:.4f}",
    "lr": "{:.3e}",
    "grad_norm": "{:.4f}",
    "tokens_per_sec": "{:.1f}",
    "samples_per_sec": "{:.1f}",
    "step_time": "{:.4f}",
    "mfu": "{:.4f}",
    "grad_norm_layer_min": "{:.4e}",
    "grad_norm_layer_max": "{:.4e}",
}

# Only plain character classes and one capturing group: SageMaker does not document which regex
# features its log scanner supports, and these need none of the rest. Each key is distinct on the
# line (no key is a suffix of another after " "), so no word boundaries are needed.
NUMBER = r"([0-9.eE+-]+)"

# The names the pipeline, the CLI and the dashboard read back.
STEP = "train:step"
LOSS = "train:loss"
TOKENS_PER_SEC = "train:tokens_per_sec"
MFU = "train:mfu"
CHECKPOINT_STEP = "train:checkpoint_step"

METRICS = {
    STEP: r"step=([0-9]+) loss=",  # progress: what `trainstack status` and the dashboard show
    LOSS: rf"step=[0-9]+ loss={NUMBER}",
    "train:learning_rate": rf" lr={NUMBER}",
    "train:grad_norm": rf" grad_norm={NUMBER}",
    TOKENS_PER_SEC: rf" tokens_per_sec={NUMBER}",
    "train:samples_per_sec": rf" samples_per_sec={NUMBER}",
    "train:step_time": rf" step_time={NUMBER}",
    MFU: rf" mfu={NUMBER}",
    "train:grad_norm_layer_min": rf" grad_norm_layer_min={NUMBER}",
    "train:grad_norm_layer_max": rf" grad_norm_layer_max={NUMBER}",
    CHECKPOINT_STEP: r"checkpoint step=([0-9]+)",  # the newest complete checkpoint
    # A health rule's warning line publishes the step it tripped at.
    **{f"health:{rule}": rf"health rule={rule} step=([0-9]+)" for rule in RULES},
}


def format_line(values: Mapping[str, float | int]) -> str:
    """A log interval's line: the keys in the order given, each in its format."""
    return " ".join(f"{key}={FORMATS[key].format(value)}" for key, value in values.items())


def health_line(rule: str, step: int, action: str, values: str) -> str:
    """A tripped health rule's warning line; `values` are its measured `key=value` pairs."""
    return f"health rule={rule} step={step} action={action} {values}".rstrip()


def checkpoint_line(step: int) -> str:
    """Printed once a checkpoint is complete on every rank (its manifest written)."""
    return f"checkpoint step={step:d}"


def metric_definitions() -> list[dict[str, str]]:
    """CreateTrainingJob's `MetricDefinitions` for these lines."""
    return [{"Name": name, "Regex": regex} for name, regex in METRICS.items()]
