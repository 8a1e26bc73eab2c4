//! Reads for the API, the console and the CLI on SQLite: intents with their
//! attempts and receipts, and the shadow report's figures.

use super::{SqliteStore, dead_letters, keys_arg, queue, receipts, suppressions};
use crate::store::shared::{REPLAYS_OF_INTENT, page};
use crate::store::{
    AttemptRow, Cursor, DeadLetter, DeadLetterFilter, DeadLetterGroup, IntentCount, IntentDetail, IntentFilter,
    IntentRow, Page, PlannedFilter, PlannedIntent, QueueStats, ReceiptRow, ReportFilter, ReportRows, SmsCount,
    StoreError, StoreResult, TallyKind, TemplateErrorCount, ViewStore,
};
use async_trait::async_trait;
use sqlx::{QueryBuilder, Sqlite, SqlitePool};

pub(super) async fn intent_get(pool: &SqlitePool, tenant: &str, key: &str) -> StoreResult<Option<IntentDetail>> {
    let intent: Option<IntentRow> = sqlx::query_as(
        "SELECT i.key, i.tenant, i.event_type, i.entity_type, i.entity_id, i.entity_version, i.occurred_at,
             i.channel, i.recipient_id, i.destination, i.locale, i.template_id, i.template_revision, i.event_digest,
             i.payload_digest, i.decision, i.reason, i.detail, i.state, i.attempts, i.created_at, i.updated_at,
             i.preferences_version, i.link_key, i.retry_base, i.mode FROM intents i WHERE i.tenant = $1
         AND i.key = $2",
    )
    .bind(tenant)
    .bind(key)
    .fetch_optional(pool)
    .await?;
    let Some(intent) = intent else { return Ok(None) };
    let (content, event_body): (Option<String>, Option<String>) =
        sqlx::query_as(crate::store::shared::MESSAGE_AND_BODY_OF_INTENT)
            .bind(key)
            .fetch_optional(pool)
            .await?
            .unwrap_or_default();
    let attempts = sqlx::query_as(
        "SELECT i.key AS intent_key, a.n, a.started_at, a.finished_at, a.outcome, a.error_class, a.provider_status,
             a.provider_message_id, a.error, a.retry_after, a.retry_at, a.provider, a.possible_duplicate
         FROM attempts a JOIN intents i ON i.id = a.intent_id WHERE i.key = $1
         ORDER BY a.n",
    )
    .bind(key)
    .fetch_all(pool)
    .await?;
    let receipts = receipts::receipts_of(pool, std::slice::from_ref(&intent.key)).await?;
    let replays = sqlx::query_as(REPLAYS_OF_INTENT).bind(key).fetch_all(pool).await?;
    Ok(Some(IntentDetail { intent, content, event_body, attempts, receipts, replays }))
}

pub(super) async fn intents_list(pool: &SqlitePool, f: &IntentFilter) -> StoreResult<Page<IntentRow>> {
    let mut items: Vec<IntentRow> = list_query(f).build_query_as().fetch_all(pool).await?;
    Ok(page(&mut items, f.limit, |r| Cursor::new(r.created_at, &r.key)))
}

/// The list's statement. Every condition is pushed only when given, so each
/// search is one plain statement its index serves (no `$1 IS NULL OR …`).
fn list_query(f: &IntentFilter) -> QueryBuilder<'_, Sqlite> {
    let mut q: QueryBuilder<'_, Sqlite> = QueryBuilder::new(
        "SELECT i.key, i.tenant, i.event_type, i.entity_type, i.entity_id, i.entity_version, i.occurred_at,
             i.channel, i.recipient_id, i.destination, i.locale, i.template_id, i.template_revision, i.event_digest,
             i.payload_digest, i.decision, i.reason, i.detail, i.state, i.attempts, i.created_at, i.updated_at,
             i.preferences_version, i.link_key, i.retry_base, i.mode FROM intents i WHERE 1 = 1",
    );
    match &f.tenant {
        Some(t) => {
            q.push(" AND i.tenant = ").push_bind(t);
        }
        // Every tenant (an admin's search): the tenant-led indexes, one tenant
        // at a time, the tenants found by a loose scan of a tenant-led index
        // (one probe per tenant), as on Postgres; migration 0063 dropped the
        // indexes of its own this search had, which every ingest paid for.
        None => {
            q.push(
                " AND i.tenant IN (
                     WITH RECURSIVE t(tenant) AS (
                         SELECT (SELECT tenant FROM intents ORDER BY tenant LIMIT 1)
                         UNION ALL
                         SELECT (SELECT n.tenant FROM intents n WHERE n.tenant > t.tenant ORDER BY n.tenant LIMIT 1)
                         FROM t WHERE t.tenant IS NOT NULL)
                     SELECT tenant FROM t WHERE tenant IS NOT NULL)",
            );
        }
    }
    if let Some((kind, id)) = &f.entity {
        q.push(" AND i.entity_type = ").push_bind(kind).push(" AND i.entity_id = ").push_bind(id);
    }
    if let Some(r) = &f.recipient_id {
        q.push(" AND i.recipient_id = ").push_bind(r);
    }
    if let Some(s) = f.state {
        q.push(" AND i.state = ").push_bind(s);
    }
    if let Some(c) = &f.cursor {
        q.push(" AND (i.created_at < ").push_bind(c.at);
        q.push(" OR (i.created_at = ").push_bind(c.at).push(" AND i.key < ").push_bind(&c.id).push("))");
    }
    q.push(" ORDER BY i.created_at DESC, i.key DESC LIMIT ").push_bind(i64::from(f.limit) + 1);
    q
}

