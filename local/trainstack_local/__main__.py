"""`python -m trainstack_local`: run the default training job offline, as SageMaker would run it.

Today this is the container step of the pipeline: the real SageMaker training toolkit unpacks the
deterministic source tarball, launches `train.py` under torchrun with two CPU processes (gloo)
on the shipped sample data, and writes the model and the success marker into a local /opt/ml.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from trainstack_local import container

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from stacks.tarball import write_source_tarball  # noqa: E402

DEFAULT_JOB = {"model": "gpt-tiny", "strategy": "ddp", "max_steps": 20, "log_every": 5, "seed": 0}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None, help="where /opt/ml is emulated (default: a temporary folder)")
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="trainstack-local-"))
    source = write_source_tarball(ROOT / "training", workdir / "sourcedir.tar.gz")
    hyperparameters = container.encode_hyperparameters(
        {
            "sagemaker_program": "train.py",
            "sagemaker_submit_directory": str(source),
            "sagemaker_torch_distributed_enabled": True,
            "sagemaker_distribution_instance_groups": ["homogeneousCluster"],
            "sagemaker_mpi_num_of_processes_per_host": args.processes,
            "sagemaker_job_name": "trainstack-local",
            **DEFAULT_JOB,
            "checkpoint_dir": str(workdir / "checkpoints"),
        }
    )
    base = container.prepare(workdir / "opt" / "ml", hyperparameters, {"train": ROOT / "training" / "sample_data" / "tokens"})
    print(f"trainstack local: running {DEFAULT_JOB} under the SageMaker training toolkit in {base}", flush=True)
    result = container.run(base, {"OMP_NUM_THREADS": "1"})
    for line in (result.stdout + result.stderr).splitlines():
        if line.startswith(("step=", "torchrun ")) or " trainstack: " in line:
            print(line)
    if not result.succeeded:
        print(f"trainstack local: FAILED: {result.failure_reason or result.stderr[-2000:]}", file=sys.stderr)
        return 1
    print(f"trainstack local: model at {result.model_dir / 'model.pt'}, success marker at {result.output_dir / 'success'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
