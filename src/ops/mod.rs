//! Operations: metrics, the daily dead-letter digest, retention, and the
//! optional Redis fast path in front of ingest.

pub mod dlq_digest;
pub mod fastpath;
pub mod log;
pub mod metrics;
pub mod replay;
pub mod retention;
pub mod shadow_compare;
pub mod shadow_report;
pub mod trace;
