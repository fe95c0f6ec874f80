"""Failure-trace bench: `checkpoint_every: auto` against three fixed intervals 10x apart, each run of a
two-host job taken through the emulated pipeline (its restarts) and the SageMaker twin under the same
trace of failures at a compressed mean time to failure; for each, the effective-training fraction it
measured beside the one the planner's model predicts (trainstack.planner.goodput).

Usage: python tools/bench_goodput.py [--mttf 20] [--steps 20000] [--seed 0]   (after `make synth`)

The trace: failures every MTTF seconds of training on average (exponential, its draws stratified so
that a few of them cover the distribution), a third each of the three kinds the twin makes, in
shuffled blocks of three: a hang (the script's TRAINSTACK_INJECT_HANG on the second host: its
watchdog ends the job after `step_timeout`), a transport error (TRAINSTACK_INJECT_TRANSPORT_ERROR on
rank 0) and a spot reclaim (SageMakerTwin.interrupt: SIGTERM, a save at the next step, the job's
hosts started again). The first two fail the job, and the pipeline restarts it. Each failure comes
a number of steps after the step the job resumed from (its training time over the step time of a
run without failures), so every run meets the same failures at the same training time since each
restart. Faults go in through the twin's own interface: a job's fault variables when it is created,
from the event feed's "Failed" of the job before it (InjectedFault), and spot reclaims as its log
reaches their step.

Measured: the steps' time (the run's median step time x its steps) over the time from its first
step to its last, restarts and steps trained again included. Predicted: trainstack.planner.goodput's
expected_goodput with what the model takes as given, measured in the same run: the step time and
the save time (the run's own medians), the start-up (a job without failures, from its creation to
its first step), the twin's poll and restart waits (pipeline_restart), the watchdog's limit and the
spot capacity wait. Saves are synchronous (async_checkpoint false): on this machine's two cores a
background write slows the steps beside it, and its cost is then not the save's time alone.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for folder in ("lambda", "training", "local"):
    sys.path.insert(0, str(ROOT / folder))

import boto3  # noqa: E402

from trainstack.identity import Run  # noqa: E402
from trainstack.planner.goodput import FailureKind, expected_goodput, pipeline_restart  # noqa: E402
from trainstack_contract import fault_hooks  # noqa: E402
from trainstack_contract.checkpoint_cadence import AUTO, checkpoint_interval_seconds  # noqa: E402
from trainstack_local.emulator import REGION, STATE_MACHINE_POLL_SECONDS, local_aws, training_files  # noqa: E402
from trainstack_local.event_feed import EventFeed  # noqa: E402
from trainstack_local.pipeline import finish, upload_sample_data  # noqa: E402
from trainstack_local.sagemaker_twin import InjectedFault, JobRun, SageMakerTwin, TwinSettings  # noqa: E402

TEMPLATE = ROOT / "cdk.out" / "trainstack.template.json"
HANG, TRANSPORT, SPOT = "hang", "transport error", "spot reclaim"
KINDS = (HANG, TRANSPORT, SPOT)
FIXED_INTERVALS = (10, 100, 1000)  # steps: 10x apart
STEP_TIMEOUT_SECONDS = 3  # the watchdog's limit: how long a hang holds the job before it fails
HOSTS = 2
SPOT_CAPACITY_WAIT_SECONDS = 1.0
STEP_LINE = re.compile(r"^step=(\d+) .*?step_time=([0-9.]+)", re.MULTILINE)
SAVED_LINE = re.compile(r"saved step_\d+ in ([0-9.]+) s")
CHECKPOINT_LINE = re.compile(r"^checkpoint step=(\d+)", re.MULTILINE)
POLL_SECONDS = 0.02


@dataclass(frozen=True)
class Failure:
    kind: str
    steps: int  # of training after the step the job resumed from (or after the failure before, within one job)


def failure_trace(mttf_steps: float, count: int, seed: int) -> list[Failure]:
    """Exponential gaps of mean `mttf_steps` steps, stratified in blocks of six draws (each block has
    one draw from each sixth of the distribution, in a shuffled order), and the kinds in shuffled
    blocks of three: a short run meets a representative sample of both."""
    rng = random.Random(seed)
    gaps: list[float] = []
    while len(gaps) < count:
        strata = list(range(6))
        rng.shuffle(strata)
        gaps += [-mttf_steps * math.log(1 - (stratum + rng.random()) / 6) for stratum in strata]
    kinds: list[str] = []
    while len(kinds) < count:
        block = list(KINDS)
        rng.shuffle(block)
        kinds += block
    return [Failure(kind, max(1, round(gap))) for kind, gap in zip(kinds[:count], gaps[:count], strict=True)]


@dataclass(frozen=True)
class JobFaults:
    """What one job meets of the trace from the step it resumes at: the spot reclaims (absolute
    steps) until its first failing fault, and that fault, whose index in the trace follows."""

    spot_steps: tuple[int, ...]
    failing: tuple[str, int] | None  # (kind, absolute step)
    next_index: int  # the trace's index after that failing fault


def job_faults(trace: list[Failure], index: int, resume_step: int) -> JobFaults:
    spots: list[int] = []
    step = resume_step
    for position in range(index, len(trace)):
        step += trace[position].steps
        if trace[position].kind == SPOT:
            spots.append(step)
            continue
        return JobFaults(tuple(spots), (trace[position].kind, step), position + 1)
    return JobFaults(tuple(spots), None, len(trace))


def fault_variable(kind: str, step: int) -> tuple[str, str, str | None]:
    """The script's fault hook for a failing kind: (variable, value, host)."""
    if kind == HANG:
        return fault_hooks.INJECT_HANG, f"1:{step}", "algo-2"  # rank 1, the second host's one process
    return fault_hooks.INJECT_TRANSPORT_ERROR, f"0:{step}", None