/// The tenant an intent belongs to (an `admin` opening it by key).
pub(super) async fn intent_tenant(pool: &SqlitePool, key: &str) -> StoreResult<Option<String>> {
    Ok(sqlx::query_scalar("SELECT tenant FROM intents WHERE key = $1").bind(key).fetch_optional(pool).await?)
}

/// Finished attempts in [since, until) by outcome, most first: one tenant's
/// (through their intents) or every tenant's.
pub(super) async fn attempts_by_outcome(
    pool: &SqlitePool,
    tenant: Option<&str>,
    since_us: i64,
    until_us: i64,
) -> StoreResult<Vec<(String, i64)>> {
    let mut q: QueryBuilder<'_, Sqlite> =
        QueryBuilder::new("SELECT COALESCE(a.outcome, 'unknown') AS outcome, COUNT(*) AS n FROM attempts a");
    if let Some(t) = tenant {
        q.push(" JOIN intents i ON i.id = a.intent_id AND i.tenant = ").push_bind(t);
    }
    q.push(" WHERE a.finished_at IS NOT NULL AND a.finished_at >= ").push_bind(since_us);
    q.push(" AND a.finished_at < ").push_bind(until_us);
    q.push(" GROUP BY 1 ORDER BY 2 DESC, 1");
    Ok(q.build_query_as().fetch_all(pool).await?)
}

/// Every attempt of these intents, in order.
pub(super) async fn attempts_of(pool: &SqlitePool, keys: &[String]) -> StoreResult<Vec<AttemptRow>> {
    let rows = sqlx::query_as(
        "SELECT i.key AS intent_key, a.n, a.started_at, a.finished_at, a.outcome, a.error_class, a.provider_status,
             a.provider_message_id, a.error, a.retry_after, a.retry_at, a.provider, a.possible_duplicate
         FROM attempts a JOIN intents i ON i.id = a.intent_id
         WHERE i.key IN (SELECT value FROM json_each($1)) ORDER BY i.key, a.n",
    )
    .bind(keys_arg(keys))
    .fetch_all(pool)
    .await?;
    Ok(rows)
}

