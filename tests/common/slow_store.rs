//! A store that records outcomes slowly: the real store underneath, with
//! `attempts_finish` held back (by a delay, or until the test opens a gate),
//! as a database under load would; and, when asked, a retry's read of its
//! earlier attempts (`attempts_of`) slow too.

use async_trait::async_trait;
use herald::store::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::watch;

pub struct SlowRecording {
    inner: Arc<dyn Store>,
    delay: Duration,
    history_delay: Duration,
    open: watch::Sender<bool>,
    /// Finished attempts waiting at the closed gate.
    held: AtomicUsize,
}

impl SlowRecording {
    /// Every recording takes `delay` longer.
    pub fn new(inner: Arc<dyn Store>, delay: Duration) -> Arc<SlowRecording> {
        Arc::new(SlowRecording {
            inner,
            delay,
            history_delay: Duration::ZERO,
            open: watch::channel(true).0,
            held: AtomicUsize::new(0),
        })
    }

    /// Recording at full speed, but every read of attempts takes `delay`.
    pub fn slow_history(inner: Arc<dyn Store>, delay: Duration) -> Arc<SlowRecording> {
        Arc::new(SlowRecording {
            inner,
            delay: Duration::ZERO,
            history_delay: delay,
            open: watch::channel(true).0,
            held: AtomicUsize::new(0),
        })
    }

    /// No recording finishes until [`SlowRecording::open`].
    pub fn stalled(inner: Arc<dyn Store>) -> Arc<SlowRecording> {
        Arc::new(SlowRecording {
            inner,
            delay: Duration::ZERO,
            history_delay: Duration::ZERO,
            open: watch::channel(false).0,
            held: AtomicUsize::new(0),
        })
    }

    pub fn open(&self) {
        self.open.send_replace(true);
    }

    /// How many finished attempts are waiting for the gate to open.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl IngestStore for SlowRecording {
    async fn request_find(&self, tenant: &str, identity: &str, fingerprint: &str) -> StoreResult<Option<RequestSeen>> {
        self.inner.request_find(tenant, identity, fingerprint).await
    }

    async fn events_ingest_batch(&self, batch: Vec<Ingest>) -> Vec<StoreResult<IngestOutcome>> {
        self.inner.events_ingest_batch(batch).await
    }

    async fn event_digest(&self, event_key: &str) -> StoreResult<Option<String>> {
        self.inner.event_digest(event_key).await
    }

    async fn intents_status(&self, tenant: &str, keys: &[String]) -> StoreResult<Vec<IntentStatus>> {
        self.inner.intents_status(tenant, keys).await
    }

    async fn ingest_tally_add(&self, rows: &[TallyRow]) -> StoreResult<()> {
        self.inner.ingest_tally_add(rows).await
    }
}

#[async_trait]
impl DirectoryStore for SlowRecording {
    async fn recipients_get(&self, tenant: &str, ids: &[String]) -> StoreResult<Vec<RecipientRow>> {
        self.inner.recipients_get(tenant, ids).await
    }

    async fn recipient_put(&self, put: RecipientPut) -> StoreResult<RecipientRow> {
        self.inner.recipient_put(put).await
    }

    async fn recipient_preferences_get(
        &self,
        tenant: &str,
        id: &str,
        version: i64,
    ) -> StoreResult<Option<PreferencesVersion>> {
        self.inner.recipient_preferences_get(tenant, id, version).await
    }

    async fn suppressions_match(&self, tenant: &str, hashes: &[String]) -> StoreResult<Vec<SuppressionRow>> {
        self.inner.suppressions_match(tenant, hashes).await
    }

