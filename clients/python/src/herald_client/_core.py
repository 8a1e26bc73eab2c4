"""Everything the sync and the async client share, written once and without I/O.

Each call is an *operation*: a generator that yields the HTTP requests it needs
(`Request`) and receives each answer, then returns its result. `why` is several
requests; every other call is one. The clients only drive operations: send a
request (retrying it as `Tries` decides), hand the answer back, and wait between
tries with their own sleep. Building requests, deciding retries and turning
answers into results or exceptions all happen here.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar, cast
from urllib.parse import quote

import httpx

from .errors import HeraldConnectionError, HeraldError, error_class, field_of
from .types import (
    DeadLetterPage,
    DeadLetterSummary,
    DryRun,
    Event,
    IntentDetail,
    IntentPage,
    IntentSummary,
    ReplayResult,
    ShadowReport,
    State,
    SuppressionPage,
    SuppressionRemoved,
)

__version__ = "0.1.0"

T = TypeVar("T")


# ---- Retries ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How a call is retried when Herald (or a proxy in front of it) asks to be
    tried again, or no answer came.

    `attempts` counts every try, the first included. The wait before retry n
    is drawn uniformly from 0 … min(max, base·2^(n−1)) seconds (full jitter, so
    many clients failing together do not come back together); an answer's
    `Retry-After` is a floor under it. An answer asking for a longer wait than
    `max_retry_after` ends the retries: its error is raised at once, with
    `retry_after` set, rather than retrying sooner than asked.
    """

    attempts: int = 4
    base: float = 0.5
    max: float = 8.0
    max_retry_after: float = 60.0
    # What Herald's API answers when a request may simply be sent again; a
    # final 4xx is never among them.
    statuses: frozenset[int] = frozenset({429, 503})

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("RetryPolicy.attempts: at least 1 (the first try)")
        if self.base <= 0:
            raise ValueError("RetryPolicy.base: must be more than zero seconds")
        if self.max < self.base:
            raise ValueError("RetryPolicy.max: may not be shorter than base")
        if self.max_retry_after < 0:
            raise ValueError("RetryPolicy.max_retry_after: may not be negative")
        if any(400 <= s < 500 and s != 429 for s in self.statuses):
            raise ValueError("RetryPolicy.statuses: a 4xx other than 429 is final, never retried")

    def window(self, retry: int) -> float:
        """The longest wait before retry `retry` (1, 2, …)."""
        return min(self.max, self.base * 2.0 ** (retry - 1))

    def delay(self, retry: int, retry_after: float | None, draw: Callable[[float, float], float]) -> float:
        """The wait before retry `retry`: `draw(0, window)`, never under `retry_after`."""
        jitter = draw(0.0, self.window(retry))
        return jitter if retry_after is None else max(retry_after, jitter)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """`Retry-After` in seconds: delay-seconds, or an HTTP date (a past one is 0).
    Anything else is ignored (None)."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(int(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # an HTTP date is always GMT
        when = when.replace(tzinfo=timezone.utc)
    now = now or datetime.now(timezone.utc)
    return max(0.0, (when - now).total_seconds())


# Failures where the request never left: a retry cannot do anything twice.
_NOT_SENT: tuple[type[Exception], ...] = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Failures after the request may have arrived: retried only for calls whose
# repetition is harmless (reads, and posting an event, whose identity derives
# from the event itself).
_MAYBE_SENT: tuple[type[Exception], ...] = (
    httpx.ReadTimeout,
    httpx.WriteTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)


@dataclass(frozen=True)
class Request:
    """One HTTP request of an operation."""

    method: str
    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    # Sending it twice does nothing twice: a read, or an event post.
    repeatable: bool = True
    # Statuses besides 2xx handed back to the operation instead of raised.
    answers: frozenset[int] = frozenset()


class Tries:
    """One request's tries: after each answer or failure, the wait before the
    next try, or the exception that ends the call."""

    def __init__(self, policy: RetryPolicy, request: Request, draw: Callable[[float, float], float]) -> None:
        self._policy = policy
        self._request = request
        self._draw = draw
        self.made = 0

    def after_answer(self, response: httpx.Response) -> float | None:
        """None when the answer is the call's; else the wait before the next try."""
        self.made += 1
        status = response.status_code
        if 200 <= status < 300 or status in self._request.answers:
            return None
        error = error_from(response)
        if status not in self._policy.statuses or self.made >= self._policy.attempts:
            raise error
        if error.retry_after is not None and error.retry_after > self._policy.max_retry_after:
            raise error
        return self._policy.delay(self.made, error.retry_after, self._draw)

    def after_failure(self, failure: httpx.TransportError) -> float:
        """The wait before the next try; raises when this failure ends the call."""
        self.made += 1
        retryable = isinstance(failure, _NOT_SENT) or (self._request.repeatable and isinstance(failure, _MAYBE_SENT))
        if not retryable or self.made >= self._policy.attempts:
            tries = f" after {self.made} tries" if self.made > 1 else ""
            raise HeraldConnectionError(
                f"{self._request.method} {self._request.path}: {type(failure).__name__}: {failure}{tries}",
                status=None,
                code="connection_error",
            ) from failure
        return self._policy.delay(self.made, None, self._draw)


