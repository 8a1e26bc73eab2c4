"""Retries against a live Herald behind a proxy that answers 503 or 429 or drops
a connection first: what is retried, how long the client waits, and what never is."""

from __future__ import annotations

import socket
import time
from email.utils import formatdate

import pytest
from conftest import Connect
from fakes import Fault, FlakyProxy
from support import a_phone, an_event

from herald_client import EventConflict, HeraldConnectionError, RetryPolicy, ServerError

pytestmark = pytest.mark.anyio

EVENTS = ("POST", "/v1/events")


async def test_a_503_is_retried_after_its_retry_after(connect: Connect, proxy: FlakyProxy) -> None:
    client = connect(base_url=proxy.url)
    proxy.fail_next(Fault(503, retry_after="1"))

    started = time.monotonic()
    answer = await client.post_event(an_event(a_phone()))
    waited = time.monotonic() - started

    assert proxy.seen() == [EVENTS, EVENTS], "one 503, then the same post again"
    assert (answer.status, answer.created) == (202, True), "the 503 never reached Herald"
    assert waited >= 1.0, f"Retry-After: 1 is a floor under the wait, waited {waited:.3f}s"


async def test_a_429_with_an_http_date_is_retried_no_sooner(connect: Connect, proxy: FlakyProxy) -> None:
    client = connect(base_url=proxy.url)
    # An HTTP date has whole seconds: two ahead is at least one from now.
    proxy.fail_next(Fault(429, retry_after=formatdate(time.time() + 2, usegmt=True)))

    started = time.monotonic()
    page = await client.list_intents(limit=1)
    waited = time.monotonic() - started

    assert "intents" in page
    assert proxy.seen() == [("GET", "/v1/intents")] * 2
    assert waited >= 0.9, f"waited only {waited:.3f}s"


async def test_a_retried_post_that_had_arrived_is_answered_as_a_replay(connect: Connect, proxy: FlakyProxy) -> None:
    client = connect(base_url=proxy.url)
    event = an_event(a_phone())
    first = await client.post_event(event)
    # The caller's own retry of the same event, and the client's retry of a 503
    # inside it: neither makes a second notification.
    proxy.fail_next(Fault(503))
    again = await client.post_event(event)
    assert (again.status, again.replayed) == (200, True)
    assert [i["key"] for i in again.intents] == [i["key"] for i in first.intents]


async def test_a_final_4xx_is_never_retried(connect: Connect, proxy: FlakyProxy) -> None:
    client = connect(base_url=proxy.url)
    event = an_event(a_phone())
    await client.post_event(event)
    event["data"] = {"po": {"number": event["entity"]["id"], "total": "9"}, "approver": {"name": "Asha"}}

    with pytest.raises(EventConflict):
        await client.post_event(event)
    assert proxy.seen() == [EVENTS, EVENTS], "the 409 was asked once"


async def test_retries_are_bounded(connect: Connect, proxy: FlakyProxy) -> None:
    client = connect(base_url=proxy.url, retry=RetryPolicy(attempts=3, base=0.01, max=0.05))
    proxy.fail_next(Fault(503), Fault(503), Fault(503), Fault(503))

    with pytest.raises(ServerError) as unavailable:
        await client.dead_letter_summary()
    assert (unavailable.value.status, unavailable.value.code) == (503, "http_503")
    assert len(proxy.seen()) == 3, "attempts counts every try, the first included"


async def test_a_retry_after_beyond_the_policy_ends_the_retries(connect: Connect, proxy: FlakyProxy) -> None:
    client = connect(base_url=proxy.url, retry=RetryPolicy(max_retry_after=5))
    proxy.fail_next(Fault(503, retry_after="3600"))

    with pytest.raises(ServerError) as unavailable:
        await client.list_intents()
    assert unavailable.value.retry_after == 3600
    assert len(proxy.seen()) == 1


async def test_a_lost_answer_is_retried_for_an_event_post(connect: Connect, proxy: FlakyProxy) -> None:
    client = connect(base_url=proxy.url)
    proxy.fail_next(Fault(None))
    answer = await client.post_event(an_event(a_phone()))
    assert answer.created
    assert proxy.seen() == [EVENTS, EVENTS]


async def test_a_lost_answer_is_not_retried_for_a_removal(connect: Connect, proxy: FlakyProxy) -> None:
    client = connect(base_url=proxy.url)
    proxy.fail_next(Fault(None))
    with pytest.raises(HeraldConnectionError) as lost:
        await client.remove_suppression("000000000000000000000000")
    assert lost.value.status is None
    assert proxy.seen() == [("DELETE", "/v1/suppressions/000000000000000000000000")]


async def test_no_herald_at_all_is_a_connection_error_after_every_try(connect: Connect) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed_port = probe.getsockname()[1]
    client = connect(base_url=f"http://127.0.0.1:{closed_port}", retry=RetryPolicy(attempts=2, base=0.01, max=0.01))
    with pytest.raises(HeraldConnectionError, match="after 2 tries") as refused:
        await client.post_event(an_event(a_phone()))
    assert refused.value.code == "connection_error"
