"""The emulated AWS account: its SageMaker training quotas per instance type and use, as Service Quotas
lists them, and the Availability Zone of the stack's training subnet (EC2's offerings by AZ are moto's,
a snapshot of AWS's own). Validate reads them as it reads a real account (trainstack/account.py), and
CreateTrainingJob refuses a job that would take an account past a quota, as SageMaker does.

A new account has 0 for most GPU training types (amazon-sagemaker-examples #593); AWS does not
publish the defaults per type, so the twin's account starts with 0 for every accelerated type and
`CPU_INSTANCES` for the others, then holds the increases that trainstack's own examples, default job
and scenarios need (`GRANTED`: what a user asks for first on a new account). RequestServiceQuotaIncrease
is granted at once here; AWS reviews each request, in minutes to days.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from trainstack import facts
from trainstack.account import SERVICE_CODE, SPOT, TRAINING, WARM_POOL, quota_name

USES = (TRAINING, SPOT, WARM_POOL)
CPU_INSTANCES = 20  # the twin's choice for a type without accelerators
GRANTED = {
    "ml.g5.xlarge": 4,  # the team queue's scenarios
    "ml.g5.12xlarge": 8,  # the default job, examples/hf-llama-tiny.yaml and tracked.yaml, the twin scenarios
    "ml.g6.12xlarge": 4,  # the capacity fallback's second choice
    "ml.p4d.24xlarge": 8,  # examples/gpt-small.yaml (2) and llama-13b-smddp.yaml (8)
}
AVAILABILITY_ZONE_ID = "use1-az4"  # offers every type above in us-east-1 (moto's snapshot of EC2's offerings)


def new_account_quotas() -> dict[str, float]:
    """Every training type's quotas, by name, as the twin's account starts."""
    quotas = {}
    for name, instance in facts.instances().items():
        value = GRANTED.get(name, CPU_INSTANCES if instance.kind == "cpu" else 0)
        quotas.update({quota_name(name, use): float(value) for use in USES})
    return quotas


@dataclass(frozen=True)
class AccountSettings:
    """How the emulated account starts: quota values over the new account's (by quota name, e.g.
    {"ml.p4d.24xlarge for training job usage": 0}) and the training subnet's AZ ID."""

    quotas: Mapping[str, float] = field(default_factory=dict)
    availability_zone_id: str = AVAILABILITY_ZONE_ID


class TwinAccount:
    """The account's quotas as they stand (an increase request changes them)."""

    def __init__(self, settings: AccountSettings, region: str, account: str) -> None:
        self.settings = settings
        self.region = region
        self.account = account
        self._values = {**new_account_quotas(), **settings.quotas}
        self._lock = threading.Lock()

    def value(self, name: str) -> float | None:
        with self._lock:
            return self._values.get(name)

    def quotas(self) -> list[dict[str, object]]:
        """Every SageMaker quota as ListServiceQuotas lists it, sorted by name."""
        with self._lock:
            return [self._quota(name, value) for name, value in sorted(self._values.items())]

    def by_code(self, code: str) -> dict[str, object] | None:
        return next((quota for quota in self.quotas() if quota["QuotaCode"] == code), None)

    def grant(self, code: str, desired: float) -> dict[str, object] | None:
        """An increase, granted at once; None for an unknown code."""
        quota = self.by_code(code)
        if quota is None:
            return None
        with self._lock:
            self._values[str(quota["QuotaName"])] = max(float(desired), float(quota["Value"]))  # type: ignore[arg-type]
        return quota

    def _quota(self, name: str, value: float) -> dict[str, object]:
        code = quota_code(name)
        return {
            "ServiceCode": SERVICE_CODE,
            "ServiceName": "Amazon SageMaker",
            "QuotaArn": f"arn:aws:servicequotas:{self.region}:{self.account}:{SERVICE_CODE}/{code}",
            "QuotaCode": code,
            "QuotaName": name,
            "Value": value,
            "Unit": "None",
            "Adjustable": True,
            "GlobalQuota": False,
        }


def quota_code(name: str) -> str:
    """A stable code per quota, shaped as Service Quotas' (L- and eight hexadecimal digits)."""
    return "L-" + hashlib.sha256(name.encode()).hexdigest()[:8].upper()