def error_from(response: httpx.Response) -> HeraldError:
    """The exception for an answer that is not a success."""
    status = response.status_code
    code, message = f"http_{status}", response.reason_phrase or f"HTTP {status}"
    try:
        body = response.json()
    except ValueError:
        text = response.text.strip()
        message = text[:300] if text else message
    else:
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and isinstance(error.get("code"), str):
            code = error["code"]
            message = str(error.get("message", ""))
    return error_class(status, code)(
        message,
        status=status,
        code=code,
        field=field_of(code, message),
        retry_after=parse_retry_after(response.headers.get("retry-after")),
    )


# ---- What a post answers ----------------------------------------------------------------


@dataclass(frozen=True)
class EventAnswer:
    """Herald's answer to `POST /v1/events`.

    `status` is 202 when this post created at least one intent, 200 when it
    created none. `replayed` is true when Herald answered with the stored answer
    of the same request (the `Idempotent-Replayed: true` header): a retry, by
    this client or its caller, of a post that had already been accepted.
    """

    status: int
    replayed: bool
    event_key: str
    intents: list[IntentSummary]

    @property
    def created(self) -> bool:
        return self.status == 202


# ---- Building requests ------------------------------------------------------------------


def _timestamp(name: str, value: str | datetime) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{name}: a datetime needs a time zone (an aware datetime); Herald never guesses one")
        return value.isoformat()
    return value


def _json(value: Any) -> bytes:
    # Compact and deterministic: a retry sends the very bytes of the first try.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _params(**given: str | int | bool | datetime | None) -> dict[str, str]:
    out = {}
    for name, value in given.items():
        if value is None or value is False:
            continue
        if value is True:
            out[name] = "true"
        elif isinstance(value, datetime):
            out[name] = _timestamp(name, value)
        else:
            out[name] = str(value)
    return out


def _segment(value: str) -> str:
    return quote(value, safe="")


def _event_body(event: Event) -> bytes:
    body = dict(event)
    if "occurred_at" in body:
        body["occurred_at"] = _timestamp("occurred_at", event["occurred_at"])
    return _json(body)


def _event_headers(idempotency_key: str | None) -> dict[str, str]:
    headers = {"content-type": "application/json"}
    if idempotency_key is not None:
        if not idempotency_key.isascii():
            raise ValueError("idempotency_key: only visible ASCII characters (Herald takes 1 to 255, no spaces)")
        headers["idempotency-key"] = idempotency_key
    return headers


def _json_of(response: httpx.Response) -> Any:
    return response.json()


# ---- Operations ---------------------------------------------------------------------------

Steps = Generator[Request, httpx.Response, T]


def post_event(event: Event, idempotency_key: str | None) -> Steps[EventAnswer]:
    response = yield Request("POST", "/v1/events", body=_event_body(event), headers=_event_headers(idempotency_key))
    body = _json_of(response)
    return EventAnswer(
        status=response.status_code,
        replayed=response.headers.get("idempotent-replayed", "").lower() == "true",
        event_key=body["event_key"],
        intents=body["intents"],
    )


def dry_run_event(event: Event, idempotency_key: str | None) -> Steps[DryRun]:
    response = yield Request(
        "POST",
        "/v1/events",
        params={"dry_run": "true"},
        body=_event_body(event),
        headers=_event_headers(idempotency_key),
    )
    return cast(DryRun, _json_of(response))


def get_intent(id: str) -> Steps[IntentDetail]:
    response = yield Request("GET", f"/v1/intents/{_segment(id)}")
    return cast(IntentDetail, _json_of(response))


