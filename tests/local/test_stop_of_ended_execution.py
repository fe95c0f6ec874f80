"""StopExecution of an execution that has ended, as Step Functions answers it: the status and end date
stay, and no "Step Functions Execution Status Change" event follows, since the status did not change
(the twin once sent ABORTED for a run that had ended, which `local serve` printed as its second end)."""

from __future__ import annotations

import boto3
import pytest

from tests.core.specs import DDP
from tests.local.twin_runs import start_inline
from trainstack.polling import poll_until
from trainstack_local.emulator import REGION, local_aws, training_files
from trainstack_local.event_feed import EventFeed

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_stop_of_a_failed_run_leaves_it_failed_and_sends_no_event(default_stack, tmp_path):
    printed: list[str] = []
    with local_aws(default_stack.json, tmp_path, files=training_files(tmp_path), feed=EventFeed(printed.append)) as (stack, _):
        sfn = boto3.client("stepfunctions", region_name=REGION)
        execution = start_inline(stack, {**DDP, "instance_count": 0}, "refused")  # Validate refuses it: no job

        def ends() -> list[str]:
            return [line for line in printed if line.startswith("run refused ended")]

        (ended,) = poll_until(ends, timeout=60, interval=0.1, what="the refused run to end")
        before = sfn.describe_execution(executionArn=execution)
        sfn.stop_execution(executionArn=execution)
        after = sfn.describe_execution(executionArn=execution)

    assert ended.startswith("run refused ended FAILED")
    assert (after["status"], after["stopDate"]) == ("FAILED", before["stopDate"])
    assert ends() == [ended]  # the feed line and the event are sent inside StopExecution, before it answers
