"""The training loop, in the manner of torchtitan's Trainer: `build_trainer` makes the components
(model, optimizer, scheduler, data, checkpointing, stop vote, metrics, health rules, fault hooks) in
run order and resumes, and `Trainer.train` steps, logs, checks health, votes on stopping and
checkpoints until max_steps, then exports. Every strategy runs through this one loop."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn
from torch.distributed.optim import ZeroRedundancyOptimizer

from trainstack_contract.config import ConfigError, TrainConfig
from trainstack_contract.health_rules import CHECKPOINT_AND_STOP
from trainstack_contract.job_names import submitted_name
from trainstack_contract.metric_lines import format_line
from trainstack_contract.model_sizes import GPT_SIZES, is_hf_model, is_language_model
from trainstack_contract.runtime_requirements import ASYNC_CHECKPOINT, meets, unmet_by_torch
from trainstack_contract.sigterm import SIGTERM_GRACE_SECONDS
from trainstack_training import distributed
from trainstack_training.cadence import AutoCadence, FixedCadence, checkpoint_cadence
from trainstack_training.checkpoint import Checkpointer, DataPosition, Progress, TrainingState, export_model
from trainstack_training.data.images import ImageSet
from trainstack_training.data.sampler import EpochShuffle, ShardPlan, micro_batch_indices
from trainstack_training.data.tokens import DataError, TokenShards
from trainstack_training.faults import FaultHooks, StopRequest
from trainstack_training.health import (
    HealthMonitor,
    HealthRuleTrippedError,
    Verdict,
    layer_gradient_norms,
    layer_of,
    layer_tensors,
)
from trainstack_training.metrics import TensorBoardSink, Throughput, open_tensorboard, peak_flops, print_line
from trainstack_training.models import build_model, save_model
from trainstack_training.models.hf import HFCausalLM
from trainstack_training.precision import autocast, grad_scaler
from trainstack_training.strategies import builds_on_meta, parallelize
from trainstack_training.strategies.base import Parallelized
from trainstack_training.tracking import MlflowTracker, open_tracker
from trainstack_training.watchdog import Point, Watchdog

log = logging.getLogger("trainstack")
SAMPLE_DATA = Path(__file__).resolve().parent.parent / "sample_data"
ADAMW_BETAS = (0.9, 0.95)
# How long a failing job waits for a checkpoint save in flight before it exits: worth the steps it keeps
# (a gp2 volume writes 15 GiB in that time), short against the time a restart takes.
IN_FLIGHT_SAVE_WAIT_SECONDS = 120.0


def run(config: TrainConfig) -> str:
    """Train until max_steps (returns "completed") or a stop request (returns "stopped")."""
    _require_runtime(config)
    # Before the process group: the rendezvous and NCCL's first communicator are where jobs hang.
    watchdog = Watchdog(config, distributed.read_launch()).start()
    try:
        context = distributed.init_distributed(config)
        try:
            result = build_trainer(config, context, watchdog).train()
            # Every rank is done before any destroys the group: rank 0 hosts the rendezvous store,
            # and a peer still in its last collective then aborts at exit (seen once under load).
            # A slow phase: the other ranks wait here while rank 0 ends its MLflow run.
            with watchdog.slow_phase():
                distributed.barrier(context)
            return result
        finally:
            distributed.shutdown(context)
    finally:
        watchdog.stop()


@dataclass
class Batches:
    """This rank's share of each step's examples, in the seeded order of the data set."""

    dataset: TokenShards | ImageSet
    plan: ShardPlan
    shuffle: EpochShuffle

    def micro_batch(self, position: int, micro_step: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        inputs, targets = self.dataset.batch(micro_batch_indices(self.plan, self.shuffle, position, micro_step))
        return inputs.to(device), targets.to(device)


@dataclass
class Checkpointing:
    """What a checkpoint holds (model, optimizer, scheduler and progress as one DCP state) and where it
    goes; with zero1 the optimizer's partitions are saved beside DCP's files, not through it."""

    checkpointer: Checkpointer
    state: TrainingState
    zero1_optimizer: torch.optim.Optimizer | None

    def save(self, wait: bool = True) -> Path:
        return self.checkpointer.save(self.state, self.zero1_optimizer, wait=wait)

    def resume(self, context: distributed.DistContext, leads_data_set: bool) -> None:
        """Load the step every host agreed on, then continue this node's data set where it stopped."""
        step = self.checkpointer.resume_step()
        if step is None:
            return
        path = self.checkpointer.load(step, self.state, self.zero1_optimizer)
        progress, current = self.state.progress, self.state.progress.data
        saved = progress.every_data_set.get(progress.data_set)
        if context.is_node_main:
            position = saved.position if saved else 0
            log.info("%s: resumed from %s at step %d, example position %d", context.node_name, path, progress.step, position)
        if saved is None:
            if leads_data_set:
                log.warning(
                    "%s: data set %s is new to this checkpoint (it holds %s): reading it from its start",
                    context.node_name, progress.data_set, ", ".join(sorted(progress.every_data_set)) or "none",
                )  # fmt: skip
            return
        if leads_data_set:
            if saved.readers != current.readers:
                # The position counts examples of the data set, not per rank, so its ranks re-split each
                # step's examples from exactly where it stopped; nothing is skipped or repeated.
                log.warning(
                    "data-parallel degree changed from %d to %d: continuing at example %d with the global batch re-split",
                    saved.readers, current.readers, saved.position,
                )  # fmt: skip
            if saved.batch != current.batch:
                log.warning("global batch changed from %d to %d examples per step", saved.batch, current.batch)
        current.position = saved.position


