"""CreateTrainingJob `MetricDefinitions` for the lines training/train.py prints, e.g.

    step=20 loss=4.9305 lr=3.000e-05 grad_norm=2.7089 tokens_per_sec=45815.8 step_time=0.0224 mfu=0.4120

SageMaker scans the job's log with each regex and publishes the first group as a CloudWatch
metric. The line format is owned by training/trainstack_training/metrics.py; a test runs these
regexes over real training output, so the two cannot drift apart silently.
"""

from __future__ import annotations

NUMBER = r"([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"

METRICS = {
    "train:loss": rf"\bstep=\d+ loss={NUMBER}",
    "train:learning_rate": rf"\blr={NUMBER}",
    "train:grad_norm": rf"\bgrad_norm={NUMBER}",
    "train:tokens_per_sec": rf"\btokens_per_sec={NUMBER}",
    "train:samples_per_sec": rf"\bsamples_per_sec={NUMBER}",
    "train:step_time": rf"\bstep_time={NUMBER}",
    "train:mfu": rf"\bmfu={NUMBER}",
}


def metric_definitions() -> list[dict[str, str]]:
    return [{"Name": name, "Regex": regex} for name, regex in METRICS.items()]
