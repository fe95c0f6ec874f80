"""Training health, evaluated inside the loop on values every rank already has: the rules of
health_rules.py, per-layer gradient norms, and weight and gradient histograms for TensorBoard.

No extra host syncs on ordinary steps: the gradient norm the optimizer step computes is already on
the host; per-layer norms are computed on log steps only (on shards with FSDP2 and SMP, reduced in
one all-reduce). Every rank evaluates the same numbers, so every rank trips the same rule at the
same step without agreeing through a collective.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import torch

from trainstack_contract.health_rules import CHECKPOINT_AND_STOP, STOP, RuleSetting
from trainstack_contract.metric_lines import health_line

# Wrapper prefixes that activation checkpointing, DDP, FSDP1 and torch.compile add to parameter names.
WRAPPERS = re.compile(r"(^|\.)(_checkpoint_wrapped_module|_offload_wrapped_module|_fsdp_wrapped_module|module|_orig_mod)\.")
# GPT's blocks.<i>; a Hugging Face model's ....layers.<i> (Llama, GPT-NeoX) or ....h.<i> (GPT-2, Falcon)
LAYER = re.compile(r"^((?:.*\.)?(?:blocks|layers|h)\.\d+)\.")
HISTOGRAM_VALUES = 65536  # values per histogram at most: bounded event files and time


class HealthRuleTrippedError(RuntimeError):
    """A rule whose action ends the job tripped; the message is the job's failure reason."""


@dataclass(frozen=True)
class Verdict:
    rule: str
    action: str
    step: int
    values: Mapping[str, float | str]

    def line(self) -> str:
        """The warning line (a MetricDefinition per rule publishes its step)."""
        return health_line(self.rule, self.step, self.action, " ".join(f"{k}={_number(v)}" for k, v in self.values.items()))

    def reason(self) -> str:
        values = ", ".join(f"{k}={_number(v)}" for k, v in self.values.items())
        return f"health rule {self.rule} tripped at step {self.step}: {values}"

    @property
    def ends_job(self) -> bool:
        return self.action in (CHECKPOINT_AND_STOP, STOP)


@dataclass
class HealthMonitor:
    settings: tuple[RuleSetting, ...]
    fp16: bool = False
    _norms: list[float] = field(default_factory=list)
    _vanishing: int = 0
    _best_loss: float = math.inf
    _since_best: int = 0

    def _rule(self, name: str) -> RuleSetting | None:
        return next((s for s in self.settings if s.name == name), None)

    def check_step(self, step: int, grad_norm: float) -> Verdict | None:
        """On the step's norm where the host read it to decide the update (every step), or, with the
        fused optimizer skipping on the device, on the first nonfinite step a log step finds. With fp16
        an infinite norm is an overflow the loss scaler skips; loss_scale_collapse watches those."""
        rule = self._rule("nonfinite")
        if rule and not self.fp16 and not math.isfinite(grad_norm):
            return Verdict(rule.name, rule.action, step, {"grad_norm": grad_norm})
        return None

    def check_interval(
        self, step: int, loss: float, grad_norm: float, layer_norms: Mapping[str, float], loss_scale: float | None
    ) -> list[Verdict]:
        """At a log step: the loss averaged over ranks, the step's gradient norm, per-layer norms."""
        verdicts = []
        if (rule := self._rule("nonfinite")) and not math.isfinite(loss):
            verdicts.append(Verdict(rule.name, rule.action, step, {"loss": loss}))
        if (rule := self._rule("exploding_gradients")) and math.isfinite(grad_norm):
            window = int(rule.parameters["window"])
            recent = self._norms[-window:]
            median = statistics.median(recent) if len(recent) == window else None
            if grad_norm > rule.parameters["threshold"]:
                verdicts.append(
                    Verdict(rule.name, rule.action, step, {"grad_norm": grad_norm, "threshold": rule.parameters["threshold"]})
                )
            elif median and grad_norm > rule.parameters["growth"] * median:
                verdicts.append(
                    Verdict(
                        rule.name,
                        rule.action,
                        step,
                        {"grad_norm": grad_norm, "median": median, "growth": rule.parameters["growth"]},
                    )
                )
            self._norms.append(grad_norm)
        if (rule := self._rule("vanishing_gradients")) and layer_norms:
            largest = max(layer_norms.values())
            weakest = min(layer_norms, key=lambda name: layer_norms[name])
            self._vanishing = (
                self._vanishing + 1 if largest > 0 and layer_norms[weakest] < rule.parameters["ratio"] * largest else 0
            )
            if self._vanishing >= rule.parameters["window"]:
                self._vanishing = 0
                verdicts.append(
                    Verdict(
                        rule.name,
                        rule.action,
                        step,
                        {"layer": weakest, "layer_grad_norm": layer_norms[weakest], "largest": largest},
                    )
                )
        if (rule := self._rule("loss_not_decreasing")) and math.isfinite(loss):
            if loss < self._best_loss - rule.parameters["min_delta"]:
                self._best_loss, self._since_best = loss, 0
            else:
                self._since_best += 1
                if self._since_best >= rule.parameters["window"]:
                    self._since_best = 0
                    verdicts.append(Verdict(rule.name, rule.action, step, {"loss": loss, "best": self._best_loss}))
        if (rule := self._rule("loss_scale_collapse")) and loss_scale is not None and loss_scale < rule.parameters["min_scale"]:
            verdicts.append(
                Verdict(rule.name, rule.action, step, {"loss_scale": loss_scale, "min_scale": rule.parameters["min_scale"]})
            )
        return verdicts


