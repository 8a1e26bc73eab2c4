"""`Herald`: the blocking client. Every call is an operation of `_core`, driven here."""

from __future__ import annotations

import time
from datetime import datetime
from types import TracebackType
from typing import TypeVar, cast

import httpx

from . import _core
from ._core import EventAnswer, RetryPolicy, Steps
from .types import (
    DeadLetterPage,
    DeadLetterSummary,
    DryRun,
    Event,
    IntentDetail,
    IntentPage,
    ReplayResult,
    ShadowReport,
    State,
    SuppressionPage,
    SuppressionRemoved,
)

T = TypeVar("T")
_Self = TypeVar("_Self", bound="Herald")


class Herald:
    """A client of one Herald deployment.

    `token` is sent as `Authorization: Bearer …` (its scopes decide what each
    call may do). `retry` says how calls are retried (see `RetryPolicy`).
    Pass `http_client` to share an `httpx.Client` (its own base URL and headers
    are not used); otherwise this client makes one, closed by `close()` or by
    leaving a `with` block.
    """

    def __init__(
        self,
        base_url: str,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retry: RetryPolicy | None = None,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._core = _core.ClientCore(base_url, token, retry)
        self._owns_http = http_client is None
        self._http = http_client if http_client is not None else httpx.Client(timeout=timeout)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    # ---- Events and intents -------------------------------------------------------------

    def post_event(self, event: Event, idempotency_key: str | None = None) -> EventAnswer:
        """Post a domain event (`POST /v1/events`). Safe to retry as it stands:
        its identity is the event's own (type, entity, occurred_at) and the key if given."""
        return self._run(_core.post_event(event, idempotency_key))

    def dry_run_event(self, event: Event, idempotency_key: str | None = None) -> DryRun:
        """What posting `event` would record, writing nothing (`?dry_run=true`)."""
        return self._run(_core.dry_run_event(event, idempotency_key))

    def get_intent(self, id: str) -> IntentDetail:
        """One intent, by its id (its key), with content, attempts, receipts and replays."""
        return self._run(_core.get_intent(id))

    def list_intents(
        self,
        *,
        entity: str | None = None,
        recipient: str | None = None,
        state: State | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> IntentPage:
        """One page of intents, newest first; `entity` is `TYPE:ID`. Pass a page's
        `next` as `cursor` for the next."""
        return self._run(_core.list_intents(entity, recipient, state, limit, cursor))

    def why(self, entity: str, recipient: str) -> list[IntentDetail]:
        """Why was (or wasn't) `recipient` told about `entity` (`TYPE:ID`)? Every
        intent for the pair, oldest first, with its attempts: `herald why` as data."""
        return self._run(_core.why(entity, recipient))

    # ---- Dead letters -------------------------------------------------------------------

    def list_dead_letters(
        self,
        *,
        reason: str | None = None,
        since: str | datetime | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        tenant: str | None = None,
        all_tenants: bool = False,
    ) -> DeadLetterPage:
        """One page of dead letters, newest first (scope `ops`; another tenant's needs `admin`)."""
        return self._run(_core.list_dead_letters(reason, since, limit, cursor, tenant, all_tenants))

    def dead_letter_summary(
        self, *, since: str | datetime | None = None, tenant: str | None = None, all_tenants: bool = False
    ) -> DeadLetterSummary:
        """The count of dead letters, in all and by reason."""
        return self._run(_core.dead_letter_summary(since, tenant, all_tenants))

    def replay_dead_letters(
        self, *, ids: list[str] | None = None, reason: str | None = None, since: str | datetime | None = None
    ) -> ReplayResult:
        """Queue dead letters again, same key and frozen content: `ids`, or `reason` (with `since`)."""
        return self._run(_core.replay_dead_letters(ids, reason, since))

    # ---- The suppression list and the shadow report ---------------------------------------

    def list_suppressions(self, *, limit: int | None = None, cursor: str | None = None) -> SuppressionPage:
        """One page of the tenant's suppression list, newest first (scope `ops`)."""
        return self._run(_core.list_suppressions(limit, cursor))

    def remove_suppression(self, id: str) -> SuppressionRemoved:
        """Remove an entry from the suppression list, by the id the list shows."""
        return self._run(_core.remove_suppression(id))

    def shadow_report(
        self,
        *,
        since: str | datetime | None = None,
        until: str | datetime | None = None,
        tenant: str | None = None,
        all_tenants: bool = False,
    ) -> ShadowReport:
        """Posts, duplicates, mismatches, decisions and what shadow mode would have sent."""
        return self._run(_core.shadow_report(since, until, tenant, all_tenants))

    # ---- Driving operations ---------------------------------------------------------------

    def _run(self, steps: Steps[T]) -> T:
        try:
            request = next(steps)
            while True:
                request = steps.send(self._send(request))
        except StopIteration as done:
            return cast(T, done.value)

    def _send(self, request: _core.Request) -> httpx.Response:
        tries = self._core.tries(request)
        while True:
            try:
                response = self._http.send(self._core.build(self._http, request))
            except httpx.TransportError as failure:
                wait = tries.after_failure(failure)
            else:
                answered = tries.after_answer(response)
                if answered is None:
                    return response
                wait = answered
            time.sleep(wait)
