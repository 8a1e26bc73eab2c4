//! Storage: a trait per role (what ingest, the workers, the API's views, …
//! each use; [`Store`] is all of them), a backend per database (SQLite, the
//! embedded default; Postgres, for many processes on one database) that
//! implements each role in a file of its own, and one suite of tests in
//! `tests/store/` that both must pass. The queue lives beside the intents,
//! so enqueueing is part of the same transaction (the outbox is the queue).

mod backfill;
mod batch;
pub mod caps;
pub mod decide;
mod postgres;
mod postgres_batch;
mod publications;
mod rows;
mod rows_receipts;
mod rows_report;
mod schema;
mod shared;
mod sqlite;
mod sqlite_batch;

pub use postgres::{PostgresStore, RANDOM_PAGE_COST, REQUESTS_OF_TENANT};
pub use publications::{
    PUBLICATIONS_SETTING, Publication, PublicationBacklog, PublicationClaim, enable as publications_enable,
};
pub use rows::*;
pub use rows_receipts::*;
pub use rows_report::*;
pub use schema::SchemaState;
pub use sqlite::SqliteStore;

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;

/// A wrapped driver error is part of the message and deliberately not the
/// error's `source()`: a caller printing the chain (`{:#}`) would say it twice.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Database(sqlx::Error),
    /// A statement SQLite's writer ran directly (`sqlite::direct`).
    #[error("database error: {0}")]
    Sqlite(rusqlite::Error),
    #[error("migration failed: {0}")]
    Migrate(sqlx::migrate::MigrateError),
    #[error("stored data is corrupt: {0}")]
    Corrupt(String),
    #[error(
        "no database at {0}; create it with `herald migrate` (or `herald serve`), or point database_url at an existing one"
    )]
    Missing(String),
    /// The database is there, but not with this binary's schema.
    #[error("{0}")]
    Schema(String),
    /// The database could not be reached (no connection within the pool's
    /// time, a closed pool, a broken socket).
    #[error("the database could not be reached: {0}")]
    Unreachable(String),
    /// The failure of a statement that served several requests at once (a
    /// gathered read), as each of the others sees it.
    #[error("{0}")]
    Shared(String),
    /// A request gathered into a batch got no answer: a worker stopped or
    /// the batch panicked. An ingest may or may not have been written; the
    /// same request sent again is answered either way (as new, or as a replay).
    #[error("the {0} batch gave this request no answer (a worker stopped or panicked)")]
    Unanswered(&'static str),
}

impl StoreError {
    /// Whether the error is about reaching the database rather than about
    /// what was asked of it: asking again at once would only wait again.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self,
            StoreError::Unreachable(_)
                | StoreError::Database(
                    sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Io(_) | sqlx::Error::Tls(_)
                )
        )
    }
}

impl StoreError {
    /// The same failure for every request a statement served: the first
    /// gets the error itself, the others its text (still unreachable when it
    /// was, so that each caller sees what kind of failure it is).
    pub fn fan_out<T>(self, requests: usize) -> Vec<StoreResult<T>> {
        let shared = match &self {
            StoreError::Unreachable(reason) => StoreError::Unreachable(reason.clone()),
            e if e.is_unreachable() => StoreError::Unreachable(e.to_string()),
            e => StoreError::Shared(e.to_string()),
        };
        let mut out: Vec<StoreResult<T>> = Vec::with_capacity(requests);
        out.push(Err(self));
        out.extend((1..requests).map(|_| Err(shared.duplicate())));
        out.truncate(requests);
        out
    }

    /// A copy of an error that carries only text.
    fn duplicate(&self) -> StoreError {
        match self {
            StoreError::Unreachable(reason) => StoreError::Unreachable(reason.clone()),
            e => StoreError::Shared(e.to_string()),
        }
    }
}

