//! Delivery receipts and the suppression list. The rules (which way a status
//! may move, what a bounce leads to) are `crate::lifecycle::receipt`'s; these
//! queries fetch what they need and write what they decide, in one
//! transaction.
//! Instantiated per backend by [`super::shared_queries`].

macro_rules! receipts_queries {
    ($db:ty, $in_keys:literal, $keys_arg:path, $for_update:literal) => {
        /// Records one receipt against the intent it names: once (a repeat
        /// changes nothing), moving the delivery status only forward, and
        /// applying what a bounce or complaint leads to.
        pub async fn receipt_record(tx: &mut Tx<'_>, r: &NewReceipt) -> StoreResult<ReceiptOutcome> {
            use crate::lifecycle::receipt::{DeliveryStatus, advances, consequence, current, ends_retry};
            use crate::lifecycle::receipt::receipt_id;
            let key: Option<String> = match &r.target {
                ReceiptTarget::Key(k) => Some(k.clone()),
                ReceiptTarget::ProviderMessageId(id) => {
                    sqlx::query_scalar(
                        "SELECT intent_key FROM attempts WHERE provider_message_id = $1 ORDER BY n DESC LIMIT 1",
                    )
                    .bind(id)
                    .fetch_optional(&mut **tx)
                    .await?
                }
            };
            let Some(key) = key else { return Ok(ReceiptOutcome::NotFound) };
            // Locked on Postgres: two receipts for one intent take turns.
            let intent: Option<(String, String, Option<String>, State, i64)> = sqlx::query_as(concat!(
                "SELECT tenant, channel, destination, state, attempts FROM intents WHERE key = $1",
                $for_update
            ))
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
                 WHERE intent_key = $1 AND (outcome IN ('accepted', 'unknown') OR finished_at IS NULL)",
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
                    sqlx::query("DELETE FROM jobs WHERE intent_key = $1").bind(&key).execute(&mut **tx).await?;
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
        pub async fn receipts_of(pool: &Pool<$db>, keys: &[String]) -> StoreResult<Vec<ReceiptRow>> {
            let rows = sqlx::query_as(concat!(
                "SELECT id, intent_key, source, provider_message_id, status, provider_status, reason, received_at, applied,
                        ended_retry
                 FROM receipts WHERE intent_key ",
                $in_keys,
                " ORDER BY intent_key, received_at, id"
            ))
            .bind($keys_arg(keys))
            .fetch_all(pool)
            .await?;
            Ok(rows)
        }

        /// The tenant's entries among these address hashes.
        pub async fn suppressions_match(
            pool: &Pool<$db>,
            tenant: &str,
            hashes: &[String],
        ) -> StoreResult<Vec<SuppressionRow>> {
            if hashes.is_empty() {
                return Ok(Vec::new());
            }
            let rows = sqlx::query_as(concat!(
                "SELECT tenant, id, address_hash, channel, masked, domain, reason, source_intent, detail, created_at
                 FROM suppressions WHERE tenant = $2 AND address_hash ",
                $in_keys
            ))
            .bind($keys_arg(hashes))
            .bind(tenant)
            .fetch_all(pool)
            .await?;
            Ok(rows)
        }

        /// Newest first.
        pub async fn suppressions_list(
            pool: &Pool<$db>,
            tenant: &str,
            cursor: Option<&Cursor>,
            limit: u32,
        ) -> StoreResult<Page<SuppressionRow>> {
            let mut q: QueryBuilder<'_, $db> = QueryBuilder::new(
                "SELECT tenant, id, address_hash, channel, masked, domain, reason, source_intent, detail, created_at
                 FROM suppressions WHERE tenant = ",
            );
            q.push_bind(tenant);
            if let Some(c) = cursor {
                q.push(" AND (created_at < ").push_bind(c.at);
                q.push(" OR (created_at = ").push_bind(c.at).push(" AND source_intent < ").push_bind(&c.id).push("))");
            }
            q.push(" ORDER BY created_at DESC, source_intent DESC LIMIT ").push_bind(i64::from(limit) + 1);
            let mut items: Vec<SuppressionRow> = q.build_query_as().fetch_all(pool).await?;
            // The cursor names the source intent, never the address's lookup.
            Ok(page(&mut items, limit, |r| Cursor::new(r.created_at, &r.source_intent)))
        }

        /// Removes the tenant's entry of this id; false when there is none.
        pub async fn suppression_remove(pool: &Pool<$db>, tenant: &str, id: &str) -> StoreResult<bool> {
            let n = sqlx::query("DELETE FROM suppressions WHERE tenant = $1 AND id = $2")
                .bind(tenant)
                .bind(id)
                .execute(pool)
                .await?
                .rows_affected();
            Ok(n > 0)
        }

        pub async fn setting_get(pool: &Pool<$db>, name: &str) -> StoreResult<Option<String>> {
            Ok(sqlx::query_scalar("SELECT value FROM settings WHERE name = $1").bind(name).fetch_optional(pool).await?)
        }

        pub async fn setting_remove(pool: &Pool<$db>, name: &str) -> StoreResult<bool> {
            let n = sqlx::query("DELETE FROM settings WHERE name = $1").bind(name).execute(pool).await?.rows_affected();
            Ok(n > 0)
        }

        /// The value stored under `name`, storing `value` first when there is
        /// none: every process on the database settles on the first one written.
        pub async fn setting_get_or_insert(pool: &Pool<$db>, name: &str, value: &str, now_us: i64) -> StoreResult<String> {
            sqlx::query("INSERT INTO settings (name, value, created_at) VALUES ($1, $2, $3) ON CONFLICT (name) DO NOTHING")
                .bind(name)
                .bind(value)
                .bind(now_us)
                .execute(pool)
                .await?;
            Ok(sqlx::query_scalar("SELECT value FROM settings WHERE name = $1").bind(name).fetch_one(pool).await?)
        }

        /// Rekeys the entries the old unkeyed hash wrote, from the destination
        /// of the intent that put each there (checked against the old hash),
        /// and names every entry that has no id yet. An entry whose intent is
        /// gone keeps its old hash; one whose address is already listed under
        /// the key is a duplicate, and goes.
        pub async fn suppressions_rekey(
            pool: &Pool<$db>,
            key: &crate::recipient::keyed::SuppressionKey,
        ) -> StoreResult<crate::recipient::keyed::RekeyReport> {
            let unkeyed: Vec<(String, String, String, String, Option<String>, Option<String>)> = sqlx::query_as(
                "SELECT s.tenant, s.address_hash, s.channel, s.source_intent, s.id, i.destination
                 FROM suppressions s LEFT JOIN intents i ON i.key = s.source_intent
                 WHERE NOT s.keyed",
            )
            .fetch_all(pool)
            .await?;
            let mut report = crate::recipient::keyed::RekeyReport::default();
            for (tenant, old, channel, source_intent, id, destination) in unkeyed {
                let id = id.unwrap_or_else(|| crate::recipient::keyed::entry_id(&tenant, &source_intent));
                let kind = crate::recipient::keyed::kind_of(&channel);
                let address = match (kind, destination) {
                    (Some(kind), Some(d)) if crate::recipient::keyed::legacy_hash(&tenant, kind, &d) == old => Some((kind, d)),
                    _ => None,
                };
                let mut tx = pool.begin().await?;
                match address {
                    Some((kind, d)) => {
                        let lookup = key.lookup(&tenant, kind, &d);
                        let taken: i64 = sqlx::query_scalar(
                            "SELECT COUNT(*) FROM suppressions WHERE tenant = $1 AND address_hash = $2",
                        )
                        .bind(&tenant)
                        .bind(&lookup)
                        .fetch_one(&mut *tx)
                        .await?;
                        if taken == 0 {
                            sqlx::query(
                                "UPDATE suppressions SET address_hash = $3, id = $4, keyed = TRUE
                                 WHERE tenant = $1 AND address_hash = $2",
                            )
                            .bind(&tenant)
                            .bind(&old)
                            .bind(&lookup)
                            .bind(&id)
                            .execute(&mut *tx)
                            .await?;
                        } else {
                            sqlx::query("DELETE FROM suppressions WHERE tenant = $1 AND address_hash = $2")
                                .bind(&tenant)
                                .bind(&old)
                                .execute(&mut *tx)
                                .await?;
                        }
                        report.rekeyed += 1;
                    }
                    None => {
                        sqlx::query("UPDATE suppressions SET id = $3 WHERE tenant = $1 AND address_hash = $2 AND id IS NULL")
                            .bind(&tenant)
                            .bind(&old)
                            .bind(&id)
                            .execute(&mut *tx)
                            .await?;
                        report.left += 1;
                    }
                }
                tx.commit().await?;
            }
            // Intents the planner suppressed before the keyed list named
            // their entry by its unkeyed hash in `detail`: named by id
            // instead, once (the views do the same for any left).
            let done = "suppression.details_named";
            let named: Option<String> = sqlx::query_scalar("SELECT value FROM settings WHERE name = $1")
                .bind(done)
                .fetch_optional(pool)
                .await?;
            if named.is_none() {
                let old: Vec<(String, String, String)> = sqlx::query_as(
                    "SELECT key, tenant, detail FROM intents
                     WHERE reason IN ('address_bounced', 'address_complained') AND detail LIKE '%(entry %'",
                )
                .fetch_all(pool)
                .await?;
                for (key, tenant, detail) in old {
                    let renamed = crate::recipient::keyed::named_detail(&tenant, &detail);
                    if renamed != detail {
                        sqlx::query("UPDATE intents SET detail = $2 WHERE key = $1")
                            .bind(&key)
                            .bind(renamed.as_ref())
                            .execute(pool)
                            .await?;
                    }
                }
                sqlx::query(
                    "INSERT INTO settings (name, value, created_at) VALUES ($1, 'yes', $2) ON CONFLICT (name) DO NOTHING",
                )
                .bind(done)
                .bind(crate::clock::micros(jiff::Timestamp::now()))
                .execute(pool)
                .await?;
            }
            Ok(report)
        }

        /// New bounces in [since, until) by recipient domain (emails), most first;
        /// every tenant when `tenant` is None.
        pub async fn bounces_by_domain(
            pool: &Pool<$db>,
            tenant: Option<&str>,
            since_us: i64,
            until_us: i64,
        ) -> StoreResult<Vec<(String, i64)>> {
            let rows = sqlx::query_as(
                "SELECT COALESCE(domain, '(sms)') AS d, COUNT(*) AS n FROM suppressions
                 WHERE reason = 'address_bounced' AND created_at >= $1 AND created_at < $2
                   AND ($3 IS NULL OR tenant = $3)
                 GROUP BY d ORDER BY n DESC, d",
            )
            .bind(since_us)
            .bind(until_us)
            .bind(tenant)
            .fetch_all(pool)
            .await?;
            Ok(rows)
        }
    };
}
pub(crate) use receipts_queries;