    async fn suppressions_list(
        &self,
        tenant: &str,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> StoreResult<Page<SuppressionRow>> {
        self.inner.suppressions_list(tenant, cursor, limit).await
    }

    async fn suppression_remove(&self, tenant: &str, address_hash: &str) -> StoreResult<bool> {
        self.inner.suppression_remove(tenant, address_hash).await
    }

    async fn suppressions_rekey(
        &self,
        key: &herald::suppression::SuppressionKey,
    ) -> StoreResult<herald::suppression::RekeyReport> {
        self.inner.suppressions_rekey(key).await
    }

    async fn setting_get_or_insert(&self, name: &str, value: &str) -> StoreResult<String> {
        self.inner.setting_get_or_insert(name, value).await
    }

    async fn setting_get(&self, name: &str) -> StoreResult<Option<String>> {
        self.inner.setting_get(name).await
    }

    async fn setting_remove(&self, name: &str) -> StoreResult<bool> {
        self.inner.setting_remove(name).await
    }
}

#[async_trait]
impl QueueStore for SlowRecording {
    async fn jobs_claim(&self, claim: Claim) -> StoreResult<Vec<ClaimedJob>> {
        self.inner.jobs_claim(claim).await
    }

    async fn attempts_finish(&self, finished: &[FinishedAttempt]) -> StoreResult<FinishReport> {
        // Slow on purpose: a database under load is what the test is about.
        tokio::time::sleep(self.delay).await;
        let mut open = self.open.subscribe();
        if !*open.borrow() {
            self.held.fetch_add(finished.len(), Ordering::SeqCst);
            let _ = open.wait_for(|open| *open).await;
            self.held.fetch_sub(finished.len(), Ordering::SeqCst);
        }
        self.inner.attempts_finish(finished).await
    }

    async fn wait_for_work(&self, timeout: Duration) {
        self.inner.wait_for_work(timeout).await
    }

    async fn digests_due(&self, now_us: i64, limit: u32) -> StoreResult<Vec<DigestRow>> {
        self.inner.digests_due(now_us, limit).await
    }

    async fn digest_members(&self, key: &str) -> StoreResult<Vec<DigestMember>> {
        self.inner.digest_members(key).await
    }

    async fn digest_close(&self, close: DigestClose) -> StoreResult<DigestCloseOutcome> {
        self.inner.digest_close(close).await
    }
}

#[async_trait]
impl InboxStore for SlowRecording {
    async fn inbox_deliver(&self, delivery: InboxDelivery) -> StoreResult<()> {
        self.inner.inbox_deliver(delivery).await
    }

    async fn inbox_list(
        &self,
        tenant: &str,
        recipient_id: &str,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> StoreResult<Page<InboxCard>> {
        self.inner.inbox_list(tenant, recipient_id, cursor, limit).await
    }

    async fn inbox_mark_read(&self, tenant: &str, recipient_id: &str, card_id: &str, now_us: i64) -> StoreResult<bool> {
        self.inner.inbox_mark_read(tenant, recipient_id, card_id, now_us).await
    }
}

#[async_trait]
impl ReceiptStore for SlowRecording {
    async fn receipt_record(&self, receipt: NewReceipt) -> StoreResult<ReceiptOutcome> {
        self.inner.receipt_record(receipt).await
    }
}

#[async_trait]
impl ViewStore for SlowRecording {
    async fn intent_get(&self, tenant: &str, key: &str) -> StoreResult<Option<IntentDetail>> {
        self.inner.intent_get(tenant, key).await
    }

    async fn intent_tenant(&self, key: &str) -> StoreResult<Option<String>> {
        self.inner.intent_tenant(key).await
    }

    async fn intents_list(&self, filter: IntentFilter) -> StoreResult<Page<IntentRow>> {
        self.inner.intents_list(filter).await
    }

    async fn attempts_of(&self, keys: &[String]) -> StoreResult<Vec<AttemptRow>> {
        // Slow on purpose, as above.
        tokio::time::sleep(self.history_delay).await;
        self.inner.attempts_of(keys).await
    }

    async fn receipts_of(&self, keys: &[String]) -> StoreResult<Vec<ReceiptRow>> {
        self.inner.receipts_of(keys).await
    }

    async fn dead_letters_list(&self, filter: DeadLetterFilter) -> StoreResult<Page<DeadLetter>> {
        self.inner.dead_letters_list(filter).await
    }

    async fn dead_letters_summary(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        self.inner.dead_letters_summary(tenant, since_us, until_us).await
    }