/// Each request read on its own, in order: what a backend without gathered
/// reads answers, and what a gathered read falls back to.
async fn each_alone<'a, T, R, F>(inputs: &'a [T], read: impl Fn(&'a T) -> F) -> Vec<StoreResult<R>>
where
    F: std::future::Future<Output = StoreResult<R>>,
{
    let mut out = Vec::with_capacity(inputs.len());
    for input in inputs {
        out.push(read(input).await);
    }
    out
}

/// The answers of a read gathered over `inputs`. When it failed, each request
/// is read alone — one request's failure is never another's — unless the
/// database could not be reached (asking again would only wait again) or
/// there was only one request.
async fn gathered_or_each_alone<'a, T, R, F>(
    what: &str,
    inputs: &'a [T],
    gathered: StoreResult<Vec<StoreResult<R>>>,
    read: impl Fn(&'a T) -> F,
) -> Vec<StoreResult<R>>
where
    F: std::future::Future<Output = StoreResult<R>>,
{
    match gathered {
        Ok(answers) => answers,
        Err(e) if e.is_unreachable() || inputs.len() < 2 => e.fan_out(inputs.len()),
        Err(e) => {
            tracing::warn!(error = %e, requests = inputs.len(), "a gathered {what} failed; reading each request alone");
            each_alone(inputs, read).await
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        StoreError::Database(e)
    }
}

impl From<sqlx::migrate::MigrateError> for StoreError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        StoreError::Migrate(e)
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// What the ingest path reads and writes: request records looked up before
/// planning, the group-committed ingest itself, what a replay or a dry run
/// reads back, and the ingest tally.
#[async_trait]
pub trait IngestStore: Send + Sync + 'static {
    /// The answer stored for a request identity, read before anything is
    /// planned (from the read pool on SQLite). None when the identity is new —
    /// which the ingest transaction, not this read, then decides.
    async fn request_find(&self, tenant: &str, identity: &str, fingerprint: &str) -> StoreResult<Option<RequestSeen>>;

    /// [`IngestStore::request_find`] for many requests at once (concurrent requests
    /// gathered by the ingest pipeline), answered in order. One request's
    /// unreadable record fails only that request. Both backends read the
    /// records in one statement per tenant, each identity once, and the
    /// replays' intents in one more; the default asks one by one.
    async fn requests_find(&self, lookups: &[RequestLookup]) -> Vec<StoreResult<Option<RequestSeen>>> {
        each_alone(lookups, |l| self.request_find(&l.tenant, &l.identity, &l.fingerprint)).await
    }

    /// One request: a batch of one.
    async fn events_ingest(&self, ingest: Ingest) -> StoreResult<IngestOutcome> {
        let mut out = self.events_ingest_batch(vec![ingest]).await;
        out.pop().unwrap_or_else(|| Err(StoreError::Corrupt("an ingest batch of one answered nothing".into())))
    }

    /// Group commit: a batch of requests in ONE transaction (request record
    /// with its response + payloads + intents + jobs for each), answered in
    /// order, each only once its rows are durable. Each request is written
    /// entirely or not at all; two requests for the same identity or event
    /// behave as two transactions in a row; a request that fails is run again
    /// on its own and never fails the others. The unique constraints on the
    /// request identity and the intent key decide.
    async fn events_ingest_batch(&self, batch: Vec<Ingest>) -> Vec<StoreResult<IngestOutcome>>;

    /// The content digest an event key was accepted with (None when the
    /// event is new): a dry run's read of what the ingest transaction checks.
    async fn event_digest(&self, event_key: &str) -> StoreResult<Option<String>>;

    /// The decision, reason and state of these intents as they are now (a
    /// replay answered from the Redis fast path reads them here).
    async fn intents_status(&self, tenant: &str, keys: &[String]) -> StoreResult<Vec<IntentStatus>>;

    /// Adds posts to the ingest tally (a row per tenant, minute and kind).
    async fn ingest_tally_add(&self, rows: &[TallyRow]) -> StoreResult<()>;
}

/// The directory (recipients and their kept preference versions), the
/// suppression list, and the deployment-wide settings (the suppression key).
#[async_trait]
pub trait DirectoryStore: Send + Sync + 'static {
    /// The directory entries of `ids` that exist.
    async fn recipients_get(&self, tenant: &str, ids: &[String]) -> StoreResult<Vec<RecipientRow>>;

    /// Creates or replaces a directory entry; returns it as stored. A change of
    /// preferences makes a new, kept version.
    async fn recipient_put(&self, put: RecipientPut) -> StoreResult<RecipientRow>;

    async fn recipient_preferences_get(
        &self,
        tenant: &str,
        id: &str,
        version: i64,
    ) -> StoreResult<Option<PreferencesVersion>>;

    /// The tenant's suppression entries among these address hashes.
    async fn suppressions_match(&self, tenant: &str, hashes: &[String]) -> StoreResult<Vec<SuppressionRow>>;

    /// What a new request reads before it is planned: the directory entries
    /// of these recipients and the tenant's suppression entries among these
    /// address hashes — [`DirectoryStore::recipients_get`] and
    /// [`DirectoryStore::suppressions_match`], in one round trip where the backend has
    /// round trips to save (Postgres).
    async fn recipients_and_suppressions(
        &self,
        tenant: &str,
        ids: &[String],
        hashes: &[String],
    ) -> StoreResult<DirectoryRows> {
        let recipients = self.recipients_get(tenant, ids).await?;
        let suppressions = self.suppressions_match(tenant, hashes).await?;
        Ok((recipients, suppressions))
    }

    /// [`DirectoryStore::recipients_and_suppressions`] for many requests at once,
    /// answered in order: Postgres reads them all in one statement; the
    /// default asks one by one.
    async fn directories_read(&self, reads: &[DirectoryRead]) -> Vec<StoreResult<DirectoryRows>> {
        each_alone(reads, |r| self.recipients_and_suppressions(&r.tenant, &r.ids, &r.hashes)).await
    }

    /// The tenant's suppression list, newest first.
    async fn suppressions_list(
        &self,
        tenant: &str,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> StoreResult<Page<SuppressionRow>>;

    /// Removes the tenant's entry of this id (never an address: see
    /// [`crate::suppression`]); false when the tenant has no such entry.
    async fn suppression_remove(&self, tenant: &str, id: &str) -> StoreResult<bool>;

    /// Rekeys the entries written under the old unkeyed hash where their
    /// address can still be found, and names every entry without an id.
    async fn suppressions_rekey(
        &self,
        key: &crate::recipient::keyed::SuppressionKey,
    ) -> StoreResult<crate::recipient::keyed::RekeyReport>;

    /// The deployment-wide value stored under `name`, storing `value` first
    /// when there is none; every process on the database gets the same.
    async fn setting_get_or_insert(&self, name: &str, value: &str) -> StoreResult<String>;

    /// The deployment-wide value stored under `name`, if any.
    async fn setting_get(&self, name: &str) -> StoreResult<Option<String>>;

    /// Removes the value stored under `name`; false when there was none.
    async fn setting_remove(&self, name: &str) -> StoreResult<bool>;
}

/// What the delivery workers do: claim due jobs, record outcomes, wait for
/// work, and close digest windows.
#[async_trait]
pub trait QueueStore: Send + Sync + 'static {
    /// Claims due jobs under a lease and writes their attempt rows in the same
    /// transaction, so an attempt row exists before any provider is called. An
    /// unfinished attempt left by a worker whose lease expired becomes `unknown`.
    /// The jobs to attempt are returned in state `sending`. Returned as well,
    /// already ended, for the worker to count and log: a job of an intent
    /// planned in shadow mode (it ends `shadowed` there, with no attempt), and
    /// one whose rescued attempt was its last (`rescued` names the attempt).
    async fn jobs_claim(&self, claim: Claim) -> StoreResult<Vec<ClaimedJob>>;

    /// Records a batch of attempt outcomes and the transitions they cause, in one
    /// transaction. An outcome for an attempt that is no longer running (it was
    /// rescued after its lease expired) is skipped and reported.
    async fn attempts_finish(&self, finished: &[FinishedAttempt]) -> StoreResult<FinishReport>;

    /// A future that resolves when new work may be due (or after `timeout`).
    async fn wait_for_work(&self, timeout: Duration);

    /// Digest windows whose time is up, oldest first.
    async fn digests_due(&self, now_us: i64, limit: u32) -> StoreResult<Vec<DigestRow>>;

    /// The members of a digest window with their events and contents.
    async fn digest_members(&self, key: &str) -> StoreResult<Vec<DigestMember>>;

    /// Turns a window into its digest intent, once, however many try: its
    /// members become `digested` (those the close leaves out too, saying so),
    /// or, if it could not be rendered, are queued on their own (those it
    /// leaves out end `shadowed`); the digest's job carries the close's trace
    /// and links.
    async fn digest_close(&self, close: DigestClose) -> StoreResult<DigestCloseOutcome>;
}