def list_intents(
    entity: str | None, recipient: str | None, state: State | None, limit: int | None, cursor: str | None
) -> Steps[IntentPage]:
    params = _params(entity=entity, recipient=recipient, state=state, limit=limit, cursor=cursor)
    response = yield Request("GET", "/v1/intents", params=params)
    return cast(IntentPage, _json_of(response))


def why(entity: str, recipient: str) -> Steps[list[IntentDetail]]:
    """Every intent for (entity, recipient), oldest first, each with its attempts,
    receipts and replays: what `herald why` prints, as data."""
    keys: list[str] = []
    cursor: str | None = None
    while True:
        page = yield from list_intents(entity, recipient, None, 500, cursor)
        keys.extend(intent["key"] for intent in page["intents"])
        cursor = page.get("next")
        if cursor is None:
            break
    timeline: list[IntentDetail] = []
    for key in reversed(keys):
        # One pruned by retention between the list and now is left out.
        response = yield Request("GET", f"/v1/intents/{_segment(key)}", answers=frozenset({404}))
        if response.status_code != 404:
            timeline.append(cast(IntentDetail, _json_of(response)))
    return timeline


def list_dead_letters(
    reason: str | None,
    since: str | datetime | None,
    limit: int | None,
    cursor: str | None,
    tenant: str | None,
    all_tenants: bool,
) -> Steps[DeadLetterPage]:
    params = _params(reason=reason, since=since, limit=limit, cursor=cursor, tenant=tenant, all_tenants=all_tenants)
    response = yield Request("GET", "/v1/dead-letters", params=params)
    return cast(DeadLetterPage, _json_of(response))


def dead_letter_summary(
    since: str | datetime | None, tenant: str | None, all_tenants: bool
) -> Steps[DeadLetterSummary]:
    params = _params(since=since, tenant=tenant, all_tenants=all_tenants)
    response = yield Request("GET", "/v1/dead-letters/summary", params=params)
    return cast(DeadLetterSummary, _json_of(response))


def replay_dead_letters(ids: list[str] | None, reason: str | None, since: str | datetime | None) -> Steps[ReplayResult]:
    body: dict[str, Any] = {}
    if ids is not None:
        body["ids"] = ids
    if reason is not None:
        body["reason"] = reason
    if since is not None:
        body["since"] = _timestamp("since", since)
    response = yield Request(
        "POST",
        "/v1/dead-letters/replay",
        body=_json(body),
        headers={"content-type": "application/json"},
        # A second replay could queue again an intent that died again meanwhile.
        repeatable=False,
    )
    return cast(ReplayResult, _json_of(response))


def list_suppressions(limit: int | None, cursor: str | None) -> Steps[SuppressionPage]:
    response = yield Request("GET", "/v1/suppressions", params=_params(limit=limit, cursor=cursor))
    return cast(SuppressionPage, _json_of(response))


def remove_suppression(id: str) -> Steps[SuppressionRemoved]:
    # Not repeatable: a second DELETE after a lost answer would be a 404 for an
    # entry that was in fact removed.
    response = yield Request("DELETE", f"/v1/suppressions/{_segment(id)}", repeatable=False)
    return cast(SuppressionRemoved, _json_of(response))


def shadow_report(
    since: str | datetime | None, until: str | datetime | None, tenant: str | None, all_tenants: bool
) -> Steps[ShadowReport]:
    params = _params(since=since, until=until, tenant=tenant, all_tenants=all_tenants)
    response = yield Request("GET", "/v1/shadow/report", params=params)
    return cast(ShadowReport, _json_of(response))


# ---- What both clients hold ------------------------------------------------------------------


class ClientCore:
    """The clients' shared state: where Herald is, the token, the retry policy."""

    def __init__(self, base_url: str, token: str | None, retry: RetryPolicy | None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url: an http(s) URL, like http://127.0.0.1:8080 (got {base_url!r})")
        self.base_url = base_url.rstrip("/")
        self.retry = retry if retry is not None else RetryPolicy()
        self._headers = {"accept": "application/json", "user-agent": f"herald-client-python/{__version__}"}
        if token is not None:
            self._headers["authorization"] = f"Bearer {token}"
        self._random = random.Random()

    def tries(self, request: Request) -> Tries:
        return Tries(self.retry, request, self._random.uniform)

    def build(self, http: httpx.Client | httpx.AsyncClient, request: Request) -> httpx.Request:
        return http.build_request(
            request.method,
            self.base_url + request.path,
            params=dict(request.params),
            content=request.body,
            headers={**self._headers, **request.headers},
        )