    async fn dead_letters_groups(&self, tenant: Option<&str>) -> StoreResult<Vec<DeadLetterGroup>> {
        self.inner.dead_letters_groups(tenant).await
    }

    async fn dead_letters_newest(&self, tenant: Option<&str>, per_group: u32) -> StoreResult<Vec<IntentRow>> {
        self.inner.dead_letters_newest(tenant, per_group).await
    }

    async fn dead_letters_examples(
        &self,
        tenant: Option<&str>,
        reason: &str,
        since_us: i64,
        until_us: i64,
        limit: u32,
    ) -> StoreResult<Vec<IntentRow>> {
        self.inner.dead_letters_examples(tenant, reason, since_us, until_us, limit).await
    }

    async fn queue_stats(&self, tenant: Option<&str>, now_us: i64) -> StoreResult<QueueStats> {
        self.inner.queue_stats(tenant, now_us).await
    }

    async fn attempts_by_outcome(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        self.inner.attempts_by_outcome(tenant, since_us, until_us).await
    }

    async fn bounces_by_domain(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        self.inner.bounces_by_domain(tenant, since_us, until_us).await
    }

    async fn report_rows(&self, filter: ReportFilter) -> StoreResult<ReportRows> {
        self.inner.report_rows(filter).await
    }

    async fn intents_planned(&self, filter: PlannedFilter) -> StoreResult<Vec<PlannedIntent>> {
        self.inner.intents_planned(filter).await
    }
}

#[async_trait]
impl OpsStore for SlowRecording {
    async fn migrate(&self) -> StoreResult<()> {
        self.inner.migrate().await
    }

    async fn schema_state(&self) -> StoreResult<SchemaState> {
        self.inner.schema_state().await
    }

    async fn ping(&self) -> StoreResult<()> {
        self.inner.ping().await
    }

    async fn retention_batch(&self, step: PruneStep, cutoff_us: i64, batch: i64) -> StoreResult<u64> {
        self.inner.retention_batch(step, cutoff_us, batch).await
    }

    async fn dead_letters_replay(&self, replay: Replay) -> StoreResult<Vec<ReplayResult>> {
        self.inner.dead_letters_replay(replay).await
    }

    async fn ops_digest_claim(&self, claim: OpsDigestClaim) -> StoreResult<Option<(i64, i64)>> {
        self.inner.ops_digest_claim(claim).await
    }

    async fn ops_digest_posted(&self, slot: &str, now_us: i64, total: i64) -> StoreResult<()> {
        self.inner.ops_digest_posted(slot, now_us, total).await
    }

    async fn ops_digest_last_until(&self) -> StoreResult<Option<i64>> {
        self.inner.ops_digest_last_until().await
    }

    async fn ops_digest_last(&self) -> StoreResult<Option<OpsDigestRow>> {
        self.inner.ops_digest_last().await
    }
}

#[async_trait]
impl RejectedStore for SlowRecording {
    async fn rejected_record(&self, rejected: RejectedMessage) -> StoreResult<bool> {
        self.inner.rejected_record(rejected).await
    }

    async fn rejected_list(
        &self,
        tenant: Option<&str>,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> StoreResult<Page<RejectedMessage>> {
        self.inner.rejected_list(tenant, cursor, limit).await
    }

    async fn rejected_get(&self, tenant: &str, id: &str) -> StoreResult<Option<RejectedMessage>> {
        self.inner.rejected_get(tenant, id).await
    }

    async fn rejected_summary(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>> {
        self.inner.rejected_summary(tenant, since_us, until_us).await
    }
}

#[async_trait]
impl PublicationStore for SlowRecording {
    async fn publications_claim(&self, claim: PublicationClaim) -> StoreResult<Vec<Publication>> {
        self.inner.publications_claim(claim).await
    }

    async fn publications_mark(&self, msg_ids: &[String], now_us: i64) -> StoreResult<u64> {
        self.inner.publications_mark(msg_ids, now_us).await
    }

    async fn publications_backlog(&self) -> StoreResult<PublicationBacklog> {
        self.inner.publications_backlog().await
    }
}
