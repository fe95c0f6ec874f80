"""The built-in models' named sizes and parameter shapes, without torch.

One source of truth for the model family: the trainer builds its modules from these configs
(models/), and the planner (trainstack.planner, in the Lambda, where torch is not installed) reads
the same shapes to count bytes per GPU. `parameter_shapes` lists what the modules register, in
their registration order; tests/training checks it against the real model built on the meta device.
"""

from __future__ import annotations

from dataclasses import dataclass

BYTE_VOCAB = 256  # the shipped sample data is byte-level
GPT2_VOCAB = 50304  # GPT-2's 50257 padded to a multiple of 64
MLP_EXPANSION = 4  # the GPT MLP's hidden width is 4 x n_embd


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head

    def parameter_shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        """Every distinct parameter (the tied lm_head shares wte's) with its shape."""
        d, hidden = self.n_embd, MLP_EXPANSION * self.n_embd
        shapes: list[tuple[str, tuple[int, ...]]] = [("wte.weight", (self.vocab_size, d)), ("wpe.weight", (self.block_size, d))]
        for index in range(self.n_layer):
            block = f"blocks.{index}"
            shapes += [
                (f"{block}.ln_1.weight", (d,)),
                (f"{block}.ln_1.bias", (d,)),
                (f"{block}.attn.qkv.weight", (3 * d, d)),
                (f"{block}.attn.proj.weight", (d, d)),
                (f"{block}.ln_2.weight", (d,)),
                (f"{block}.ln_2.bias", (d,)),
                (f"{block}.mlp.up.weight", (hidden, d)),
                (f"{block}.mlp.down.weight", (d, hidden)),
            ]
        return [*shapes, ("ln_f.weight", (d,)), ("ln_f.bias", (d,))]


GPT_SIZES: dict[str, GPTConfig] = {
    "gpt-tiny": GPTConfig(n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=BYTE_VOCAB),
    "gpt-small-bytes": GPTConfig(n_layer=4, n_head=4, n_embd=128, block_size=128, vocab_size=BYTE_VOCAB),
    "gpt-125m": GPTConfig(n_layer=12, n_head=12, n_embd=768, block_size=1024, vocab_size=GPT2_VOCAB),
    "gpt-350m": GPTConfig(n_layer=24, n_head=16, n_embd=1024, block_size=1024, vocab_size=GPT2_VOCAB),
    "gpt-1.3b": GPTConfig(n_layer=24, n_head=32, n_embd=2048, block_size=2048, vocab_size=GPT2_VOCAB),
    "gpt-7b": GPTConfig(n_layer=32, n_head=32, n_embd=4096, block_size=2048, vocab_size=GPT2_VOCAB),
}
CLASSIFIERS = ("mnist-cnn",)
MODEL_NAMES = (*GPT_SIZES, *CLASSIFIERS)

# `hf:<path>`: a Hugging Face causal LM from a config.json (random init) or a save_pretrained folder
# (its safetensors weights), read from local files only: a folder or .json file in the source dir, or
# an input channel's folder (/opt/ml/input/data/<channel>). Nothing is downloaded at run time.
HF_PREFIX = "hf:"
# The `model_type`s SMP v2's tsm.transform gives tensor parallelism (GPT-NeoX, Llama 2 and 3,
# Mistral, Mixtral): https://docs.aws.amazon.com/sagemaker/latest/dg/model-parallel-core-features-v2-tensor-parallelism.html
SMP_TENSOR_PARALLEL_MODEL_TYPES = ("gpt_neox", "llama", "mistral", "mixtral")


def is_hf_model(name: str) -> bool:
    return name.startswith(HF_PREFIX)


def hf_source(name: str) -> str:
    """The path an `hf:` model name points at."""
    return name.removeprefix(HF_PREFIX).strip()


def is_known_model(name: str) -> bool:
    return name in MODEL_NAMES or (is_hf_model(name) and bool(hf_source(name)))


def is_language_model(name: str) -> bool:
    return name in GPT_SIZES or is_hf_model(name)