@dataclass(frozen=True)
class StepOutcome:
    loss: torch.Tensor  # this rank's, summed over the micro-steps, still on the device
    grad_norm: torch.Tensor  # still on the device
    layer_norms: dict[str, float]  # per-layer gradient norms; empty but on log steps with a health rule on


@dataclass(frozen=True)
class LoggedValues:
    """What a log step read on the host: the loss averaged over ranks and the step's gradient norm."""

    loss: float
    grad_norm: float


@dataclass
class Trainer:
    """One rank's training run: its components, and the loop that drives them (`train`)."""

    config: TrainConfig
    context: distributed.DistContext
    watchdog: Watchdog
    parallel: Parallelized  # the module the loop runs, and the plain model inside it
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    scaler: torch.amp.GradScaler | None
    data: Batches
    checkpoint: Checkpointing
    cadence: FixedCadence | AutoCadence  # which steps save
    stop: StopRequest
    vote: distributed.StopVote
    throughput: Throughput
    tensorboard: TensorBoardSink | None  # rank 0's, with a tensorboard_dir
    tracker: MlflowTracker | None  # rank 0's, when the job's Environment names an MLflow tracking server
    faults: FaultHooks
    health: HealthMonitor
    seq_len: int
    # The fused AdamW kernel skips a step whose gradients are not finite on the device (the loss
    # scaler's found_inf), so the norm needs no trip to the host but on log steps.
    skip_on_device: bool
    nonfinite_at: torch.Tensor = field(init=False)  # with skip_on_device, the first such step; 0: none
    # rank 0: since the last save, or the last time-based save asked for (the answer comes a step later)
    interval_started: float = field(default_factory=time.monotonic)
    saved_at_step: int = -1  # the step of the last save this run started, the same on every rank

    def __post_init__(self) -> None:
        self.nonfinite_at = torch.zeros((), dtype=torch.long, device=self.context.device)

    @property
    def progress(self) -> Progress:
        return self.checkpoint.state.progress

    def train(self) -> str:
        """Step until max_steps ("completed", the model exported) or a stop request ("stopped", checkpointed).
        A failure first lets a save in flight complete (bounded), as a synchronous save would have."""
        try:
            outcome = self._train()
        except BaseException:
            self._complete_save_in_flight()
            self._close_tracker("FAILED")
            raise
        self._close_tracker("FINISHED" if outcome == "completed" else "KILLED")
        return outcome

    def _train(self) -> str:
        self.parallel.module.train()
        while self.progress.step < self.config.max_steps:
            step = self.progress.step + 1  # as the metric lines number it
            outcome = self.train_step(step)
            logged = self.log_metrics(step, outcome) if self._is_log_step(step) else None
            self.check_health(step, outcome, logged)
            agreed = self.agree()
            if agreed.stop:
                self.stop_with_checkpoint()
                return "stopped"
            # A time-based save asked for before a save the loop then made anyway is served by it (every
            # rank knows both steps: the answer comes `lag` steps after the question).
            due_by_time = agreed.save and self.saved_at_step < step - self.vote.lag
            due_by_steps = self.cadence.due(step)  # on every rank at every step: auto's decisions are collectives
            last = step == self.config.max_steps
            if due_by_steps or last or due_by_time:
                self.save_checkpoint(wait=last or self.cadence.times_next_save)  # the last one precedes the export
                if not last:
                    self.cadence.saved(step)
        self.export()
        return "completed"

    def train_step(self, step: int) -> StepOutcome:
        """grad_accum micro-batches of forward and backward, then one optimizer step."""
        distributed.seed_step(self.config.seed, self.progress.step, self.context)
        loss = torch.zeros((), device=self.context.device)
        for micro_step in range(self.config.grad_accum):
            loss += self.forward_backward(step, micro_step)
        self.watchdog.reached(Point.OPTIMIZER, step)
        layer_norms = self.observe_gradients(step)  # before the optimizer step clears them
        grad_norm = self.optimizer_step()
        self.scheduler.step()
        self.progress.step += 1
        self.progress.data.position += self.data.plan.global_batch
        self.watchdog.step_completed(step)
        examples = self.config.micro_batch_size * self.config.grad_accum * self.context.world_size  # per step, all nodes
        self.throughput.add(examples * (self.seq_len or 1))
        return StepOutcome(loss, grad_norm, layer_norms)

    def forward_backward(self, step: int, micro_step: int) -> torch.Tensor:
        """One micro-batch; gradients are synchronised on the last of the accumulation window only.
        Returns its loss, already divided by grad_accum."""
        self.watchdog.reached(Point.DATA, step, micro_step)
        self.faults.before_batch(step)
        inputs, targets = self.data.micro_batch(self.progress.data.position, micro_step, self.context.device)
        self.watchdog.reached(Point.COMPUTE, step, micro_step)
        last = micro_step == self.config.grad_accum - 1
        casts_itself = self.parallel.shards_optimizer_state  # FSDP casts through its mixed-precision policy
        with (
            self.parallel.no_sync() if not last else contextlib.nullcontext(),
            autocast(self.config.precision, self.context.device, casts_itself),
        ):
            loss = self.faults.loss(step, self.parallel.module(inputs, targets) / self.config.grad_accum)
            (self.scaler.scale(loss) if self.scaler else loss).backward()
        return loss.detach()

    def observe_gradients(self, step: int) -> dict[str, float]:
        """On log steps only: one reduction of per-layer squares (on shards with FSDP2/SMP); histograms
        every histogram_every steps on rank 0."""
        watched = self._is_log_step(step) and bool(self.health.settings)  # with every rule off, nothing is computed
        named = self.parallel.model.named_parameters
        replicas = _shard_replicas(self.config, self.context.world_size)
        layer_norms = layer_gradient_norms(named(), self.parallel.shards_optimizer_state, replicas) if watched else {}
        if self.tensorboard and self.config.histogram_every and step % self.config.histogram_every == 0:
            self.tensorboard.histograms("weights", layer_tensors(named(), gradients=False), step)
            self.tensorboard.histograms("gradients", layer_tensors(named(), gradients=True), step)
        return layer_norms

    def optimizer_step(self) -> torch.Tensor:
        """Clip, then update unless the gradients are not finite (a NaN or infinite gradient would poison
        every weight it touches); returns the gradient norm, still on the device."""
        module, optimizer, scaler = self.parallel.module, self.optimizer, self.scaler
        if scaler:
            scaler.unscale_(optimizer)
        clip = getattr(module, "clip_grad_norm_", None)  # FSDP1 needs its own (sharded) norm
        norm = clip(self.config.grad_clip) if clip else torch.nn.utils.clip_grad_norm_(module.parameters(), self.config.grad_clip)
        if hasattr(norm, "full_tensor"):  # FSDP2 returns a DTensor
            norm = norm.full_tensor()
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        elif self.skip_on_device:
            inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer steps the AdamW it wraps
            inner.found_inf = (~torch.isfinite(norm)).to(torch.float32)
            optimizer.step()
        elif math.isfinite(float(norm)):  # the host decides: one sync per step (fused_adamw avoids it)
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return norm.detach()

    def log_metrics(self, step: int, outcome: StepOutcome) -> LoggedValues:
        """The metric line (printed by rank 0) and its TensorBoard scalars."""
        mean_loss = distributed.all_reduce_mean(outcome.loss, self.context).item()
        grad_norm = float(outcome.grad_norm)
        rates = self.throughput.report()
        line = {"step": step, "loss": mean_loss, "lr": self.scheduler.get_last_lr()[0], "grad_norm": grad_norm}
        line["tokens_per_sec" if is_language_model(self.config.model) else "samples_per_sec"] = rates["rate"]
        line["step_time"] = rates["step_time"]
        if "mfu" in rates:
            line["mfu"] = rates["mfu"]
        if outcome.layer_norms:
            line["grad_norm_layer_min"] = min(outcome.layer_norms.values())
            line["grad_norm_layer_max"] = max(outcome.layer_norms.values())
        if self.context.is_main:
            print_line(format_line(line))
        if self.tensorboard:
            self.tensorboard.write(line)
            self.tensorboard.write_layers("grad_norm", outcome.layer_norms, step)
        if self.tracker:
            self.tracker.log_line(line)
        return LoggedValues(mean_loss, grad_norm)

    def check_health(self, step: int, outcome: StepOutcome, logged: LoggedValues | None) -> None:
        """Evaluate the health rules: on the step's gradient norm, and on a log step's values. Rank 0
        prints every verdict; one whose action ends the job ends it, on every rank at the same step."""
        verdicts: list[Verdict] = []
        if self.skip_on_device:  # the norm stays on the device; its first nonfinite step is read at log steps
            nonfinite = (self.nonfinite_at == 0) & ~torch.isfinite(outcome.grad_norm)
            self.nonfinite_at = torch.where(nonfinite, step, self.nonfinite_at)
        elif verdict := self.health.check_step(step, float(outcome.grad_norm)):  # the host already read it to decide the update
            verdicts.append(verdict)
        if logged:
            if self.skip_on_device and (first := int(self.nonfinite_at)) and (verdict := self.health.check_step(first, math.nan)):
                verdicts.append(verdict)
            loss_scale = self.scaler.get_scale() if self.scaler else None
            verdicts += self.health.check_interval(step, logged.loss, logged.grad_norm, outcome.layer_norms, loss_scale)
        for verdict in verdicts:
            if self.context.is_main:
                print_line(verdict.line())
            if self.tracker:
                self.tracker.log_event(verdict.rule, verdict.step)
        if ending := next((v for v in verdicts if v.ends_job), None):
            self.end_for_health(ending)

    def end_for_health(self, verdict: Verdict) -> NoReturn:
        """Checkpoint first if the rule's action says so (every rank takes part), then fail with the
        rule, the step and the values as the job's failure reason."""
        if verdict.action == CHECKPOINT_AND_STOP:
            path = self.save_checkpoint()
            log.warning("%s: saved %s", verdict.reason(), path)
        self._close_tensorboard()
        raise HealthRuleTrippedError(verdict.reason())

    def agree(self) -> distributed.Agreed:
        """The vote: whether any rank was asked to stop (SIGTERM) and whether a checkpoint is due by
        rank 0's clock (`checkpoint_interval`), the same answers on every rank."""
        interval, now = self.config.checkpoint_interval, time.monotonic()
        due = bool(interval) and self.context.is_main and now - self.interval_started >= interval
        if due:  # counted from the request: the answer arrives a step later, and must not be asked twice
            self.interval_started = now
        return self.vote.any_rank(self.stop.requested, due)

    def stop_with_checkpoint(self) -> None:
        """Save this step, unless the last save shows it cannot finish before SageMaker's SIGKILL: then
        the newest completed checkpoint is where the job resumes, and the log says so."""
        self.vote.close()
        checkpointer = self.checkpoint.checkpointer
        with self.watchdog.slow_phase():
            checkpointer.wait()  # a save in flight completes first: it may be the one a resume uses
        signal_name = self.stop.signal_name or "SIGTERM"
        left = distributed.from_main(self._grace_left() if self.context.is_main else None, self.context)
        if not save_fits_grace(checkpointer.last_save_seconds, left):
            if self.context.is_main:
                log.warning(
                    "stop requested (%s) at step %d: not saving, the last save took %.0f s and %.0f s of SageMaker's "
                    "%d s grace are left; a resume starts from step %d, the last completed checkpoint",
                    signal_name, self.progress.step, checkpointer.last_save_seconds, left, SIGTERM_GRACE_SECONDS,
                    checkpointer.last_saved_step,
                )  # fmt: skip
            self._close_tensorboard()
            return
        path = self.save_checkpoint()
        if self.context.is_main:
            log.warning("stop requested (%s): saved %s at step %d, exiting", signal_name, path, self.progress.step)
        self._close_tensorboard()

    def _complete_save_in_flight(self) -> None:
        """Its own gloo group may still work where the training group failed (a transport error, a
        health rule); a peer that is gone makes it fail, or the bound ends the wait."""
        try:
            self.checkpoint.checkpointer.wait(timeout=IN_FLIGHT_SAVE_WAIT_SECONDS)
        except Exception as error:  # the training failure is the one to report
            log.warning("the checkpoint save in flight did not complete (%s: %s); a restart resumes from the one before",
                        type(error).__name__, error)  # fmt: skip

    def _grace_left(self) -> float | None:
        """Seconds before SageMaker's SIGKILL, by rank 0's clock (None: rank 0 got no signal itself)."""
        if self.stop.received_at is None:
            return None
        return SIGTERM_GRACE_SECONDS - (time.monotonic() - self.stop.received_at)

    def save_checkpoint(self, wait: bool = True) -> Path:
        """A checkpoint of this step; with `wait` false (and asynchronous saves) the loop goes on once the
        state is in host memory, and the log says how long the loop stalled."""
        started = time.monotonic()
        self.saved_at_step, self.interval_started = self.progress.step, started  # the interval counts from any save
        with self.watchdog.slow_phase():
            path = self.checkpoint.save(wait=wait)
        if not wait and self.checkpoint.checkpointer.asynchronous and self.context.is_main:
            stalled = time.monotonic() - started
            log.info("step %d: checkpoint staged in %.3f s, writing in the background", self.progress.step, stalled)
        return path

    def export(self) -> None:
        """The trained model into model_dir, once every rank's last stop vote is in."""
        self.vote.close()
        with self.watchdog.slow_phase():
            description = _describe(self.config, self.seq_len)
            write = functools.partial(save_model, self.parallel.model, description=description)
            export_model(self.parallel.module, self.config.model_dir, write, self.context)
            if self.tracker:
                self.tracker.log_model(self.config.model_dir)
        self._close_tensorboard()

    def _is_log_step(self, step: int) -> bool:
        return step % self.config.log_every == 0 or step == self.config.max_steps

    def _close_tracker(self, status: str) -> None:
        """A slow phase: the last batch and the end of the run are requests to a server that may be
        slow (bounded by the tracker), with no step to show for them."""
        if self.tracker:
            with self.watchdog.slow_phase():
                self.tracker.close(status)

    def _close_tensorboard(self) -> None:
        if self.tensorboard:
            self.tensorboard.close()