/// The in-app inbox: delivered by the in-app channel, read and marked by the API.
#[async_trait]
pub trait InboxStore: Send + Sync + 'static {
    /// Puts an in-app message in the recipient's inbox; idempotent per intent.
    async fn inbox_deliver(&self, delivery: InboxDelivery) -> StoreResult<()>;

    async fn inbox_list(
        &self,
        tenant: &str,
        recipient_id: &str,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> StoreResult<Page<InboxCard>>;

    /// Returns false when no such card exists for that recipient.
    async fn inbox_mark_read(&self, tenant: &str, recipient_id: &str, card_id: &str, now_us: i64) -> StoreResult<bool>;
}

/// Delivery receipts as providers report them.
#[async_trait]
pub trait ReceiptStore: Send + Sync + 'static {
    /// Records a delivery receipt against the intent it names, once: moves its
    /// delivery status only forward, and applies what a bounce or complaint
    /// leads to (a dead letter, a suppression entry), in one transaction.
    async fn receipt_record(&self, receipt: NewReceipt) -> StoreResult<ReceiptOutcome>;
}

/// Reads for the API, the console and the CLI: intents, their attempts and
/// receipts, dead letters, the queue and the shadow report's figures.
#[async_trait]
pub trait ViewStore: Send + Sync + 'static {
    async fn intent_get(&self, tenant: &str, key: &str) -> StoreResult<Option<IntentDetail>>;

    /// Whose intent this is (an `admin` opening any tenant's by key).
    async fn intent_tenant(&self, key: &str) -> StoreResult<Option<String>>;

    /// Newest first.
    async fn intents_list(&self, filter: IntentFilter) -> StoreResult<Page<IntentRow>>;

    async fn attempts_of(&self, keys: &[String]) -> StoreResult<Vec<AttemptRow>>;

    /// Every receipt of these intents, oldest first.
    async fn receipts_of(&self, keys: &[String]) -> StoreResult<Vec<ReceiptRow>>;

    async fn dead_letters_list(&self, filter: DeadLetterFilter) -> StoreResult<Page<DeadLetter>>;

    /// (reason, count) of dead letters updated in [since, until); every tenant when `tenant` is None.
    async fn dead_letters_summary(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>>;

    /// Dead letters by tenant and reason — how many, and since when: one
    /// tenant's, or every tenant's when `tenant` is None.
    async fn dead_letters_groups(&self, tenant: Option<&str>) -> StoreResult<Vec<DeadLetterGroup>>;

    /// The newest `per_group` dead letters of every (tenant, reason) group,
    /// by tenant, reason, newest first: one tenant's, or every tenant's.
    async fn dead_letters_newest(&self, tenant: Option<&str>, per_group: u32) -> StoreResult<Vec<IntentRow>>;

    /// The newest dead letters of one reason: one tenant's, or every tenant's.
    async fn dead_letters_examples(
        &self,
        tenant: Option<&str>,
        reason: &str,
        since_us: i64,
        until_us: i64,
        limit: u32,
    ) -> StoreResult<Vec<IntentRow>>;

    /// The queue: every tenant's jobs when `tenant` is None (`/metrics`).
    async fn queue_stats(&self, tenant: Option<&str>, now_us: i64) -> StoreResult<QueueStats>;

    /// Attempts finished in [since, until) by outcome, most first; every
    /// tenant's when `tenant` is None.
    async fn attempts_by_outcome(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>>;

    /// New hard bounces in [since, until) by recipient domain, most first;
    /// every tenant when `tenant` is None.
    async fn bounces_by_domain(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>>;

    /// The shadow report's figures for a range: the ingest tally, intents
    /// planned in it by channel, decision, reason and state, shadowed or sent
    /// SMS by encoding, template errors, rejected bus messages.
    async fn report_rows(&self, filter: ReportFilter) -> StoreResult<ReportRows>;

    /// One tenant's intents planned in a range, oldest first, a page at a
    /// time: what the shadow comparison matches the old notifier's sends to.
    /// A digest's own intent is left out (its members stand for it).
    async fn intents_planned(&self, filter: PlannedFilter) -> StoreResult<Vec<PlannedIntent>>;
}

/// Running the database: its schema, readiness, retention, dead-letter
/// replays and the ops digest's schedule.
#[async_trait]
pub trait OpsStore: Send + Sync + 'static {
    /// Applies this backend's migrations (idempotent), then the data work a
    /// migration left to do (content records of events accepted before 0006).
    async fn migrate(&self) -> StoreResult<()>;

    /// How the database's applied migrations compare with this binary's.
    async fn schema_state(&self) -> StoreResult<SchemaState>;

    /// Whether the database answers (`/readyz`).
    async fn ping(&self) -> StoreResult<()>;

    /// One small batch of one retention step, in its own short transaction.
    async fn retention_batch(&self, step: PruneStep, cutoff_us: i64, batch: i64) -> StoreResult<u64>;

    /// Puts dead letters back on the queue with the same key and frozen
    /// content, their jobs in the replay's trace, linked to the trace that
    /// planned each intent.
    async fn dead_letters_replay(&self, replay: Replay) -> StoreResult<Vec<ReplayResult>>;

    async fn ops_digest_claim(&self, claim: OpsDigestClaim) -> StoreResult<Option<(i64, i64)>>;

    async fn ops_digest_posted(&self, slot: &str, now_us: i64, total: i64) -> StoreResult<()>;

    async fn ops_digest_last_until(&self) -> StoreResult<Option<i64>>;

    /// The last daily digest posted (not a manual one), if any.
    async fn ops_digest_last(&self) -> StoreResult<Option<OpsDigestRow>>;
}

/// Bus messages that could not become an event.
#[async_trait]
pub trait RejectedStore: Send + Sync + 'static {
    /// Records a bus message that could not become an event, once per
    /// stream and sequence; true when this call recorded it.
    async fn rejected_record(&self, rejected: RejectedMessage) -> StoreResult<bool>;

    /// A tenant's rejected bus messages (every tenant's for None), newest first.
    async fn rejected_list(
        &self,
        tenant: Option<&str>,
        cursor: Option<&Cursor>,
        limit: u32,
    ) -> StoreResult<Page<RejectedMessage>>;

    async fn rejected_get(&self, tenant: &str, id: &str) -> StoreResult<Option<RejectedMessage>>;

    /// (error code, count) of bus messages rejected in [since, until), most
    /// first; every tenant when `tenant` is None.
    async fn rejected_summary(
        &self,
        tenant: Option<&str>,
        since_us: i64,
        until_us: i64,
    ) -> StoreResult<Vec<(String, i64)>>;
}

