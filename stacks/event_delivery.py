"""How every EventBridge target of the stack is delivered to: one place for the retry policy and the
dead-letter queue, so no rule of the stack drops an event silently."""

from __future__ import annotations

from typing import Any

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs

# EventBridge retries a failed delivery with backoff for up to 24 hours and 185 attempts (its maximum),
# then puts the event into the dead-letter queue, where it waits for `trainstack redrive`.
TARGET_RETRY_ATTEMPTS = 185
TARGET_MAX_EVENT_AGE = Duration.hours(24)


def delivery(dead_letters: sqs.IQueue | None) -> dict[str, Any]:
    """Keyword arguments for an aws_events_targets target."""
    return {"dead_letter_queue": dead_letters, "retry_attempts": TARGET_RETRY_ATTEMPTS, "max_event_age": TARGET_MAX_EVENT_AGE}
