//! Replaying dead letters, in a trace of its own: the replay request's
//! (the caller's `traceparent`, or one derived from who asked and when).
//! The replayed jobs continue that trace, so the attempts a replay causes are
//! found under the request that caused them; each attempt's span links to
//! the trace of the request that planned the intent in the first place.

use crate::ops::trace::{self, TraceParent};
use crate::store::{OpsStore, Replay, ReplayResult, StoreResult};
use tracing::Instrument;
use tracing::field::Empty;

/// Puts the selected dead letters back on the queue (see
/// [`OpsStore::dead_letters_replay`]) in a `replay` span that continues
/// `caller`'s trace when there is one.
pub async fn replay(
    store: &dyn OpsStore,
    mut replay: Replay,
    caller: Option<TraceParent>,
) -> StoreResult<Vec<ReplayResult>> {
    let span = tracing::info_span!(parent: None, "replay", otel.kind = "server", herald.replayed = Empty, herald.skipped = Empty);
    // Never random: the same replay call gives the same trace in every process.
    let seed = format!("replay|{}|{}|{}", replay.tenant, replay.now_us, replay.requested_by.as_deref().unwrap_or(""));
    let own = TraceParent::derived(&seed);
    match &caller {
        Some(c) => trace::continue_trace(&span, c),
        None => trace::start_trace(&span, own.trace_id),
    }
    replay.traceparent = Some(trace::traceparent_of(&span, caller.unwrap_or(own)).to_string());
    let results = store.dead_letters_replay(replay).instrument(span.clone()).await;
    match &results {
        Ok(results) => {
            let replayed = results.iter().filter(|r| r.outcome.skipped().is_none()).count();
            span.record("herald.replayed", replayed);
            span.record("herald.skipped", results.len() - replayed);
        }
        Err(_) => trace::fail(&span, "the store failed"),
    }
    results
}
