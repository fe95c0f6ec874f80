"""How a job spreads over its GPUs: the degrees the planner reasons about, from the resolved spec."""

from __future__ import annotations

from dataclasses import dataclass

from trainstack.facts import Instance


@dataclass(frozen=True)
class Layout:
    """`shard` ranks split parameters (FSDP2, SMP's hybrid shard group) or optimizer state (ZeRO-1);
    `tensor` ranks split each layer; the rest replicate. world = nodes x gpus_per_node."""

    strategy: str
    instance: Instance
    nodes: int
    gpus_per_node: int
    shard: int
    tensor: int = 1

    @property
    def world(self) -> int:
        return self.nodes * self.gpus_per_node

    @property
    def data_parallel(self) -> int:
        return self.world // self.tensor

    @property
    def replicas(self) -> int:
        """Copies of each shard (hybrid sharding's replication degree)."""
        return max(1, self.data_parallel // self.shard)

    @property
    def shards_parameters(self) -> bool:
        return self.strategy in ("fsdp", "smp")


def layout_of(strategy: str, instance: Instance, nodes: int, smp_parameters: dict, zero1: bool) -> Layout:
    gpus = max(instance.accelerators, 1)
    world = nodes * gpus
    if strategy == "smp":
        tensor = int(smp_parameters.get("tensor_parallel_degree", 1) or 1)
        hybrid = int(smp_parameters.get("hybrid_shard_degree", 0) or 0)
        return Layout(strategy, instance, nodes, gpus, shard=hybrid or world // tensor, tensor=tensor)
    if strategy == "fsdp" or zero1:
        return Layout(strategy, instance, nodes, gpus, shard=world)
    return Layout(strategy, instance, nodes, gpus, shard=1)
