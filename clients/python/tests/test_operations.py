"""Dead letters and their replay, the suppression list and the shadow report,
against a live Herald whose SMS provider refuses or accepts as told."""

from __future__ import annotations

import pytest
from conftest import LOOKOUT_TOKEN, Connect, RunningHerald
from fakes import FakeSms
from support import a_phone, an_event, wait_for

from herald_client import AsyncHerald, EventConflict, NotFound
from herald_client.types import DeadLetter, IntentDetail, ShadowReport, Suppression

pytestmark = pytest.mark.anyio


async def in_state(client: AsyncHerald, id: str, state: str) -> IntentDetail:
    async def probe() -> IntentDetail | None:
        intent = await client.get_intent(id)
        return intent if intent["state"] == state else None

    return await wait_for(f"intent {id} {state}", probe)


async def test_a_permanent_failure_is_a_dead_letter_and_its_replay_delivers(
    client: AsyncHerald, fake_sms: FakeSms
) -> None:
    phone = a_phone()
    fake_sms.refuse(phone)
    [intent] = (await client.post_event(an_event(phone))).intents

    dead = await in_state(client, intent["id"], "dead")
    assert dead["reason"] == "invalid_destination"
    assert [a["outcome"] for a in dead["attempts"]] == ["permanent"], "a permanent failure is not retried"

    async def listed() -> DeadLetter | None:
        page = await client.list_dead_letters(reason="invalid_destination", limit=500)
        return next((d for d in page["dead_letters"] if d["id"] == intent["id"]), None)

    letter = await wait_for("the dead letter listed", listed)
    assert letter["tenant"] == "acme" and letter["event"] is not None
    summary = await client.dead_letter_summary()
    assert summary["by_reason"]["invalid_destination"] >= 1 and summary["total"] >= 1

    fake_sms.accept(phone)
    replay = await client.replay_dead_letters(ids=[intent["id"]])
    assert (replay["replayed"], replay["skipped"]) == ([intent["id"]], [])

    delivered = await in_state(client, intent["id"], "sent")
    assert [a["outcome"] for a in delivered["attempts"]] == ["permanent", "accepted"]
    [replayed] = delivered["replays"]
    assert (replayed["previous_reason"], replayed["requested_by"]) == ("invalid_destination", "ops")
    assert len(fake_sms.sent_to(phone)) == 2, "refused once, then delivered once"

    again = await client.replay_dead_letters(ids=[intent["id"]])
    assert again["replayed"] == [] and again["skipped_by_reason"] == {"not_dead": 1}


async def test_a_bounce_suppresses_the_address_until_the_entry_is_removed(
    client: AsyncHerald, herald: RunningHerald
) -> None:
    phone = a_phone()
    first = an_event(phone)
    [intent] = (await client.post_event(first)).intents
    await in_state(client, intent["id"], "sent")

    receipt = herald.sign_receipt({"key": intent["key"], "status": "bounced", "reason": "unknown handset"})
    assert receipt.status_code == 200, receipt.text

    async def entry() -> Suppression | None:
        page = await client.list_suppressions(limit=500)
        return next((s for s in page["suppressions"] if s["source_intent"] == intent["id"]), None)

    suppression = await wait_for("the suppression entry", entry)
    assert (suppression["channel"], suppression["reason"]) == ("sms", "address_bounced")
    assert suppression["id"] is not None and phone not in suppression["address"], "the address is masked"
    assert (await client.get_intent(intent["id"]))["reason"] == "hard_bounce"

    later = an_event(phone, occurred_at="2026-11-30T10:15:00+05:45")
    later["recipients"] = first["recipients"]
    [held_back] = (await client.post_event(later)).intents
    assert (held_back["decision"], held_back["reason"]) == ("suppress", "address_bounced")

    removed = await client.remove_suppression(suppression["id"])
    assert removed == {"removed": suppression["id"]}
    assert await entry() is None
    with pytest.raises(NotFound):
        await client.remove_suppression(suppression["id"])

    latest = an_event(phone, occurred_at="2026-12-01T10:15:00+05:45")
    latest["recipients"] = first["recipients"]
    [through] = (await client.post_event(latest)).intents
    assert through["decision"] == "send"


async def test_the_shadow_report_counts_posts_duplicates_and_conflicts(connect: Connect) -> None:
    client = connect(token=LOOKOUT_TOKEN)
    before = await client.shadow_report()
    event = an_event(a_phone())
    await client.post_event(event)
    await client.post_event(event)
    event["entity"]["version"] = 4
    with pytest.raises(EventConflict):
        await client.post_event(event)

    def grown(report: ShadowReport) -> tuple[int, int, int, int]:
        return (
            report["events_received"] - before["events_received"],
            report["events_new"] - before["events_new"],
            report["duplicates"]["replay"] - before["duplicates"]["replay"],
            report["mismatches"]["event_conflict"] - before["mismatches"]["event_conflict"],
        )

    # Each process adds its counts to the report every half second.
    async def counted() -> ShadowReport | None:
        report = await client.shadow_report()
        return report if grown(report) == (3, 1, 1, 1) else None

    after = await wait_for("the three posts counted", counted)
    assert after["tenant"] == "lookout"
    assert after["intents"]["sms"]["send"]["none"] >= 1