def layer_of(name: str) -> str:
    """The layer a parameter belongs to: its transformer block (`blocks.<i>`, `hf.model.layers.<i>`),
    or else the module that holds it (`wte`, `ln_f`, `hf.lm_head`...)."""
    name = WRAPPERS.sub(r"\1", name)
    match = LAYER.match(name)
    return match.group(1) if match else name.rsplit(".", 1)[0]


def layer_gradient_norms(
    named_parameters: Iterable[tuple[str, torch.nn.Parameter]], sharded: bool, replicas: int = 1
) -> dict[str, float]:
    """L2 norm of each layer's gradients. Sharded parameters (DTensor shards, FSDP1 flat views)
    hold only this rank's part: their squares are summed across ranks in one all-reduce (divided by
    the replicas of hybrid sharding, which hold the same shards)."""
    grads: list[torch.Tensor] = []
    owners: list[str] = []
    for name, parameter in named_parameters:
        if parameter.grad is None or not parameter.requires_grad:
            continue
        grad = parameter.grad.to_local() if hasattr(parameter.grad, "to_local") else parameter.grad
        if grad.numel():
            grads.append(grad.detach())
            owners.append(layer_of(name))
    if not grads:
        return {}
    # One fused kernel for every tensor's norm, as clip_grad_norm_ computes them.
    squares_per_tensor = torch.stack(torch._foreach_norm(grads)).float().pow(2)
    names = list(dict.fromkeys(owners))
    index = torch.tensor([names.index(owner) for owner in owners], device=squares_per_tensor.device)
    squares = torch.zeros(len(names), device=squares_per_tensor.device).index_add_(0, index, squares_per_tensor)
    if sharded and torch.distributed.is_initialized():
        torch.distributed.all_reduce(squares)
        squares = squares / replicas
    return dict(zip(names, squares.sqrt().tolist(), strict=True))


def layer_tensors(named_parameters: Iterable[tuple[str, torch.nn.Parameter]], gradients: bool) -> dict[str, torch.Tensor]:
    """Each layer's weights (or gradients) on this rank, flattened and thinned to HISTOGRAM_VALUES."""
    layers: dict[str, list[torch.Tensor]] = {}
    for name, parameter in named_parameters:
        tensor = parameter.grad if gradients else parameter
        if tensor is None:
            continue
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        layers.setdefault(layer_of(name), []).append(local.detach().float().flatten())
    thinned = {}
    for name, parts in layers.items():
        values = torch.cat(parts)
        stride = max(1, values.numel() // HISTOGRAM_VALUES)
        thinned[name] = values[::stride].cpu()
    return thinned


def _number(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:.6g}"
