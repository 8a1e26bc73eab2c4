"""A client for Herald's HTTP API: `Herald` (blocking) and `AsyncHerald` (async),
with the same calls, typed answers (`herald_client.types`), typed errors
(`herald_client.errors`) and retries as `RetryPolicy` says."""

from ._core import EventAnswer, RetryPolicy, __version__, parse_retry_after
from .aio import AsyncHerald
from .errors import (
    EventConflict,
    Forbidden,
    HeraldConnectionError,
    HeraldError,
    IdempotencyKeyMismatch,
    InvalidField,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    Unauthorized,
    UnknownEventType,
    UnsupportedMediaType,
)
from .sync import Herald

__all__ = [
    "AsyncHerald",
    "EventAnswer",
    "EventConflict",
    "Forbidden",
    "Herald",
    "HeraldConnectionError",
    "HeraldError",
    "IdempotencyKeyMismatch",
    "InvalidField",
    "InvalidRequest",
    "NotFound",
    "PayloadTooLarge",
    "RateLimited",
    "RetryPolicy",
    "ServerError",
    "Unauthorized",
    "UnknownEventType",
    "UnsupportedMediaType",
    "__version__",
    "parse_retry_after",
]