@dataclass
class Trial:
    """One configuration's run: its jobs, the faults given to each, and when each step line appeared."""

    label: str
    spec: dict[str, Any]
    execution: str
    job_names: list[str]  # the first job's, then each re-creation's, as the pipeline names them
    trace: list[Failure]
    next_index: int = 0
    spot_steps: dict[str, list[int]] = field(default_factory=dict)  # job -> absolute steps still to reclaim at
    seen: dict[tuple[str, int, int], float] = field(default_factory=dict)  # (job, attempt, step) -> monotonic time
    attempts_seen: set[tuple[str, int]] = field(default_factory=set)  # (job, attempt) that printed a step
    reclaimed: dict[str, int] = field(default_factory=dict)  # job -> its attempt last reclaimed
    created: dict[str, float] = field(default_factory=dict)  # job -> when it appeared
    failures: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    restart_seconds: list[float] = field(default_factory=list)  # each failure to the next first step
    _failed_at: float | None = None


class Bench:
    def __init__(self, twin: SageMakerTwin, stack: Any) -> None:
        self.twin = twin
        self.stack = stack
        self.trial: Trial | None = None
        self.lock = threading.Lock()

    # -- faults --------------------------------------------------------------------------------
    def give_faults(self, trial: Trial, job: str, resume_step: int) -> None:
        """The faults `job` meets from `resume_step`, before it is created."""
        faults = job_faults(trial.trace, trial.next_index, resume_step)
        trial.spot_steps[job] = list(faults.spot_steps)
        if faults.failing is not None:
            variable, value, host = fault_variable(*faults.failing)
            self.twin.inject(InjectedFault(job, variable, value, host, times=1))
        trial.next_index = faults.next_index

    def job_failed(self, job: str, reason: str | None) -> None:
        """A job of the running trial failed (the event feed, in the twin's job thread, before Describe
        can see it): the next job's faults go in now."""
        trial = self.trial
        if trial is None or job not in trial.job_names:
            return
        with self.lock:
            trial._failed_at = time.monotonic()
            trial.failures[HANG if reason and "StepTimeout" in reason else TRANSPORT] += 1
            following = trial.job_names[trial.job_names.index(job) + 1]
            self.give_faults(trial, following, self.resume_step(trial))

    def resume_step(self, trial: Trial) -> int:
        """The newest checkpoint any of the trial's jobs reported complete on every host."""
        steps = [0]
        for name in trial.job_names:
            run = self.twin.runs.get(name)
            if run is not None:
                steps += [int(step) for step in CHECKPOINT_LINE.findall(run.log("algo-1"))]
        return max(steps)

    # -- watching ------------------------------------------------------------------------------
    def watch(self, trial: Trial, done: threading.Event) -> None:
        """Time each step line as it appears, and reclaim spot capacity at the trace's steps."""
        offsets: dict[tuple[str, int], int] = {}
        while not done.is_set():
            for name in trial.job_names:
                run = self.twin.runs.get(name)
                if run is None:
                    continue
                trial.created.setdefault(name, time.monotonic())
                for index, attempt in enumerate(list(run.attempts)):
                    self._read(trial, run, index, attempt.root / "algo-1.log", offsets)
            time.sleep(POLL_SECONDS)

    def _read(self, trial: Trial, run: JobRun, attempt: int, log: Path, offsets: dict[tuple[str, int], int]) -> None:
        if not log.exists():
            return
        key = (run.name, attempt)
        with log.open("rb") as handle:
            handle.seek(offsets.get(key, 0))
            data = handle.read()
        complete = data[: data.rfind(b"\n") + 1]
        offsets[key] = offsets.get(key, 0) + len(complete)
        now = time.monotonic()
        for match in STEP_LINE.finditer(complete.decode(errors="replace")):
            step = int(match[1])
            if key not in trial.attempts_seen:
                trial.attempts_seen.add(key)
                if trial._failed_at is not None:  # this attempt's first step after a failure
                    trial.restart_seconds.append(now - trial._failed_at)
                    trial._failed_at = None
            trial.seen[(run.name, attempt, step)] = now
            with self.lock:
                spots = trial.spot_steps.get(run.name, [])
                if spots and step >= spots[0] and attempt > trial.reclaimed.get(run.name, -1):
                    spots.pop(0)
                    trial.reclaimed[run.name] = attempt  # once per attempt: its stop is under way
                    trial.failures[SPOT] += 1
                    trial._failed_at = now
                    self.twin.interrupt(run.name)


