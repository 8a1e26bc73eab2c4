//! The ingest tally: every post counted by how it was answered, per tenant
//! and minute, for the shadow report. Counts are added up in memory and
//! written in one small transaction at most every [`FLUSH`], never on a
//! request's path: a duplicate storm adds to a number, not to a row lock. A
//! crash loses at most the last interval's counts; a failed write is kept and
//! tried again with the next.

use crate::clock::{Clock, micros};
use crate::store::{IngestStore, TallyKind, TallyRow};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often counts are written.
pub const FLUSH: Duration = Duration::from_millis(500);

const MINUTE_US: i64 = 60_000_000;

pub struct Tally {
    counts: Mutex<HashMap<(String, i64, TallyKind), i64>>,
    clock: Arc<dyn Clock>,
}

impl Tally {
    /// A tally with its writer running; the writer writes what is left and
    /// stops once the tally is dropped.
    pub fn start(store: Arc<dyn IngestStore>, clock: Arc<dyn Clock>) -> Arc<Tally> {
        let tally = Arc::new(Tally { counts: Mutex::new(HashMap::new()), clock });
        let writer = tally.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(FLUSH).await;
                let last = Arc::strong_count(&writer) == 1;
                writer.flush(store.as_ref()).await;
                if last {
                    return;
                }
            }
        });
        tally
    }

    pub fn count(&self, tenant: &str, kind: TallyKind) {
        let minute = micros(self.clock.now()).div_euclid(MINUTE_US) * MINUTE_US;
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        *counts.entry((tenant.to_string(), minute, kind)).or_default() += 1;
    }

    /// Writes the counts so far; on failure they are kept for the next try.
    pub async fn flush(&self, store: &dyn IngestStore) {
        let taken = std::mem::take(&mut *self.counts.lock().unwrap_or_else(|p| p.into_inner()));
        if taken.is_empty() {
            return;
        }
        let rows: Vec<TallyRow> = (taken.iter())
            .map(|((tenant, minute_us, kind), n)| TallyRow {
                tenant: tenant.clone(),
                minute_us: *minute_us,
                kind: *kind,
                n: *n,
            })
            .collect();
        if let Err(e) = store.ingest_tally_add(&rows).await {
            tracing::warn!(error = %e, rows = rows.len(), "the ingest tally could not be written; keeping it for the next try");
            let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
            for (k, n) in taken {
                *counts.entry(k).or_default() += n;
            }
        }
    }
}