def build_trainer(config: TrainConfig, context: distributed.DistContext, watchdog: Watchdog) -> Trainer:
    """The components in the order each needs the last. The resume comes before what only the loop
    uses: a SIGTERM then ends a resume at once, and the throughput clock leaves its time out."""
    if context.is_node_main:  # each host's log says what it runs on
        log.info("%s: runtime torch %s, Python %s", context.node_name, torch.__version__, platform.python_version())
    if context.is_main:
        log.info("config %s", config.to_json())
    model, seq_len = _build_model(config, context)
    language_model = is_language_model(config.model)
    per_node = config.data_distribution == "ShardedByS3Key"
    dataset = _open_dataset(config, seq_len, model.vocab_size if language_model else 0, per_node)
    flops_per_token = model.flops_per_token(seq_len) if language_model else None

    parallel = parallelize(model, config, context)
    zero1 = config.zero1 and context.is_distributed
    fused = config.fused_adamw if config.fused_adamw is not None else context.device.type == "cuda"
    optimizer = _optimizer(parallel.module, config, zero1, fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, config))
    scaler = grad_scaler(config.precision, context.device, sharded=parallel.shards_optimizer_state)

    # With ShardedByS3Key each node reads its own shard set, split over its own ranks only.
    reader, readers = context.data_split(per_node)
    plan = ShardPlan(reader, readers, config.micro_batch_size, config.grad_accum)
    if reader == 0:
        log.info(
            "%s: data set %s, %d examples, ranks reading it: %d (%s)",
            context.node_name, dataset.name, len(dataset), readers, config.data_distribution,
        )  # fmt: skip
    progress = Progress(data_set=dataset.name, data=DataPosition(readers=readers, batch=plan.global_batch))
    state = TrainingState(parallel.checkpointed, optimizer, scheduler, progress, optimizer_in_dcp=not zero1)
    asynchronous = _saves_asynchronously(config, context)
    checkpointer = Checkpointer(config.checkpoint_dir, config.keep_checkpoints, context, asynchronous=asynchronous)
    checkpoint = Checkpointing(checkpointer, state, optimizer if zero1 else None)
    checkpoint.resume(context, leads_data_set=reader == 0)

    return Trainer(  # arguments evaluate in this order
        config=config,
        context=context,
        watchdog=watchdog,
        parallel=parallel,
        optimizer=optimizer,
        scheduler=scheduler,
        scaler=scaler,
        data=Batches(dataset, plan, EpochShuffle(len(dataset), config.seed)),
        checkpoint=checkpoint,
        cadence=checkpoint_cadence(config, context, checkpointer, watchdog, start_step=progress.step),
        stop=StopRequest().install(),
        vote=distributed.StopVote(context),
        # before the throughput clock starts: opening the run is a few requests to the server
        # named as MlflowConfig names the run: trainstack's job name, also inside the team queue's AWSBatch<name><hex>
        tracker=open_tracker(config, submitted_name(os.environ.get("TRAINING_JOB_NAME", "local"))) if context.is_main else None,
        throughput=Throughput(flops_per_token, peak_flops(context.device, config.precision), context.world_size),
        tensorboard=open_tensorboard(config.tensorboard_dir) if config.tensorboard_dir and context.is_main else None,
        faults=FaultHooks.read(context.rank).install(parallel.model.named_parameters(), layer_of),  # test-only: the twin's
        health=HealthMonitor(config.health_rules, fp16=config.precision == "fp16"),
        seq_len=seq_len,
        skip_on_device=fused and scaler is None,
    )


