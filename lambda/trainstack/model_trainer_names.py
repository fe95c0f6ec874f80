"""A job spec in the SageMaker Python SDK 3.x `ModelTrainer`'s names, read as the spec's own fields.

SDK 3.x replaced the 2.x estimator's keyword arguments with configuration objects: `source_code`
(SourceCode), `compute` (Compute), `distributed` (Torchrun, with its `smp` (SMP), or MPI),
`stopping_condition`, `input_data_config` (a list of InputData or Channel) and `checkpoint_config`.
A spec may give any of these, written as the objects' fields in YAML or JSON (`distributed` names
its class: `distributed: {Torchrun: {smp: {...}}}`), and the job is the one the spec's own fields
would have made: the same request. A field given both ways is refused naming both of its names,
and so is a ModelTrainer field trainstack would not honour (a local source folder, a checkpoint
location of the user's), rather than being dropped. Defaults stay the spec's (trainstack's).
"""

from __future__ import annotations

from typing import Any

# The ModelTrainer name -> the spec's field, for each field both can give.
SOURCE_CODE = {"source_dir": "source_dir", "entry_script": "entry_point"}
COMPUTE = {
    "instance_type": "instance_type",
    "instance_count": "instance_count",
    "volume_size_in_gb": "volume_size_gb",
    "keep_alive_period_in_seconds": "warm_pool",
    "enable_managed_spot_training": "spot.enabled",
    "training_plan_arn": "training_plan_arn",
    "instance_preferences": "instance_types",
}
STOPPING_CONDITION = {
    "max_runtime_in_seconds": "max_runtime",
    "max_wait_time_in_seconds": "spot.max_wait",
    "max_pending_time_in_seconds": "max_pending",
}
# What ModelTrainer takes that trainstack does not do, and why.
UNSUPPORTED = {
    "source_code.requirements": "the toolkit installs requirements.txt from source_dir itself; leave it in the archive",
    "source_code.command": "the job runs entry_script with the toolkit; give source_code.entry_script",
    "source_code.args": "give the script's arguments as hyperparameters",
    "source_code.ignore_patterns": "source_dir is an s3:// sourcedir.tar.gz here, nothing is uploaded from a folder",
    "compute.volume_kms_key_id": "the stack's key encrypts the volumes",
    "compute.instance_groups": "heterogeneous clusters are not supported yet; use one instance_type with instance_count",
    "compute.instance_placement_config": "UltraServer placement is not supported yet",
    "checkpoint_config.s3_uri": "each run's checkpoints live under the stack's bucket, where its restarts resume from",
}
DISTRIBUTED = ("Torchrun", "MPI")
CHECKPOINT_LOCAL_PATH = "/opt/ml/checkpoints"
MODEL_TRAINER_FIELDS = (
    "source_code",
    "compute",
    "distributed",
    "stopping_condition",
    "input_data_config",
    "checkpoint_config",
)


def estimator_names(data: dict[str, Any]) -> dict[str, Any]:
    """The spec with each ModelTrainer field rewritten into the spec's own; ValueError naming every
    field given both ways or not supported. A spec without ModelTrainer names is returned as it is.
    A field left null is left out, as ModelTrainer's None, but checkpoint_config: null, which turns
    checkpoints off (ModelTrainer's default; trainstack's is on)."""
    if not any(name in data for name in MODEL_TRAINER_FIELDS):
        return data
    spec = {key: value for key, value in data.items() if key not in MODEL_TRAINER_FIELDS}
    problems: list[str] = []
    given: dict[str, tuple[str, Any]] = {}  # spec field -> (ModelTrainer name, value)
    for section, names in (("source_code", SOURCE_CODE), ("compute", COMPUTE), ("stopping_condition", STOPPING_CONDITION)):
        if data.get(section) is not None:
            for name, value in _fields(data[section], section, names, problems).items():
                given[names[name]] = (f"{section}.{name}", value)
    if data.get("distributed") is not None:
        distribution = _distribution(data["distributed"], problems)
        if distribution is not None:
            given["distribution"] = ("distributed", distribution)
    if data.get("input_data_config") is not None:
        inputs = _inputs(data["input_data_config"], problems)
        if inputs is not None:
            given["inputs"] = ("input_data_config", inputs)
    if "checkpoint_config" in data:
        checkpoints = _checkpoints(data["checkpoint_config"], problems)
        if checkpoints is not None:
            given["checkpoints"] = ("checkpoint_config", checkpoints)
    if "instance_types" in given:
        given["instance_types"] = (given["instance_types"][0], _preferences(given["instance_types"][1], problems))
    for field, (name, value) in given.items():
        _set(spec, field, name, value, problems)
    if problems:
        raise ValueError("; ".join(problems))
    return spec


