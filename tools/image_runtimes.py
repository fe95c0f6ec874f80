"""Build the image runtimes the twin and the tests run jobs on, before anything waits for them.

    .venv/bin/python tools/image_runtimes.py            # every one `make test` uses
    .venv/bin/python tools/image_runtimes.py --default  # the default job's only (`make local`)

A job in the twin builds its image's runtime on first start anyway (trainstack_local.runtimes);
building them here first keeps minutes of downloads out of any one test's time limit. The images
the tests use are derived, not listed: for each of the built-in script's strategies the oldest and
the newest image Validate accepts (the rule Validate applies), the default job's image, and the
project image (its base plus its Dockerfile's packages).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from trainstack import facts
from trainstack.builtin_script import STRATEGY_IMAGES, runnable_versions
from trainstack.facts import ImageKind
from trainstack.images import TORCH_DISTRIBUTED, resolve
from trainstack_local import runtimes
from trainstack_local.registry import TwinImage, framework_image, project_image

ROOT = Path(__file__).resolve().parents[1]


def oldest_and_newest(strategy: str) -> list[tuple[ImageKind, str]]:
    """The first and the last image Validate accepts for the built-in script with this strategy."""
    kind, launcher = STRATEGY_IMAGES[strategy]
    accepted = runnable_versions(kind, frozenset({launcher}), strategy, "gpt-tiny")
    return [(kind, version) for version in dict.fromkeys([accepted[0], accepted[-1]])]


def default_job_image() -> TwinImage:
    """The default job leaves framework_version out: the newest PyTorch training image."""
    resolution = resolve("dlc", frozenset({TORCH_DISTRIBUTED}), None)
    assert resolution is not None, "the facts file lists no PyTorch training image"
    return framework_image(facts.image_version("dlc", resolution.version).runtime)


def tested_images() -> list[TwinImage]:
    pairs = dict.fromkeys(pair for strategy in STRATEGY_IMAGES for pair in oldest_and_newest(strategy))
    return [
        default_job_image(),
        *(framework_image(facts.image_version(kind, version).runtime) for kind, version in pairs),
        project_image(ROOT / "training" / "Dockerfile"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--default", action="store_true", help="only the default job's image (what make local runs)")
    args = parser.parse_args()
    seen = set()
    for image in [default_job_image()] if args.default else tested_images():
        packages = runtimes.image_packages(image.runtime, image.extra_packages)
        if (key := repr((image.runtime, packages))) in seen:
            continue
        seen.add(key)
        started = time.monotonic()
        runtime = runtimes.ensure(image.runtime, image.extra_packages)
        took = time.monotonic() - started
        built = f"; built in {took:.0f} s" if took > 5 else ""
        print(f"image runtime: {runtime.describe()}; {', '.join(packages) or 'no other packages'}{built}", flush=True)


if __name__ == "__main__":
    main()
