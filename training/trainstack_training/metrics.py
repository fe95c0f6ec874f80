"""What the metric lines report: throughput, MFU and TensorBoard scalars. The lines' format and the
regexes SageMaker reads them with are the contract's (trainstack_contract.metric_lines).

`mfu=` appears only where the accelerator's peak FLOP/s for the run's precision is known:
a guessed peak gives a wrong number, which is worse than none.
"""

from __future__ import annotations

import logging
import sys
import time

import torch

# Dense peak FLOP/s per GPU by (device-name fragment, precision), from vendor data sheets.
# fp32 matmuls run on TF32 tensor cores only when allowed; otherwise the plain FP32 peak applies.
PEAK_FLOPS: dict[tuple[str, str], float] = {
    ("H200", "bf16"): 989e12,
    ("H200", "fp16"): 989e12,
    ("H100", "bf16"): 989e12,
    ("H100", "fp16"): 989e12,
    ("H100", "tf32"): 494e12,
    ("H100", "fp32"): 67e12,
    ("A100", "bf16"): 312e12,
    ("A100", "fp16"): 312e12,
    ("A100", "tf32"): 156e12,
    ("A100", "fp32"): 19.5e12,
    ("A10G", "bf16"): 70e12,
    ("A10G", "fp16"): 70e12,
    ("L4", "bf16"): 121e12,
    ("L4", "fp16"): 121e12,
    ("V100", "fp16"): 125e12,
    ("V100", "fp32"): 15.7e12,
    ("T4", "fp16"): 65e12,
}


def peak_flops(device: torch.device, precision: str) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    if precision == "fp32" and torch.backends.cuda.matmul.allow_tf32:
        precision = "tf32"
    for (fragment, kind), flops in PEAK_FLOPS.items():
        if fragment in name and kind == precision:
            return flops
    return None


class Throughput:
    """Tokens (or samples) per second and MFU over the last log interval."""

    def __init__(self, flops_per_token: float | None, peak: float | None, world_size: int) -> None:
        self.flops_per_token = flops_per_token
        self.peak = peak
        self.world_size = world_size
        self._start = time.perf_counter()
        self._units = 0
        self._steps = 0

    def add(self, units: int) -> None:
        self._units += units
        self._steps += 1

    def report(self) -> dict[str, float]:
        elapsed = max(time.perf_counter() - self._start, 1e-9)
        rate = self._units / elapsed
        values = {"rate": rate, "step_time": elapsed / max(self._steps, 1)}
        if self.flops_per_token and self.peak:
            values["mfu"] = rate * self.flops_per_token / (self.peak * self.world_size)
        self._start, self._units, self._steps = time.perf_counter(), 0, 0
        return values


def print_line(text: str) -> None:
    """A metric line to stdout in one write: print's text and newline are two, between which another
    thread's output (the checkpoint writer's) or another process's on the same log (the container
    entry's) can land and break the line its MetricDefinitions regex reads."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def open_tensorboard(directory: str) -> TensorBoardSink | None:
    """TensorBoard event files in `directory`, or None with one warning where the image has no
    tensorboard package (the PyTorch 2.1.0 training image has none): the run goes on without them."""
    try:
        return TensorBoardSink(directory)
    except ImportError as error:
        logging.getLogger("trainstack").warning("no TensorBoard files: this image lacks the tensorboard package (%s)", error)
        return None


class TensorBoardSink:
    """Scalars to TensorBoard event files (rank 0). SageMaker uploads `/opt/ml/output/tensorboard`
    when the job has a TensorBoardOutputConfig; the request builder points `tensorboard_dir` there."""

    def __init__(self, directory: str) -> None:
        from torch.utils.tensorboard import SummaryWriter  # lazy: the tensorboard package is optional

        self._writer = SummaryWriter(log_dir=directory)

    def write(self, values: dict[str, float | int]) -> None:
        step = int(values["step"])
        for key, value in values.items():
            if key != "step":
                self._writer.add_scalar(f"train/{key}", value, step)
        self._writer.flush()

    def write_layers(self, name: str, values: dict[str, float], step: int) -> None:
        """One scalar per layer, e.g. grad_norm/blocks.3."""
        for layer, value in values.items():
            self._writer.add_scalar(f"{name}/{layer}", value, step)

    def histograms(self, name: str, tensors: dict[str, torch.Tensor], step: int) -> None:
        for layer, values in tensors.items():
            self._writer.add_histogram(f"{name}/{layer}", values, step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()