def _fields(value: Any, section: str, names: dict[str, str], problems: list[str]) -> dict[str, Any]:
    """A config object's fields that map onto the spec's; each other one is a problem."""
    if not isinstance(value, dict):
        problems.append(f"{section}: a mapping of ModelTrainer's {section} fields ({', '.join(names)})")
        return {}
    for key in value:
        if key not in names:
            problems.append(_unsupported(f"{section}.{key}", list(names)))
    return {key: field for key, field in value.items() if key in names and field is not None}


def _unsupported(name: str, known: list[str]) -> str:
    if name in UNSUPPORTED:
        return f"{name}: not supported ({UNSUPPORTED[name]})"
    section = name.split(".")[0]
    return f"{name}: not a ModelTrainer {section} field trainstack reads ({', '.join(known)})"


def _distribution(value: Any, problems: list[str]) -> dict[str, Any] | None:
    """`distributed: {Torchrun: {...}}` or `{MPI: {...}}` as the SDK 2.x distribution dict."""
    kind, config = next(iter(value.items())) if isinstance(value, dict) and len(value) == 1 else (None, None)
    config = {} if config is None else config
    if kind not in DISTRIBUTED or not isinstance(config, dict):
        problems.append(
            "distributed: one of ModelTrainer's distributed configs by its class name, holding its fields: "
            "Torchrun (smp: {...} for SMP v2) or MPI (process_count_per_node, mpi_additional_options), "
            "e.g. distributed: {Torchrun: {}}"
        )
        return None
    known = {"Torchrun": ("smp",), "MPI": ("process_count_per_node", "mpi_additional_options")}[kind]
    for key in config:
        if kind == "Torchrun" and key == "process_count_per_node":
            problems.append(
                "distributed.Torchrun.process_count_per_node: not supported (torchrun starts one process per GPU "
                "of the instance, as the estimator's torch_distributed does); remove it"
            )
        elif key not in known:
            problems.append(f"distributed.{kind}.{key}: not a field of ModelTrainer's {kind} ({', '.join(known)})")
    if kind == "MPI":
        mpi: dict[str, Any] = {"enabled": True}
        if config.get("process_count_per_node") is not None:
            mpi["processes_per_host"] = config["process_count_per_node"]
        if isinstance(config.get("mpi_additional_options"), list):
            mpi["custom_mpi_options"] = " ".join(str(option) for option in config["mpi_additional_options"])
        elif config.get("mpi_additional_options") is not None:
            problems.append("distributed.MPI.mpi_additional_options: a list of mpirun options")
        return {"mpi": mpi}
    distribution: dict[str, Any] = {"torch_distributed": {"enabled": True}}
    smp = config.get("smp")
    if isinstance(smp, dict):
        distribution["smdistributed"] = {"modelparallel": {"enabled": True, "parameters": dict(smp)}}
    elif smp is not None:
        problems.append("distributed.Torchrun.smp: a mapping of ModelTrainer's SMP fields (SMP v2 parameters)")
    return distribution


def _inputs(value: Any, problems: list[str]) -> dict[str, Any] | None:
    """`input_data_config` (InputData or Channel objects) as the spec's `inputs`."""
    if not isinstance(value, list):
        problems.append("input_data_config: a list of ModelTrainer InputData or Channel mappings")
        return None
    inputs: dict[str, Any] = {}
    for index, channel in enumerate(value):
        where = f"input_data_config[{index}]"
        if not isinstance(channel, dict) or not isinstance(channel.get("channel_name"), str):
            problems.append(f"{where}: a mapping with channel_name and data_source")
            continue
        name = channel["channel_name"]
        if name in inputs:
            problems.append(f"{where}: channel {name} is given twice")
        for key in set(channel) - {"channel_name", "data_source", "input_mode"}:
            problems.append(f"{where}.{key}: not supported (a channel here takes channel_name, data_source and input_mode)")
        source = _s3_source(channel.get("data_source"), f"{where}.data_source", problems)
        if source is not None:
            inputs[name] = {**source, **({"mode": channel["input_mode"]} if channel.get("input_mode") is not None else {})}
    return inputs


