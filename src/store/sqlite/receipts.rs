//! Delivery receipts on SQLite: recording one (the rules are
//! [`crate::lifecycle::receipt`]'s; these statements fetch what they need and
//! write what they decide, in one transaction), and reading them back.

use super::{SqliteStore, Tx, keys_arg};
use crate::intent::State;
use crate::store::{NewReceipt, ReceiptOutcome, ReceiptRow, ReceiptStore, ReceiptTarget, StoreResult};
use async_trait::async_trait;
use sqlx::SqlitePool;

/// Records one receipt against the intent it names: once (a repeat
/// changes nothing), moving the delivery status only forward, and
/// applying what a bounce or complaint leads to.
pub(super) async fn receipt_record(tx: &mut Tx<'_>, r: &NewReceipt) -> StoreResult<ReceiptOutcome> {
    use crate::lifecycle::receipt::receipt_id;
    use crate::lifecycle::receipt::{DeliveryStatus, advances, consequence, current, ends_retry};
    let key: Option<String> = match &r.target {
        ReceiptTarget::Key(k) => Some(k.clone()),
        ReceiptTarget::ProviderMessageId(id) => {
            sqlx::query_scalar(crate::store::shared::INTENT_OF_PROVIDER_MESSAGE_ID)
                .bind(id)
                .fetch_optional(&mut **tx)
                .await?
        }
    };
    let Some(key) = key else { return Ok(ReceiptOutcome::NotFound) };
    // One writer: two receipts for one intent take turns.
    let intent: Option<(String, String, Option<String>, State, i64)> =
        sqlx::query_as("SELECT tenant, channel, destination, state, attempts FROM intents WHERE key = $1")
            .bind(&key)
            .fetch_optional(&mut **tx)
            .await?;
    let Some((tenant, channel, destination, state, attempts)) = intent else {
        return Ok(ReceiptOutcome::NotFound);
    };
    if r.channel.as_ref().is_some_and(|c| *c != channel) {
        return Ok(ReceiptOutcome::NotFound);
    }
    let taken: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM attempts
         WHERE intent_id = (SELECT id FROM intents WHERE key = $1) AND (outcome IN ('accepted', 'unknown') OR finished_at IS NULL)",
    )
    .bind(&key)
    .fetch_one(&mut **tx)
    .await?;
    if let Some(why) = crate::lifecycle::receipt::refusal(&channel, taken) {
        return Ok(ReceiptOutcome::Refused { intent_key: key, why });
    }
    let applied_before: Vec<String> =
        sqlx::query_scalar("SELECT status FROM receipts WHERE intent_key = $1 AND applied")
            .bind(&key)
            .fetch_all(&mut **tx)
            .await?;
    let before = current(applied_before.iter().filter_map(|s| DeliveryStatus::parse(s)));
    let applied = advances(before, r.status);
    let ends = if applied { ends_retry(state, attempts, r.status) } else { None };
    let id = receipt_id(&key, &r.source, r.provider_message_id.as_deref(), &r.provider_status);
    let inserted = sqlx::query(
        "INSERT INTO receipts (id, intent_key, source, provider_message_id, status, provider_status, reason,
                               received_at, applied, ended_retry)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) ON CONFLICT (id) DO NOTHING",
    )
    .bind(&id)
    .bind(&key)
    .bind(&r.source)
    .bind(&r.provider_message_id)
    .bind(r.status.as_str())
    .bind(&r.provider_status)
    .bind(&r.reason)
    .bind(r.now_us)
    .bind(applied)
    .bind(ends.is_some())
    .execute(&mut **tx)
    .await?
    .rows_affected();
    let duplicate = inserted == 0;
    let (mut dead, mut suppressed) = (None, false);
    if applied && !duplicate {
        if crate::lifecycle::receipt::publishes_delivered(r.status, applied) {
            super::publications_write(tx, std::slice::from_ref(&key), Some(r.now_us)).await?;
        }
        // What the receipt does to the intent is `lifecycle::receipt`'s.
        let changes = crate::lifecycle::receipt::changes(&key, state, attempts, r.status, r.now_us);
        super::intents_apply(tx, &changes).await?;
        if ends.is_some() {
            // The provider had the message: the retry it waits for
            // would send it again. Its job ends with it.
            sqlx::query("DELETE FROM jobs WHERE intent_id = (SELECT id FROM intents WHERE key = $1)")
                .bind(&key)
                .execute(&mut **tx)
                .await?;
        }
        dead = changes.iter().filter(|c| c.to == State::Dead).find_map(|c| c.reason.flatten());
        let then = consequence(r.status);
        let kind = crate::recipient::keyed::kind_of(&channel);
        if let (Some(reason), Some(kind), Some(address)) = (then.suppress, kind, destination.as_deref()) {
            let facts = crate::recipient::keyed::facts(&r.suppression_key, &tenant, kind, address, &key);
            // An entry of the old scheme for this address (its intent
            // pruned, or written by the previous release) is rekeyed
            // here, where the address is known: one address, one entry.
            let legacy = crate::recipient::keyed::legacy_hash(&tenant, kind, address);
            let keyed: i64 =
                sqlx::query_scalar("SELECT COUNT(*) FROM suppressions WHERE tenant = $1 AND address_hash = $2")
                    .bind(&tenant)
                    .bind(&facts.lookup)
                    .fetch_one(&mut **tx)
                    .await?;
            if keyed == 0 {
                sqlx::query(
                    "UPDATE suppressions SET address_hash = $3, keyed = TRUE, id = COALESCE(id, $4)
                     WHERE tenant = $1 AND address_hash = $2",
                )
                .bind(&tenant)
                .bind(&legacy)
                .bind(&facts.lookup)
                .bind(crate::recipient::keyed::entry_id(&tenant, &key))
                .execute(&mut **tx)
                .await?;
            } else {
                sqlx::query("DELETE FROM suppressions WHERE tenant = $1 AND address_hash = $2")
                    .bind(&tenant)
                    .bind(&legacy)
                    .execute(&mut **tx)
                    .await?;
            }
            suppressed = sqlx::query(
                "INSERT INTO suppressions (tenant, address_hash, channel, masked, domain, reason, source_intent,
                                           detail, created_at, id, keyed)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, TRUE)
                 ON CONFLICT (tenant, address_hash) DO NOTHING",
            )
            .bind(&tenant)
            .bind(&facts.lookup)
            .bind(&channel)
            .bind(&facts.masked)
            .bind(&facts.domain)
            .bind(reason.as_str())
            .bind(&key)
            .bind(&r.reason)
            .bind(r.now_us)
            .bind(&facts.id)
            .execute(&mut **tx)
            .await?
            .rows_affected()
                == 1;
        }
    }
    let delivery_status = if applied && !duplicate { Some(r.status) } else { before };
    Ok(ReceiptOutcome::Recorded {
        intent_key: key,
        tenant,
        delivery_status,
        applied: applied && !duplicate,
        duplicate,
        dead,
        suppressed,
        ended_retry: ends.is_some() && !duplicate,
    })
}

/// Every receipt of these intents, oldest first.
pub(super) async fn receipts_of(pool: &SqlitePool, keys: &[String]) -> StoreResult<Vec<ReceiptRow>> {
    let rows = sqlx::query_as(
        "SELECT id, intent_key, source, provider_message_id, status, provider_status, reason, received_at, applied,
                ended_retry
         FROM receipts WHERE intent_key IN (SELECT value FROM json_each($1)) ORDER BY intent_key, received_at, id",
    )
    .bind(keys_arg(keys))
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

#[async_trait]
impl ReceiptStore for SqliteStore {
    async fn receipt_record(&self, receipt: NewReceipt) -> StoreResult<ReceiptOutcome> {
        let mut tx = self.writer.begin().await?;
        let out = receipt_record(&mut tx, &receipt).await?;
        tx.commit().await?;
        Ok(out)
    }
}
