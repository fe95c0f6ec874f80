"""When the loop saves a checkpoint: every `checkpoint_every` steps, or with `auto` at the interval
that loses least to saves and failures (trainstack_contract.checkpoint_cadence), in steps of the
step time this job measures.

`auto` needs the job's mean time to failure (the `mttf` hyperparameter, which the request builder
sets from the spec or the published per-GPU rate; else that rate over this job's processes, one per
GPU) and the time one save takes: the plan's estimate (`planned_save_seconds`) until this job has
timed a save of its own; with neither, it saves once as soon as its step time is known, to time it.
Rank 0 decides, on its own step and save times, and every rank takes its decision (a broadcast at the
first decision, once WARMUP_STEPS steps are timed, and after each save the loop makes), so every rank
saves at the same step. The interval is logged when it is chosen and whenever it changes.
"""

from __future__ import annotations

import logging
import statistics
from dataclasses import dataclass, field

from trainstack_contract.checkpoint_cadence import (
    SAVE_OVERHEAD_BOUND,
    checkpoint_interval_seconds,
    interval_steps,
    job_mttf_seconds,
    overhead_bound_seconds,
)
from trainstack_contract.config import TrainConfig
from trainstack_training import distributed
from trainstack_training.checkpoint import Checkpointer
from trainstack_training.watchdog import WARMUP_STEPS, Watchdog

log = logging.getLogger("trainstack")

# A new interval replaces the one in use only when it differs by more than this factor: the time lost
# is flat near the optimum (an interval 25% off it loses at most 2.5% more than the optimum does), and
# a save time or step time measured a little differently each time must not move the interval each save.
KEEP_WITHIN = 1.25


class FixedCadence:
    """Every `every` steps of the run (step numbers divisible by it, across restarts)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.times_next_save = False  # a fixed cadence has nothing to learn from a save

    def due(self, step: int) -> bool:
        return step % self.every == 0

    def saved(self, step: int) -> None:
        """Nothing to decide."""


@dataclass
class AutoCadence:
    """`checkpoint_every: auto`: see the module's docstring."""

    context: distributed.DistContext
    checkpointer: Checkpointer
    watchdog: Watchdog
    mttf_seconds: float
    mttf_source: str
    planned_save_seconds: float | None
    start_step: int  # where this run started (a resume's step): the first interval counts from it
    steps_between: int | None = None  # None until decided
    last_save_step: int = field(init=False)
    times_next_save: bool = False  # the next save is the one that times a save (synchronous)
    saves_timed: list[float] = field(default_factory=list)  # rank 0's, this run's
    _timed_step: int = -1

    def __post_init__(self) -> None:
        self.last_save_step = self.start_step

    @property
    def first_decision_step(self) -> int:
        """Once the watchdog has WARMUP_STEPS step intervals (the first step's includes start-up)."""
        return self.start_step + WARMUP_STEPS + 1

    def due(self, step: int) -> bool:
        """Whether this step saves; at the first decision step, a broadcast from rank 0 (every rank
        calls this at every step, so every rank is there)."""
        if self.steps_between is None:
            if step != self.first_decision_step:
                return False
            self._decide()
            if self.steps_between is None:  # no save time known: this save times one
                self.times_next_save = True
                return True
        return step - self.last_save_step >= self.steps_between

    def saved(self, step: int) -> None:
        """After every save the loop made at this step (every rank): decide again with its time."""
        self.last_save_step, self.times_next_save = step, False
        if step >= self.first_decision_step:
            self._decide()

    def _decide(self) -> None:
        proposal = self._proposal() if self.context.is_main else None
        self.steps_between = distributed.from_main(proposal, self.context)

    def _proposal(self) -> int | None:
        """Rank 0's interval in steps: from the save times it has measured (their median), else the plan's."""
        checkpointer = self.checkpointer
        if checkpointer.last_save_seconds is not None and checkpointer.last_saved_step != self._timed_step:
            self.saves_timed.append(checkpointer.last_save_seconds)
            self._timed_step = checkpointer.last_saved_step
        step_seconds = self.watchdog.median_step_seconds()
        if self.saves_timed:
            save, source = statistics.median(self.saves_timed), f"measured, median of {len(self.saves_timed)}"
        elif self.planned_save_seconds:
            save, source = self.planned_save_seconds, "the plan's estimate"
        else:
            log.info("checkpoint_every auto: no save time known yet; the checkpoint at this step times one")
            return None
        assert step_seconds is not None, "decisions come once WARMUP_STEPS steps are timed"
        steps = interval_steps(checkpoint_interval_seconds(save, self.mttf_seconds), step_seconds)
        if self.steps_between is not None and self.steps_between / KEEP_WITHIN <= steps <= self.steps_between * KEEP_WITHIN:
            return self.steps_between
        self._explain(steps, step_seconds, save, source)
        return steps

    def _explain(self, steps: int, step_seconds: float, save: float, source: str) -> None:
        interval = checkpoint_interval_seconds(save, self.mttf_seconds)
        bound = overhead_bound_seconds(save)
        why = (
            f"the {SAVE_OVERHEAD_BOUND:.0%} save-overhead bound ({bound:.3g} s), longer than Young/Daly's"
            if interval == bound
            else "Young/Daly's"
        )
        log.info(
            "checkpoint_every auto: every %d steps (%.3g s of training at %.3g s per step): %s sqrt(2 x save %.3g s (%s) "
            "x MTTF %.0f s (%s))%s",
            steps, steps * step_seconds, step_seconds, why, save, source, self.mttf_seconds, self.mttf_source,
            "" if self.steps_between is None else f"; was every {self.steps_between} steps",
        )  # fmt: skip


def checkpoint_cadence(
    config: TrainConfig, context: distributed.DistContext, checkpointer: Checkpointer, watchdog: Watchdog, start_step: int
) -> FixedCadence | AutoCadence:
    if isinstance(config.checkpoint_every, int):
        return FixedCadence(config.checkpoint_every)
    if config.mttf:
        mttf, source = config.mttf, "mttf"
    else:
        mttf, source = job_mttf_seconds(context.world_size), f"the per-GPU rate over {context.world_size} processes"
    return AutoCadence(context, checkpointer, watchdog, mttf, source, config.planned_save_seconds or None, start_step)
