"""Herald's answers that are not a success, as exceptions a caller can match.

Herald answers every error as `{"error": {"code": "snake_case", "message": "…"}}`.
Its body has no separate field name: a message about one field starts with it
(`recipients[1].phone: must be E.164`), and `field` is read from there for the
codes whose messages do so.
"""

from __future__ import annotations

from collections.abc import Mapping


class HeraldError(Exception):
    """Any error from Herald, or from reaching it.

    `status` is the HTTP status (None when no answer came), `code` Herald's
    error code (`http_<status>` when the answer was not Herald's, say a
    proxy's), `message` its text, `field` the field it is about when Herald
    named one, and `retry_after` the seconds the answer asked to wait, if any.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None,
        code: str,
        field: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f"HTTP {self.status}" if self.status is not None else "no answer"
        return f"{where} {self.code}: {self.message}"


class HeraldConnectionError(HeraldError):
    """No answer came: the connection failed or timed out (after any retries)."""


class InvalidRequest(HeraldError):
    """400: the request is malformed (`malformed_json`, `duplicate_key`,
    `too_deep`, `inexact_number`, `invalid_request`); `field` names the path
    when the message does."""


class InvalidField(InvalidRequest):
    """400 `invalid_field`: `field` names it (`occurred_at`, `recipients[1].phone`,
    `Idempotency-Key`, a query parameter)."""


class Unauthorized(HeraldError):
    """401: no token, or one Herald does not know."""


class Forbidden(HeraldError):
    """403: the token lacks the scope this call needs."""


class NotFound(HeraldError):
    """404: no such object in the token's tenant."""


class EventConflict(HeraldError):
    """409 `event_conflict`: this event (type, entity, occurred_at) was accepted
    before with other `data` or `entity.version`. A changed event is a new
    event and needs its own `occurred_at`."""


class PayloadTooLarge(HeraldError):
    """413: the body is over Herald's `max_body_bytes`."""


class UnsupportedMediaType(HeraldError):
    """415: the body is not JSON."""


class IdempotencyKeyMismatch(HeraldError):
    """422 `idempotency_key_mismatch`: this Idempotency-Key was used before with
    another body."""


class UnknownEventType(HeraldError):
    """422 `unknown_event_type`: no route is configured for the event's type."""


class RateLimited(HeraldError):
    """429, still answered after the retries the policy allows."""


class ServerError(HeraldError):
    """5xx: Herald (or a proxy in front of it) failed; 503 is retried first."""


_BY_CODE: Mapping[str, type[HeraldError]] = {
    "invalid_field": InvalidField,
    "invalid_request": InvalidRequest,
    "malformed_json": InvalidRequest,
    "duplicate_key": InvalidRequest,
    "too_deep": InvalidRequest,
    "inexact_number": InvalidRequest,
    "event_conflict": EventConflict,
    "idempotency_key_mismatch": IdempotencyKeyMismatch,
    "unknown_event_type": UnknownEventType,
}

_BY_STATUS: Mapping[int, type[HeraldError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    429: RateLimited,
}

# The codes whose message starts with the field or path it is about.
_NAMES_A_FIELD = frozenset({"invalid_field", "duplicate_key", "too_deep", "inexact_number"})


def error_class(status: int, code: str) -> type[HeraldError]:
    """The exception for an answer: by Herald's code first, then by status."""
    if code in _BY_CODE:
        return _BY_CODE[code]
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, HeraldError)


def field_of(code: str, message: str) -> str | None:
    """The field a message names (`recipients[1].phone: …` → `recipients[1].phone`)."""
    if code not in _NAMES_A_FIELD:
        return None
    name, sep, _ = message.partition(": ")
    return name if sep and name else None
