//! The in-app inbox on Postgres: one card per entity at its highest version.

use super::PostgresStore;
use crate::store::shared::page;
use crate::store::{Cursor, InboxCard, InboxDelivery, InboxStore, Page, StoreResult, inbox_card_id};
use async_trait::async_trait;
use sqlx::{PgPool, Postgres, Transaction};
use std::sync::LazyLock;

/// Is the delivered version newer than the card's? Versionless entities
/// order by `occurred_at`.
const NEWER_THAN_CARD: &str = "(COALESCE(excluded.version, -1) > COALESCE(inbox_cards.version, -1)
                   OR (COALESCE(excluded.version, -1) = COALESCE(inbox_cards.version, -1)
                       AND excluded.occurred_at > inbox_cards.occurred_at))";

/// A delivery's card: new, or the entity's card collapsing one more
/// delivery and taking the newer version's content. Built once: the
/// condition is the same for every column it moves.
static DELIVER: LazyLock<String> = LazyLock::new(|| {
    format!(
        "INSERT INTO inbox_cards (card_id, tenant, recipient_id, entity_type, entity_id, version, occurred_at,
             intent_key, payload_digest, collapsed, read_at, updated_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, NULL, $10)
         ON CONFLICT (card_id) DO UPDATE SET
             collapsed = inbox_cards.collapsed + 1,
             version = CASE WHEN {NEWER_THAN_CARD} THEN excluded.version ELSE inbox_cards.version END,
             occurred_at = CASE WHEN {NEWER_THAN_CARD} THEN excluded.occurred_at ELSE inbox_cards.occurred_at END,
             intent_key = CASE WHEN {NEWER_THAN_CARD} THEN excluded.intent_key ELSE inbox_cards.intent_key END,
             payload_digest = CASE WHEN {NEWER_THAN_CARD}
                 THEN excluded.payload_digest ELSE inbox_cards.payload_digest END,
             read_at = CASE WHEN {NEWER_THAN_CARD} THEN NULL ELSE inbox_cards.read_at END,
             updated_at = CASE WHEN {NEWER_THAN_CARD} THEN excluded.updated_at ELSE inbox_cards.updated_at END"
    )
});

pub(super) async fn inbox_deliver(tx: &mut Transaction<'_, Postgres>, d: &InboxDelivery) -> StoreResult<()> {
    let card_id = inbox_card_id(&d.tenant, &d.recipient_id, &d.entity_type, &d.entity_id);
    let first = sqlx::query(
        "INSERT INTO inbox_entries (intent_key, card_id) VALUES ($1, $2) ON CONFLICT (intent_key) DO NOTHING",
    )
    .bind(&d.intent_key)
    .bind(&card_id)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if first == 0 {
        return Ok(()); // this intent is in the inbox already
    }
    sqlx::query(DELIVER.as_str())
        .bind(&card_id)
        .bind(&d.tenant)
        .bind(&d.recipient_id)
        .bind(&d.entity_type)
        .bind(&d.entity_id)
        .bind(d.version)
        .bind(&d.occurred_at)
        .bind(&d.intent_key)
        .bind(&d.payload_digest)
        .bind(d.now_us)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

pub(super) async fn inbox_list(
    pool: &PgPool,
    tenant: &str,
    recipient_id: &str,
    cursor: Option<&Cursor>,
    limit: u32,
) -> StoreResult<Page<InboxCard>> {
    let (at, id) = cursor.map_or((i64::MAX, ""), |c| (c.at, c.id.as_str()));
    let mut items: Vec<InboxCard> = sqlx::query_as(
        "SELECT c.card_id, c.entity_type, c.entity_id, c.version, c.intent_key, c.collapsed, c.read_at,
                c.updated_at,
                COALESCE((SELECT i.content FROM intents i WHERE i.key = c.intent_key AND i.payload_digest = c.payload_digest),
                         (SELECT p.body FROM payloads p WHERE p.digest = c.payload_digest)) AS content
         FROM inbox_cards c
         WHERE c.tenant = $1 AND c.recipient_id = $2
           AND (c.updated_at < $3 OR (c.updated_at = $3 AND c.card_id < $4))
         ORDER BY c.updated_at DESC, c.card_id DESC LIMIT $5",
    )
    .bind(tenant)
    .bind(recipient_id)
    .bind(at)
    .bind(id)
    .bind(i64::from(limit) + 1)
    .fetch_all(pool)
    .await?;
    Ok(page(&mut items, limit, |c| Cursor::new(c.updated_at, &c.card_id)))
}

pub(super) async fn inbox_mark_read(
    pool: &PgPool,
    tenant: &str,
    recipient_id: &str,
    card_id: &str,
    now_us: i64,
) -> StoreResult<bool> {
    let n = sqlx::query(
        "UPDATE inbox_cards SET read_at = COALESCE(read_at, $4) WHERE tenant = $1 AND recipient_id = $2
         AND card_id = $3",
    )
    .bind(tenant)
    .bind(recipient_id)
    .bind(card_id)
    .bind(now_us)
    .execute(pool)
    .await?
    .rows_affected();
    Ok(n > 0)
}

#[async_trait]
impl InboxStore for PostgresStore {
    async fn inbox_deliver(&self, delivery: InboxDelivery) -> StoreResult<()> {
        let mut tx = self.pool.begin().await?;
        inbox_deliver(&mut tx, &delivery).await?;
        tx.commit().await?;
        Ok(())
    }

    async fn inbox_list(
        &self,
        tenant: &str,
        recipient_id: &str,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> StoreResult<Page<InboxCard>> {
        inbox_list(&self.pool, tenant, recipient_id, cursor, limit).await
    }

    async fn inbox_mark_read(&self, tenant: &str, recipient_id: &str, card_id: &str, now_us: i64) -> StoreResult<bool> {
        inbox_mark_read(&self.pool, tenant, recipient_id, card_id, now_us).await
    }
}
