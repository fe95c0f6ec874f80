"""The training loop, in run order: bootstrap, data, model, strategy, optimizer, resume, steps,
checkpoints, export. Every strategy runs through this one loop."""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import platform
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch.distributed.optim import ZeroRedundancyOptimizer

from trainstack_training import distributed
from trainstack_training.checkpoint import Checkpointer, DataPosition, Progress, TrainingState, export_model
from trainstack_training.config import ConfigError, TrainConfig
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
from trainstack_training.health_rules import CHECKPOINT_AND_STOP
from trainstack_training.metrics import Throughput, format_line, open_tensorboard, peak_flops
from trainstack_training.model_sizes import GPT_SIZES, is_hf_model, is_language_model
from trainstack_training.models import build_model, save_model
from trainstack_training.models.hf import HFCausalLM
from trainstack_training.precision import autocast, grad_scaler
from trainstack_training.runtime_requirements import unmet_by_torch
from trainstack_training.strategies import builds_on_meta, parallelize
from trainstack_training.watchdog import Point, Watchdog

log = logging.getLogger("trainstack")
SAMPLE_DATA = Path(__file__).resolve().parent.parent / "sample_data"
ADAMW_BETAS = (0.9, 0.95)


def run(config: TrainConfig) -> str:
    """Train until max_steps (returns "completed") or a stop request (returns "stopped")."""
    _require_runtime(config)
    # Before the process group: the rendezvous and NCCL's first communicator are where jobs hang.
    watchdog = Watchdog(config, distributed.read_launch()).start()
    try:
        context = distributed.init_distributed(config)
        try:
            result = _train(config, context, watchdog)
            # Every rank is done before any destroys the group: rank 0 hosts the rendezvous store,
            # and a peer still in its last collective then aborts at exit (seen once under load).
            distributed.barrier(context)
            return result
        finally:
            distributed.shutdown(context)
    finally:
        watchdog.stop()


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


