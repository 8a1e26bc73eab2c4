"""The pure parts, without a Herald: the retry policy's waits, `Retry-After`, and
how an answer becomes an exception."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import httpx
import pytest

from herald_client import (
    EventConflict,
    HeraldError,
    IdempotencyKeyMismatch,
    InvalidField,
    InvalidRequest,
    RetryPolicy,
    ServerError,
    parse_retry_after,
)
from herald_client._core import Request, Tries, error_from

NOW = datetime(2026, 11, 29, 10, 0, 0, tzinfo=timezone.utc)


def test_retry_after_is_seconds_or_an_http_date() -> None:
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after(" 0 ") == 0.0
    in_90s = format_datetime(NOW + timedelta(seconds=90), usegmt=True)
    assert parse_retry_after(in_90s, now=NOW) == 90.0
    a_minute_ago = format_datetime(NOW - timedelta(seconds=60), usegmt=True)
    assert parse_retry_after(a_minute_ago, now=NOW) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after("-5") is None
    assert parse_retry_after(None) is None


def test_the_wait_is_full_jitter_under_a_doubling_window_with_retry_after_as_a_floor() -> None:
    policy = RetryPolicy(attempts=6, base=0.5, max=3.0)
    assert [policy.window(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3.0, 3.0]

    def top(low: float, high: float) -> float:
        return high

    def bottom(low: float, high: float) -> float:
        return low

    assert policy.delay(3, None, top) == 2.0
    assert policy.delay(3, None, bottom) == 0.0
    assert policy.delay(1, 10.0, top) == 10.0, "Retry-After is never cut by max"
    assert policy.delay(5, 1.0, top) == 3.0, "a floor, not the wait itself"


def test_a_policy_that_would_retry_a_final_answer_is_refused() -> None:
    with pytest.raises(ValueError, match="statuses"):
        RetryPolicy(statuses=frozenset({409}))
    with pytest.raises(ValueError, match="attempts"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="max"):
        RetryPolicy(base=2.0, max=1.0)


def answer(status: int, body: object = None, headers: dict[str, str] | None = None) -> httpx.Response:
    if body is None:
        return httpx.Response(status, text="upstream unavailable", headers=headers)
    return httpx.Response(status, json=body, headers=headers)


def herald_error(status: int, code: str, message: str) -> HeraldError:
    return error_from(answer(status, {"error": {"code": code, "message": message}}))


def test_an_answer_becomes_the_exception_for_its_code() -> None:
    invalid = herald_error(400, "invalid_field", "recipients[1].phone: must be E.164, like +9779800000000")
    assert isinstance(invalid, InvalidField) and invalid.field == "recipients[1].phone"
    deep = herald_error(400, "too_deep", "data.a.b[0]: nested deeper than 32 levels of arrays and objects")
    assert type(deep) is InvalidRequest and deep.field == "data.a.b[0]"
    assert herald_error(400, "malformed_json", "body is not valid JSON: EOF").field is None
    assert isinstance(herald_error(409, "event_conflict", "…"), EventConflict)
    assert isinstance(herald_error(422, "idempotency_key_mismatch", "…"), IdempotencyKeyMismatch)

    proxied = error_from(answer(503, headers={"retry-after": "2"}))
    assert isinstance(proxied, ServerError)
    assert (proxied.code, proxied.message, proxied.retry_after) == ("http_503", "upstream unavailable", 2.0)


def test_tries_retry_only_what_may_be_sent_again() -> None:
    policy = RetryPolicy(attempts=3, base=1.0, max=1.0)

    def top(low: float, high: float) -> float:
        return high

    tries = Tries(policy, Request("POST", "/v1/events"), top)
    assert tries.after_answer(answer(503, headers={"retry-after": "4"})) == 4.0
    assert tries.after_answer(answer(429)) == 1.0
    with pytest.raises(ServerError):  # the third try was the last
        tries.after_answer(answer(503))

    final = Tries(policy, Request("POST", "/v1/events"), top)
    with pytest.raises(EventConflict):
        final.after_answer(answer(409, {"error": {"code": "event_conflict", "message": "…"}}))

    removal = Tries(policy, Request("DELETE", "/v1/suppressions/x", repeatable=False), top)
    assert removal.after_failure(httpx.ConnectError("refused")) == 1.0, "it never left: safe"
    with pytest.raises(HeraldError, match="ReadTimeout"):
        removal.after_failure(httpx.ReadTimeout("no answer"))
