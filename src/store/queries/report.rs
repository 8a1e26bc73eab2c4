//! The shadow report's reads and the ingest tally's writes. Instantiated per
//! backend by [`super::shared_queries`]; `$json_of` reads a payload's text as
//! JSON (SQLite's `->>` takes the text itself, Postgres needs `::jsonb`).

macro_rules! report_queries {
    ($db:ty, $json_of:literal) => {
        /// Adds to the tally, a statement per row (a batch holds one row per
        /// tenant, minute and kind, so a handful a second at most).
        pub async fn ingest_tally_add(pool: &Pool<$db>, rows: &[TallyRow]) -> StoreResult<()> {
            if rows.is_empty() {
                return Ok(());
            }
            let mut tx = pool.begin().await?;
            for r in rows {
                sqlx::query(
                    "INSERT INTO ingest_tally (tenant, minute, kind, n) VALUES ($1, $2, $3, $4)
                     ON CONFLICT (tenant, minute, kind) DO UPDATE SET n = ingest_tally.n + excluded.n",
                )
                .bind(&r.tenant)
                .bind(r.minute_us)
                .bind(r.kind.as_str())
                .bind(r.n)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
            Ok(())
        }

        pub async fn report_rows(pool: &Pool<$db>, f: &ReportFilter) -> StoreResult<ReportRows> {
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
            let sms: Vec<SmsCount> = sqlx::query_as(concat!(
                "SELECT ", $json_of, "->>'encoding' AS encoding, COUNT(*) AS messages,
                        CAST(COALESCE(SUM(CAST(", $json_of, "->>'segments' AS BIGINT)), 0) AS BIGINT) AS segments
                 FROM intents i JOIN payloads p ON p.digest = i.payload_digest
                 WHERE ($1 IS NULL OR i.tenant = $1) AND i.created_at >= $2 AND i.created_at < $3
                   AND i.channel = 'sms' AND i.state IN ('shadowed', 'sent')
                 GROUP BY 1 ORDER BY 1"
            ))
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
            let tally = tally
                .into_iter()
                .map(|(kind, n)| {
                    TallyKind::parse(&kind)
                        .map(|k| (k, n))
                        .ok_or_else(|| StoreError::Corrupt(format!("ingest tally kind {kind:?}")))
                })
                .collect::<StoreResult<_>>()?;
            Ok(ReportRows { tally, intents, sms, template_errors, bus_rejected })
        }
    };
}
pub(crate) use report_queries;
