"""Typed stack settings read from cdk.json context (overridable with `cdk synth -c key=value`).

Values from cdk.json keep their JSON types; values from `-c` arrive as strings, so each parser
accepts both. An invalid value fails synth with a `SettingsError` naming the setting and the fix.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from trainstack.naming import DEFAULT_NAME_PREFIX, NAME_PREFIX_PATTERN
from trainstack.rules.tracking import STACK_SETTING, arn_region, is_mlflow_arn
from trainstack.service_jobs import SHARE_IDENTIFIER, TIME_LIMIT_SECONDS

# Interface endpoints a training VPC may need without NAT. Each costs ~$7.30/month per AZ
# (see tools/prices.json), so none is on by default: SageMaker pulls images and ships logs outside
# the job's VPC, and S3 goes through the free gateway endpoint.
SUPPORTED_INTERFACE_ENDPOINTS = (
    "ecr.api",
    "ecr.dkr",
    "logs",
    "monitoring",
    "sts",
    "sagemaker.api",
    "sagemaker.runtime",
    "kms",
    "ssm",
    "secretsmanager",
)
REMOVAL_POLICIES = ("retain", "destroy")
# The retention periods CloudWatch Logs accepts (PutRetentionPolicy).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)
AZ_ID_PATTERN = re.compile(r"^[a-z]{2,4}\d-az\d{1,2}$")
ACCOUNT_PATTERN = re.compile(r"^\d{12}$")
REGION_PATTERN = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
# ShareAttributes.weightFactor: a share's usage counts this many times over, so a lower weight gets more.
SHARE_WEIGHT_MIN, SHARE_WEIGHT_MAX = 0.0001, 999.9999
SHARES_EXPECTED = 'expected at least one share and its weight: {"research": 1, "prod": 0.5} or research:1,prod:0.5'
BUDGETS_EXPECTED = 'expected teams and their monthly budgets in USD: {"research": 500, "prod": 5000} or research:500,prod:5000'


class SettingsError(ValueError):
    """A cdk.json / `-c` setting is invalid; the message names the setting and the fix."""

    def __init__(self, setting: str, value: Any, problem: str) -> None:
        super().__init__(f"setting '{setting}' = {value!r}: {problem}")
        self.setting = setting


@dataclass(frozen=True)
class StackSettings:
    """Everything a deployment may choose. Defaults are the safe, cheap-when-idle ones."""

    account: str | None = None
    region: str | None = None
    name_prefix: str = DEFAULT_NAME_PREFIX
    availability_zone_ids: tuple[str, ...] = ()
    subnet_count: int = 1
    nat_gateway: bool = False
    interface_endpoints: tuple[str, ...] = ()
    inter_container_encryption: bool = False
    data_removal_policy: str = "retain"
    checkpoint_expiry_days: int = 30
    log_retention_days: int = 365
    build_training_image: bool = False
    dashboard: bool = True  # $3/month beyond an account's 3 free dashboards (tools/prices.json)
    default_spec_key: str | None = None
    # The SageMaker managed MLflow tracking server (or MLflow App) jobs may log to (`tracking` in a
    # spec): the execution role may log to it and the VPC gets an endpoint to reach it (~$7.30/month per AZ).
    mlflow_tracking_server_arn: str | None = None
    # The team queue (AWS Batch service jobs for SageMaker Training): specs with `queue` wait in it
    # for their share of `queue_max_instances` instances (no charge for the queue itself).
    queue: bool = False
    queue_max_instances: int = 8
    queue_shares: tuple[tuple[str, float], ...] = (("default", 1.0),)  # (share identifier, weight), in order
    queue_default_share: str = "default"  # a spec's share when it names none; unless set, the first of queue_shares
    # How long the job at the head of the queue may wait for capacity (or for instances beyond the
    # cap) before Batch ends it; time in SCHEDULED while SageMaker finds capacity counts too.
    queue_capacity_wait_seconds: int = 3600
    # A monthly budget in USD per team (each one of the stack's teams): Validate refuses a run whose worst
    # case, with what the team's running and queued jobs may still cost, would exceed it. None by default.
    queue_budgets: tuple[tuple[str, float], ...] = ()

    @property
    def environment_agnostic(self) -> bool:
        return self.account is None and self.region is None

    @property
    def teams(self) -> tuple[str, ...]:
        """The stack's teams (trainstack/layout.py), the default first: each share of the queue, or the
        one team of a stack without it."""
        shares = [share for share, _ in self.queue_shares] if self.queue else []
        return tuple(dict.fromkeys([self.queue_default_share, *shares]))

    @property
    def retain_data(self) -> bool:
        return self.data_removal_policy == "retain"

    @classmethod
    def from_context(cls, get: Any) -> StackSettings:
        """Build settings from a context getter such as `app.node.try_get_context`."""
        raw = {f.name: get(f.name) for f in fields(cls)}
        return cls.parse({k: v for k, v in raw.items() if v is not None})

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> StackSettings:
        known = {f.name for f in fields(cls)}
        for key in raw:
            if key not in known:
                raise SettingsError(key, raw[key], f"unknown setting; known settings: {sorted(known)}")
        values: dict[str, Any] = {}
        if "account" in raw:
            values["account"] = _matching("account", raw["account"], ACCOUNT_PATTERN, "a 12-digit account id")
        if "region" in raw:
            values["region"] = _matching("region", raw["region"], REGION_PATTERN, "a region such as us-east-1")
        if "name_prefix" in raw:
            values["name_prefix"] = _matching(
                "name_prefix",
                raw["name_prefix"],
                NAME_PREFIX_PATTERN,
                "2-20 lower-case letters, digits or hyphens, starting with a letter",
            )
        if "availability_zone_ids" in raw:
            az_ids = _string_list("availability_zone_ids", raw["availability_zone_ids"])
            for az_id in az_ids:
                if not AZ_ID_PATTERN.match(az_id):
                    raise SettingsError(
                        "availability_zone_ids", az_id, "not an AZ ID; use IDs such as use1-az4, not names such as us-east-1a"
                    )
            if len(set(az_ids)) != len(az_ids):
                raise SettingsError("availability_zone_ids", az_ids, "each AZ ID may appear once")
            values["availability_zone_ids"] = az_ids
        if "subnet_count" in raw:
            values["subnet_count"] = _integer("subnet_count", raw["subnet_count"], low=1, high=6)
        for flag in ("nat_gateway", "inter_container_encryption", "build_training_image", "dashboard", "queue"):
            if flag in raw:
                values[flag] = _boolean(flag, raw[flag])
        if "interface_endpoints" in raw:
            endpoints = _string_list("interface_endpoints", raw["interface_endpoints"])
            for endpoint in endpoints:
                if endpoint not in SUPPORTED_INTERFACE_ENDPOINTS:
                    raise SettingsError(
                        "interface_endpoints",
                        endpoint,
                        f"unsupported endpoint; choose from {list(SUPPORTED_INTERFACE_ENDPOINTS)}",
                    )
            values["interface_endpoints"] = tuple(dict.fromkeys(endpoints))
        if "data_removal_policy" in raw:
            policy = str(raw["data_removal_policy"]).lower()
            if policy not in REMOVAL_POLICIES:
                raise SettingsError("data_removal_policy", raw["data_removal_policy"], f"use one of {list(REMOVAL_POLICIES)}")
            values["data_removal_policy"] = policy
        if "checkpoint_expiry_days" in raw:
            values["checkpoint_expiry_days"] = _integer("checkpoint_expiry_days", raw["checkpoint_expiry_days"], low=1, high=3650)
        if "log_retention_days" in raw:
            days = _integer("log_retention_days", raw["log_retention_days"], low=1, high=3653)
            if days not in LOG_RETENTION_DAYS:
                raise SettingsError("log_retention_days", days, f"CloudWatch Logs accepts only {list(LOG_RETENTION_DAYS)}")
            values["log_retention_days"] = days
        if "default_spec_key" in raw:
            key = str(raw["default_spec_key"])
            if not key.startswith("jobs/") or not key.endswith((".yaml", ".yml", ".json")):
                raise SettingsError("default_spec_key", key, "expected a spec key under jobs/, e.g. jobs/default.yaml")
            values["default_spec_key"] = key
        if STACK_SETTING in raw:
            arn = str(raw[STACK_SETTING]).strip()
            if not is_mlflow_arn(arn):
                raise SettingsError(
                    STACK_SETTING,
                    raw[STACK_SETTING],
                    "expected a SageMaker MLflow ARN: arn:aws:sagemaker:<region>:<account>:mlflow-tracking-server/<name> "
                    "or ...:mlflow-app/<id>",
                )
            values[STACK_SETTING] = arn
        if "queue_max_instances" in raw:
            values["queue_max_instances"] = _integer("queue_max_instances", raw["queue_max_instances"], low=1)
        if "queue_shares" in raw:
            values["queue_shares"] = _shares("queue_shares", raw["queue_shares"])
            values["queue_default_share"] = values["queue_shares"][0][0]
        if "queue_default_share" in raw:
            values["queue_default_share"] = str(raw["queue_default_share"]).strip()
        if "queue_capacity_wait_seconds" in raw:
            values["queue_capacity_wait_seconds"] = _integer(
                "queue_capacity_wait_seconds",
                raw["queue_capacity_wait_seconds"],
                low=TIME_LIMIT_SECONDS[0],
                high=TIME_LIMIT_SECONDS[1],
            )
        if "queue_budgets" in raw:
            values["queue_budgets"] = _budgets("queue_budgets", raw["queue_budgets"])
        settings = cls(**values)
        settings._check_consistency(explicit_subnet_count="subnet_count" in raw)
        return settings

    def _check_consistency(self, *, explicit_subnet_count: bool) -> None:
        if self.availability_zone_ids:
            if explicit_subnet_count and self.subnet_count != len(self.availability_zone_ids):
                raise SettingsError(
                    "subnet_count",
                    self.subnet_count,
                    f"must equal the number of availability_zone_ids ({len(self.availability_zone_ids)}); omit it to derive it",
                )
            object.__setattr__(self, "subnet_count", len(self.availability_zone_ids))
        if (self.account is None) != (self.region is None):
            raise SettingsError(
                "account" if self.account is None else "region",
                None,
                "set account and region together, or neither for an environment-agnostic stack",
            )
        if self.build_training_image and self.region is None:
            raise SettingsError(
                "build_training_image",
                True,
                "the image builds on the framework image of the stack's region; set account and region",
            )
        if self.mlflow_tracking_server_arn and self.region and arn_region(self.mlflow_tracking_server_arn) != self.region:
            raise SettingsError(
                STACK_SETTING,
                self.mlflow_tracking_server_arn,
                f"the server must be in the stack's region ({self.region}): jobs reach it through the VPC endpoint there",
            )
        shares = [share for share, _ in self.queue_shares]
        if self.queue_default_share not in shares:
            raise SettingsError("queue_default_share", self.queue_default_share, f"must be one of queue_shares {shares}")
        for team, _ in self.queue_budgets:
            if team not in self.teams:
                raise SettingsError("queue_budgets", team, f"not one of the stack's teams {list(self.teams)}")
        if self.environment_agnostic and self.subnet_count > 2:
            raise SettingsError(
                "subnet_count",
                self.subnet_count,
                "an environment-agnostic stack can place at most 2 AZs; set account and region, or availability_zone_ids",
            )

    def describe(self) -> str:
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)}, sort_keys=True)


def _matching(setting: str, value: Any, pattern: re.Pattern[str], expected: str) -> str:
    text = str(value)
    if not pattern.match(text):
        raise SettingsError(setting, value, f"expected {expected}")
    return text


def _boolean(setting: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off"):
        return False
    raise SettingsError(setting, value, "expected true or false")


def _integer(setting: str, value: Any, *, low: int, high: int | None = None) -> int:
    expected = (
        f"expected a whole number from {low} to {high}" if high is not None else f"expected a whole number of at least {low}"
    )
    return _bounded(setting, value, int, low, high, expected)


def _bounded(setting: str, value: Any, convert: Callable[[str], float], low: float, high: float | None, expected: str) -> Any:
    """A number from cdk.json or `-c` (text), within [low, high] (no upper bound for None); a flag,
    text `convert` cannot read, or a number outside (nan included) is refused with `expected`."""
    if isinstance(value, bool):
        raise SettingsError(setting, value, expected)
    try:
        number = convert(str(value).strip())
    except ValueError:
        raise SettingsError(setting, value, expected) from None
    if not (low <= number and (high is None or number <= high)):
        raise SettingsError(setting, value, expected)
    return number


def _shares(setting: str, value: Any) -> tuple[tuple[str, float], ...]:
    """Share identifiers and their weights, in order: a JSON object from cdk.json, or from `-c` a JSON
    object string or `name:weight,name:weight` (a name alone weighs 1, Batch's default)."""
    return _teams_and_numbers(setting, value, SHARES_EXPECTED, lambda team, weight: _weight(setting, team, weight), default=1)


def _budgets(setting: str, value: Any) -> tuple[tuple[str, float], ...]:
    """Teams and their monthly budgets in USD, as `_shares` reads weights (a team alone has no budget)."""

    def budget(team: str, usd: Any) -> float:
        expected = f"team {team}'s monthly budget must be a number of US dollars above 0"
        return _bounded(setting, usd, float, 0.01, None, expected)

    return _teams_and_numbers(setting, value, BUDGETS_EXPECTED, budget, default=None)


def _teams_and_numbers(
    setting: str, value: Any, expected: str, number: Callable[[str, Any], float], default: float | None
) -> tuple[tuple[str, float], ...]:
    """Team names (share identifiers) and a number each, in order: a JSON object from cdk.json, or from
    `-c` a JSON object string or `name:number,name:number` (a name alone takes `default`, if any)."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                raise SettingsError(setting, value, expected) from None
        else:
            value = {}
            for part in filter(None, (part.strip() for part in text.split(","))):
                name, separator, given = (item.strip() for item in part.partition(":"))
                if name in value:
                    raise SettingsError(setting, text, f"{name} appears twice; name each once")
                if not separator and default is None:
                    raise SettingsError(setting, text, expected)
                value[name] = given if separator else default
    if not isinstance(value, dict) or not value:
        raise SettingsError(setting, value, expected)
    named = []
    for name, given in value.items():
        if not SHARE_IDENTIFIER.fullmatch(str(name)):
            raise SettingsError(setting, name, "a share identifier is 1-255 letters and digits")
        named.append((str(name), number(str(name), given)))
    return tuple(named)


def _weight(setting: str, share: str, value: Any) -> float:
    expected = f"share {share}'s weight must be a number from {SHARE_WEIGHT_MIN} to {SHARE_WEIGHT_MAX} (lower gets more)"
    return _bounded(setting, value, float, SHARE_WEIGHT_MIN, SHARE_WEIGHT_MAX, expected)


def _string_list(setting: str, value: Any) -> tuple[str, ...]:
    """A JSON list from cdk.json, or from `-c` a JSON list string or a comma-separated string."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            try:
                value = json.loads(text)
            except json.JSONDecodeError:
                raise SettingsError(setting, value, 'expected a JSON list such as ["a","b"] or a comma-separated list') from None
        else:
            value = [part.strip() for part in text.split(",") if part.strip()]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise SettingsError(setting, value, "expected a list of strings")
    return tuple(value)
