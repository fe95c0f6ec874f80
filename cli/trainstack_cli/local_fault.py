"""`trainstack local fault`: rehearse a failure on the served twin (`trainstack local serve`), to watch
what trainstack does about it before it happens on AWS. The served twin takes it over HTTP on its own
endpoint, signed with the access key it printed (trainstack_local/rehearsal.py holds the faults)."""

from __future__ import annotations

import argparse
import json
import os
import urllib.error
import urllib.request

from trainstack_cli.stack import EXIT_BAD_INPUT, EXIT_NO_STACK, EXIT_OK, CliError
from trainstack_local.rehearsal import ACCESS_KEY_HEADER, FAULT_PATH


def rehearse(args: argparse.Namespace) -> int:
    endpoint, key = os.environ.get("AWS_ENDPOINT_URL"), os.environ.get("AWS_ACCESS_KEY_ID")
    if not endpoint or not key:
        raise CliError(
            "no served twin: run `trainstack local serve` and export the variables it prints (AWS_ENDPOINT_URL, ...)",
            EXIT_NO_STACK,
        )
    given = {"kind": args.kind, "target": args.target, "code": args.code, "for": args.for_, "times": args.times}
    given.update(fail=args.fail, every=args.every, rank=args.rank, step=args.step, host=args.host)
    body = {name: value for name, value in given.items() if value is not None}
    request = urllib.request.Request(
        endpoint.rstrip("/") + FAULT_PATH,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", ACCESS_KEY_HEADER: key},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            print(f"trainstack local fault: {json.loads(answer.read())['done']}")
            return EXIT_OK
    except urllib.error.HTTPError as error:
        reason = json.loads(error.read() or b"{}").get("error") or error.reason
        raise CliError(str(reason), EXIT_BAD_INPUT) from None
    except (urllib.error.URLError, OSError) as error:
        raise CliError(
            f"the served twin at {endpoint} does not answer ({error}); is `trainstack local serve` running?", EXIT_NO_STACK
        ) from None
