"""How the built-in script words a failure that is not the user's, so that the pipeline can tell
whose a failure is from the job's FailureReason alone (trainstack/failures.py reads these).

Every failure the script reports is `rank <r>: <Tag or exception type>: <detail>` in
`/opt/ml/output/failure` (SageMaker's FailureReason, first 1,024 characters). Two tags mark
failures of the infrastructure, each with an exit code of its own so that a launcher's summary and
the host's log say the same:

- the watchdog's `StepTimeout` (no optimizer step for far longer than steps take: a hang);
- `TransportError` (a collective failed in the transport: NCCL, EFA, or a peer that vanished).

Anything else the script writes is an exception's type name (the user's code, data, config) or a
health rule that tripped.
"""

STEP_TIMEOUT = "StepTimeout"
TRANSPORT_ERROR = "TransportError"

# Distinct from 1 (an ordinary failure) and from the shell's 126-165 (not found, killed by a signal);
# 75 is EX_TEMPFAIL in sysexits.h: "temporary failure, the user is invited to retry".
STEP_TIMEOUT_EXIT_CODE = 75
TRANSPORT_ERROR_EXIT_CODE = 76

# gloo reports a peer that vanished mid-collective as a plain RuntimeError (gloo/transport/tcp/pair.cc):
# "Connection closed by peer [<address>]" at end of file, "Read error [<address>]: " + strerror(ECONNRESET)
# when the connection was reset (a peer that exited with data unread, or its host). The script tags
# these as TRANSPORT_ERROR; the pipeline reads the same words in the reasons of scripts that do not.
GLOO_PEER_GONE = ("Connection closed by peer", "Connection reset by peer")
