"""What an AWS account allows a job, as data: its SageMaker training quotas per instance type, the
instances its training jobs hold now, and which Availability Zones offer each type. `read_account`
reads them at the edge (Validate, the CLI, `trainstack doctor`); `rules/account.py` judges a spec
against them, so a job that can never start is refused before anything is uploaded or billed.

SageMaker's per-type training quotas live in Service Quotas (service code `sagemaker`), one per
instance type and use, named "<type> for training job usage", "... for spot training job usage" and
"... for training warm pool usage"; their codes differ per quota and are read from the service, never
typed here. A new account has 0 for most GPU types (amazon-sagemaker-examples #593).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainstack.calls import Ask, asked_once, listed

SERVICE_CODE = "sagemaker"
TRAINING = "training job usage"
SPOT = "spot training job usage"
WARM_POOL = "training warm pool usage"
EC2_PREFIX = "ml."  # an ml. training type and the EC2 type it runs on share the rest of the name


def quota_name(instance_type: str, usage: str) -> str:
    return f"{instance_type} for {usage}"


def ec2_type(instance_type: str) -> str:
    return instance_type.removeprefix(EC2_PREFIX)


@dataclass(frozen=True)
class Quota:
    """One applied quota as Service Quotas lists it."""

    name: str
    code: str
    value: float

    def increase_command(self, desired: int, region: str) -> str:
        """The exact command that asks for more."""
        return (
            f"aws service-quotas request-service-quota-increase --service-code {SERVICE_CODE} "
            f"--quota-code {self.code} --desired-value {desired} --region {region}"
        )


@dataclass(frozen=True)
class AccountView:
    """The account as one region of it stands for a job. A part that could not be read is None, and
    `unreadable` says what and why (a warning, never a refusal)."""

    region: str
    quotas: Mapping[str, Quota] | None = None  # by quota name: the ones the job's types and uses need
    in_use: Mapping[str, int] = field(default_factory=dict)  # quota name -> instances running jobs hold
    offerings: Mapping[str, tuple[str, ...]] | None = None  # EC2 type -> the AZ IDs that offer it here
    subnet_zones: tuple[str, ...] = ()  # the AZ IDs of the stack's training subnets
    unreadable: tuple[str, ...] = ()
    # DescribeTrainingJob of each of the account's jobs in progress (what the in-use counts come from;
    # a team's budget reads what they may still cost, budgets.py); None where they could not be read
    jobs_in_progress: tuple[dict[str, Any], ...] | None = ()

    def quota(self, instance_type: str, usage: str) -> Quota | None:
        return None if self.quotas is None else self.quotas.get(quota_name(instance_type, usage))

    def using(self, instance_type: str, usage: str) -> int:
        return self.in_use.get(quota_name(instance_type, usage), 0)


Clients = Callable[[str], Any]


def read_account(clients: Clients, region: str, instance_types: Iterable[str], subnet_ids: Iterable[str]) -> AccountView:
    """Read what `AccountView` holds for these instance types: Service Quotas, the account's training
    jobs in progress, EC2's offerings by AZ ID and the subnets' AZ IDs. A call the caller may not make,
    or that fails, leaves its part unknown and says so."""
    types = sorted(set(instance_types))
    unreadable: list[str] = []
    quotas = _read("Service Quotas (the account's quotas: not checked)", unreadable, lambda: _quotas(clients, types))
    jobs = _read(
        "SageMaker training jobs in progress (in use: not counted)",
        unreadable,
        lambda: described_in_progress(clients("sagemaker")),
    )
    offerings = _read("EC2 instance type offerings (not checked)", unreadable, lambda: _offerings(clients, types))
    subnets = list(subnet_ids)
    zones = _read("the training subnets (their AZ: not checked)", unreadable, lambda: _subnet_zones(clients, subnets))
    in_progress = None if jobs is None else tuple(jobs)
    return AccountView(region, quotas, _in_use(jobs or []), offerings, zones or (), tuple(unreadable), in_progress)


def _read(what: str, unreadable: list[str], read: Callable[[], Any]) -> Any:
    """What `read` returns; None, and a line in `unreadable`, where it fails for any reason: what the
    account could not tell never keeps a job from launching (the capacity loop still catches it)."""
    from botocore.exceptions import ClientError  # on the call: Validate's cold start needs none

    try:
        return read()
    except ClientError as error:
        unreadable.append(f"{what}: {error.response['Error'].get('Code')}: {error.response['Error'].get('Message', '')}")
    except Exception as error:  # a lost connection, an endpoint without the API (an emulator), a malformed answer
        unreadable.append(f"{what}: {type(error).__name__}: {error}")
    return None


def _quotas(clients: Clients, types: list[str]) -> dict[str, Quota]:
    wanted = {quota_name(t, usage) for t in types for usage in (TRAINING, SPOT, WARM_POOL)}
    pages = clients("service-quotas").get_paginator("list_service_quotas").paginate(ServiceCode=SERVICE_CODE)
    found = {}
    for page in pages:
        for quota in page["Quotas"]:
            if quota["QuotaName"] in wanted:
                found[quota["QuotaName"]] = Quota(quota["QuotaName"], quota["QuotaCode"], float(quota["Value"]))
    return found


def described_in_progress(sagemaker: Any, ask: Ask = asked_once) -> list[dict[str, Any]]:
    """DescribeTrainingJob of every training job of the account in progress (a queued job of the team
    queue has none until Batch dispatches it), each call made with `ask`."""
    listing = functools.partial(sagemaker.list_training_jobs, StatusEquals="InProgress")
    described = []
    for summary in listed(ask, "ListTrainingJobs InProgress", listing, "TrainingJobSummaries", "NextToken"):
        describe = functools.partial(sagemaker.describe_training_job, TrainingJobName=summary["TrainingJobName"])
        described.append(ask(f"DescribeTrainingJob {summary['TrainingJobName']}", describe))
    return described


def _in_use(jobs: list[dict[str, Any]]) -> dict[str, int]:
    """Instances each quota has in use: spot jobs count against the spot quota."""
    used: dict[str, int] = {}
    for job in jobs:
        config = job.get("ResourceConfig", {})
        instance_type = config.get("SelectedInstanceType") or config.get("InstanceType")
        count = int(config.get("SelectedInstanceCount") or config.get("InstanceCount") or 0)
        if instance_type:
            name = quota_name(instance_type, SPOT if job.get("EnableManagedSpotTraining") else TRAINING)
            used[name] = used.get(name, 0) + count
    return used


def _offerings(clients: Clients, types: list[str]) -> dict[str, tuple[str, ...]]:
    names = [ec2_type(t) for t in types]
    pages = (
        clients("ec2")
        .get_paginator("describe_instance_type_offerings")
        .paginate(LocationType="availability-zone-id", Filters=[{"Name": "instance-type", "Values": names}])
    )
    zones: dict[str, set[str]] = {name: set() for name in names}
    for page in pages:
        for offering in page["InstanceTypeOfferings"]:
            zones.setdefault(offering["InstanceType"], set()).add(offering["Location"])
    return {name: tuple(sorted(found)) for name, found in zones.items()}


def _subnet_zones(clients: Clients, subnet_ids: list[str]) -> tuple[str, ...]:
    if not subnet_ids:
        return ()
    subnets = clients("ec2").describe_subnets(SubnetIds=subnet_ids)["Subnets"]
    return tuple(sorted({subnet["AvailabilityZoneId"] for subnet in subnets}))
