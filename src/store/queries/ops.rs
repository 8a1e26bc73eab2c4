//! Dead letters, the daily digest's bookkeeping, and retention.
//! Instantiated per backend by [`super::shared_queries`].

macro_rules! ops_queries {
    ($db:ty, $in_keys:literal, $keys_arg:path, $for_update:literal) => {
        pub async fn dead_letters_list(pool: &Pool<$db>, f: &DeadLetterFilter) -> StoreResult<Page<DeadLetter>> {
            let mut q: QueryBuilder<'_, $db> = QueryBuilder::new(concat!(
                "SELECT ",
                intent_columns!(),
                ", p.body AS content, e.body AS event_body FROM intents i
                 LEFT JOIN payloads p ON p.digest = i.payload_digest
                 LEFT JOIN payloads e ON e.digest = i.event_digest
                 WHERE i.dead_at IS NOT NULL"
            ));
            if let Some(tenant) = &f.tenant {
                q.push(" AND i.tenant = ").push_bind(tenant);
            }
            if let Some(r) = &f.reason {
                q.push(" AND i.reason = ").push_bind(r);
            }
            if let Some(since) = f.since_us {
                q.push(" AND i.dead_at >= ").push_bind(since);
            }
            if let Some(c) = &f.cursor {
                q.push(" AND (i.dead_at < ").push_bind(c.at);
                q.push(" OR (i.dead_at = ").push_bind(c.at).push(" AND i.key < ").push_bind(&c.id).push("))");
            }
            q.push(" ORDER BY i.dead_at DESC, i.key DESC LIMIT ").push_bind(i64::from(f.limit) + 1);
            let mut items: Vec<DeadLetter> = q.build_query_as().fetch_all(pool).await?;
            // A dead letter's `dead_at` is its `updated_at`.
            Ok(page(&mut items, f.limit, |d| Cursor::new(d.intent.updated_at, &d.intent.key)))
        }

        /// Dead letters by reason; `tenant` None counts every tenant (the ops digest).
        pub async fn dead_letters_summary(
            pool: &Pool<$db>,
            tenant: Option<&str>,
            since_us: i64,
            until_us: i64,
        ) -> StoreResult<Vec<(String, i64)>> {
            let rows = sqlx::query_as(
                "SELECT COALESCE(reason, 'unknown'), COUNT(*) FROM intents
                 WHERE dead_at IS NOT NULL AND ($1 IS NULL OR tenant = $1) AND dead_at >= $2 AND dead_at < $3
                 GROUP BY 1 ORDER BY 2 DESC, 1",
            )
            .bind(tenant)
            .bind(since_us)
            .bind(until_us)
            .fetch_all(pool)
            .await?;
            Ok(rows)
        }

        /// One tenant's dead letters by reason, with the oldest's time: the
        /// console's groups (the `intents_dead` index answers it).
        /// Dead letters by tenant and reason: one tenant's, or every tenant's.
        pub async fn dead_letters_groups(pool: &Pool<$db>, tenant: Option<&str>) -> StoreResult<Vec<DeadLetterGroup>> {
            let mut q: QueryBuilder<'_, $db> = QueryBuilder::new(
                "SELECT tenant, COALESCE(reason, 'unknown') AS reason, COUNT(*) AS count, MIN(dead_at) AS oldest_at
                 FROM intents WHERE dead_at IS NOT NULL",
            );
            if let Some(t) = tenant {
                q.push(" AND tenant = ").push_bind(t);
            }
            q.push(" GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2");
            Ok(q.build_query_as().fetch_all(pool).await?)
        }

        /// The newest `per_group` dead letters of every (tenant, reason)
        /// group: ranked from the `intents_dead` index alone, then read by
        /// key. (Two statements: joined in one, Postgres cannot foresee how
        /// few rows the ranking keeps and reads the whole table.) One
        /// tenant's, or every tenant's for None.
        pub async fn dead_letters_newest(
            pool: &Pool<$db>,
            tenant: Option<&str>,
            per_group: u32,
        ) -> StoreResult<Vec<IntentRow>> {
            let mut q: QueryBuilder<'_, $db> = QueryBuilder::new(
                "SELECT key FROM (
                     SELECT key, ROW_NUMBER() OVER (PARTITION BY tenant, reason ORDER BY dead_at DESC, key DESC) AS n
                     FROM intents WHERE dead_at IS NOT NULL",
            );
            if let Some(t) = tenant {
                q.push(" AND tenant = ").push_bind(t);
            }
            q.push(") ranked WHERE n <= ").push_bind(i64::from(per_group));
            let keys: Vec<String> = q.build_query_scalar().fetch_all(pool).await?;
            if keys.is_empty() {
                return Ok(Vec::new());
            }
            let rows = sqlx::query_as(concat!(
                "SELECT ",
                intent_columns!(),
                " FROM intents i WHERE i.key ",
                $in_keys,
                " ORDER BY i.tenant, COALESCE(i.reason, 'unknown'), i.dead_at DESC, i.key DESC"
            ))
            .bind($keys_arg(&keys))
            .fetch_all(pool)
            .await?;
            Ok(rows)
        }

        /// The newest dead letters of one reason, every tenant: the digest's examples.
        pub async fn dead_letters_examples(
            pool: &Pool<$db>,
            tenant: Option<&str>,
            reason: &str,
            since_us: i64,
            until_us: i64,
            limit: u32,
        ) -> StoreResult<Vec<IntentRow>> {
            // Each condition as its index reads it: `reason = $1` (not
            // COALESCE, which no index serves) and the tenant only when
            // given, so the newest `limit` come straight off `intents_dead`
            // whatever the number of dead letters.
            let mut q: QueryBuilder<'_, $db> =
                QueryBuilder::new(concat!("SELECT ", intent_columns!(), " FROM intents i WHERE i.dead_at IS NOT NULL"));
            if let Some(t) = tenant {
                q.push(" AND i.tenant = ").push_bind(t);
            }
            if reason == "unknown" {
                // The group a dead letter without a reason is counted in.
                q.push(" AND (i.reason IS NULL OR i.reason = 'unknown')");
            } else {
                q.push(" AND i.reason = ").push_bind(reason);
            }
            q.push(" AND i.dead_at >= ").push_bind(since_us);
            q.push(" AND i.dead_at < ").push_bind(until_us);
            q.push(" ORDER BY i.dead_at DESC, i.key DESC LIMIT ").push_bind(i64::from(limit));
            Ok(q.build_query_as().fetch_all(pool).await?)
        }

        /// The same intents back on the queue: same key, same frozen content, a
        /// fresh retry budget; each replay recorded. A dead letter without its
        /// content (never rendered, or pruned since) is refused, not queued.
        pub async fn dead_letters_replay(tx: &mut Tx<'_>, r: &Replay) -> StoreResult<Vec<ReplayResult>> {
            let keys: Vec<String> = match &r.selector {
                ReplaySelector::Ids(ids) => ids.clone(),
                // The replayable first, so that dead letters which can never be
                // replayed do not use up the limit call after call.
                ReplaySelector::Reason { reason, since_us } => sqlx::query_scalar(
                    "SELECT i.key FROM intents i LEFT JOIN payloads p ON p.digest = i.payload_digest
                     WHERE i.tenant = $1 AND i.dead_at IS NOT NULL AND i.reason = $2 AND i.dead_at >= $3
                     ORDER BY CASE WHEN p.digest IS NULL THEN 1 ELSE 0 END, i.dead_at LIMIT $4",
                )
                .bind(&r.tenant)
                .bind(reason)
                .bind(since_us.unwrap_or(i64::MIN))
                .bind(r.limit)
                .fetch_all(&mut **tx)
                .await?,
            };
            let mut out = Vec::with_capacity(keys.len());
            for key in keys {
                let row: Option<(State, Option<String>, Option<String>)> = sqlx::query_as(concat!(
                    "SELECT state, reason, payload_digest FROM intents WHERE tenant = $1 AND key = $2",
                    $for_update
                ))
                .bind(&r.tenant)
                .bind(&key)
                .fetch_optional(&mut **tx)
                .await?;
                let outcome = match row {
                    None => ReplayOutcome::NotFound,
                    Some((state, _, _)) if !crate::lifecycle::replay::may_replay(state) => ReplayOutcome::NotDead(state),
                    Some((_, reason, None)) => ReplayOutcome::NoContent(reason.unwrap_or_default()),
                    Some((_, reason, Some(digest))) if !content_kept(tx, &digest, r.now_us).await? => {
                        ReplayOutcome::ContentPruned(reason.unwrap_or_default())
                    }
                    Some((_, reason, Some(_))) => {
                        super::intents_apply(tx, &[crate::lifecycle::replay::replayed(&key, r.now_us)]).await?;
                        // The replay request's trace, linked to the one that
                        // planned the intent.
                        sqlx::query(
                            "INSERT INTO jobs (intent_key, tenant, run_at, traceparent, links)
                             VALUES ($1, $2, $3, $4, (SELECT traceparent FROM intents WHERE key = $1))
                             ON CONFLICT (intent_key) DO UPDATE SET run_at = excluded.run_at, locked_until = NULL,
                                 traceparent = excluded.traceparent, links = excluded.links",
                        )
                        .bind(&key)
                        .bind(&r.tenant)
                        .bind(r.now_us)
                        .bind(r.traceparent.as_deref())
                        .execute(&mut **tx)
                        .await?;
                        sqlx::query(
                            "INSERT INTO dead_letter_replays (tenant, intent_key, replayed_at, previous_reason, requested_by)
                             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (intent_key, replayed_at) DO NOTHING",
                        )
                        .bind(&r.tenant)
                        .bind(&key)
                        .bind(r.now_us)
                        .bind(&reason)
                        .bind(&r.requested_by)
                        .execute(&mut **tx)
                        .await?;
                        ReplayOutcome::Queued
                    }
                };
                out.push(ReplayResult { key, outcome });
            }
            Ok(out)
        }

        /// Whether the content is still stored; if so it counts as used now, so
        /// that retention (which goes by latest use) cannot take it from under
        /// the replay. On Postgres a concurrent prune waits for this row lock
        /// and then sees the content as fresh.
        async fn content_kept(tx: &mut Tx<'_>, digest: &str, now_us: i64) -> StoreResult<bool> {
            let touched = sqlx::query(
                "UPDATE payloads SET created_at = CASE WHEN created_at < $2 THEN $2 ELSE created_at END WHERE digest = $1",
            )
            .bind(digest)
            .bind(now_us)
            .execute(&mut **tx)
            .await?
            .rows_affected();
            Ok(touched > 0)
        }

        /// Claims the ops digest of `slot`: true for exactly one caller at a
        /// time, until it is posted. Returns the window it covers. `now_us` is
        /// the clock that judges the lease (each backend says whose).
        pub async fn ops_digest_claim(pool: &Pool<$db>, c: &OpsDigestClaim, now_us: i64) -> StoreResult<Option<(i64, i64)>> {
            let row = sqlx::query_as(
                "INSERT INTO ops_digests (slot, since, until, lease_until) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (slot) DO UPDATE SET lease_until = excluded.lease_until
                 WHERE ops_digests.posted_at IS NULL AND ops_digests.lease_until <= $5
                 RETURNING since, until",
            )
            .bind(&c.slot)
            .bind(c.since_us)
            .bind(c.until_us)
            .bind(now_us.saturating_add(c.lease_us))
            .bind(now_us)
            .fetch_optional(pool)
            .await?;
            Ok(row)
        }

        pub async fn ops_digest_posted(pool: &Pool<$db>, slot: &str, now_us: i64, total: i64) -> StoreResult<()> {
            sqlx::query("UPDATE ops_digests SET posted_at = $2, total = $3 WHERE slot = $1")
                .bind(slot)
                .bind(now_us)
                .bind(total)
                .execute(pool)
                .await?;
            Ok(())
        }

        /// Where the next daily digest starts: the end of the last one posted.
        /// The last daily digest posted (manual posts are not the schedule's).
        pub async fn ops_digest_last(pool: &Pool<$db>) -> StoreResult<Option<OpsDigestRow>> {
            Ok(sqlx::query_as(
                "SELECT slot, since, until, posted_at, COALESCE(total, 0) AS total FROM ops_digests
                 WHERE posted_at IS NOT NULL AND slot NOT LIKE 'manual:%' ORDER BY until DESC LIMIT 1",
            )
            .fetch_optional(pool)
            .await?)
        }

        pub async fn ops_digest_last_until(pool: &Pool<$db>) -> StoreResult<Option<i64>> {
            let v: Option<i64> = sqlx::query_scalar("SELECT MAX(until) FROM ops_digests WHERE posted_at IS NOT NULL AND slot NOT LIKE 'manual:%'")
                .fetch_one(pool)
                .await?;
            Ok(v)
        }

        /// One batch of one retention step; returns the rows it touched.
        pub async fn retention_batch(pool: &Pool<$db>, step: PruneStep, cutoff_us: i64, batch: i64) -> StoreResult<u64> {
            let mut tx = pool.begin().await?;
            let n = match step {
                PruneStep::AttemptDiagnostics => sqlx::query(
                    "UPDATE attempts SET error = NULL WHERE (intent_key, n) IN (
                         SELECT intent_key, n FROM attempts WHERE error IS NOT NULL AND finished_at < $1 LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                // A payload goes once nothing pending or visible still needs it:
                // no queued job's intent (content or event) and no inbox card.
                // Held digest members are covered by age: their payloads were
                // written (or reused) within the window, and config keeps
                // payloads longer than any digest window.
                PruneStep::Payloads => sqlx::query(
                    "DELETE FROM payloads WHERE created_at < $1 AND digest IN (
                         SELECT p.digest FROM payloads p
                         WHERE p.created_at < $1
                           AND p.digest NOT IN (
                               SELECT i.payload_digest FROM jobs j JOIN intents i ON i.key = j.intent_key
                               WHERE i.payload_digest IS NOT NULL
                               UNION ALL
                               SELECT i.event_digest FROM jobs j JOIN intents i ON i.key = j.intent_key)
                           AND NOT EXISTS (SELECT 1 FROM inbox_cards c WHERE c.payload_digest = p.digest)
                         LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                PruneStep::Intents => {
                    // Only an intent in a final state goes (`State::is_final`).
                    let finals = crate::store::queries::final_states();
                    let candidates: Vec<String> = sqlx::query_scalar(&format!(
                        "SELECT key FROM intents
                         WHERE created_at < $1 AND updated_at < $1 AND state IN ({finals})
                         LIMIT $2"
                    ))
                    .bind(cutoff_us)
                    .bind(batch)
                    .fetch_all(&mut *tx)
                    .await?;
                    // The state is checked again as the rows are deleted: an
                    // intent replayed in between is pending again and stays.
                    let keys: Vec<String> = if candidates.is_empty() {
                        Vec::new()
                    } else {
                        sqlx::query_scalar(&format!(
                            "DELETE FROM intents WHERE updated_at < $2 AND state IN ({finals}) AND key {} RETURNING key",
                            $in_keys
                        ))
                        .bind($keys_arg(&candidates))
                        .bind(cutoff_us)
                        .fetch_all(&mut *tx)
                        .await?
                    };
                    if !keys.is_empty() {
                        for table in [
                            concat!("DELETE FROM attempts WHERE intent_key ", $in_keys),
                            concat!("DELETE FROM inbox_entries WHERE intent_key ", $in_keys),
                            concat!("DELETE FROM receipts WHERE intent_key ", $in_keys),
                        ] {
                            sqlx::query(table).bind($keys_arg(&keys)).execute(&mut *tx).await?;
                        }
                    }
                    candidates.len() as u64
                }
                // An event's content record stays while any of its intents
                // does: a later post with other data is still a conflict.
                PruneStep::Events => sqlx::query(
                    // The outer age test is re-checked on a row an ingest
                    // touched meanwhile (Postgres), so a record that has just
                    // been reused is kept.
                    "DELETE FROM events WHERE created_at < $1 AND event_key IN (
                         SELECT e.event_key FROM events e
                         WHERE e.created_at < $1
                           AND NOT EXISTS (
                               SELECT 1 FROM intents i
                               WHERE i.tenant = e.tenant AND i.entity_type = e.entity_type AND i.entity_id = e.entity_id
                                 AND i.event_type = e.event_type AND i.occurred_at = e.occurred_at)
                         LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                PruneStep::Requests => sqlx::query(
                    "DELETE FROM requests WHERE (tenant, identity) IN (
                         SELECT tenant, identity FROM requests WHERE created_at < $1 LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                // A closed window is only needed while a member planned inside
                // it may still arrive (it is then sent on its own): long past
                // its close, and once its digest intent is gone, it goes. An
                // open window has members waiting, whatever its age.
                PruneStep::Digests => sqlx::query(
                    "DELETE FROM digests WHERE state = 'closed' AND closes_at < $1 AND key IN (
                         SELECT d.key FROM digests d
                         WHERE d.state = 'closed' AND d.closes_at < $1
                           AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.key = d.key)
                         LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                // A card is open while any in-app intent about its entity for
                // its recipient is left (queued, sent, or folded into it).
                // The outer conditions are checked again as rows are deleted,
                // so a card a delivery has just moved forward stays.
                PruneStep::InboxCards => sqlx::query(
                    "DELETE FROM inbox_cards WHERE updated_at < $1 AND card_id IN (
                         SELECT c.card_id FROM inbox_cards c
                         WHERE c.updated_at < $1
                           AND NOT EXISTS (SELECT 1 FROM intents i WHERE i.key = c.intent_key)
                           AND NOT EXISTS (SELECT 1 FROM intents i
                               WHERE i.tenant = c.tenant AND i.entity_type = c.entity_type AND i.entity_id = c.entity_id
                                 AND i.recipient_id = c.recipient_id AND i.channel = 'in_app')
                         LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                PruneStep::DeadLetterReplays => sqlx::query(
                    "DELETE FROM dead_letter_replays WHERE (intent_key, replayed_at) IN (
                         SELECT r.intent_key, r.replayed_at FROM dead_letter_replays r
                         WHERE r.replayed_at < $1 OR NOT EXISTS (SELECT 1 FROM intents i WHERE i.key = r.intent_key)
                         LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                // A version's age counts from when a newer one replaced it (a
                // planner may have read it just before), so the current version
                // never qualifies; nor does one an intent was decided by.
                PruneStep::PreferenceVersions => sqlx::query(
                    "DELETE FROM recipient_preferences WHERE (tenant, recipient_id, version) IN (
                         SELECT p.tenant, p.recipient_id, p.version FROM recipient_preferences p
                         WHERE p.created_at < $1
                           AND EXISTS (SELECT 1 FROM recipient_preferences n
                               WHERE n.tenant = p.tenant AND n.recipient_id = p.recipient_id
                                 AND n.version > p.version AND n.created_at < $1)
                           AND NOT EXISTS (SELECT 1 FROM recipients r
                               WHERE r.tenant = p.tenant AND r.id = p.recipient_id AND r.preferences_version = p.version)
                           AND NOT EXISTS (SELECT 1 FROM intents i
                               WHERE i.tenant = p.tenant AND i.recipient_id = p.recipient_id
                                 AND i.preferences_version = p.version)
                         LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                PruneStep::RejectedBodies => sqlx::query(
                    "UPDATE rejected_messages SET body = NULL WHERE id IN (
                         SELECT id FROM rejected_messages WHERE body IS NOT NULL AND created_at < $1 LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                PruneStep::Publications => sqlx::query(
                    "DELETE FROM publications WHERE msg_id IN (
                         SELECT msg_id FROM publications WHERE published_at IS NOT NULL AND published_at < $1 LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                PruneStep::RejectedMessages => sqlx::query(
                    "DELETE FROM rejected_messages WHERE id IN (
                         SELECT id FROM rejected_messages WHERE created_at < $1 LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
                PruneStep::IngestTally => sqlx::query(
                    "DELETE FROM ingest_tally WHERE (tenant, minute, kind) IN (
                         SELECT tenant, minute, kind FROM ingest_tally WHERE minute < $1 LIMIT $2)",
                )
                .bind(cutoff_us)
                .bind(batch)
                .execute(&mut *tx)
                .await?
                .rows_affected(),
            };
            tx.commit().await?;
            Ok(n)
        }
    };
}
pub(crate) use ops_queries;
