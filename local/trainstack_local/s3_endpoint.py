"""The twin's S3 as a training job's containers reach it: moto's S3 served on SERVICE_ADDRESS (hosts.py),
the one address of this machine the job's hosts have a route to, as a job in the stack's isolated
subnets reaches S3 through the VPC's gateway endpoint. The twin gives each container its job's role's
credentials and this endpoint (AWS_ENDPOINT_URL_S3), and S3 decides each request by the role's
policies (bridges.role_checked_s3, iam_twin.py).

It answers only requests signed with credentials STS issued: the twin's own keys are the platform's,
never a job's, so a request signed with any other key is refused as S3 refuses a key it does not know
(InvalidAccessKeyId), and an unsigned one as S3 refuses an anonymous caller of a private bucket
(AccessDenied).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote

from trainstack_local import iam_twin
from trainstack_local.hosts import service_address

_CREDENTIAL = re.compile(r"Credential=([^/,\s&]+)/")
_REFUSALS = {
    "InvalidAccessKeyId": "The AWS Access Key Id you provided does not exist in our records.",
    iam_twin.ACCESS_DENIED: "Access Denied",
}

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


@contextmanager
def s3_endpoint(account: str) -> Iterator[str]:
    """Serve moto's S3 on SERVICE_ADDRESS (a free port) until the block ends; yields its URL."""
    from moto.moto_server.werkzeug_app import MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    with service_address() as address:
        server = make_server(
            address, 0, roles_only(create_backend_app("s3"), account), threaded=True, request_handler=MotoRequestHandler
        )
        thread = threading.Thread(target=server.serve_forever, name="trainstack-twin-s3", daemon=True)
        thread.start()
        try:
            yield f"http://{address}:{server.server_port}"
        finally:
            server.shutdown()
            thread.join()
            server.server_close()


def roles_only(app: WsgiApp, account: str) -> WsgiApp:
    """Pass on the requests signed with a role's STS credentials; refuse the others as S3 does."""

    def answered(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        found = _CREDENTIAL.search(environ.get("HTTP_AUTHORIZATION", "")) or _CREDENTIAL.search(
            unquote(environ.get("QUERY_STRING", ""))
        )
        if found and iam_twin.assumed_role(account, found.group(1)):
            return app(environ, start_response)
        code = "InvalidAccessKeyId" if found else iam_twin.ACCESS_DENIED
        start_response("403 Forbidden", [("Content-Type", "application/xml")])
        return [f"<Error><Code>{code}</Code><Message>{_REFUSALS[code]}</Message></Error>".encode()]

    return answered
