"""The account on the served twin, as a user meets it: `local serve --quota ml.p4d.24xlarge=0`, then
`trainstack submit` is refused in one line naming the quota and the command that raises it, nothing
uploaded; that command, run with the AWS CLI, raises it; and a second job that fits the quota but not
what the first holds waits, its status saying for what."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from tests.cli.served import serving
from trainstack_cli.stack import EXIT_BAD_INPUT

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

P4D = "ml.p4d.24xlarge"
UNREACHED = 1_000_000  # steps no run here reaches: only a stop ends it


@pytest.fixture(scope="module")
def served(default_stack, tmp_path_factory):
    with serving(default_stack.json, tmp_path_factory.mktemp("account"), "--quota", f"{P4D}=0") as stack:
        yield stack


def spec_file(tmp_path, name: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": name,
                "instance_type": P4D,
                "instance_count": 2,
                "strategy": "ddp",
                "hyperparameters": {"model": "gpt-tiny", "max_steps": UNREACHED, "log_every": 10, "checkpoint_every": UNREACHED},
                "inputs": {"train": {"s3_uri": "s3://trainstack-local-trigger/datasets/default/sample/", "mode": "File"}},
                "max_runtime": "1h",
            }
        )
    )
    return str(path)


def test_a_spec_beyond_a_zero_quota_is_refused_in_one_line_and_the_named_increase_lets_the_next_one_wait(served, tmp_path):
    refused = served.trainstack("submit", spec_file(tmp_path, "first"))
    assert refused.returncode == EXIT_BAD_INPUT
    (line,) = refused.stderr.strip().splitlines()
    assert f"the account's quota '{P4D} for training job usage' is 0 in us-east-1, below the 2 instances" in line
    assert "nothing was submitted" in line
    uploaded = served.aws_json("s3api", "list-objects-v2", "--bucket", "trainstack-local-trigger", "--prefix", "jobs/")
    assert "Contents" not in uploaded

    (command,) = re.findall(r"request an increase: (aws service-quotas request-service-quota-increase [^;]+)", line)
    assert served.aws(*command.split()[1:]).returncode == 0  # the user's next step, as printed

    first = json.loads(served.trainstack("submit", spec_file(tmp_path, "first"), "--inline", "--json").stdout)["run"]
    served.wait_until(first, lambda view: view["trials"] and view["trials"][0]["status"] == "InProgress")
    second = json.loads(served.trainstack("submit", spec_file(tmp_path, "second"), "--inline", "--json").stdout)["run"]
    waiting = served.wait_until(second, lambda view: view["waiting"])
    assert waiting["trials"] == []
    assert "waits for quota or capacity (Create retries it): " in waiting["waiting"]
    assert f"'{P4D} for training job usage' is 2 Instances, with current utilization of 2 Instances" in waiting["waiting"]
    shown = served.trainstack("status", second)
    assert "waits for quota or capacity" in shown.stdout
    for run in (first, second):
        assert served.trainstack("stop", run).returncode == 0