def _train(config: TrainConfig, context: distributed.DistContext, watchdog: Watchdog) -> str:
    if context.is_node_main:  # each host's log says what it runs on
        log.info("%s: runtime torch %s, Python %s", context.node_name, torch.__version__, platform.python_version())
    if context.is_main:
        log.info("config %s", config.to_json())
    torch.manual_seed(config.seed)  # the same initial weights on every rank that builds them
    language_model = is_language_model(config.model)
    model = build_model(config.model, on_meta=builds_on_meta(config, context))
    if context.is_main and isinstance(model, HFCausalLM):
        log.info("model %s: %s, %d parameters", config.model, model.source, model.num_parameters(exclude_embeddings=False))
    seq_len = config.seq_len or (model.context_length if language_model else 0)
    if language_model and seq_len > model.context_length:
        raise ConfigError(
            f"hyperparameter 'seq_len' = {seq_len}: longer than {config.model}'s context of {model.context_length} tokens; "
            "set seq_len at most that (0 takes the model's own)"
        )
    per_node = config.data_distribution == "ShardedByS3Key"
    dataset = _open_dataset(config, seq_len, model.vocab_size if language_model else 0, per_node)
    flops_per_token = model.flops_per_token(seq_len) if language_model else None

    parallel = parallelize(model, config, context)
    zero1 = config.zero1 and context.is_distributed
    fused = config.fused_adamw if config.fused_adamw is not None else context.device.type == "cuda"
    optimizer = _optimizer(parallel.module, config, zero1, fused)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: _lr_factor(step, config))
    scaler = grad_scaler(config.precision, context.device, sharded=parallel.shards_optimizer_state)
    # The fused AdamW kernel skips a step whose gradients are not finite on the device (the loss
    # scaler's found_inf), so the norm needs no trip to the host but on log steps.
    skip_on_device = fused and scaler is None
    nonfinite_at = torch.zeros((), dtype=torch.long, device=context.device)  # first such step; 0: none
    casts_itself = parallel.shards_optimizer_state  # FSDP casts through its mixed-precision policy

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
    checkpointer = Checkpointer(config.checkpoint_dir, config.keep_checkpoints, context)
    _resume(checkpointer, state, optimizer if zero1 else None, context, leads_data_set=reader == 0)

    shuffle = EpochShuffle(len(dataset), config.seed)
    stop = StopRequest().install()
    vote = distributed.StopVote(context)
    throughput = Throughput(flops_per_token, peak_flops(context.device, config.precision), context.world_size)
    job_batch = config.micro_batch_size * config.grad_accum * context.world_size  # examples per step, all nodes
    tensorboard = open_tensorboard(config.tensorboard_dir) if config.tensorboard_dir and context.is_main else None
    faults = FaultHooks.read(context.rank)  # test-only; nothing outside the twin
    faults.install(parallel.model.named_parameters(), layer_of)
    health = HealthMonitor(config.health_rules, fp16=config.precision == "fp16")
    replicas = _shard_replicas(config, context.world_size)
    parallel.module.train()
    while progress.step < config.max_steps:
        step = progress.step + 1  # as the metric lines number it
        distributed.seed_step(config.seed, progress.step, context)
        loss = torch.zeros((), device=context.device)
        for micro_step in range(config.grad_accum):
            watchdog.reached(Point.DATA, step, micro_step)
            faults.before_batch(step)
            inputs, targets = dataset.batch(micro_batch_indices(plan, shuffle, progress.data.position, micro_step))
            inputs, targets = inputs.to(context.device), targets.to(context.device)
            watchdog.reached(Point.COMPUTE, step, micro_step)
            last = micro_step == config.grad_accum - 1
            with (
                parallel.no_sync() if not last else contextlib.nullcontext(),
                autocast(config.precision, context.device, casts_itself),
            ):
                micro_loss = faults.loss(step, parallel.module(inputs, targets) / config.grad_accum)
                (scaler.scale(micro_loss) if scaler else micro_loss).backward()
            loss += micro_loss.detach()
        watchdog.reached(Point.OPTIMIZER, step)
        log_step = step % config.log_every == 0 or step == config.max_steps
        # On log steps only: one reduction of per-layer squares (on shards with FSDP2/SMP), before the
        # optimizer step clears the gradients; histograms every histogram_every steps on rank 0.
        watched = log_step and bool(health.settings)  # with every rule off, nothing is computed
        layer_norms = (
            layer_gradient_norms(parallel.model.named_parameters(), parallel.shards_optimizer_state, replicas) if watched else {}
        )
        if tensorboard and config.histogram_every and step % config.histogram_every == 0:
            tensorboard.histograms("weights", layer_tensors(parallel.model.named_parameters(), gradients=False), step)
            tensorboard.histograms("gradients", layer_tensors(parallel.model.named_parameters(), gradients=True), step)
        norm = _step(parallel.module, optimizer, scaler, config.grad_clip, skip_on_device)
        scheduler.step()
        progress.step += 1
        progress.data.position += plan.global_batch
        watchdog.step_completed(step)
        throughput.add(job_batch * (seq_len or 1))
        if skip_on_device:  # the norm stays on the device; its first nonfinite step is read at log steps
            nonfinite_at = torch.where((nonfinite_at == 0) & ~torch.isfinite(norm), step, nonfinite_at)
            verdicts = []
        else:  # the host already read the norm to decide the update
            verdicts = [v for v in [health.check_step(step, float(norm))] if v]

        if progress.step % config.log_every == 0 or progress.step == config.max_steps:
            mean_loss = distributed.all_reduce_mean(loss, context).item()
            grad_norm = float(norm)
            if skip_on_device and (first := int(nonfinite_at)):
                verdicts += [v for v in [health.check_step(first, float("nan"))] if v]
            rates = throughput.report()
            line = {"step": progress.step, "loss": mean_loss, "lr": scheduler.get_last_lr()[0], "grad_norm": grad_norm}
            line["tokens_per_sec" if language_model else "samples_per_sec"] = rates["rate"]
            line["step_time"] = rates["step_time"]
            if "mfu" in rates:
                line["mfu"] = rates["mfu"]
            if layer_norms:
                line["grad_norm_layer_min"] = min(layer_norms.values())
                line["grad_norm_layer_max"] = max(layer_norms.values())
            if context.is_main:
                print(format_line(line), flush=True)
            if tensorboard:
                tensorboard.write(line)
                tensorboard.write_layers("grad_norm", layer_norms, progress.step)
            loss_scale = scaler.get_scale() if scaler else None
            verdicts += health.check_interval(progress.step, mean_loss, grad_norm, layer_norms, loss_scale)
        for verdict in verdicts:
            if context.is_main:
                print(verdict.line(), flush=True)
        if ending := next((v for v in verdicts if v.ends_job), None):
            _end_for_health(ending, checkpointer, state, optimizer if zero1 else None, watchdog, tensorboard)

        if vote.any_rank(stop.requested):
            vote.close()
            with watchdog.slow_phase():
                path = checkpointer.save(state, optimizer if zero1 else None)
            if context.is_main:
                log.warning(
                    "stop requested (%s): saved %s at step %d, exiting", stop.signal_name or "SIGTERM", path, progress.step
                )
            if tensorboard:
                tensorboard.close()
            return "stopped"
        if progress.step % config.checkpoint_every == 0 or progress.step == config.max_steps:
            with watchdog.slow_phase():
                checkpointer.save(state, optimizer if zero1 else None)

    vote.close()
    with watchdog.slow_phase():
        description = _describe(config, seq_len)
        write = functools.partial(save_model, parallel.model, description=description)
        export_model(parallel.module, config.model_dir, write, context)
    if tensorboard:
        tensorboard.close()
    return "completed"


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


