"""Shared by the stand-ins: append one JSON line per call to $TRAINSTACK_STANDIN_LOG."""

import json
import os


def record(event: str, **details: object) -> None:
    with open(os.environ["TRAINSTACK_STANDIN_LOG"], "a") as log:
        log.write(json.dumps({"event": event, "rank": os.environ.get("RANK", "0"), **details}) + "\n")
