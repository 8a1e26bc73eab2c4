//! The part of `impl Store` that is the same for every backend: each method
//! hands its pool (the reader or the writer) to the shared query of the same
//! name. A backend writes only what differs — migrations, claiming, batch
//! recording, ingest's wake-up, whose clock judges a lease — and lets this macro write the rest, so the
//! two implementations cannot drift apart.

macro_rules! store_impl {
    ($ty:ty, reader = $reader:ident, writer = $writer:ident, { $($own:tt)* }) => {
        #[async_trait::async_trait]
        impl Store for $ty {
            $($own)*

            async fn recipients_get(&self, tenant: &str, ids: &[String]) -> StoreResult<Vec<RecipientRow>> {
                q::recipients_get(&self.$reader, tenant, ids).await
            }

            async fn recipient_put(&self, put: RecipientPut) -> StoreResult<RecipientRow> {
                q::recipient_put(&self.$writer, &put).await
            }

            async fn recipient_preferences_get(&self, tenant: &str, id: &str, version: i64) -> StoreResult<Option<PreferencesVersion>> {
                q::recipient_preferences_get(&self.$reader, tenant, id, version).await
            }

            async fn events_ingest_batch(&self, batch: Vec<Ingest>) -> Vec<StoreResult<IngestOutcome>> {
                let mut out = match self.ingest_tx(&batch).await {
                    Ok(out) => out.into_iter().map(Some).collect(),
                    // A database that cannot be reached fails the whole batch
                    // at once: running each request alone would make the last
                    // caller wait out one connection timeout per request.
                    Err(e) if e.is_unreachable() => {
                        tracing::warn!(error = %e, requests = batch.len(), "ingest batch failed: the database could not be reached");
                        let reason = e.to_string();
                        return batch.iter().map(|_| Err(StoreError::Unreachable(reason.clone()))).collect();
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, requests = batch.len(), "ingest batch failed; running its requests one by one");
                        batch.iter().map(|_| None).collect::<Vec<_>>()
                    }
                };
                // A request that failed inside the batch, or a batch that failed
                // as a whole, is run again on its own: one request's failure is
                // never another's.
                for (slot, ingest) in out.iter_mut().zip(&batch) {
                    if !matches!(slot, Some(Ok(_))) {
                        *slot = Some(super::ingest_alone(ingest, |one| self.ingest_tx(one)).await);
                    }
                }
                out.into_iter().flatten().collect()
            }

            async fn request_find(&self, tenant: &str, identity: &str, fingerprint: &str) -> StoreResult<Option<RequestSeen>> {
                let mut conn = self.$reader.acquire().await?;
                q::request_seen(&mut conn, tenant, identity, fingerprint).await
            }

            async fn requests_find(&self, lookups: &[RequestLookup]) -> Vec<StoreResult<Option<RequestSeen>>> {
                let gathered = match self.$reader.acquire().await {
                    Ok(mut conn) => q::requests_seen(&mut conn, lookups).await,
                    Err(e) => Err(e.into()),
                };
                super::gathered_or_each_alone("request lookup", lookups, gathered, |l| {
                    self.request_find(&l.tenant, &l.identity, &l.fingerprint)
                })
                .await
            }

            async fn event_digest(&self, event_key: &str) -> StoreResult<Option<String>> {
                let mut conn = self.$reader.acquire().await?;
                q::event_digest(&mut conn, event_key).await
            }

            async fn intents_status(&self, tenant: &str, keys: &[String]) -> StoreResult<Vec<IntentStatus>> {
                let mut conn = self.$reader.acquire().await?;
                q::intents_status(&mut conn, tenant, keys).await
            }

            async fn intent_get(&self, tenant: &str, key: &str) -> StoreResult<Option<IntentDetail>> {
                q::intent_get(&self.$reader, tenant, key).await
            }

            async fn intent_tenant(&self, key: &str) -> StoreResult<Option<String>> {
                q::intent_tenant(&self.$reader, key).await
            }

            async fn intents_list(&self, filter: IntentFilter) -> StoreResult<Page<IntentRow>> {
                q::intents_list(&self.$reader, &filter).await
            }

            async fn digests_due(&self, now_us: i64, limit: u32) -> StoreResult<Vec<DigestRow>> {
                q::digests_due(&self.$reader, now_us, limit).await
            }

            async fn digest_members(&self, key: &str) -> StoreResult<Vec<DigestMember>> {
                q::digest_members(&self.$reader, key).await
            }

            async fn digest_close(&self, close: DigestClose) -> StoreResult<DigestCloseOutcome> {
                let mut tx = self.$writer.begin().await?;
                let outcome = q::digest_close(&mut tx, &close).await?;
                if outcome == DigestCloseOutcome::Closed {
                    tx.commit().await?;
                    self.jobs_queued();
                } else {
                    tx.rollback().await?;
                }
                Ok(outcome)
            }

            async fn inbox_deliver(&self, delivery: InboxDelivery) -> StoreResult<()> {
                let mut tx = self.$writer.begin().await?;
                q::inbox_deliver(&mut tx, &delivery).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn inbox_list(&self, tenant: &str, recipient_id: &str, cursor: Option<&Cursor>, limit: u32) -> StoreResult<Page<InboxCard>> {
                q::inbox_list(&self.$reader, tenant, recipient_id, cursor, limit).await
            }

            async fn inbox_mark_read(&self, tenant: &str, recipient_id: &str, card_id: &str, now_us: i64) -> StoreResult<bool> {
                q::inbox_mark_read(&self.$writer, tenant, recipient_id, card_id, now_us).await
            }

            async fn dead_letters_list(&self, filter: DeadLetterFilter) -> StoreResult<Page<DeadLetter>> {
                q::dead_letters_list(&self.$reader, &filter).await
            }

            async fn attempts_of(&self, keys: &[String]) -> StoreResult<Vec<AttemptRow>> {
                q::attempts_of(&self.$reader, keys).await
            }

            async fn dead_letters_summary(&self, tenant: Option<&str>, since_us: i64, until_us: i64) -> StoreResult<Vec<(String, i64)>> {
                q::dead_letters_summary(&self.$reader, tenant, since_us, until_us).await
            }

            async fn dead_letters_groups(&self, tenant: Option<&str>) -> StoreResult<Vec<DeadLetterGroup>> {
                q::dead_letters_groups(&self.$reader, tenant).await
            }

            async fn dead_letters_newest(&self, tenant: Option<&str>, per_group: u32) -> StoreResult<Vec<IntentRow>> {
                q::dead_letters_newest(&self.$reader, tenant, per_group).await
            }

            async fn dead_letters_examples(&self, tenant: Option<&str>, reason: &str, since_us: i64, until_us: i64, limit: u32) -> StoreResult<Vec<IntentRow>> {
                q::dead_letters_examples(&self.$reader, tenant, reason, since_us, until_us, limit).await
            }

            async fn dead_letters_replay(&self, replay: Replay) -> StoreResult<Vec<ReplayResult>> {
                let mut tx = self.$writer.begin().await?;
                let out = q::dead_letters_replay(&mut tx, &replay).await?;
                tx.commit().await?;
                self.jobs_queued();
                Ok(out)
            }

            async fn ops_digest_posted(&self, slot: &str, now_us: i64, total: i64) -> StoreResult<()> {
                q::ops_digest_posted(&self.$writer, slot, now_us, total).await
            }

            async fn ops_digest_last_until(&self) -> StoreResult<Option<i64>> {
                q::ops_digest_last_until(&self.$reader).await
            }

            async fn ops_digest_last(&self) -> StoreResult<Option<OpsDigestRow>> {
                q::ops_digest_last(&self.$reader).await
            }

            async fn queue_stats(&self, tenant: Option<&str>, now_us: i64) -> StoreResult<QueueStats> {
                q::queue_stats(&self.$reader, tenant, now_us).await
            }

            async fn attempts_by_outcome(&self, tenant: Option<&str>, since_us: i64, until_us: i64) -> StoreResult<Vec<(String, i64)>> {
                q::attempts_by_outcome(&self.$reader, tenant, since_us, until_us).await
            }

            async fn retention_batch(&self, step: PruneStep, cutoff_us: i64, batch: i64) -> StoreResult<u64> {
                q::retention_batch(&self.$writer, step, cutoff_us, batch).await
            }

            async fn wait_for_work(&self, timeout: Duration) {
                let _ = tokio::time::timeout(timeout, self.wake.notified()).await;
            }

            async fn receipt_record(&self, receipt: NewReceipt) -> StoreResult<ReceiptOutcome> {
                let mut tx = self.$writer.begin().await?;
                let out = q::receipt_record(&mut tx, &receipt).await?;
                tx.commit().await?;
                Ok(out)
            }

            async fn receipts_of(&self, keys: &[String]) -> StoreResult<Vec<ReceiptRow>> {
                q::receipts_of(&self.$reader, keys).await
            }

            async fn suppressions_match(&self, tenant: &str, hashes: &[String]) -> StoreResult<Vec<SuppressionRow>> {
                q::suppressions_match(&self.$reader, tenant, hashes).await
            }

            async fn suppressions_list(&self, tenant: &str, cursor: Option<&Cursor>, limit: u32) -> StoreResult<Page<SuppressionRow>> {
                q::suppressions_list(&self.$reader, tenant, cursor, limit).await
            }

            async fn suppression_remove(&self, tenant: &str, id: &str) -> StoreResult<bool> {
                q::suppression_remove(&self.$writer, tenant, id).await
            }

            async fn suppressions_rekey(&self, key: &crate::suppression::SuppressionKey) -> StoreResult<crate::suppression::RekeyReport> {
                q::suppressions_rekey(&self.$writer, key).await
            }

            async fn setting_get(&self, name: &str) -> StoreResult<Option<String>> {
                q::setting_get(&self.$writer, name).await
            }

            async fn setting_remove(&self, name: &str) -> StoreResult<bool> {
                q::setting_remove(&self.$writer, name).await
            }

            async fn setting_get_or_insert(&self, name: &str, value: &str) -> StoreResult<String> {
                q::setting_get_or_insert(&self.$writer, name, value, crate::clock::micros(jiff::Timestamp::now())).await
            }

            async fn rejected_record(&self, rejected: RejectedMessage) -> StoreResult<bool> {
                q::rejected_record(&self.$writer, &rejected).await
            }

            async fn rejected_list(&self, tenant: Option<&str>, cursor: Option<&Cursor>, limit: u32) -> StoreResult<Page<RejectedMessage>> {
                q::rejected_list(&self.$reader, tenant, cursor, limit).await
            }

            async fn rejected_get(&self, tenant: &str, id: &str) -> StoreResult<Option<RejectedMessage>> {
                q::rejected_get(&self.$reader, tenant, id).await
            }

            async fn rejected_summary(&self, tenant: Option<&str>, since_us: i64, until_us: i64) -> StoreResult<Vec<(String, i64)>> {
                q::rejected_summary(&self.$reader, tenant, since_us, until_us).await
            }

            async fn publications_mark(&self, msg_ids: &[String], now_us: i64) -> StoreResult<u64> {
                q::publications_mark(&self.$writer, msg_ids, now_us).await
            }

            async fn publications_backlog(&self) -> StoreResult<PublicationBacklog> {
                q::publications_backlog(&self.$reader).await
            }

            async fn bounces_by_domain(&self, tenant: Option<&str>, since_us: i64, until_us: i64) -> StoreResult<Vec<(String, i64)>> {
                q::bounces_by_domain(&self.$reader, tenant, since_us, until_us).await
            }

            async fn ingest_tally_add(&self, rows: &[TallyRow]) -> StoreResult<()> {
                q::ingest_tally_add(&self.$writer, rows).await
            }

            async fn report_rows(&self, filter: ReportFilter) -> StoreResult<ReportRows> {
                q::report_rows(&self.$reader, &filter).await
            }
        }
    };
}
pub(crate) use store_impl;
