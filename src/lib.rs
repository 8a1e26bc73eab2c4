//! Herald: domain events in, each person told once, every decision recorded.
//!
//! The modules follow an event's path: [`event`] (validation, canonical time,
//! keys) → [`ingest`] (the pipeline every front door calls) → [`plan`] (routes, recipients, decisions) → [`render`] (templates,
//! SMS encoding) → [`store`] (one transaction: request, intents, payloads,
//! jobs) → [`deliver`] (worker, retry policy) → [`channel`] (providers), with
//! [`api`] as the HTTP edge and [`app`] wiring it together. What moves an
//! intent from one state to another, wherever it happens, is [`lifecycle`]'s.

pub mod api;
pub mod app;
pub mod channel;
pub mod clock;
pub mod config;
pub mod console;
pub mod deliver;
pub mod event;
pub mod ingest;
pub mod intent;
pub mod lifecycle;
pub mod ops;
pub mod plan;
pub mod preferences;
pub mod publish;
pub mod receipt;
pub mod recipient;
pub mod redact;
pub mod render;
pub mod store;
pub mod suppression;
pub mod why;