class TrialFeed(EventFeed):
    """The twin's event feed, silent, telling the bench when a job failed."""

    def __init__(self) -> None:
        super().__init__(write=lambda line: None)
        self.bench: Bench | None = None

    def job_status(self, job: str, status: str, secondary: str, failure_reason: str | None = None) -> None:
        super().job_status(job, status, secondary, failure_reason)
        if status == "Failed" and self.bench is not None:
            self.bench.job_failed(job, failure_reason)


# -- one configuration ----------------------------------------------------------------------------
def spec(label: str, steps: int, checkpoint_every: int | str, mttf_seconds: int) -> dict[str, Any]:
    return {
        "name": f"goodput-{label}",
        "instance_type": "ml.m5.xlarge",  # one process per host, two hosts
        "instance_count": HOSTS,
        "strategy": "ddp",
        "framework_version": "2.10.0",
        "hyperparameters": {
            "model": "gpt-tiny", "max_steps": steps, "log_every": 1, "seed": 0, "micro_batch_size": 4,
            "checkpoint_every": checkpoint_every, "async_checkpoint": False, "step_timeout": STEP_TIMEOUT_SECONDS,
        },
        "inputs": {"train": {"s3_uri": "s3://trainstack-local-trigger/datasets/default/sample/", "mode": "File"}},
        "spot": {"enabled": True, "max_wait": "2h"},
        "max_runtime": "2h",
        "restarts": {"max": 20},
        "mttf": f"{mttf_seconds}s",
    }  # fmt: skip