/// The status outbox the publisher drains onto the bus.
#[async_trait]
pub trait PublicationStore: Send + Sync + 'static {
    /// Leases up to `limit` unpublished status publications, oldest first,
    /// that no other publisher holds (SKIP LOCKED on Postgres): several
    /// processes publish side by side without taking the same rows.
    async fn publications_claim(&self, claim: PublicationClaim) -> StoreResult<Vec<Publication>>;

    /// Marks publications the bus has acknowledged; the number marked.
    async fn publications_mark(&self, msg_ids: &[String], now_us: i64) -> StoreResult<u64>;

    /// How many publications wait, and since when.
    async fn publications_backlog(&self) -> StoreResult<PublicationBacklog>;
}

/// Every role at once: what the app wires up and hands out, each component
/// keeping only the role it uses.
pub trait Store:
    IngestStore
    + DirectoryStore
    + QueueStore
    + InboxStore
    + ReceiptStore
    + ViewStore
    + OpsStore
    + RejectedStore
    + PublicationStore
{
}

impl<
    T: IngestStore
        + DirectoryStore
        + QueueStore
        + InboxStore
        + ReceiptStore
        + ViewStore
        + OpsStore
        + RejectedStore
        + PublicationStore
        + ?Sized,
> Store for T
{
}

/// A batch of requests in one transaction (`run`), and each request that
/// failed in it, or all of them when the batch failed as a whole, run again
/// on its own: one request's failure is never another's. Both backends'
/// [`IngestStore::events_ingest_batch`], around their own transaction.
async fn ingest_batch_or_alone<'a, F, Fut>(batch: &'a [Ingest], run: F) -> Vec<StoreResult<IngestOutcome>>
where
    F: Fn(&'a [Ingest]) -> Fut,
    Fut: std::future::Future<Output = StoreResult<Vec<StoreResult<IngestOutcome>>>>,
{
    let mut out = match run(batch).await {
        Ok(out) => out.into_iter().map(Some).collect(),
        // A database that cannot be reached fails the whole batch at once:
        // running each request alone would make the last caller wait out one
        // connection timeout per request.
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
    for (slot, ingest) in out.iter_mut().zip(batch) {
        if !matches!(slot, Some(Ok(_))) {
            *slot = Some(ingest_alone(ingest, &run).await);
        }
    }
    out.into_iter().flatten().collect()
}

/// One request in its own transaction, run again (up to three more times) when
/// Postgres aborted it in a deadlock or a serialization failure: rows shared
/// between events (content, digest windows) can, rarely, meet retention or
/// another ingest that way, and the whole transaction is safe to run again.
async fn ingest_alone<'a, F, Fut>(ingest: &'a Ingest, run: F) -> StoreResult<IngestOutcome>
where
    F: Fn(&'a [Ingest]) -> Fut,
    Fut: std::future::Future<Output = StoreResult<Vec<StoreResult<IngestOutcome>>>>,
{
    let mut tries = 0;
    loop {
        tries += 1;
        let outcome = match run(std::slice::from_ref(ingest)).await {
            Ok(mut out) => {
                out.pop().unwrap_or_else(|| Err(StoreError::Corrupt("an ingest of one answered nothing".into())))
            }
            Err(e) => Err(e),
        };
        match outcome {
            Err(StoreError::Database(sqlx::Error::Database(e)))
                if tries < 4 && matches!(e.code().as_deref(), Some("40P01" | "40001")) =>
            {
                tracing::warn!(error = %e, tries, "ingest transaction aborted by Postgres; running it again");
            }
            other => return other,
        }
    }
}

/// Whether a database URL names Postgres (else it is a SQLite file).
pub fn is_postgres(database_url: &str) -> bool {
    database_url.starts_with("postgres://") || database_url.starts_with("postgresql://")
}

/// Opens the backend named by the URL's scheme, creating a SQLite file that
/// is not there yet (`herald serve`, `herald migrate`).
pub async fn connect(database_url: &str) -> StoreResult<Arc<dyn Store>> {
    if is_postgres(database_url) {
        Ok(Arc::new(PostgresStore::connect(database_url).await?))
    } else {
        Ok(Arc::new(SqliteStore::connect(database_url).await?))
    }
}

/// Opens a database that exists and holds this binary's schema, creating and
/// migrating nothing: for the commands that read (`herald why`, `herald dlq`).
pub async fn open_existing(database_url: &str) -> StoreResult<Arc<dyn Store>> {
    let store: Arc<dyn Store> = if is_postgres(database_url) {
        Arc::new(PostgresStore::connect(database_url).await?)
    } else {
        Arc::new(SqliteStore::open_existing(database_url).await?)
    };
    match store.schema_state().await?.problem() {
        None => Ok(store),
        Some(problem) => Err(StoreError::Schema(problem)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failure_is_fanned_out_to_every_request_it_served_keeping_its_kind() {
        let out: Vec<StoreResult<()>> = StoreError::Corrupt("bad row".into()).fan_out(3);
        assert_eq!(out.len(), 3);
        assert!(matches!(&out[0], Err(StoreError::Corrupt(m)) if m == "bad row"));
        for e in &out[1..] {
            assert!(matches!(e, Err(StoreError::Shared(m)) if m == "stored data is corrupt: bad row"), "{e:?}");
        }
        let out: Vec<StoreResult<()>> = StoreError::Database(sqlx::Error::PoolTimedOut).fan_out(2);
        assert!(out.iter().all(|e| e.as_ref().is_err_and(StoreError::is_unreachable)), "{out:?}");
        let out: Vec<StoreResult<()>> = StoreError::Unreachable("refused".into()).fan_out(2);
        assert!(matches!(&out[1], Err(StoreError::Unreachable(m)) if m == "refused"));
        assert!(StoreError::Corrupt("x".into()).fan_out::<()>(0).is_empty());
    }
}