def _s3_source(value: Any, where: str, problems: list[str]) -> dict[str, Any] | None:
    """An s3:// URI, an S3DataSource, or a DataSource holding one, as a channel's s3_uri and distribution."""
    if isinstance(value, str):
        return {"s3_uri": value}
    if isinstance(value, dict) and set(value) == {"s3_data_source"}:
        value = value["s3_data_source"]
    if not isinstance(value, dict) or not isinstance(value.get("s3_uri"), str):
        problems.append(f"{where}: an s3:// URI or an S3DataSource (s3_uri, s3_data_type, s3_data_distribution_type)")
        return None
    if value.get("s3_data_type", "S3Prefix") != "S3Prefix":
        problems.append(f"{where}.s3_data_type: only S3Prefix (a channel is every object under a prefix)")
    for key in set(value) - {"s3_uri", "s3_data_type", "s3_data_distribution_type"}:
        problems.append(f"{where}.{key}: not supported (a channel here is an S3 prefix)")
    source = {"s3_uri": value["s3_uri"]}
    if value.get("s3_data_distribution_type") is not None:
        source["distribution"] = value["s3_data_distribution_type"]
    return source


def _checkpoints(value: Any, problems: list[str]) -> bool | None:
    """A CheckpointConfig turns checkpoints on; null, as ModelTrainer's default, turns them off."""
    if value is None:
        return False
    if not isinstance(value, dict):
        problems.append("checkpoint_config: a mapping (CheckpointConfig), or null for no checkpoints")
        return None
    for key in value:
        if key == "s3_uri":
            problems.append(_unsupported("checkpoint_config.s3_uri", []))
        elif key != "local_path":
            problems.append(f"checkpoint_config.{key}: not a CheckpointConfig field (local_path)")
    if str(value.get("local_path", CHECKPOINT_LOCAL_PATH)).rstrip("/") != CHECKPOINT_LOCAL_PATH:
        problems.append(f"checkpoint_config.local_path: the built-in script and restarts use {CHECKPOINT_LOCAL_PATH}")
    return True


def _preferences(value: Any, problems: list[str]) -> list[str]:
    """compute.instance_preferences (InstancePreference mappings, or plain types) as instance_types."""
    if not isinstance(value, list):
        problems.append("compute.instance_preferences: a list of InstancePreference mappings (instance_type)")
        return []
    types = []
    for index, preference in enumerate(value):
        if isinstance(preference, dict) and set(preference) == {"instance_type"}:
            types.append(preference["instance_type"])
        else:
            problems.append(
                f"compute.instance_preferences[{index}]: an InstancePreference with instance_type alone "
                "(a count or training plan per preference is not supported; give compute.instance_count)"
            )
    return types


def _set(spec: dict[str, Any], field: str, name: str, value: Any, problems: list[str]) -> None:
    """Put `value` at the spec's `field` (spot.enabled: inside spot), unless the spec gives it already."""
    if field == "distribution" and "strategy" in spec:
        problems.append(f"{name} (ModelTrainer's) and strategy (trainstack's shorthand) both say how to launch: give one")
        return
    parent, _, child = field.rpartition(".")
    if parent:
        nested = spec.get(parent)
        if nested is not None and not isinstance(nested, dict):
            return  # the spec's own validation names a malformed `spot`
        if nested is not None and child in nested:
            problems.append(_both(name, field))
            return
        spec[parent] = {**(nested or {}), child: value}
    elif field in spec:
        problems.append(_both(name, field))
    else:
        spec[field] = value


def _both(name: str, field: str) -> str:
    return f"{name} (ModelTrainer's name) and {field} (the spec's) are one field, given twice: keep one"
