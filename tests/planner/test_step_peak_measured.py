"""The planner's memory per GPU, less its framework overhead, against the peak of a whole training step
of one DDP process on CPU (nothing wraps the model: no gradient buckets). The peak is at the start of
backward, where no gradient exists yet and the loss's two fp32 gradients sit beside the log-probs,
or, with few tokens, at the end of backward (every gradient, no activation): not their sum."""

from __future__ import annotations

import pytest

from tests.planner.measuring import LLAMA, Job, planned, step_peak_bytes
from trainstack.planner.memory import FRAMEWORK_OVERHEAD_BYTES, memory_per_gpu

# Measured here: 0.997 to 1.026 of the peak. The gradients are 10% to 23% of these peaks; added to the
# activations, as the plan did before, it was 12% to 16% high.
WITHIN = 0.03


@pytest.mark.parametrize(
    ("job", "gradients_at_peak"),
    [(Job("gpt-small-bytes", 8), False), (Job(LLAMA, 4), False), (Job(LLAMA, 1), True)],
    ids=["gpt-small-bytes-mb8", "llama-mb4-backward-start", "llama-mb1-backward-end"],
)
def test_one_processs_step_peaks_where_the_planner_says(job, gradients_at_peak, tmp_path):
    measured = step_peak_bytes(job, tmp_path)
    workload, layout = planned(job)
    memory = memory_per_gpu(workload, layout)

    assert not memory.gradients_between_steps
    assert (memory.gradients > 0) == gradients_at_peak and (memory.activations == 0) == gradients_at_peak
    plan = memory.total - FRAMEWORK_OVERHEAD_BYTES
    assert abs(plan / measured - 1) <= WITHIN, (plan, measured)
