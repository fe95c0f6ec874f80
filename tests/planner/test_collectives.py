"""The collective model against published nccl-tests all_reduce_perf bus bandwidth on two nodes.

Source: aws-samples/awsome-distributed-training, micro-benchmarks/nccl-tests/README.md ("Results",
commit 0162aacd5da07d424e13f44bef8dd2c4cfcc66e4): 2 x p4de.24xlarge (16 A100, EFA 4 x 100 Gbps)
and 2 x p5.48xlarge (16 H100, EFA 32 x 100 Gbps), out-of-place busbw at large messages, the sizes
where bandwidth, not latency, sets the time. Small messages are latency-bound and not claimed.
"""

from __future__ import annotations

import pytest

from trainstack.instances import CATALOG
from trainstack.planner.parallelism import Layout
from trainstack.planner.speed import bus_bandwidth

GIB = 1024**3
PUBLISHED = [  # (instance type, message bytes, busbw GB/s)
    ("ml.p4de.24xlarge", 1 * GIB, 76.79),
    ("ml.p4de.24xlarge", 2 * GIB, 78.33),
    ("ml.p5.48xlarge", 1 * GIB, 436.95),
    ("ml.p5.48xlarge", 4 * GIB, 465.87),
    ("ml.p5.48xlarge", 16 * GIB, 487.09),
]


@pytest.mark.parametrize(("instance_type", "size", "published"), PUBLISHED)
def test_two_node_all_reduce_bus_bandwidth_is_within_20_percent_of_nccl_tests(instance_type, size, published):
    layout = Layout("ddp", CATALOG[instance_type], nodes=2, gpus_per_node=8, shard=1)
    predicted = bus_bandwidth(layout, 16, size) / 1e9
    assert abs(predicted - published) <= 0.20 * published, (predicted, published)


def test_one_node_all_reduce_runs_at_nvlink_speed_and_two_nodes_no_faster():
    instance = CATALOG["ml.p4de.24xlarge"]
    one = bus_bandwidth(Layout("ddp", instance, nodes=1, gpus_per_node=8, shard=1), 8, GIB)
    two = bus_bandwidth(Layout("ddp", instance, nodes=2, gpus_per_node=8, shard=1), 16, GIB)
    assert two < one