def _end_for_health(
    verdict: Verdict, checkpointer: Checkpointer, state: TrainingState, zero1_optimizer: Any, watchdog: Watchdog, tensorboard: Any
) -> None:
    """A rule that ends the job: checkpoint first if its action says so (every rank takes part),
    then fail with the rule, the step and the values as the job's failure reason."""
    if verdict.action == CHECKPOINT_AND_STOP:
        with watchdog.slow_phase():
            path = checkpointer.save(state, zero1_optimizer)
        log.warning("%s: saved %s", verdict.reason(), path)
    if tensorboard:
        tensorboard.close()
    raise HealthRuleTrippedError(verdict.reason())


def _shard_replicas(config: TrainConfig, world_size: int) -> int:
    """Copies of each parameter shard: SMP's hybrid sharding replicates its shard groups."""
    hybrid = int(config.smp_parameters.get("hybrid_shard_degree", 0) or 0) if config.strategy == "smp" else 0
    return world_size // hybrid if 1 < hybrid < world_size else 1


def _step(
    module: torch.nn.Module, optimizer: torch.optim.Optimizer, scaler: Any, grad_clip: float, skip_on_device: bool
) -> torch.Tensor:
    """Clip, then update unless the gradients are not finite (a NaN or infinite gradient would poison
    every weight it touches); returns the gradient norm, still on the device."""
    if scaler:
        scaler.unscale_(optimizer)
    clip = getattr(module, "clip_grad_norm_", None)  # FSDP1 needs its own (sharded) norm
    norm = clip(grad_clip) if clip else torch.nn.utils.clip_grad_norm_(module.parameters(), grad_clip)
    if hasattr(norm, "full_tensor"):  # FSDP2 returns a DTensor
        norm = norm.full_tensor()
    if scaler:
        scaler.step(optimizer)
        scaler.update()
    elif skip_on_device:
        inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer steps the AdamW it wraps
        inner.found_inf = (~torch.isfinite(norm)).to(torch.float32)
        optimizer.step()
    elif math.isfinite(float(norm)):  # the host decides: one sync per step (fused_adamw avoids it)
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm.detach()


def _resume(
    checkpointer: Checkpointer, state: TrainingState, zero1_optimizer: Any, context: distributed.DistContext, leads_data_set: bool
) -> None:
    """Load the step every host agreed on, then continue this node's data set where it stopped."""
    step = checkpointer.resume_step()
    if step is None:
        return
    path = checkpointer.load(step, state, zero1_optimizer)
    progress, current = state.progress, state.progress.data
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


def _describe(config: TrainConfig, seq_len: int) -> dict[str, Any]:
    layout = "transformers save_pretrained (safetensors)" if is_hf_model(config.model) else "torch state_dict (model.pt)"
    description: dict[str, Any] = {"model": config.model, "train_config": asdict(config), "format": layout}
    if config.model in GPT_SIZES:
        description["gpt"] = asdict(GPT_SIZES[config.model])
    if is_language_model(config.model):
        description["seq_len"] = seq_len
    return description
