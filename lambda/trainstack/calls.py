"""How a read of many AWS calls makes each one: Validate asks each call again on its own while AWS
fails on its side (handlers.environment.asked_again), so one failing call of many never throws away
the others' answers; the CLI makes each call once. A botocore paginator cannot be asked page by page
(a failing page would start the listing over), hence `listed`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

# (what the call reads, the call) -> its answer
Ask = Callable[[str, Callable[[], Any]], Any]


def asked_once(subject: str, call: Callable[[], Any]) -> Any:
    """The call's answer; its error is the caller's."""
    return call()


def listed(ask: Ask, subject: str, list_call: Callable[..., dict[str, Any]], items: str, token: str) -> Iterator[Any]:
    """Each item of a paged listing (`items` in each page, the next page's `token`), each page asked for with `ask`."""
    following: dict[str, str] = {}
    while True:
        page = ask(subject, functools.partial(list_call, **following))
        yield from page[items]
        if not page.get(token):
            return
        following = {token: page[token]}