/// The shadow report's figures. SQLite's `->>` reads a payload's text as
/// JSON as it is (Postgres needs a cast).
pub(super) async fn report_rows(pool: &SqlitePool, f: &ReportFilter) -> StoreResult<ReportRows> {
    let tenant = f.tenant.as_deref();
    let tally: Vec<(String, i64)> = sqlx::query_as(
        "SELECT kind, CAST(SUM(n) AS BIGINT) FROM ingest_tally
         WHERE ($1 IS NULL OR tenant = $1) AND minute >= $2 AND minute < $3 GROUP BY kind ORDER BY kind",
    )
    .bind(tenant)
    .bind(f.since_us)
    .bind(f.until_us)
    .fetch_all(pool)
    .await?;
    let intents: Vec<IntentCount> = sqlx::query_as(
        "SELECT channel, decision, reason, state, COUNT(*) AS n FROM intents
         WHERE ($1 IS NULL OR tenant = $1) AND created_at >= $2 AND created_at < $3
         GROUP BY channel, decision, reason, state ORDER BY channel, decision, reason, state",
    )
    .bind(tenant)
    .bind(f.since_us)
    .bind(f.until_us)
    .fetch_all(pool)
    .await?;
    let sms: Vec<SmsCount> = sqlx::query_as(
        "SELECT p.body->>'encoding' AS encoding, COUNT(*) AS messages,
                CAST(COALESCE(SUM(CAST(p.body->>'segments' AS BIGINT)), 0) AS BIGINT) AS segments
         FROM (SELECT COALESCE(i.content, (SELECT p.body FROM payloads p WHERE p.digest = i.payload_digest)) AS body
               FROM intents i
               WHERE ($1 IS NULL OR i.tenant = $1) AND i.created_at >= $2 AND i.created_at < $3
                 AND i.channel = 'sms' AND i.state IN ('shadowed', 'sent')) p
         WHERE p.body IS NOT NULL
         GROUP BY 1 ORDER BY 1",
    )
    .bind(tenant)
    .bind(f.since_us)
    .bind(f.until_us)
    .fetch_all(pool)
    .await?;
    // Caught when planned: the intent died before any attempt.
    let template_errors: Vec<TemplateErrorCount> = sqlx::query_as(
        "SELECT template_id, reason, COUNT(*) AS n FROM intents
         WHERE ($1 IS NULL OR tenant = $1) AND created_at >= $2 AND created_at < $3
           AND reason IN ('template_error', 'sms_too_long') AND attempts = 0
         GROUP BY template_id, reason ORDER BY template_id, reason",
    )
    .bind(tenant)
    .bind(f.since_us)
    .bind(f.until_us)
    .fetch_all(pool)
    .await?;
    let bus_rejected: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM rejected_messages
         WHERE ($1 IS NULL OR tenant = $1) AND created_at >= $2 AND created_at < $3",
    )
    .bind(tenant)
    .bind(f.since_us)
    .bind(f.until_us)
    .fetch_one(pool)
    .await?;
    Ok(ReportRows { tally: tally_kinds(tally)?, intents, sms, template_errors, bus_rejected })
}

/// The tally's kinds, read back from their text.
fn tally_kinds(tally: Vec<(String, i64)>) -> StoreResult<Vec<(TallyKind, i64)>> {
    tally
        .into_iter()
        .map(|(kind, n)| {
            TallyKind::parse(&kind)
                .map(|k| (k, n))
                .ok_or_else(|| StoreError::Corrupt(format!("ingest tally kind {kind:?}")))
        })
        .collect()
}

/// The intents the shadow comparison matches sends to. The digest's own
/// intent (a digest row of the same key) is left out: its members stand for it.
pub(super) async fn intents_planned(pool: &SqlitePool, f: &PlannedFilter) -> StoreResult<Vec<PlannedIntent>> {
    let mut q: QueryBuilder<'_, Sqlite> = QueryBuilder::new(
        "SELECT i.key, i.event_type, i.entity_type, i.entity_id, i.occurred_at, i.channel, i.recipient_id,
             i.destination, i.decision, i.reason, i.detail, i.state, i.mode, i.created_at FROM intents i
         WHERE i.tenant = ",
    );
    q.push_bind(&f.tenant).push(" AND i.created_at >= ").push_bind(f.since_us);
    q.push(" AND i.created_at < ").push_bind(f.until_us);
    if let Some(c) = &f.after {
        // The first bound alone is what lets the index start at the cursor.
        q.push(" AND i.created_at >= ").push_bind(c.at);
        q.push(" AND (i.created_at > ").push_bind(c.at).push(" OR i.key > ").push_bind(&c.id).push(")");
    }
    q.push(" AND NOT EXISTS (SELECT 1 FROM digests d WHERE d.key = i.key)");
    q.push(" ORDER BY i.created_at, i.key LIMIT ").push_bind(i64::from(f.limit));
    Ok(q.build_query_as().fetch_all(pool).await?)
}

#[async_trait]
impl ViewStore for SqliteStore {
    async fn intent_get(&self, tenant: &str, key: &str) -> StoreResult<Option<IntentDetail>> {
        intent_get(&self.reader, tenant, key).await
    }

    async fn intent_tenant(&self, key: &str) -> StoreResult<Option<String>> {
        intent_tenant(&self.reader, key).await
    }

    async fn intents_list(&self, filter: IntentFilter) -> StoreResult<Page<IntentRow>> {
        intents_list(&self.reader, &filter).await
    }

