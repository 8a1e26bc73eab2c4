"""Posting events and reading intents against a live Herald, through `Herald` and
`AsyncHerald` alike: new (202), replayed, conflicting, refused; `why`."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from conftest import READ_TOKEN, Connect
from fakes import FakeSms
from support import a_phone, an_event, entity_of, wait_for

from herald_client import (
    AsyncHerald,
    EventConflict,
    Forbidden,
    IdempotencyKeyMismatch,
    InvalidField,
    NotFound,
    Unauthorized,
    UnknownEventType,
)
from herald_client.types import IntentDetail

pytestmark = pytest.mark.anyio


async def sent(client: AsyncHerald, id: str) -> IntentDetail:
    async def probe() -> IntentDetail | None:
        intent = await client.get_intent(id)
        return intent if intent["state"] == "sent" else None

    return await wait_for(f"intent {id} sent", probe)


async def test_a_new_event_is_accepted_and_its_exact_repeat_replayed(client: AsyncHerald, fake_sms: FakeSms) -> None:
    phone = a_phone()
    event = an_event(phone)

    first = await client.post_event(event)
    assert (first.status, first.created, first.replayed) == (202, True, False)
    [intent] = first.intents
    assert (intent["channel"], intent["decision"], intent["created"]) == ("sms", "send", True)
    assert intent["id"] == intent["key"] and len(intent["key"]) == 32

    again = await client.post_event(event)
    assert (again.status, again.created, again.replayed) == (200, False, True)
    assert again.event_key == first.event_key
    assert [i["key"] for i in again.intents] == [intent["key"]]

    detail = await sent(client, intent["id"])
    assert detail["attempts"][0]["outcome"] == "accepted"
    assert detail["content"] is not None and event["entity"]["id"] in detail["content"]["body"]
    assert detail["destination"] is not None and "*" in detail["destination"], "the number is shown masked"
    [message] = fake_sms.sent_to(phone)
    assert message.idempotency_key == intent["key"], "the provider gets the event's own key"


async def test_the_same_event_under_a_new_idempotency_key_creates_nothing(client: AsyncHerald) -> None:
    event = an_event(a_phone())
    keyed = await client.post_event(event, idempotency_key="order-approval-1-" + event["entity"]["id"])
    assert keyed.created

    replay = await client.post_event(event, idempotency_key="order-approval-1-" + event["entity"]["id"])
    assert (replay.status, replay.replayed) == (200, True)

    other_key = await client.post_event(event, idempotency_key="order-approval-2-" + event["entity"]["id"])
    assert (other_key.status, other_key.replayed) == (200, False)
    assert [i["created"] for i in other_key.intents] == [False]


async def test_an_aware_datetime_is_the_same_event_as_its_text(client: AsyncHerald) -> None:
    event = an_event(a_phone(), occurred_at="2026-11-29T04:30:00Z")
    assert (await client.post_event(event)).created
    kathmandu = timezone(timedelta(hours=5, minutes=45))
    event["occurred_at"] = datetime(2026, 11, 29, 10, 15, tzinfo=kathmandu)
    repeat = await client.post_event(event)
    assert (repeat.status, repeat.created) == (200, False), "the same instant at another offset is the same event"


async def test_a_naive_datetime_is_refused_before_anything_is_sent(client: AsyncHerald) -> None:
    event = an_event(a_phone())
    event["occurred_at"] = datetime(2026, 11, 29, 10, 15)
    with pytest.raises(ValueError, match="occurred_at"):
        await client.post_event(event)


async def test_changed_data_for_an_accepted_event_is_a_conflict(client: AsyncHerald) -> None:
    event = an_event(a_phone())
    await client.post_event(event)
    changed = an_event(event["recipients"][0]["phone"], entity_id=event["entity"]["id"], total="2,00,000")
    changed["recipients"] = event["recipients"]

    with pytest.raises(EventConflict) as conflict:
        await client.post_event(changed)
    assert (conflict.value.status, conflict.value.code) == (409, "event_conflict")
    assert "occurred_at" in conflict.value.message

    with pytest.raises(EventConflict):
        await client.post_event(changed, idempotency_key="fresh-" + event["entity"]["id"])


async def test_a_reused_idempotency_key_with_another_body_is_a_mismatch(client: AsyncHerald) -> None:
    key = "reused-" + a_phone()
    await client.post_event(an_event(a_phone()), idempotency_key=key)
    with pytest.raises(IdempotencyKeyMismatch) as mismatch:
        await client.post_event(an_event(a_phone()), idempotency_key=key)
    assert (mismatch.value.status, mismatch.value.code) == (422, "idempotency_key_mismatch")


async def test_an_invalid_field_is_named(client: AsyncHerald) -> None:
    event = an_event("12345")
    with pytest.raises(InvalidField) as invalid:
        await client.post_event(event)
    assert (invalid.value.status, invalid.value.code, invalid.value.field) == (
        400,
        "invalid_field",
        "recipients[0].phone",
    )

    with pytest.raises(InvalidField) as bad_key:
        await client.post_event(an_event(a_phone()), idempotency_key="has spaces")
    assert bad_key.value.field == "Idempotency-Key"

    with pytest.raises(InvalidField) as bad_state:
        await client.list_intents(state="lost")  # type: ignore[arg-type]
    assert bad_state.value.field == "state"


async def test_an_event_type_without_a_route_is_unknown(client: AsyncHerald) -> None:
    event = an_event(a_phone())
    event["type"] = "purchase_order.shredded"
    with pytest.raises(UnknownEventType) as unknown:
        await client.post_event(event)
    assert (unknown.value.status, unknown.value.code) == (422, "unknown_event_type")


async def test_a_dry_run_writes_nothing(client: AsyncHerald) -> None:
    event = an_event(a_phone())
    dry = await client.dry_run_event(event)
    assert dry["dry_run"] is True and dry["replay"] is False
    [intent] = dry["intents"]
    assert (intent["exists"], intent["decision"]) == (False, "send")
    with pytest.raises(NotFound) as missing:
        await client.get_intent(intent["key"])
    assert missing.value.status == 404
    assert (await client.post_event(event)).created, "the real post is still the first"


async def test_scopes_and_tokens_are_enforced(connect: Connect) -> None:
    reader = connect(token=READ_TOKEN)
    with pytest.raises(Forbidden) as forbidden:
        await reader.post_event(an_event(a_phone()))
    assert forbidden.value.status == 403
    assert "intents" in await reader.list_intents(limit=1)

    with pytest.raises(Unauthorized) as anonymous:
        await connect(token=None).list_intents()
    assert anonymous.value.status == 401


async def test_intents_are_listed_by_entity_and_recipient_and_why_tells_the_story(client: AsyncHerald) -> None:
    phone = a_phone()
    first = an_event(phone, occurred_at="2026-11-29T10:15:00+05:45")
    second = an_event(phone, entity_id=first["entity"]["id"], occurred_at="2026-11-29T11:15:00+05:45")
    second["recipients"] = first["recipients"]
    older = (await client.post_event(first)).intents[0]
    newer = (await client.post_event(second)).intents[0]
    recipient = first["recipients"][0]["id"]

    page = await client.list_intents(entity=entity_of(first), recipient=recipient, limit=1)
    assert [i["key"] for i in page["intents"]] == [newer["key"]], "newest first"
    rest = await client.list_intents(entity=entity_of(first), recipient=recipient, cursor=page["next"])
    assert [i["key"] for i in rest["intents"]] == [older["key"]]
    assert rest.get("next") is None

    await sent(client, older["id"])
    await sent(client, newer["id"])
    story = await client.why(entity_of(first), recipient)
    assert [i["key"] for i in story] == [older["key"], newer["key"]], "oldest first"
    assert all(i["state"] == "sent" and i["attempts"][0]["outcome"] == "accepted" for i in story)
    assert await client.why(entity_of(first), "nobody") == []
