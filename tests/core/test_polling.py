"""The one polling loop (trainstack.polling)."""

import itertools

import pytest

from trainstack.polling import poll_until


def test_poll_until_returns_the_first_value_that_is_done():
    reads = itertools.count(1)
    assert poll_until(lambda: next(reads), lambda n: n >= 3, timeout=5, interval=0, what="three") == 3


def test_poll_until_without_a_condition_waits_for_a_truthy_value():
    values = iter([None, [], ["run-1"]])
    assert poll_until(lambda: next(values), timeout=5, interval=0, what="a run") == ["run-1"]


def test_poll_until_says_what_did_not_happen_past_its_timeout():
    with pytest.raises(TimeoutError, match=r"the job to end did not happen within 0\.05 s"):
        poll_until(lambda: False, timeout=0.05, interval=0.01, what="the job to end")