    async fn attempts_of(&self, keys: &[String]) -> StoreResult<Vec<AttemptRow>> {
        attempts_of(&self.reader, keys).await
    }

    async fn receipts_of(&self, keys: &[String]) -> StoreResult<Vec<ReceiptRow>> {
        receipts::receipts_of(&self.reader, keys).await
    }

    async fn dead_letters_list(&self, filter: DeadLetterFilter) -> StoreResult<Page<DeadLetter>> {
        dead_letters::dead_letters_list(&self.reader, &filter).await
    }

    async fn dead_letters_summary(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        dead_letters::dead_letters_summary(&self.reader, tenant, since_us, until_us).await
    }

    async fn dead_letters_groups(&self, tenant: Option<&str>) -> StoreResult<Vec<DeadLetterGroup>> {
        dead_letters::dead_letters_groups(&self.reader, tenant).await
    }

    async fn dead_letters_newest(&self, tenant: Option<&str>, per_group: u32) -> StoreResult<Vec<IntentRow>> {
        dead_letters::dead_letters_newest(&self.reader, tenant, per_group).await
    }

    async fn dead_letters_examples(
        &self,
        tenant: Option<&str>,
        reason: &str,
        since_us: i64,
        until_us: i64,
        limit: u32,
    ) -> StoreResult<Vec<IntentRow>> {
        dead_letters::dead_letters_examples(&self.reader, tenant, reason, since_us, until_us, limit).await
    }

    async fn queue_stats(&self, tenant: Option<&str>, now_us: i64) -> StoreResult<QueueStats> {
        queue::queue_stats(&self.reader, tenant, now_us).await
    }

    async fn attempts_by_outcome(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        attempts_by_outcome(&self.reader, tenant, since_us, until_us).await
    }

    async fn bounces_by_domain(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        suppressions::bounces_by_domain(&self.reader, tenant, since_us, until_us).await
    }

    async fn report_rows(&self, filter: ReportFilter) -> StoreResult<ReportRows> {
        report_rows(&self.reader, &filter).await
    }

    async fn intents_planned(&self, filter: PlannedFilter) -> StoreResult<Vec<PlannedIntent>> {
        intents_planned(&self.reader, &filter).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::OpsStore;

    /// What SQLite's planner makes of the list's statement for this filter.
    async fn plan(pool: &SqlitePool, f: &IntentFilter) -> Vec<String> {
        let sql = format!("EXPLAIN QUERY PLAN {}", list_query(f).sql());
        let rows: Vec<(i64, i64, i64, String)> = sqlx::query_as(&sql).fetch_all(pool).await.unwrap();
        rows.into_iter().map(|r| r.3).collect()
    }

    /// Every search the console and the API make, for one tenant and (an
    /// admin's) for every tenant, reads an index by what it names: none scans
    /// the intents, and none reads a whole tenant. Only the loose scan that
    /// finds the tenants may step into an index, one row a tenant.
    #[tokio::test]
    async fn every_search_reads_an_index_by_what_it_names() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("herald.db").display());
        let store = SqliteStore::connect(&url).await.unwrap();
        store.migrate().await.unwrap();
        let entity = Some(("purchase_order".to_string(), "PO-1".to_string()));
        let recipient = Some("u-1".to_string());
        for analyzed in [false, true] {
            if analyzed {
                sqlx::query("ANALYZE").execute(&store.writer).await.unwrap();
            }
            for tenant in [Some("acme".to_string()), None] {
                for (entity, recipient_id) in [(entity.clone(), None), (None, recipient.clone())] {
                    let f =
                        IntentFilter { tenant: tenant.clone(), entity, recipient_id, limit: 50, ..Default::default() };
                    let steps = plan(&store.reader, &f).await;
                    let outer = steps.iter().find(|s| s.contains(" i ")).cloned().unwrap_or_default();
                    assert!(
                        outer.starts_with("SEARCH i USING INDEX")
                            && outer.contains("tenant=?")
                            && outer.contains("AND"),
                        "{f:?} (analyzed: {analyzed}) reads the intents by tenant and what it names: {steps:#?}"
                    );
                    for step in steps.iter().filter(|s| s.starts_with("SCAN intents") || s.starts_with("SCAN i ")) {
                        assert!(
                            tenant.is_none() && step.contains("COVERING INDEX"),
                            "{f:?} (analyzed: {analyzed}): only an admin's loose scan of the tenants steps \
                             into an index: {steps:#?}"
                        );
                    }
                }
            }
        }
    }
}
