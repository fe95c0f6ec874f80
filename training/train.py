"""trainstack's training entry point: one script for ddp, smddp, smp and fsdp.

Launch commands:
    # on a laptop or CI (CPU, gloo), on the shipped sample data
    torchrun --nproc_per_node 2 training/train.py --strategy ddp --model gpt-tiny --max_steps 20 --seed 0 --model_dir out/
    torchrun --nproc_per_node 2 training/train.py --strategy fsdp --model gpt-tiny --precision bf16 --max_steps 20
    python training/train.py --model mnist-cnn --max_steps 50            # one process, no process group

    # two hosts by hand: the same command on each, node_rank 0 and 1, each with its own checkpoint_dir
    torchrun --nnodes 2 --node_rank 0 --master_addr HOST0 --master_port 29500 --nproc_per_node 2 training/train.py ...
    # under Open MPI, as SageMaker's MPI launcher runs it (rank and master from the launcher's variables)
    mpirun -np 2 python -m mpi4py training/train.py --model gpt-tiny --max_steps 20

    # on SageMaker, the framework container runs it with the hyperparameters as --name value
    # (distribution torch_distributed -> torchrun; mpi -> mpirun; smdistributed.dataparallel -> smddp;
    # modelparallel -> smp)

Every start resumes from the newest checkpoint complete on every host in --checkpoint_dir
(/opt/ml/checkpoints, one per host), which is how spot restarts and retries continue. SIGTERM saves
a checkpoint and exits 0. A failure writes its reason to <output_dir>/failure (the job's
FailureReason), `rank <r>: <ExceptionType>: <message>`, and exits 1. Two failures are the
infrastructure's, tagged so that a restart can be chosen from the FailureReason alone
(trainstack_contract.failure_tags): a stall (no optimizer step within --step_timeout, derived from
step times by default) writes `rank <r>: StepTimeout: ...` after dumping every rank's stacks and
exits 75; a collective failing in the transport (NCCL, EFA, a peer that vanished) writes
`rank <r>: TransportError: <ExceptionType>: <message>` and exits 76.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the package beside this script, as in the container

from trainstack_contract import failure_tags
from trainstack_contract.config import ConfigError, TrainConfig, parse_config, requested_output_dir
from trainstack_training.distributed import read_launch
from trainstack_training.faults import is_transport_error, write_failure
from trainstack_training.health import HealthRuleTrippedError
from trainstack_training.trainer import run


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    output_dir = requested_output_dir(argv)
    try:
        config: TrainConfig = parse_config(argv)
        outcome = run(config)
    except ConfigError as error:
        return _fail(output_dir, f"invalid hyperparameters: {error}")
    except HealthRuleTrippedError as error:
        return _fail(output_dir, str(error))
    except Exception as error:  # any failure must reach FailureReason, then exit non-zero
        traceback.print_exc()
        if is_transport_error(error):
            reason = f"{failure_tags.TRANSPORT_ERROR}: {type(error).__name__}: {error}"
            return _fail(output_dir, reason, failure_tags.TRANSPORT_ERROR_EXIT_CODE)
        return _fail(output_dir, f"{type(error).__name__}: {error}")
    logging.getLogger("trainstack").info("training %s", outcome)
    return 0


def _fail(output_dir: str, reason: str, exit_code: int = 1) -> int:
    rank = read_launch().rank  # also before the bootstrap ran, under torchrun or mpirun
    print(f"trainstack: rank {rank}: {reason}", file=sys.stderr, flush=True)
    write_failure(output_dir, f"rank {rank}: {reason}")
    return exit_code


def leave(code: int) -> None:
    """Exit without the interpreter's finalization where nothing needs it. After a completed run the
    process group is destroyed, checkpoints and the model are written and closed, and the logs are
    flushed here; what finalization then tears down is c10d's C++ threads, and a 2-rank gloo job was
    seen aborting there ("terminate called without an active exception", SIGABRT after "training
    completed"), failing a job that had finished (pytorch/pytorch#179291 describes the same
    finalization race). Under mpirun, Open MPI requires MPI_Finalize, which mpi4py runs at exit, so
    that launch exits normally."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    if read_launch().launcher == "mpirun":
        sys.exit(code)
    os._exit(code)


if __name__ == "__main__":
    leave(main(sys.argv[1:]))