def _require_runtime(config: TrainConfig) -> None:
    """Fail at once, naming the fix, on an image whose torch lacks what this job needs (Validate
    refuses such framework images before launch; your own `image` it cannot see)."""
    unmet = unmet_by_torch(torch.__version__, config.strategy, config.model)
    if unmet:
        need = unmet[0]
        raise ConfigError(
            f"{need.what} needs torch {need.torch} or newer ({need.why}); this image has torch {torch.__version__}: "
            f"use a framework_version of at least {need.torch}"
        )


def save_fits_grace(last_save_seconds: float | None, grace_left: float | None) -> bool:
    """Whether a save on SIGTERM can be expected to finish before SIGKILL: by this run's last save (none
    yet: try, there is nothing else to rely on) against what is left of the grace (unknown: try)."""
    return last_save_seconds is None or grace_left is None or last_save_seconds <= grace_left


def _saves_asynchronously(config: TrainConfig, context: distributed.DistContext) -> bool:
    """async_checkpoint where this image's torch does it right; otherwise synchronous saves, said once."""
    if not config.async_checkpoint:
        return False
    if meets(torch.__version__, ASYNC_CHECKPOINT):
        return True
    if context.is_main:
        log.info("torch %s: checkpoints are saved synchronously (%s)", torch.__version__, ASYNC_CHECKPOINT.why)
    return False


