"""A client for Herald's HTTP API: `Herald` (blocking) and `AsyncHerald` (async).

    from herald_client import Herald
    with Herald("http://127.0.0.1:8080", token="…") as herald:
        answer = herald.post_event({...})
"""

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
