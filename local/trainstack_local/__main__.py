"""`python -m trainstack_local`: the whole pipeline offline, on the embedded default job.

Uploads the sample data and the default spec to the emulated trigger bucket; EventBridge starts
the synthesized state machine; its Lambdas validate the spec and create the training job; the
SageMaker twin runs it through the real training toolkit (a host with 2 emulated GPUs: torchrun
with 2 CPU processes); the
state machine polls it to completion and notifies. Needs the synthesized template (`make synth`).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import boto3

from trainstack_local.emulator import REGION, local_aws, training_files
from trainstack_local.pipeline import finish, training_jobs, upload_sample_data, wait_for_new_executions

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # the stacks package packs the training code as the stack does

DEFAULT_JOB = Path(__file__).resolve().parent / "default_job.yaml"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--template", type=Path, default=ROOT / "cdk.out" / "trainstack.template.json")
    parser.add_argument("--spec", type=Path, default=DEFAULT_JOB, help="the job spec to upload (default: the embedded one)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    if not args.template.exists():
        print(f"trainstack local: {args.template} is missing; run `make synth` first", file=sys.stderr)
        return 2
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="trainstack-local-"))
    template = json.loads(args.template.read_text())
    with local_aws(template, workdir, files=training_files(workdir)) as (stack, twin):
        upload_sample_data(stack)
        key = f"jobs/{args.spec.name}"
        boto3.client("s3", region_name=REGION).put_object(Bucket=stack.trigger_bucket, Key=key, Body=args.spec.read_bytes())
        print(f"trainstack local: uploaded s3://{stack.trigger_bucket}/{key}; EventBridge started the state machine", flush=True)
        (execution,) = wait_for_new_executions(stack, known=0)
        run = finish(execution)
        twin.wait()
        for job in training_jobs():
            job_run = twin.runs.get(job["TrainingJobName"])
            where = job_run.host_root("algo-1") if job_run and job_run.attempts else "-"
            name, status = job["TrainingJobName"], job["TrainingJobStatus"]
            print(f"trainstack local: training job {name}: {status} (algo-1 /opt/ml: {where})")
        print(f"trainstack local: execution {run.status}: {run.output or run.cause}")
        return 0 if run.status == "SUCCEEDED" else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