def run_trial(bench: Bench, label: str, job_spec: dict[str, Any], trace: list[Failure]) -> Trial:
    execution = f"{label}-{int(time.time())}"
    identity = Run(f"execution:{execution}").trial()
    prefix = bench.stack.context.name_prefix
    names = [identity.job_name(prefix, job_spec["name"], attempt) for attempt in range(30)]
    trial = Trial(label, job_spec, execution, names, trace)
    bench.trial = trial
    bench.give_faults(trial, names[0], 0)
    done = threading.Event()
    watcher = threading.Thread(target=bench.watch, args=(trial, done), daemon=True)
    watcher.start()
    sfn = boto3.client("stepfunctions", region_name=REGION)
    arn = sfn.start_execution(stateMachineArn=bench.stack.state_machine_arn, name=execution, input=json.dumps({"spec": job_spec}))
    outcome = finish(arn["executionArn"], timeout=3600)
    time.sleep(10 * POLL_SECONDS)  # the watcher reads the last lines
    done.set()
    watcher.join()
    bench.trial = None
    if outcome.status != "SUCCEEDED":
        raise SystemExit(f"bench: the {label} run ended {outcome.status}: {outcome.cause[:500]}")
    return trial


@dataclass(frozen=True)
class Measured:
    """One run's times. Two goodputs: `fraction` credits each step the same productive time in every
    run (the run without failures' median step), so the configurations rank by how soon they finished
    the same steps; `own_fraction` credits the run's own median step, the time the model is given, so
    it is what the prediction is compared with (two cores' noise moves a run's step time by a third:
    the first run's auto stepped at 30.7 ms, every-100 at 43.6 ms)."""

    step_seconds: float
    save_seconds: float
    interval_steps: str
    fraction: float
    own_fraction: float
    saves: int
    wall_seconds: float


def measure(bench: Bench, trial: Trial, steps: int, productive_step_seconds: float | None = None) -> Measured:
    """`productive_step_seconds`: what one step is worth in every run (Measured.fraction); the run's
    own median step where not given."""
    logs = "".join(bench.twin.runs[name].log("algo-1") for name in trial.job_names if name in bench.twin.runs)
    step_seconds = statistics.median(float(match[2]) for match in STEP_LINE.finditer(logs))
    saves = [float(seconds) for seconds in SAVED_LINE.findall(logs)]
    first = min(time for (_, _, step), time in trial.seen.items() if step == 1)
    last = min(time for (_, _, step), time in trial.seen.items() if step == steps)
    chosen = re.findall(r"checkpoint_every auto: every (\d+) steps", logs)
    steps_chosen = sorted({int(every) for every in chosen})
    interval = f"{steps_chosen[0]}-{steps_chosen[-1]}" if steps_chosen else str(trial.spec["hyperparameters"]["checkpoint_every"])
    wall = last - first
    worth = productive_step_seconds or step_seconds
    own = (steps - 1) * step_seconds / wall
    return Measured(step_seconds, statistics.median(saves), interval, (steps - 1) * worth / wall, own, len(saves), wall)


def predict(measured: Measured, checkpoint_every: int | str, mttf_steps: float, start_up: float, steps: int) -> float:
    """The model's effective-training fraction for this run's own step and save times."""
    mttf = mttf_steps * measured.step_seconds
    save = measured.save_seconds
    interval = (
        checkpoint_interval_seconds(save, mttf) if checkpoint_every == AUTO else int(checkpoint_every) * measured.step_seconds
    )
    failing_restarts = steps * measured.step_seconds / mttf * 2 / 3  # hangs and transport errors: a third each
    restart = pipeline_restart(failing_restarts, save, start_up, STATE_MACHINE_POLL_SECONDS, STATE_MACHINE_POLL_SECONDS).seconds
    kinds = (
        FailureKind(1 / 3, restart + STEP_TIMEOUT_SECONDS),  # a hang holds the job for the watchdog's limit first
        FailureKind(1 / 3, restart),
        FailureKind(1 / 3, SPOT_CAPACITY_WAIT_SECONDS + start_up + save, saves_first=True),
    )
    return expected_goodput(interval, save, mttf, kinds).effective_fraction