def _build_model(config: TrainConfig, context: distributed.DistContext) -> tuple[nn.Module, int]:
    """The model as this rank builds it, and the sequence length it trains on."""
    torch.manual_seed(config.seed)  # the same initial weights on every rank that builds them
    model = build_model(config.model, on_meta=builds_on_meta(config, context))
    if context.is_main and isinstance(model, HFCausalLM):
        log.info("model %s: %s, %d parameters", config.model, model.source, model.num_parameters(exclude_embeddings=False))
    language_model = is_language_model(config.model)
    seq_len = config.seq_len or (model.context_length if language_model else 0)
    if language_model and seq_len > model.context_length:
        raise ConfigError(
            f"hyperparameter 'seq_len' = {seq_len}: longer than {config.model}'s context of {model.context_length} tokens; "
            "set seq_len at most that (0 takes the model's own)"
        )
    return model, seq_len


def _open_dataset(config: TrainConfig, seq_len: int, vocab_size: int, per_node: bool) -> TokenShards | ImageSet:
    if not is_language_model(config.model):
        if per_node:
            raise DataError("ShardedByS3Key would split images.npy from labels.npy: give the image channel FullyReplicated")
        return ImageSet(Path(config.data_dir) if config.data_dir else SAMPLE_DATA / "digits")
    directory = Path(config.data_dir) if config.data_dir else SAMPLE_DATA / "tokens"
    try:
        return TokenShards(directory, seq_len, vocab_size)
    except DataError as error:
        if not per_node:
            raise
        raise DataError(
            f"{error}; with ShardedByS3Key each host receives about 1/N of the channel's objects, markers included: "
            "give the channel several token shards per host"
        ) from error


