"""The Batch twin's fair-share order of a job queue's RUNNABLE jobs, as batch_twin.py states it: usage
counted in instances (not vCPU-seconds), within the policy's share decay window."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trainstack_local.batch_state import ServiceJob

DEFAULT_SHARE_DECAY_SECONDS = 600  # shareDecaySeconds 0: "the default minimum time window"


def fair_share_order(
    policy: dict[str, Any], jobs: Iterable[ServiceJob], runnable: list[ServiceJob], now: float
) -> list[ServiceJob]:
    """The `runnable` jobs in the order of the fair-share `policy`, from the usage of `jobs` (all of the
    queue's): share by share, the lowest weighted usage first (ties: the share with the oldest next
    job); each job taken counts its instances to its share, as its dispatch will."""
    window = policy.get("shareDecaySeconds") or DEFAULT_SHARE_DECAY_SECONDS
    distribution = policy.get("shareDistribution") or []
    usage: dict[str, float] = {}
    for job in jobs:
        if job.share is not None:
            recent = [a for a in job.attempts if a.used_capacity and (a.stopped_at is None or a.scheduled_at >= now - window)]
            usage[job.share] = usage.get(job.share, 0.0) + job.instances * len(recent)
    waiting: dict[str, list[ServiceJob]] = {}
    for job in sorted(runnable, key=lambda j: (-j.priority, j.created_at, j.sequence)):
        waiting.setdefault(job.share or "", []).append(job)
    order = []
    while waiting:
        share = min(
            waiting,
            key=lambda s: (usage.get(s, 0.0) * weight(distribution, s), waiting[s][0].created_at, waiting[s][0].sequence),
        )
        job = waiting[share].pop(0)
        if not waiting[share]:
            del waiting[share]
        order.append(job)
        usage[share] = usage.get(share, 0.0) + job.instances
    return order


def weight(distribution: list[dict[str, Any]], share: str) -> float:
    """The share's weightFactor: its own entry, else the longest prefix entry (`team*`) it starts with, else 1.0."""
    for entry in distribution:
        if entry["shareIdentifier"] == share:
            return float(entry.get("weightFactor", 1.0))
    prefixes = [e for e in distribution if e["shareIdentifier"].endswith("*") and share.startswith(e["shareIdentifier"][:-1])]
    if prefixes:
        return float(max(prefixes, key=lambda e: len(e["shareIdentifier"])).get("weightFactor", 1.0))
    return 1.0