def calibrate(bench: Bench, steps: int) -> tuple[float, float]:
    """A run without failures or checkpoints before its last step: its median step time, and its
    start-up, from the job's creation to its first step."""
    job_spec = spec("calibration", steps, steps, 3600)
    trial = run_trial(bench, "calibration", job_spec, [])
    measured = measure(bench, trial, steps)
    job = trial.job_names[0]
    first_step = min(time for (name, _, _), time in trial.seen.items() if name == job)
    return measured.step_seconds, first_step - trial.created[job]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mttf", type=int, default=20, help="compressed mean time to failure, seconds of training")
    parser.add_argument("--steps", type=int, default=20000, help="optimizer steps of each run")
    parser.add_argument("--seed", type=int, default=0, help="the failure trace's seed")
    args = parser.parse_args(argv)
    if not TEMPLATE.is_file():
        raise SystemExit(f"{TEMPLATE}: not found; run `make synth` first")
    template = json.loads(TEMPLATE.read_text())
    workdir = Path(tempfile.mkdtemp(prefix="bench-goodput-"))
    feed = TrialFeed()
    settings = TwinSettings(spot_capacity_wait_seconds=SPOT_CAPACITY_WAIT_SECONDS)
    started = time.monotonic()
    with local_aws(template, workdir, files=training_files(workdir), settings=settings, feed=feed) as (stack, twin):
        upload_sample_data(stack)
        bench = Bench(twin, stack)
        feed.bench = bench
        step_seconds, start_up = calibrate(bench, min(args.steps, 500))
        mttf_steps = args.mttf / step_seconds
        trace = failure_trace(mttf_steps, 200, args.seed)
        rows = []
        for every in (AUTO, *FIXED_INTERVALS):
            label = "auto" if every == AUTO else f"every-{every}"
            job_spec = spec(label, args.steps, every, args.mttf)
            trial = run_trial(bench, label, job_spec, trace)
            measured = measure(bench, trial, args.steps, step_seconds)
            rows.append((every, trial, measured, predict(measured, every, mttf_steps, start_up, args.steps)))
    print_report(args, step_seconds, start_up, rows, time.monotonic() - started)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


def print_report(args: argparse.Namespace, step_seconds: float, start_up: float, rows: list[Any], elapsed: float) -> None:
    print(
        f"failure trace: MTTF {args.mttf} s of training ({args.mttf / step_seconds:,.0f} steps), seed {args.seed}; "
        f"gpt-tiny on {HOSTS} hosts x 1 process, {args.steps:,} steps, synchronous saves; a third each of hangs "
        f"(watchdog {STEP_TIMEOUT_SECONDS} s), transport errors and spot reclaims, the same trace for every run"
    )
    print(f"without failures: {step_seconds * 1000:.1f} ms per step; a job's start-up {start_up:.1f} s (creation to first step)")
    print(
        "goodput: the steps' productive time over the wall time from the first step to the last (restarts and "
        "steps trained again included); same-step: every run credited the failure-free median step (its ranking); "
        "own-step: the run's own median step (what the model is given, so what the prediction is set beside)"
    )
    header = (
        f"{'checkpoint_every':<18}{'interval (steps)':>18}{'step ms':>9}{'save s':>8}{'saves':>7}{'hang/transport/spot':>21}"
        f"{'restart s':>11}{'wall s':>8}{'same-step':>11}{'own-step':>10}{'predicted':>11}{'difference':>12}"
    )
    print(header)
    for every, trial, measured, predicted in rows:
        failures = "/".join(str(trial.failures[kind]) for kind in KINDS)
        restart = statistics.median(trial.restart_seconds) if trial.restart_seconds else 0.0
        print(
            f"{every!s:<18}{measured.interval_steps:>18}{measured.step_seconds * 1000:>9.1f}"
            f"{measured.save_seconds:>8.3f}{measured.saves:>7}{failures:>21}"
            f"{restart:>11.1f}{measured.wall_seconds:>8.0f}{measured.fraction:>11.1%}{measured.own_fraction:>10.1%}"
            f"{predicted:>11.1%}{(measured.own_fraction - predicted) * 100:>+11.1f}p"
        )
    auto = rows[0][2].fraction
    best_every, _, best, _ = max(rows[1:], key=lambda row: row[2].fraction)
    worst_gap = max(abs(measured.own_fraction - predicted) for _, _, measured, predicted in rows)
    print(f"auto / best fixed (every {best_every} steps), same-step goodput = {auto / best.fraction:.3f}")
    print(f"largest |own-step - predicted| = {worst_gap * 100:.1f} points; bench took {elapsed / 60:.1f} min")


if __name__ == "__main__":
    sys.exit(main())
