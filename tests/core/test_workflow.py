"""What the state machine decides, as pure functions."""

from __future__ import annotations

import pytest

from trainstack.workflow import SUBJECT_MAX, notification_subject


def test_a_notification_subject_never_carries_line_breaks_or_control_characters():
    subject = notification_subject("Failed", "job-1: AlgorithmError: Traceback\n  File x\r\n\tboom")
    assert subject == "trainstack run Failed: job-1: AlgorithmError: Traceback File x boom"


def test_a_notification_subject_is_printable_ascii():
    assert notification_subject("Failed", "loss \u2192 NaN \U0001f525") == "trainstack run Failed: loss NaN"


@pytest.mark.parametrize("length", [10, 90, 500])
def test_a_notification_subject_stays_under_snss_limit(length):
    subject = notification_subject("Failed", "x" * length)
    assert len(subject) <= SUBJECT_MAX < 100
    assert subject.endswith("...") == (len("trainstack run Failed: ") + length > SUBJECT_MAX)
