"""What the tests share besides fixtures: events to post, and waiting for a state."""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import pytest

from herald_client.types import Event

T = TypeVar("T")


def a_phone() -> str:
    """A number of its own for each test, so one test's suppression never touches another's."""
    return "+97798" + "".join(secrets.choice("0123456789") for _ in range(8))


def an_event(
    phone: str,
    *,
    entity_id: str | None = None,
    occurred_at: str = "2026-11-29T10:15:00+05:45",
    total: str = "1,20,000",
) -> Event:
    """A `purchase_order.approved` for one recipient by SMS, about an order of its own."""
    number = entity_id or "PO-" + secrets.token_hex(4)
    return {
        "type": "purchase_order.approved",
        "entity": {"type": "purchase_order", "id": number, "version": 3},
        "occurred_at": occurred_at,
        "data": {"po": {"number": number, "total": total}, "approver": {"name": "Asha"}},
        "recipients": [{"id": "u-" + secrets.token_hex(4), "phone": phone}],
    }


def entity_of(event: Event) -> str:
    return f"{event['entity']['type']}:{event['entity']['id']}"


async def wait_for(what: str, probe: Callable[[], Awaitable[T | None]], seconds: float = 20.0) -> T:
    """Polls `probe` until it returns something, or fails naming `what` after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        seen = await probe()
        if seen is not None:
            return seen
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting for {what} after {seconds}s")
        await anyio.sleep(0.05)
