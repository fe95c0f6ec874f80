"""What a run costs: expected, and the most it can be billed before anything is, on demand and spot.

Worst case = instances x price per hour x the longest each job may be billed (max_runtime; with spot,
max_wait, as trainstack's budget rule reads it) x every job the run may create (the first, SageMaker's
own retries, trainstack's re-creations after a capacity failure) x trials. Spot is billed at a
varying price that never exceeds on demand, so the budget is checked against on-demand prices: the
one bound that holds. The spot figures use an assumed discount, stated in the output.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.facts import Instance
from trainstack.spec import JobSpec
from trainstack.workflow import CAPACITY_RETRIES

# Managed spot training's saving against on demand. AWS quotes "up to 90%"; what p4d/p5 spot
# capacity saves in practice varies by region and week: the planner assumes 60%.
ASSUMED_SPOT_DISCOUNT = 0.60
# Provisioning, image pull, data download and model upload add to the training time of each job.
STARTUP_SECONDS = 600


@dataclass(frozen=True)
class Cost:
    instance_type: str
    price_per_hour: float | None  # per instance, on demand; None: no price known
    instances: int
    billable_hours_per_job: float
    jobs_per_trial: int
    trials: int
    expected_hours: float | None  # one trial's training time, when the run's length is known

    @property
    def hourly(self) -> float | None:
        return None if self.price_per_hour is None else self.price_per_hour * self.instances

    @property
    def worst_case_usd(self) -> float | None:
        if self.hourly is None:
            return None
        return self.hourly * self.billable_hours_per_job * self.jobs_per_trial * self.trials

    @property
    def worst_case_spot_usd(self) -> float | None:
        worst = self.worst_case_usd
        return None if worst is None else worst * (1 - ASSUMED_SPOT_DISCOUNT)

    @property
    def expected_usd(self) -> float | None:
        if self.hourly is None or self.expected_hours is None:
            return None
        return self.hourly * self.expected_hours * self.trials

    @property
    def expected_spot_usd(self) -> float | None:
        expected = self.expected_usd
        return None if expected is None else expected * (1 - ASSUMED_SPOT_DISCOUNT)


def run_cost(spec: JobSpec, instance: Instance, trials: int, run_seconds: float | None) -> Cost:
    billed = (spec.spot.max_wait or spec.max_runtime) if spec.spot.enabled else spec.max_runtime
    expected = None if run_seconds is None else (run_seconds + STARTUP_SECONDS) / 3600
    return Cost(
        instance_type=instance.name,
        price_per_hour=instance.price_per_hour,
        instances=spec.instance_count,
        billable_hours_per_job=billed / 3600,
        jobs_per_trial=1 + spec.retry_attempts + CAPACITY_RETRIES + spec.restarts.max,
        trials=trials,
        expected_hours=expected,
    )
