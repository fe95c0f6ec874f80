"""The training health rules: what SageMaker Debugger's built-in rules caught (NaN, exploding and
vanishing gradients, a loss that stops decreasing, fp16 loss-scale collapse), as a table.

Torch-free on purpose: the same table validates the job spec's `health:` block in the pipeline
(shipped in the Lambda asset), documents itself in docs/training.md and `trainstack schema`, and
configures the evaluator in the training loop (health.py). Rules are evaluated at log intervals
on values every rank already has, so every rank reaches the same verdict without a collective.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

LOG = "log"  # a `health rule=...` warning line (a metric definition publishes it) and go on
CHECKPOINT_AND_STOP = "checkpoint_and_stop"  # save a checkpoint, then fail the job naming the rule
STOP = "stop"  # fail the job naming the rule, without a checkpoint
ACTIONS = (LOG, CHECKPOINT_AND_STOP, STOP)


@dataclass(frozen=True)
class Rule:
    name: str
    trips_when: str
    parameters: Mapping[str, float]  # name -> default
    action: str  # the default action


RULES: dict[str, Rule] = {
    rule.name: rule
    for rule in (
        Rule(
            "nonfinite",
            "the loss or the gradient norm is NaN or infinite (that step's update is skipped)",
            {},
            CHECKPOINT_AND_STOP,
        ),
        Rule(
            "exploding_gradients",
            "the gradient norm exceeds `threshold`, or `growth` times its median over the previous `window` log intervals",
            {"threshold": 1000.0, "growth": 10.0, "window": 5},
            LOG,
        ),
        Rule(
            "vanishing_gradients",
            "a layer's gradient norm stays below `ratio` times the largest layer's for `window` log intervals in a row",
            {"ratio": 1e-6, "window": 3},
            LOG,
        ),
        Rule(
            "loss_not_decreasing",
            "the loss has not come `min_delta` below its best for `window` log intervals",
            {"window": 20, "min_delta": 0.0},
            LOG,
        ),
        Rule(
            "loss_scale_collapse",
            "with fp16, the loss scale falls below `min_scale` (overflow after overflow)",
            {"min_scale": 1.0},
            CHECKPOINT_AND_STOP,
        ),
    )
}


@dataclass(frozen=True)
class RuleSetting:
    name: str
    action: str
    parameters: Mapping[str, float]


def parse_health(text: str) -> tuple[RuleSetting, ...]:
    """The rules in force: every rule at its defaults, changed by a JSON object such as
    `{"exploding_gradients": {"threshold": 50, "action": "checkpoint_and_stop"}, "loss_not_decreasing": false}`.
    Raises ValueError naming the rule, the key and the fix."""
    try:
        given = json.loads(text or "{}")
    except json.JSONDecodeError as error:
        raise ValueError(f"not a JSON object ({error.msg})") from None
    if not isinstance(given, dict):
        raise ValueError("a JSON object of rule names")
    unknown = sorted(set(given) - set(RULES))
    if unknown:
        raise ValueError(f"unknown rule {unknown[0]!r}; rules: {', '.join(RULES)}")
    settings = []
    for name, rule in RULES.items():
        change: Any = given.get(name, {})
        if change is False:
            continue
        if change is True:
            change = {}
        if not isinstance(change, dict):
            raise ValueError(f"rule {name!r}: give an object of parameters and action, true or false")
        action = change.get("action", rule.action)
        if action not in ACTIONS:
            raise ValueError(f"rule {name!r}: action {action!r}; choose one of {', '.join(ACTIONS)}")
        parameters = dict(rule.parameters)
        for key, value in change.items():
            if key == "action":
                continue
            if key not in rule.parameters:
                known = ", ".join(rule.parameters) or "none"
                raise ValueError(f"rule {name!r}: unknown parameter {key!r}; its parameters: {known}")
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"rule {name!r}: {key} = {value!r} must be a non-negative number")
            parameters[key] = value
        settings.append(RuleSetting(name, action, parameters))
    return tuple(settings)


TABLE_START = "<!-- health-rules:start (generated from training/trainstack_contract/health_rules.py; do not edit) -->"
TABLE_END = "<!-- health-rules:end -->"


def rules_table() -> str:
    """The rules as a Markdown table between its markers (docs/training.md, "Health rules")."""
    lines = [TABLE_START, "| rule | trips when | parameters (defaults) | default action |", "|---|---|---|---|"]
    for rule in RULES.values():
        parameters = ", ".join(f"`{k}` {v:g}" for k, v in rule.parameters.items()) or "none"
        lines.append(f"| `{rule.name}` | {rule.trips_when} | {parameters} | `{rule.action}` |")
    return "\n".join([*lines, TABLE_END])
