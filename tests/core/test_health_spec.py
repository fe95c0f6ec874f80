"""The job spec's `health:` block: validated by the rules table the script uses, passed to the
built-in script as its hyperparameters, refused for a script that has no rules."""

from __future__ import annotations

import json

import pytest

from tests.core.specs import DDP, STACK
from trainstack.identity import Run
from trainstack.preflight import rule_problems
from trainstack.request import build_request
from trainstack.rules import resolve
from trainstack.spec import SpecError, json_schema, parse_spec
from trainstack_contract.config import parse_config
from trainstack_contract.health_rules import CHECKPOINT_AND_STOP, RULES

HEALTH = {"rules": {"exploding_gradients": {"threshold": 50, "action": "checkpoint_and_stop"}, "loss_not_decreasing": False}}


def test_the_health_block_reaches_the_script_as_the_config_it_parses():
    spec = parse_spec({**DDP, "health": {**HEALTH, "histogram_every": 100}})
    hyperparameters = build_request(spec, resolve(spec), STACK, trial=Run("jobs/x.yaml").trial())["HyperParameters"]
    user = {k: json.loads(v) for k, v in hyperparameters.items() if not k.startswith("sagemaker_")}  # as the toolkit's SM_HPS
    config = parse_config([], {"SM_HPS": json.dumps(user)})
    rules = {rule.name: rule for rule in config.health_rules}
    assert "loss_not_decreasing" not in rules and config.histogram_every == 100
    assert rules["exploding_gradients"].action == CHECKPOINT_AND_STOP
    assert rules["exploding_gradients"].parameters == {"threshold": 50, "growth": 10.0, "window": 5}


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ({"exploding": {}}, "unknown rule 'exploding'; rules: nonfinite"),
        ({"vanishing_gradients": {"ration": 1e-3}}, "unknown parameter 'ration'; its parameters: ratio"),
        ({"nonfinite": {"action": "halt"}}, "action 'halt'; choose one of log, checkpoint_and_stop, stop"),
        ({"loss_scale_collapse": {"min_scale": -1}}, "min_scale = -1 must be a non-negative number"),
    ],
    ids=["rule", "parameter", "action", "value"],
)
def test_a_bad_health_block_is_refused_naming_rule_and_fix(rules, message):
    with pytest.raises(SpecError) as raised:
        parse_spec({**DDP, "health": {"rules": rules}})
    assert message in str(raised.value)


def test_health_rules_for_a_users_own_script_are_refused():
    spec = parse_spec({**DDP, "source_dir": "s3://my-code/x/sourcedir.tar.gz", "health": HEALTH})
    assert [p.field for p in rule_problems(spec)] == ["health"]


def test_the_schema_documents_every_rule():
    description = json.dumps(json_schema())
    assert all(name in description for name in RULES)


def test_the_training_page_rules_table_is_the_rules_table():
    from tools.readme_section import DOCS, section
    from trainstack_contract.health_rules import TABLE_END, TABLE_START, rules_table

    assert section(TABLE_START, TABLE_END, DOCS / "training.md") == rules_table()