def _optimizer(module: torch.nn.Module, config: TrainConfig, zero1: bool, fused: bool) -> torch.optim.Optimizer:
    """AdamW without weight decay on biases and norms; with zero1, each rank keeps only the AdamW
    state of its own partition of the parameters (ZeRO stage 1)."""
    decay = [p for p in module.parameters() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in module.parameters() if p.requires_grad and p.dim() < 2]
    options: dict[str, Any] = {"lr": config.lr, "betas": ADAMW_BETAS}
    if fused:
        options["fused"] = True
    if zero1:
        optimizer = ZeroRedundancyOptimizer(decay, optimizer_class=torch.optim.AdamW, weight_decay=config.weight_decay, **options)
        optimizer.add_param_group({"params": no_decay, "weight_decay": 0.0})
        return optimizer
    groups = [{"params": decay, "weight_decay": config.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, **options)


def _lr_factor(step: int, config: TrainConfig) -> float:
    """Linear warmup, then cosine decay to min_lr at max_steps."""
    if step < config.warmup_steps:
        return (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.max_steps - config.warmup_steps)
    floor = config.min_lr / config.lr
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(progress, 1.0)))


def _shard_replicas(config: TrainConfig, world_size: int) -> int:
    """Copies of each parameter shard: SMP's hybrid sharding replicates its shard groups."""
    hybrid = int(config.smp_parameters.get("hybrid_shard_degree", 0) or 0) if config.strategy == "smp" else 0
    return world_size // hybrid if 1 < hybrid < world_size else 1


def _describe(config: TrainConfig, seq_len: int) -> dict[str, Any]:
    layout = "transformers save_pretrained (safetensors)" if is_hf_model(config.model) else "torch state_dict (model.pt)"
    description: dict[str, Any] = {"model": config.model, "train_config": asdict(config), "format": layout}
    if config.model in GPT_SIZES:
        description["gpt"] = asdict(GPT_SIZES[config.model])
    if is_language_model(config.model):
        description["seq_len"] = seq_len
    return description
