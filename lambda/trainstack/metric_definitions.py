"""CreateTrainingJob `MetricDefinitions` for the lines training/train.py prints, e.g.

    step=20 loss=4.9305 lr=3.000e-05 grad_norm=2.7089 tokens_per_sec=45815.8 step_time=0.0224 mfu=0.4120

SageMaker scans the job's log with each regex and publishes the first group as a CloudWatch
metric. The line format is owned by training/trainstack_training/metrics.py; a test runs these
regexes over real training output, so the two cannot drift apart silently.
"""

from __future__ import annotations

from trainstack_training.health_rules import RULES

# Only plain character classes and one capturing group: SageMaker does not document which regex
# features its log scanner supports, and these need none of the rest. Each key is distinct on the
# line (no key is a suffix of another after " "), so no word boundaries are needed.
NUMBER = r"([0-9.eE+-]+)"

METRICS = {
    "train:step": r"step=([0-9]+) loss=",  # progress: what `trainstack status` and the dashboard show
    "train:loss": rf"step=[0-9]+ loss={NUMBER}",
    "train:learning_rate": rf" lr={NUMBER}",
    "train:grad_norm": rf" grad_norm={NUMBER}",
    "train:tokens_per_sec": rf" tokens_per_sec={NUMBER}",
    "train:samples_per_sec": rf" samples_per_sec={NUMBER}",
    "train:step_time": rf" step_time={NUMBER}",
    "train:mfu": rf" mfu={NUMBER}",
    "train:grad_norm_layer_min": rf" grad_norm_layer_min={NUMBER}",
    "train:grad_norm_layer_max": rf" grad_norm_layer_max={NUMBER}",
    # A health rule's warning line publishes the step it tripped at (health_rules.py names the rules).
    **{f"health:{rule}": rf"health rule={rule} step=([0-9]+)" for rule in RULES},
}


def metric_definitions() -> list[dict[str, str]]:
    return [{"Name": name, "Regex": regex} for name, regex in METRICS.items()]
