"""Input channels against the data they name: a ShardedByS3Key channel needs at least one object per
instance. How many objects a prefix holds is asked of the caller (the Lambda supplies the S3 call)."""

from __future__ import annotations

from collections.abc import Callable

from trainstack.rules.problems import Problem
from trainstack.spec import JobSpec


def sharded_input_problems(spec: JobSpec, count_objects: Callable[[str], int]) -> list[Problem]:
    problems = []
    for name, channel in spec.inputs.items():
        if channel.distribution == "ShardedByS3Key":
            objects = count_objects(channel.s3_uri)
            if objects < spec.instance_count:
                problems.append(
                    Problem(
                        f"inputs.{name}.distribution",
                        "ShardedByS3Key",
                        f"{channel.s3_uri} holds {objects} objects for {spec.instance_count} instances: some would get no data",
                        f"split the data into at least {spec.instance_count} objects, or use FullyReplicated",
                    )
                )
    return problems
