"""GPU check: the built-in script's real runs on this machine's GPU, measured against the planner.

    python3 tools/gpu_check.py --out DIR            # a CUDA machine: torch, numpy and this repository, no venv
    python3 tools/gpu_check.py --out DIR --dry-run  # any machine: the same code paths on the CPU, gpt-tiny over gloo
    make gpu-check OUT=DIR [ARGS="--models gpt-125m"]

For gpt-125m, gpt-350m and the 1.1B Llama of training/hf_configs/llama-1b, training/train.py runs
under torchrun in one process in bf16, each run a fresh process with the script's own
hyperparameters: DDP and FSDP2 with compiled blocks and the fused AdamW, each with one of the two
off, DDP with every health rule off, and DDP with a checkpoint saved mid-run, synchronously and
asynchronously (DDP and FSDP2 of both GPT sizes first, the Llama's runs last; a run the time budget,
--max-minutes, has no room for is skipped). Throughput is the median of the script's own metric lines
(trainstack_contract.metric_lines) after the first interval (warm-up, compilation); MFU is the
planner's FLOPs per token (trainstack.planner.speed) against the dense bf16 peak of the instance type
in the facts whose GPU the device's name names (H100: ml.p5.48xlarge, H200: ml.p5e.48xlarge), and
the planner's memory estimate and predicted tokens/s for the same job on that instance type sit
beside what was measured (GPU memory in use above the idle GPU's, nvidia-smi, sampled through the
run; on the CPU, the processes' peak resident memory). A checkpoint run logs every step: the save's
call is its step's time beyond the median step before it, and the steps after it are compared with
the steps before it (an asynchronous write runs meanwhile).

Writes DIR/gpu-check.json and DIR/gpu-check.txt (a table); exit 0 when every run that started
completed, 1 when one failed, 3 when this machine lacks something the runs need (one line each,
before anything runs).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import types
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TRAINING = ROOT / "training"
sys.path[:0] = [str(TRAINING), str(ROOT / "lambda")]

try:
    import trainstack.spec  # noqa: F401
except ImportError:
    # The planner's workload module imports the spec's pydantic types only to annotate the functions that
    # read a spec, which this tool never calls; a bare GPU machine has no pydantic, so they name nothing.
    spec_stand_in = types.ModuleType("trainstack.spec")
    spec_stand_in.JobSpec = spec_stand_in.ModelShape = None
    sys.modules["trainstack.spec"] = spec_stand_in

import numpy as np  # noqa: E402
import torch  # noqa: E402

from trainstack import facts  # noqa: E402
from trainstack.planner import workload as planner_workload  # noqa: E402
from trainstack.planner.memory import GIB, checkpoint_bytes, memory_per_gpu  # noqa: E402
from trainstack.planner.parallelism import Layout  # noqa: E402
from trainstack.planner.speed import flops_per_token, peak_flops, speed  # noqa: E402
from trainstack_contract.config import TrainConfig, parse_config  # noqa: E402
from trainstack_contract.health_rules import RULES  # noqa: E402
from trainstack_contract.metric_lines import CHECKPOINT_STEP, METRICS, MFU, STEP, TOKENS_PER_SEC  # noqa: E402
from trainstack_contract.model_sizes import GPT_SIZES, hf_source, is_hf_model  # noqa: E402
from trainstack_contract.runtime_requirements import HF_NEEDS, unmet_by_torch  # noqa: E402
from trainstack_training.data.tokens import write_shard  # noqa: E402

TRAIN_SCRIPT = TRAINING / "train.py"
STEP_TIME = "train:step_time"
PRECISION = "bf16"
# Micro-batch per model (nanoGPT trains GPT-2 124M at 12 x 1024 on a 40 GB A100): at most 37 GiB by the
# planner's estimate, so every run fits an 80 GB H100 without activation checkpointing.
MICRO_BATCH = {"gpt-125m": 16, "gpt-350m": 16, "hf:hf_configs/llama-1b": 4, "gpt-tiny": 8}
GPU_MODELS = ("gpt-125m", "gpt-350m", "hf:hf_configs/llama-1b")
DRY_RUN_MODELS = ("gpt-tiny",)
DRY_RUN_INSTANCE = "ml.p5.48xlarge"  # a dry run's figures are planned as on an H100 (they check the code, not the machine)
SHARDS = 4
RUN_TIMEOUT_S = {"gpu": 420, "cpu": 180}  # one run past this is a hang, and fails
MEMORY_SAMPLE_S = 0.2
LOG_TAIL_LINES = 40
# The script reads these for MLflow tracking; a check measures training alone.
TRACKING_VARIABLES = ("MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME")
RULES_OFF = json.dumps(dict.fromkeys(RULES, False))


@dataclass(frozen=True)
class Variant:
    name: str
    hyperparameters: dict[str, str]  # over the run's base: strategy, compile true, fused_adamw true
    checkpoint: bool = False  # a checkpoint run: a metric line every step and a save mid-run


VARIANTS = (
    Variant("ddp", {"strategy": "ddp"}),
    Variant("fsdp", {"strategy": "fsdp"}),
    Variant("ddp compile off", {"strategy": "ddp", "compile": "false"}),
    Variant("ddp fused off", {"strategy": "ddp", "fused_adamw": "false"}),
    Variant("fsdp compile off", {"strategy": "fsdp", "compile": "false"}),
    Variant("fsdp fused off", {"strategy": "fsdp", "fused_adamw": "false"}),
    Variant("ddp rules off", {"strategy": "ddp", "health": RULES_OFF}),
    Variant("ddp sync checkpoint", {"strategy": "ddp", "async_checkpoint": "false"}, checkpoint=True),
    Variant("ddp async checkpoint", {"strategy": "ddp", "async_checkpoint": "true"}, checkpoint=True),
)
VARIANT_NAMES = tuple(variant.name for variant in VARIANTS)
CHECKPOINT_VARIANTS = tuple(variant.name for variant in VARIANTS if variant.checkpoint)
CORE_VARIANTS = ("ddp", "fsdp")
# (ratio, numerator, denominator): tokens/s side by side in one run, or the two saves' call times.
RATIOS = (
    ("compile on / off (ddp)", "ddp", "ddp compile off"),
    ("compile on / off (fsdp)", "fsdp", "fsdp compile off"),
    ("fused on / off (ddp)", "ddp", "ddp fused off"),
    ("fused on / off (fsdp)", "fsdp", "fsdp fused off"),
    ("fsdp / ddp", "fsdp", "ddp"),
    ("rules on / off (ddp)", "ddp", "ddp rules off"),
)
SAVE_CALL_RATIO = ("async / sync save call", "ddp async checkpoint", "ddp sync checkpoint")


@dataclass(frozen=True)
class Protocol:
    steps: int  # a throughput run's optimizer steps
    log_every: int  # a throughput run's steps per metric line; the first interval is warm-up
    checkpoint_steps: int  # a checkpoint run's steps (a metric line every step)
    save_at: int  # the checkpoint run's mid-run save, after this step
    after_save: int  # steps after the save's own step, compared with the steps before it
    warmup_steps: int  # a checkpoint run's first steps, left out of the steps before the save


GPU_PROTOCOL = Protocol(steps=60, log_every=10, checkpoint_steps=40, save_at=20, after_save=10, warmup_steps=5)
DRY_RUN_PROTOCOL = Protocol(steps=8, log_every=2, checkpoint_steps=10, save_at=4, after_save=3, warmup_steps=1)


@dataclass(frozen=True)
class Run:
    model: str
    variant: Variant
    hyperparameters: dict[str, str]  # the script's

    @property
    def name(self) -> str:
        return f"{self.model} / {self.variant.name}"

    @property
    def arguments(self) -> tuple[str, ...]:
        """As SageMaker passes hyperparameters: --name value."""
        return tuple(item for name, value in self.hyperparameters.items() for item in (f"--{name}", value))

    @property
    def config(self) -> TrainConfig:
        """What the script parses from these arguments (its own parser)."""
        return parse_config(list(self.arguments), {})


@dataclass(frozen=True)
class Planned:
    """The planner's figures for a run's job on one GPU of the matched instance type."""

    flops_per_token: float
    peak_flops: float
    memory_bytes: int
    tokens_per_sec: float
    mfu: float  # what the planner expects (it grows with the model's FLOPs per token)
    checkpoint_bytes: int


@dataclass
class Result:
    model: str
    variant: str
    hyperparameters: dict[str, str]
    status: str = "skipped"  # ok, failed, skipped (the time budget had no room)
    error: str = ""
    wall_s: float = 0.0
    tokens_per_sec: float | None = None
    step_time_s: float | None = None
    intervals: int = 0  # metric lines the medians are of
    mfu: float | None = None  # the planner's FLOPs per token against the facts' peak
    planned_mfu: float | None = None  # the MFU the planner expects for the run
    script_mfu: float | None = None  # the metric lines' own mfu=, where the script knows the GPU's peak
    peak_memory_gib: float | None = None
    planned_memory_gib: float | None = None
    memory_ratio: float | None = None  # measured / planned
    planned_tokens_per_sec: float | None = None
    speed_ratio: float | None = None  # measured / planned
    save_call_s: float | None = None  # checkpoint runs: the save's step beyond the median step before it
    after_save_ratio: float | None = None  # median step after the save's / median step before it
    write_overlapped_steps: int | None = None  # steps that ran before the save's `checkpoint step=` line
    planned_checkpoint_gib: float | None = None
    log_tail: list[str] = field(default_factory=list)  # a failed run's last log lines (its traceback)


@dataclass(frozen=True)
class Device:
    name: str
    memory_gib: float
    kind: str  # "gpu" or "cpu"
    uuid: str = ""  # nvidia-smi's id of the GPU
    software: dict[str, str] = field(default_factory=dict)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    started = time.monotonic()
    device = describe_device(args.dry_run)
    models = args.models or (DRY_RUN_MODELS if args.dry_run else GPU_MODELS)
    variants = [variant for variant in VARIANTS if not args.variants or variant.name in args.variants]
    protocol = DRY_RUN_PROTOCOL if args.dry_run else GPU_PROTOCOL
    instance_type = args.instance_type or (DRY_RUN_INSTANCE if args.dry_run else matching_instance_type(device))
    with tempfile.TemporaryDirectory(prefix="gpu-check-", dir=args.work_dir) as work:
        work_dir = Path(work)
        runs = sorted(
            (
                Run(
                    model,
                    variant,
                    hyperparameters(model, variant, protocol, work_dir, args.dry_run, variant.name == args.fail_run),
                )
                for model in models
                for variant in variants
            ),
            key=lambda run: run_order(run, models),
        )
        missing = prerequisites(args.dry_run, device, instance_type, runs, work_dir)
        if missing:
            for line in missing:
                print(f"gpu-check: missing: {line}", file=sys.stderr)
            return 3
        instance = facts.instance(instance_type)
        assert instance is not None  # prerequisites checked it
        for model in models:
            write_data(model, protocol, work_dir)
        results = []
        for run in runs:
            result = Result(run.model, run.variant.name, run.hyperparameters)
            if room_for(run, results, started, args.max_minutes * 60):
                print(f"gpu-check: {run.name}", file=sys.stderr, flush=True)
                measure(run, result, device, protocol, work_dir)
                compare_with_plan(run, result, instance)
            results.append(result)
            write_report(args.out, device, instance_type, protocol, args.dry_run, results)
    failed = [result for result in results if result.status == "failed"]
    for result in failed:
        print(f"gpu-check: {result.model} / {result.variant} failed: {result.error}", file=sys.stderr)
    print((args.out / "gpu-check.txt").read_text())
    return 1 if failed else 0


def run_order(run: Run, models: tuple[str, ...]) -> tuple[bool, bool, int, int]:
    """DDP and FSDP of every built-in size first (MFU and memory against the plan at each size), then
    each model's other runs in turn, a Hugging Face model's last: what the time budget cuts is the least."""
    hf = is_hf_model(run.model)
    first = run.variant.name in CORE_VARIANTS and not hf
    return hf, not first, models.index(run.model), VARIANT_NAMES.index(run.variant.name)


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for gpu-check.json and gpu-check.txt")
    parser.add_argument(
        "--dry-run", action="store_true", help="on the CPU over gloo at gpt-tiny: the code paths, not the figures"
    )
    parser.add_argument("--models", type=_names(set(MICRO_BATCH)), help=f"comma-separated, of: {', '.join(MICRO_BATCH)}")
    parser.add_argument("--variants", type=_names(set(VARIANT_NAMES)), help=f"comma-separated, of: {', '.join(VARIANT_NAMES)}")
    parser.add_argument("--max-minutes", type=float, default=8.0, help="no run starts that would end past this (default 8)")
    parser.add_argument("--instance-type", help="plan as on this instance type (default: the one whose GPU the device names)")
    parser.add_argument(
        "--work-dir", type=Path, help="where data, checkpoints and models go while it runs (default: the temp dir)"
    )
    parser.add_argument(
        "--fail-run",
        choices=VARIANT_NAMES,
        help="the tool's own test: that variant asks for a seq_len beyond the model's context, which the script refuses",
    )
    return parser.parse_args(argv)


def _names(allowed: set[str]):
    def parse(text: str) -> tuple[str, ...]:
        names = tuple(name.strip() for name in text.split(",") if name.strip())
        unknown = sorted(set(names) - allowed)
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown: {', '.join(unknown)}; choose from {', '.join(sorted(allowed))}")
        return names

    return parse


def describe_device(dry_run: bool) -> Device:
    software = {"torch": torch.__version__, "python": platform.python_version()}
    if dry_run or not torch.cuda.is_available():
        return Device(platform.processor() or platform.machine(), 0.0, "cpu", software=software)
    properties = torch.cuda.get_device_properties(0)
    software["cuda"] = torch.version.cuda or ""
    software["nccl"] = ".".join(map(str, torch.cuda.nccl.version())) if torch.distributed.is_nccl_available() else ""
    return Device(properties.name, properties.total_memory / GIB, "gpu", f"GPU-{properties.uuid}", software)


def matching_instance_type(device: Device) -> str | None:
    """The instance type in the facts whose GPU the device's name names (the longest such name: "L40S"
    before "L4"), of the nearest memory, then the most GPUs (the training type: p5.48xlarge before
    p5.4xlarge), then the first by name (H200: p5e.48xlarge before p5en.48xlarge)."""
    candidates = [instance for instance in facts.instances().values() if instance.gpu and instance.gpu in device.name]
    if not candidates:
        return None
    best = min(
        candidates,
        key=lambda i: (-len(i.gpu), abs(i.accelerator_memory_gib - device.memory_gib), -i.accelerators, i.name),
    )
    return best.name


def hyperparameters(
    model: str, variant: Variant, protocol: Protocol, work_dir: Path, dry_run: bool, broken: bool
) -> dict[str, str]:
    run_dir = work_dir / "runs" / f"{model}-{variant.name}".replace("/", "-").replace(":", "-").replace(" ", "-")
    steps = protocol.checkpoint_steps if variant.checkpoint else protocol.steps
    chosen = {
        "model": model,
        "precision": PRECISION,
        "compile": "true",
        "fused_adamw": "true",
        "micro_batch_size": str(MICRO_BATCH[model]),
        "seq_len": str(context_length(model) + 1 if broken else context_length(model)),
        "max_steps": str(steps),
        "log_every": "1" if variant.checkpoint else str(protocol.log_every),
        "checkpoint_every": str(protocol.save_at if variant.checkpoint else steps),
        "keep_checkpoints": "1",
        "seed": "0",
        "data_dir": str(data_dir(model, work_dir)),
        "checkpoint_dir": str(run_dir / "checkpoints"),
        "model_dir": str(run_dir / "model"),
        "output_dir": str(run_dir / "output"),
        **variant.hyperparameters,
    }
    if dry_run:  # inductor on two CPU cores takes minutes per model
        chosen["compile"] = "false"
    return chosen


def hf_config(model: str) -> dict[str, Any]:
    return json.loads((TRAINING / hf_source(model) / "config.json").read_text())


def context_length(model: str) -> int:
    return int(hf_config(model)["max_position_embeddings"]) if is_hf_model(model) else GPT_SIZES[model].block_size


def vocabulary(model: str) -> int:
    return int(hf_config(model)["vocab_size"]) if is_hf_model(model) else GPT_SIZES[model].vocab_size


def data_dir(model: str, work_dir: Path) -> Path:
    return work_dir / "data" / f"vocab-{vocabulary(model)}"


def write_data(model: str, protocol: Protocol, work_dir: Path) -> None:
    """Random token shards over the model's whole vocabulary (the dtype the data loader reads for it),
    as many tokens as the longest run reads."""
    directory = data_dir(model, work_dir)
    if directory.is_dir():
        return
    examples = max(protocol.steps, protocol.checkpoint_steps) * MICRO_BATCH[model]
    tokens_per_shard = (examples // SHARDS + 1) * context_length(model) + 1
    generator = np.random.default_rng(0)
    for shard in range(SHARDS):
        write_shard(generator.integers(0, vocabulary(model), tokens_per_shard), directory, f"shard_{shard:05d}")


def prerequisites(dry_run: bool, device: Device, instance_type: str | None, runs: list[Run], work_dir: Path) -> list[str]:
    """What this machine lacks for the runs, one line each."""
    missing = []
    if dry_run:
        if not torch.distributed.is_gloo_available():
            missing.append(f"gloo: torch {torch.__version__} was built without it (a dry run's process group)")
    else:
        if device.kind != "gpu":
            missing.append(f"CUDA: torch {torch.__version__} sees no GPU (on a machine without one: --dry-run)")
        if not torch.distributed.is_nccl_available():
            missing.append(f"NCCL: torch {torch.__version__} was built without it")
        if shutil.which("nvidia-smi") is None:
            missing.append("nvidia-smi: not on PATH (it reads the GPU memory in use; it comes with the NVIDIA driver)")
        elif device.kind == "gpu" and (unread := gpu_memory_unreadable(device.uuid)):
            missing.append(f"nvidia-smi: cannot read the memory in use of {device.uuid}: {unread}")
        if any(run.config.compile for run in runs) and importlib.util.find_spec("triton") is None:
            missing.append("triton: not installed (torch.compile's GPU kernels; --variants without compile on, or install it)")
    for need in {need for run in runs for need in unmet_by_torch(torch.__version__, run.config.strategy, run.model)}:
        missing.append(f"torch {need.torch} for {need.what}: this machine has {torch.__version__} ({need.why})")
    hf = [run.model for run in runs if is_hf_model(run.model)]
    for need in HF_NEEDS if hf else ():
        if need.package and not _has_major(need.package, need.package_major):
            missing.append(f"{need.package} {need.package_major}: {need.why}, and {hf[0]} needs it (or --models without it)")
    instance = facts.instance(instance_type) if instance_type else None
    if instance_type is None:
        missing.append(f"instance type: no GPU in the facts is named in {device.name!r}; pass --instance-type")
    elif instance is None:
        missing.append(f"instance type {instance_type}: not in the facts (lambda/trainstack/facts.json)")
    elif not instance.peak_tflops.get(PRECISION):
        missing.append(
            f"a {PRECISION} peak for {instance_type} ({instance.gpu}) in the facts: MFU needs it; pass --instance-type"
        )
    free = shutil.disk_usage(work_dir).free
    needed = max(2 * checkpoint_bytes(workload_of(run)) + 4 * workload_of(run).parameters for run in runs)
    if free < needed:
        missing.append(
            f"disk: {free / GIB:.1f} GiB free in {work_dir.parent}, the largest run writes up to {needed / GIB:.1f} GiB "
            "(two checkpoints and the exported model): pass --work-dir on a larger disk"
        )
    return missing


def _has_major(package: str, major: int) -> bool:
    try:
        return int(importlib.metadata.version(package).split(".")[0]) >= major
    except importlib.metadata.PackageNotFoundError:
        return False


def room_for(run: Run, results: list[Result], started: float, budget_s: float) -> bool:
    """Whether the run should end inside the budget, judged by the longest run of its model so far (of
    any model, twice over, for a model's first run)."""
    done = [result for result in results if result.status != "skipped"]
    same_model = [result.wall_s for result in done if result.model == run.model]
    expected = max(same_model) if same_model else 2 * max((result.wall_s for result in done), default=0.0)
    return time.monotonic() - started + expected <= budget_s


def measure(run: Run, result: Result, device: Device, protocol: Protocol, work_dir: Path) -> None:
    """One run of the script under torchrun, its metric lines read, its memory sampled throughout."""
    config = run.config
    log_path = Path(config.output_dir).parent / "log.txt"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1", str(TRAIN_SCRIPT)]
    environment = {name: value for name, value in os.environ.items() if name not in TRACKING_VARIABLES}
    if device.kind == "cpu":
        environment["CUDA_VISIBLE_DEVICES"] = ""  # a dry run stays on the CPU on a GPU machine too
    sampler = GpuMemorySampler(device.uuid) if device.kind == "gpu" else None
    timeout, hung = RUN_TIMEOUT_S[device.kind], threading.Event()
    started = time.monotonic()
    with log_path.open("w") as log:
        process = subprocess.Popen([*command, *run.arguments], stdout=log, stderr=subprocess.STDOUT, env=environment, cwd=ROOT)

        def stop(signum: int) -> None:
            with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                os.kill(process.pid, signum)
                hung.set()

        # SIGTERM first: torchrun forwards it to the worker (a session of its own) and kills it 30 s later.
        timers = [threading.Timer(timeout, stop, (signal.SIGTERM,)), threading.Timer(timeout + 60, stop, (signal.SIGKILL,))]
        for timer in timers:
            timer.start()
        # wait4 rather than wait: the resource usage of the launcher and the worker it reaped (peak RSS).
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        for timer in timers:
            timer.cancel()
    result.wall_s = time.monotonic() - started
    peak_bytes = sampler.stop() if sampler else usage.ru_maxrss * 1024  # Linux counts ru_maxrss in KiB
    for written in (config.checkpoint_dir, config.model_dir):  # the next run's disk
        shutil.rmtree(written, ignore_errors=True)
    output = log_path.read_text(errors="replace")
    lines = metric_lines(output)
    if hung.is_set() or process.returncode != 0 or not lines:
        result.status = "failed"
        result.error = (
            f"still running after {timeout} s: killed" if hung.is_set() else failure_reason(config, output, process.returncode)
        )
        result.log_tail = output.splitlines()[-LOG_TAIL_LINES:]
        return
    result.status = "ok"
    result.peak_memory_gib = peak_bytes / GIB
    if run.variant.checkpoint:
        read_checkpoint_run(lines, checkpoint_position(output, protocol.save_at), protocol, result)
    else:
        read_throughput_run(lines[1:], result)


def metric_lines(output: str) -> list[dict[str, float]]:
    """The script's interval lines in order, by the regexes its MetricDefinitions use."""
    found = []
    for line in output.splitlines():
        step = re.search(METRICS[STEP], line)
        if step is None:
            continue
        values = {"step": float(step[1]), "line": float(len(found))}
        for key, metric in (("tokens_per_sec", TOKENS_PER_SEC), ("step_time", STEP_TIME), ("mfu", MFU)):
            if value := re.search(METRICS[metric], line):
                values[key] = float(value[1])
        found.append(values)
    return found


def checkpoint_position(output: str, step: int) -> int | None:
    """How many metric lines came before the `checkpoint step=<step>` line (the save complete on every rank)."""
    seen = 0
    for line in output.splitlines():
        if re.search(METRICS[STEP], line):
            seen += 1
        elif (complete := re.search(METRICS[CHECKPOINT_STEP], line)) and int(complete[1]) == step:
            return seen
    return None


def failure_reason(config: TrainConfig, output: str, returncode: int) -> str:
    """The script's own failure reason where it wrote one, else the log's last line."""
    failure = Path(config.output_dir) / "failure"
    if failure.is_file():
        return failure.read_text().strip().splitlines()[0]
    last = next((line for line in reversed(output.splitlines()) if line.strip()), "no output")
    return f"exit {returncode}: {last.strip()}"


def read_throughput_run(lines: list[dict[str, float]], result: Result) -> None:
    """Medians of the intervals after the first (warm-up and compilation)."""
    result.intervals = len(lines)
    if not lines:
        result.status, result.error = "failed", "no metric line after the first interval"
        return
    result.tokens_per_sec = statistics.median(line["tokens_per_sec"] for line in lines)
    result.step_time_s = statistics.median(line["step_time"] for line in lines)
    script_mfu = [line["mfu"] for line in lines if "mfu" in line]
    result.script_mfu = statistics.median(script_mfu) if script_mfu else None


def read_checkpoint_run(lines: list[dict[str, float]], complete_at: int | None, protocol: Protocol, result: Result) -> None:
    """A metric line per step: the steps before the save (after the warm-up) are the baseline; the
    save's call lands in the next step's time; the steps after that run while an asynchronous write goes on."""
    step_time = {int(line["step"]): line["step_time"] for line in lines}
    before = [step_time[s] for s in range(protocol.warmup_steps + 1, protocol.save_at + 1) if s in step_time]
    call_step = protocol.save_at + 1
    after = [step_time[s] for s in range(call_step + 1, call_step + 1 + protocol.after_save) if s in step_time]
    if not before or not after or call_step not in step_time or complete_at is None:
        result.status, result.error = (
            "failed",
            f"no metric lines around the save at step {protocol.save_at}, or no checkpoint line",
        )
        return
    baseline = statistics.median(before)
    result.step_time_s = baseline
    result.tokens_per_sec = statistics.median(
        line["tokens_per_sec"] for line in lines if protocol.warmup_steps < line["step"] <= protocol.save_at
    )
    result.intervals = len(before)
    result.save_call_s = step_time[call_step] - baseline
    result.after_save_ratio = statistics.median(after) / baseline
    result.write_overlapped_steps = max(0, complete_at - call_step)


def gpu_memory_used(uuid: str) -> int:
    """Bytes in use on the GPU, every process's (nvidia-smi reports MiB)."""
    query = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", uuid]
    return int(float(subprocess.run(query, capture_output=True, text=True, check=True).stdout.strip())) * 1024**2


def gpu_memory_unreadable(uuid: str) -> str:
    """Why nvidia-smi cannot read the GPU's memory in use, or "" when it can."""
    try:
        gpu_memory_used(uuid)
    except (subprocess.CalledProcessError, ValueError) as error:
        return str(getattr(error, "stderr", "") or error).strip().splitlines()[0]
    return ""


class GpuMemorySampler:
    """The GPU's memory in use, sampled by nvidia-smi while a run goes on, above what was in use before it
    (the process's CUDA context, NCCL's buffers and the caching allocator's reserve: what the planner's
    estimate adds up to, its framework overhead included)."""

    def __init__(self, uuid: str) -> None:
        self.uuid = uuid
        self.idle = gpu_memory_used(uuid)
        self.peak = self.idle
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        while not self.stopping.wait(MEMORY_SAMPLE_S):
            self.peak = max(self.peak, gpu_memory_used(self.uuid))

    def stop(self) -> int:
        self.stopping.set()
        self.thread.join()
        return self.peak - self.idle


@dataclass(frozen=True)
class DecoderShape:
    """What the planner reads of a Hugging Face decoder (the spec's `model:` block, from its config.json)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    ffn_hidden: int
    gated_mlp: bool
    tied_embeddings: bool


def workload_of(run: Run) -> planner_workload.Workload:
    """The planner's workload for the run's job, built from the script's own parse of its hyperparameters."""
    config = run.config
    if not is_hf_model(config.model):
        return planner_workload._builtin(config, planner_workload.gpt_architecture(config.model), 0)
    hf = hf_config(config.model)
    shape = DecoderShape(
        layers=hf["num_hidden_layers"],
        hidden=hf["hidden_size"],
        heads=hf["num_attention_heads"],
        kv_heads=hf.get("num_key_value_heads") or hf["num_attention_heads"],
        vocab=hf["vocab_size"],
        ffn_hidden=hf["intermediate_size"],
        gated_mlp=hf.get("hidden_act") == "silu",  # Llama's and Mistral's SwiGLU
        tied_embeddings=bool(hf.get("tie_word_embeddings")),
    )
    return planner_workload._builtin(config, planner_workload.decoder_architecture(shape), hf["max_position_embeddings"])


def planned(run: Run, instance: facts.Instance) -> Planned:
    """The same job on one GPU of the instance type: no collective crosses a GPU, so the plan is the
    compute at the MFU the planner expects for the model (FSDP2: at least its per-layer host floor)
    and the memory of one unsharded GPU."""
    workload = workload_of(run)
    layout = Layout(run.config.strategy, instance, nodes=1, gpus_per_node=1, shard=1)
    pace = speed(workload, layout)
    return Planned(
        flops_per_token=flops_per_token(workload),
        peak_flops=peak_flops(layout, workload.precision),
        memory_bytes=memory_per_gpu(workload, layout).total,
        tokens_per_sec=pace.tokens_per_second,
        mfu=pace.mfu,
        checkpoint_bytes=checkpoint_bytes(workload),
    )


def compare_with_plan(run: Run, result: Result, instance: facts.Instance) -> None:
    plan = planned(run, instance)
    result.planned_memory_gib = plan.memory_bytes / GIB
    result.planned_tokens_per_sec = plan.tokens_per_sec
    result.planned_mfu = plan.mfu
    if run.variant.checkpoint:
        result.planned_checkpoint_gib = plan.checkpoint_bytes / GIB
    if result.status != "ok":
        return
    assert result.tokens_per_sec is not None and result.peak_memory_gib is not None
    result.mfu = result.tokens_per_sec * plan.flops_per_token / plan.peak_flops
    result.memory_ratio = result.peak_memory_gib / result.planned_memory_gib
    result.speed_ratio = result.tokens_per_sec / plan.tokens_per_sec


def ratios(results: list[Result]) -> dict[str, dict[str, float | None]]:
    """Per model: each pair of runs side by side (tokens/s, or the two saves' call times)."""
    by_run = {(r.model, r.variant): r for r in results if r.status == "ok"}
    table: dict[str, dict[str, float | None]] = {}
    for model in dict.fromkeys(result.model for result in results):
        row: dict[str, float | None] = {}
        for name, top, bottom in RATIOS:
            a, b = by_run.get((model, top)), by_run.get((model, bottom))
            row[name] = a.tokens_per_sec / b.tokens_per_sec if a and b and a.tokens_per_sec and b.tokens_per_sec else None
        name, top, bottom = SAVE_CALL_RATIO
        a, b = by_run.get((model, top)), by_run.get((model, bottom))
        row[name] = a.save_call_s / b.save_call_s if a and b and a.save_call_s is not None and b.save_call_s else None
        table[model] = row
    return table


def write_report(out: Path, device: Device, instance_type: str, protocol: Protocol, dry_run: bool, results: list[Result]) -> None:
    """Both files, rewritten after every run: a check cut short still leaves what it measured."""
    instance = facts.instance(instance_type)
    assert instance is not None
    report = {
        "generated": datetime.now(UTC).isoformat(timespec="seconds"),
        "dry_run": dry_run,
        "device": asdict(device),
        "instance_type": instance_type,
        "peak_tflops": instance.peak_tflops[PRECISION],
        "precision": PRECISION,
        "protocol": asdict(protocol),
        "runs": [asdict(result) for result in results],
        "ratios": ratios(results),
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "gpu-check.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "gpu-check.txt").write_text(table(report))


# The table's columns: heading, the result's field, and its format ("ms": seconds shown as milliseconds).
THROUGHPUT_COLUMNS = (
    ("tokens/s", "tokens_per_sec", ".0f"),
    ("MFU", "mfu", ".1%"),
    ("planned MFU", "planned_mfu", ".1%"),
    ("step ms", "step_time_s", "ms"),
    ("peak GiB", "peak_memory_gib", ".2f"),
    ("planned GiB", "planned_memory_gib", ".2f"),
    ("memory ratio", "memory_ratio", ".2f"),
    ("planned tokens/s", "planned_tokens_per_sec", ".0f"),
    ("speed ratio", "speed_ratio", ".2f"),
)
CHECKPOINT_COLUMNS = (
    ("step ms", "step_time_s", "ms"),
    ("save call ms", "save_call_s", "ms"),
    ("after / before", "after_save_ratio", ".3f"),
    ("steps during write", "write_overlapped_steps", "d"),
    ("peak GiB", "peak_memory_gib", ".2f"),
    ("planned checkpoint GiB", "planned_checkpoint_gib", ".2f"),
)


def table(report: dict[str, Any]) -> str:
    device, protocol = report["device"], report["protocol"]
    models = list(dict.fromkeys(run["model"] for run in report["runs"]))  # in the order the runs began
    runs = sorted(report["runs"], key=lambda run: (models.index(run["model"]), VARIANT_NAMES.index(run["variant"])))
    software = ", ".join(f"{name} {version}" for name, version in device["software"].items() if version)
    ratio_names = [name for name, _, _ in RATIOS] + [SAVE_CALL_RATIO[0]]
    lines = [
        f"gpu-check {report['generated']}{'  DRY RUN: CPU figures, the code paths only' if report['dry_run'] else ''}",
        f"device {device['name']} ({software}); one process under torchrun, {report['precision']}",
        f"planned as on {report['instance_type']}: {report['precision']} peak {report['peak_tflops']:g} TFLOP/s per GPU; "
        "planned MFU: the planner's for the model (it grows with FLOPs per token)",
        "",
        f"throughput runs: {protocol['steps']} steps, medians of the metric lines (every {protocol['log_every']} steps) "
        "after the first",
        _rows(THROUGHPUT_COLUMNS, [run for run in runs if run["variant"] not in CHECKPOINT_VARIANTS]),
        "",
        f"checkpoint runs: {protocol['checkpoint_steps']} steps, a metric line every step, a save after step "
        f"{protocol['save_at']}; steps {protocol['warmup_steps'] + 1}-{protocol['save_at']} before it, "
        f"the {protocol['after_save']} after its own step",
        _rows(CHECKPOINT_COLUMNS, [run for run in runs if run["variant"] in CHECKPOINT_VARIANTS]),
        "",
        "ratios, side by side in this run (tokens/s medians; the save calls' times)",
        _columns(
            ["model", *ratio_names],
            [[model, *(_cell(row[name], ".3f") for name in ratio_names)] for model, row in report["ratios"].items()],
        ),
    ]
    errors = [f"{run['model']} / {run['variant']}: {run['error']}" for run in runs if run["error"]]
    if errors:
        lines += ["", "failures", *errors]
    return "\n".join(lines) + "\n"


def _rows(columns: tuple[tuple[str, str, str], ...], runs: list[dict[str, Any]]) -> str:
    header = ["model", "run", "status", *(heading for heading, _, _ in columns)]
    rows = [[run["model"], run["variant"], run["status"], *(_cell(run[key], spec) for _, key, spec in columns)] for run in runs]
    return _columns(header, rows)


def _cell(value: float | None, spec: str) -> str:
    if value is None:
        return "-"
    return format(value * 1000, ".1f") if spec == "ms" else format(value, spec)


def _columns(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in [header, *rows]
    )


if __name__ == "__main__":
    sys.exit(main())
