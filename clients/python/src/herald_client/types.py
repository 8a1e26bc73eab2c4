"""The shapes Herald takes and answers, as `GET /v1/openapi.json` describes them.

Requests are what a caller builds; answers are JSON objects as Herald sent them
(plain dicts at run time, typed here for the checker and the editor). A key the
schema may leave out is in a `total=False` class; a key that is always there but
may be null is typed `X | None`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, TypedDict

Channel = Literal["email", "sms", "in_app", "webhook"]
Decision = Literal["send", "hold", "digest", "suppress"]
State = Literal["queued", "held", "sending", "sent", "unknown", "dead", "suppressed", "digested", "shadowed"]
Mode = Literal["live", "shadow"]
DeliveryStatus = Literal["queued", "sent", "delivered", "undelivered", "failed", "bounced", "complained"]
# Reasons and attempt outcomes are bounded lists that grow with Herald
# (`retries_exhausted`, `hard_bounce`, `address_bounced`, …): kept as text so a
# newer Herald's reason never fails a type check at run time.
Reason = str
Outcome = str

# ---- The event a caller posts -------------------------------------------------------


class _EntityRequired(TypedDict):
    type: str
    id: str


class Entity(_EntityRequired, total=False):
    """The entity the event is about; `version` orders its notifications."""

    version: int


class _RecipientRequired(TypedDict):
    id: str


class Recipient(_RecipientRequired, total=False):
    """A recipient; inline fields override the directory for this event only."""

    email: str
    phone: str
    locale: str
    timezone: str
    webhook_url: str


class _EventRequired(TypedDict):
    type: str
    entity: Entity
    # The sender's time of the event: RFC 3339 text with an offset, or an aware
    # datetime (a naive one is refused before anything is sent). Part of the
    # event's identity, so take it from the record the event is about, never
    # from the clock at the time of posting.
    occurred_at: str | datetime
    recipients: list[Recipient]


class Event(_EventRequired, total=False):
    """A domain event, the body of `POST /v1/events`."""

    data: dict[str, Any]
    channels: list[Channel]


# ---- What a post answers ------------------------------------------------------------


class _IntentSummaryRequired(TypedDict):
    id: str
    key: str
    channel: Channel
    recipient_id: str
    decision: Decision
    state: State
    created: bool


class IntentSummary(_IntentSummaryRequired, total=False):
    """An intent as the answer to a post reports it."""

    reason: Reason | None
    detail: str | None


class _TemplateRefRequired(TypedDict):
    id: str


class TemplateRef(_TemplateRefRequired, total=False):
    revision: str | None
    locale: str | None


class _ContentRequired(TypedDict):
    body: str


class Content(_ContentRequired, total=False):
    """The frozen content: what was (or will be) sent."""

    subject: str | None
    html: str | None
    encoding: str | None
    segments: int | None


class _DryRunIntentRequired(TypedDict):
    key: str
    channel: Channel
    recipient_id: str
    exists: bool
    decision: Decision
    state: State
    mode: Mode
    template: TemplateRef


class DryRunIntent(_DryRunIntentRequired, total=False):
    """An intent a real post would create, or one that exists, as it stands."""

    reason: Reason | None
    detail: str | None
    destination: str | None
    payload_digest: str | None
    content: Content | None


class DryRun(TypedDict):
    """What a real post of the event would record; nothing was written."""

    dry_run: bool
    event_key: str
    replay: bool
    not_checked: list[str]
    note: str
    intents: list[DryRunIntent]


# ---- Intents ------------------------------------------------------------------------


class _EntityRefRequired(TypedDict):
    type: str
    id: str


class EntityRef(_EntityRefRequired, total=False):
    version: int | None


class _WouldHaveSentRequired(TypedDict):
    at: str
    channel: Channel


class WouldHaveSent(_WouldHaveSentRequired, total=False):
    to: str | None
    payload_digest: str | None


class _IntentRequired(TypedDict):
    id: str
    key: str
    channel: Channel
    recipient_id: str
    event_type: str
    occurred_at: str
    entity: EntityRef
    template: TemplateRef
    decision: Decision
    state: State
    mode: Mode
    attempt_count: int
    created_at: str
    updated_at: str


class Intent(_IntentRequired, total=False):
    """An intent as lists show it."""

    reason: Reason | None
    detail: str | None
    destination: str | None
    digest_id: str | None
    payload_digest: str | None
    preferences_version: int | None
    superseded_by: str | None
    would_have_sent: WouldHaveSent | None


class _AttemptRequired(TypedDict):
    n: int
    started_at: str
    possible_duplicate: bool


class Attempt(_AttemptRequired, total=False):
    """One try at delivery."""

    finished_at: str | None
    provider: str | None
    outcome: Outcome | None
    error_class: str | None
    provider_status: int | None
    provider_message_id: str | None
    error: str | None
    retry_after_seconds: float | None
    next_try_at: str | None


class _ReceiptRequired(TypedDict):
    source: str
    status: DeliveryStatus
    provider_status: str
    applied: bool
    ended_retry: bool


class Receipt(_ReceiptRequired, total=False):
    """A delivery receipt a provider sent about the intent."""

    provider_message_id: str | None
    reason: str | None
    received_at: str | None


class _ReplayRequired(TypedDict):
    at: str


class Replay(_ReplayRequired, total=False):
    """A replay of the intent from the dead letters."""

    previous_reason: str | None
    requested_by: str | None


class IntentDetail(Intent, total=False):
    """An intent with its frozen content, every attempt, its receipts and replays.

    `attempts`, `receipts`, `replays` and `messages_may_have_reached` are always
    present in Herald's answer.
    """

    attempts: list[Attempt]
    content: Content | None
    delivery_status: DeliveryStatus | None
    messages_may_have_reached: int
    receipts: list[Receipt]
    replays: list[Replay]


class _IntentPageRequired(TypedDict):
    intents: list[Intent]


class IntentPage(_IntentPageRequired, total=False):
    """A page of intents, newest first; `next` is the cursor of the next page."""

    next: str | None


# ---- Dead letters --------------------------------------------------------------------


class DeadLetter(Intent, total=False):
    """A dead intent with its tenant, frozen content, original event and attempts.

    `tenant`, `attempts` and `receipts` are always present in Herald's answer.
    """

    tenant: str
    attempts: list[Attempt]
    receipts: list[Receipt]
    content: Content | None
    delivery_status: DeliveryStatus | None
    event: dict[str, Any] | None


class _DeadLetterPageRequired(TypedDict):
    dead_letters: list[DeadLetter]


class DeadLetterPage(_DeadLetterPageRequired, total=False):
    next: str | None


class DeadLetterSummary(TypedDict):
    total: int
    by_reason: dict[str, int]


class ReplaySkipped(TypedDict):
    id: str
    # not_found, not_dead, no_content or content_pruned
    reason: str
    why: str


class ReplayResult(TypedDict):
    """What a replay queued again, and what it skipped and why."""

    replayed: list[str]
    skipped: list[ReplaySkipped]
    skipped_by_reason: dict[str, int]


# ---- The suppression list ------------------------------------------------------------


class _SuppressionRequired(TypedDict):
    address: str
    channel: str
    reason: str
    source_intent: str


class Suppression(_SuppressionRequired, total=False):
    """An address the tenant's messages no longer go to (shown masked)."""

    id: str | None
    domain: str | None
    detail: str | None
    created_at: str | None


class _SuppressionPageRequired(TypedDict):
    suppressions: list[Suppression]


class SuppressionPage(_SuppressionPageRequired, total=False):
    next: str | None


class SuppressionRemoved(TypedDict):
    removed: str


# ---- The shadow report ----------------------------------------------------------------


class Duplicates(TypedDict):
    replay: int
    another_key: int
    reemitted: int


class Mismatches(TypedDict):
    idempotency_key_mismatch: int
    event_conflict: int


class SmsSegments(TypedDict):
    encoding: str
    messages: int
    segments: int


class TemplateErrors(TypedDict):
    template: str
    reason: str
    count: int


class _ShadowReportRequired(TypedDict):
    events_received: int
    events_new: int
    duplicates: Duplicates
    mismatches: Mismatches
    # channel → decision → reason (`none`) → count
    intents: dict[str, dict[str, dict[str, int]]]
    would_send: dict[str, int]
    sent: dict[str, int]
    sms: list[SmsSegments]
    template_errors: list[TemplateErrors]
    bus_rejected: int


class ShadowReport(_ShadowReportRequired, total=False):
    """Posts, duplicates, mismatches, decisions and what shadow would have sent."""

    tenant: str | None
    since: str | None
    until: str | None
