"""What the built-in script needs of the image it runs on: the oldest torch for each strategy and
feature, and the packages it imports. Torch-free: Validate reads it before anything is billed
(trainstack.builtin_script), the script is written against it, and the tests run each strategy on
the oldest torch this table admits (tests/training, on the twin's image runtimes).

Each minimum says why. The features not listed need nothing newer than the base: fused AdamW
(`AdamW(fused=True)`, CUDA, torch 2.0), `torch.compile` (2.0), activation checkpointing and
offloading wrappers, ZeroRedundancyOptimizer and FSDP1 (SMP) all predate it.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainstack_contract.model_sizes import is_hf_model


@dataclass(frozen=True)
class Need:
    """One thing the script needs: a torch at least `torch`, or the package `package`."""

    what: str  # what needs it, as the spec says it: "strategy fsdp", "model hf:..."
    why: str
    torch: str = ""
    package: str = ""
    package_major: int = 0  # the package's oldest major release the script works with


# Every job checkpoints through DCP's get_state_dict/set_state_dict (checkpoint.py): public from 2.2.
BASE = Need("the built-in script", "its checkpoints use torch.distributed.checkpoint's state-dict API (torch 2.2)", torch="2.2")
STRATEGY_NEEDS: dict[str, Need] = {
    "fsdp": Need(
        "strategy fsdp",
        "FSDP2 runs without a GPU from torch 2.7; from 2.4 to 2.6 it runs on CUDA only, where it is untested",
        torch="2.7",
    ),
}
# model: hf: builds a transformers model; the project image installs the pinned transformers
# (image-requirements.txt), and that release needs torch 2.6 and Python 3.11.
HF_NEEDS = (
    Need(
        "model hf:",
        "no framework image installs transformers 5, the release the script is written for",
        package="transformers",
        package_major=5,
    ),
    Need("model hf:", "the pinned transformers needs torch 2.6", torch="2.6"),
)
# Optional: an older torch saves checkpoints synchronously, and the script says so once. async_save
# exists from 2.3, but until 2.7 its staging left CPU tensors uncopied, so a save of a model on the CPU
# (the twin's, a CPU-offloaded optimizer's state) wrote what the next steps changed (pytorch/pytorch#144657,
# fixed by #145408).
ASYNC_CHECKPOINT = Need("async_checkpoint", "DCP's async_save copies CPU tensors before it returns from torch 2.7", torch="2.7")


def needs(strategy: str, model: str) -> list[Need]:
    """What a job of this strategy and model needs of its image."""
    found = [BASE]
    if strategy in STRATEGY_NEEDS:
        found.append(STRATEGY_NEEDS[strategy])
    if is_hf_model(model):
        found += HF_NEEDS
    return found


def meets(torch_version: str, need: Need) -> bool:
    """Whether a torch of `torch_version` ("2.3.0", or torch.__version__ like "2.3.0+cu121") is new
    enough for `need`; a package need always is."""
    if not need.torch:
        return True
    wanted = [int(part) for part in need.torch.split(".")]
    have = [int(part) for part in torch_version.split("+")[0].split(".")[: len(wanted)]]
    return have >= wanted


def unmet_by_torch(torch_version: str, strategy: str, model: str) -> list[Need]:
    """What this torch lacks for the job (the script checks itself at start, for an image Validate
    could not see: your own `image`)."""
    return [need for need in needs(strategy, model) if not meets(torch_version, need)]
