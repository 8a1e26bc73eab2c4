//! The OpenAPI 3.1 description of the HTTP API, served at `GET /v1/openapi.json`.
//!
//! It is generated from the code: every handler carries its `#[utoipa::path]`
//! and the router is built from those same annotations ([`super::router`] uses
//! utoipa-axum's `OpenApiRouter`), so a route cannot be served without being
//! described. The bodies the handlers build with `json!` are described by the
//! types in [`doc`]; the enumerations (channels, decisions, states, reasons)
//! are read from the code's own enums, so they cannot drift apart.
//!
//! The document is the same for every deployment: it names no tenant, token,
//! route or template, so it is served without a token.

use super::AppState;
use axum::Json;
use axum::http::header;
use axum::response::IntoResponse;
use serde_json::Value;
use std::sync::OnceLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Herald",
        description = "Herald's HTTP API: domain events in, each person told once, every decision recorded. \
            Errors are `{\"error\": {\"code\", \"message\"}}`; a 5xx never carries its cause; \
            a method an endpoint does not take is `405 method_not_allowed`, with `Allow`. \
            When tokens are configured every endpoint but /healthz, /readyz and /v1/openapi.json needs \
            `Authorization: Bearer TOKEN` with the scope its security requirement names \
            (401 without a token, 403 without the scope, 404 for another tenant's objects); \
            without tokens every caller is the `default` tenant with every scope.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    modifiers(&BearerAuth),
    components(responses(
        doc::BadRequest,
        doc::Unauthorized,
        doc::Forbidden,
        doc::NotFound,
        doc::PayloadTooLarge,
        doc::UnsupportedMediaType,
        doc::EventConflict,
        doc::Unprocessable,
        doc::Internal,
        doc::BadGateway,
    )),
    tags(
        (name = "events", description = "Domain events in: identity, replay and conflict (DESIGN §3)."),
        (name = "intents", description = "The intent ledger: one intent per (event, channel, recipient), with its attempts."),
        (name = "recipients", description = "The recipient directory, preferences and the in-app inbox."),
        (name = "dead letters", description = "A tenant's dead letters, their summary and replay."),
        (name = "receipts", description = "Delivery receipts from providers, signed, not authorised by a token."),
        (name = "suppressions", description = "Addresses that bounced or complained: the tenant's suppression list."),
        (name = "rejected", description = "Bus messages that could not become an event: recorded, then terminated on the bus."),
        (name = "operations", description = "Health, readiness, metrics, the daily dead-letter digest and this document."),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let scheme = HttpBuilder::new()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "A token from `[[auth.tokens]]`; its scopes are events:write, intents:read, recipients:write, \
                 ops and admin.",
            ))
            .build();
        components.add_security_scheme("bearer", SecurityScheme::Http(scheme));
    }
}

/// The document, built once from the annotated routes.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let (_, api) = super::described_routes().split_for_parts();
        serde_json::to_value(&api).unwrap_or(Value::Null)
    })
}

/// This document.
#[utoipa::path(get, path = "/v1/openapi.json", operation_id = "openapi",
    tag = "operations",
    security(()),
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of this API.", content_type = "application/json", body = Object),
        (status = 400, response = doc::BadRequest),
    )
)]
pub async fn serve(_: axum::extract::State<AppState>) -> impl IntoResponse {
    ([(header::CACHE_CONTROL, "public, max-age=300")], Json(document()))
}

/// The shapes of request and response bodies. Handlers build their answers
/// with `json!` from the views in `views.rs`; these types only describe them.
#[allow(dead_code)]
pub mod doc {
    use crate::event::Channel;
    use crate::intent::{Decision, Mode, OutcomeClass, Reason, State};
    use serde::{Deserialize, Serialize};
    use serde_json::{Map, Value, json};
    use std::borrow::Cow;
    use std::collections::BTreeMap;
    use utoipa::openapi::schema::{ObjectBuilder, Schema, SchemaType, Type};
    use utoipa::openapi::{RefOr, ResponseBuilder, content::ContentBuilder};
    use utoipa::{PartialSchema, ToResponse, ToSchema};

    fn string_enum(description: &str, values: Vec<&'static str>) -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .description(Some(description))
            .enum_values(Some(values))
            .into()
    }

    macro_rules! enum_schema {
        ($name:ident, $description:literal, $values:expr) => {
            #[doc = $description]
            #[derive(Serialize, Deserialize)]
            pub struct $name;
            impl PartialSchema for $name {
                fn schema() -> RefOr<Schema> {
                    string_enum($description, $values)
                }
            }
            impl ToSchema for $name {
                fn name() -> Cow<'static, str> {
                    Cow::Borrowed(stringify!($name))
                }
            }
        };
    }

    enum_schema!(ChannelName, "A channel.", Channel::ALL.iter().map(|c| c.as_str()).collect());
    enum_schema!(DecisionName, "What the planner decided.", Decision::ALL.iter().map(|d| d.as_str()).collect());
    enum_schema!(StateName, "Where an intent is now.", State::ALL.iter().map(|s| s.as_str()).collect());
    enum_schema!(
        ModeName,
        "Live (delivered) or shadow (observed only: it ends `shadowed` where live would call a provider).",
        Mode::ALL.iter().map(|m| m.as_str()).collect()
    );
    enum_schema!(
        ReasonName,
        "Why an intent was not sent, or why its last attempt failed (a bounded set).",
        Reason::ALL.iter().map(|r| r.as_str()).collect()
    );
    enum_schema!(
        OutcomeName,
        "The class of one attempt's result.",
        OutcomeClass::ALL.iter().map(|o| o.as_str()).collect()
    );

    /// An error body whose `code` is one of `codes`.
    fn error_schema(codes: &[&'static str]) -> RefOr<Schema> {
        let code = ObjectBuilder::new().schema_type(SchemaType::Type(Type::String)).enum_values(Some(codes.to_vec()));
        let message = ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::String))
            .description(Some("For a person: what was wrong, naming the field."));
        let inner = ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::Object))
            .property("code", code)
            .property("message", message)
            .required("code")
            .required("message");
        ObjectBuilder::new()
            .schema_type(SchemaType::Type(Type::Object))
            .property("error", inner)
            .required("error")
            .into()
    }

    /// One reusable error response per status, each with the codes it can carry.
    macro_rules! error_response {
        ($name:ident, $description:literal, [$($code:literal),+ $(,)?]) => {
            #[doc = $description]
            pub struct $name;
            impl<'r> ToResponse<'r> for $name {
                fn response() -> (&'r str, RefOr<utoipa::openapi::Response>) {
                    let codes = [$($code),+];
                    let content = ContentBuilder::new()
                        .schema(Some(error_schema(&codes)))
                        .example(Some(json!({"error": {"code": codes[0], "message": $description}})))
                        .build();
                    let response = ResponseBuilder::new()
                        .description(concat!($description, " Codes: ", $("`", $code, "` "),+))
                        .content("application/json", content)
                        .build();
                    (stringify!($name), response.into())
                }
            }
        };
    }

    error_response!(
        BadRequest,
        "The request is malformed or a field is invalid; the message names the field (e.g. recipients[1].phone).",
        ["invalid_field", "invalid_request", "malformed_json", "duplicate_key", "too_deep", "inexact_number"]
    );
    error_response!(Unauthorized, "No token, or a token Herald does not know.", ["unauthorized"]);
    error_response!(Forbidden, "The token lacks the scope this endpoint needs.", ["forbidden"]);
    error_response!(
        NotFound,
        "No such object for this tenant (another tenant's objects are not found).",
        ["not_found"]
    );
    error_response!(
        PayloadTooLarge,
        "The body is over the limit (max_body_bytes, 256 KiB by default).",
        ["payload_too_large"]
    );
    error_response!(
        UnsupportedMediaType,
        "The body is not sent as JSON (Content-Type: application/json).",
        ["unsupported_media_type"]
    );
    error_response!(
        EventConflict,
        "This event (type, entity, occurred_at) was accepted before with other data or entity.version.",
        ["event_conflict"]
    );
    error_response!(
        Unprocessable,
        "No route for the event type, or an Idempotency-Key reused with another body.",
        ["unknown_event_type", "idempotency_key_mismatch"]
    );
    error_response!(
        Internal,
        "Something failed inside; the message holds a reference to the log, never the cause.",
        ["internal"]
    );
    error_response!(
        BadGateway,
        "A service Herald depends on did not answer as it should (the ops webhook; SNS for its certificate or a confirmation).",
        ["bad_gateway"]
    );

    // ---- POST /v1/shadow/compare ----

    /// The send log as JSON: one object a send, its fields named as the
    /// columns are (`time`, `channel`, `recipient_id` or `destination`,
    /// `entity_type`, `entity_id`, `event_type`, or as the query maps them);
    /// other fields are ignored.
    #[derive(ToSchema, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[schema(example = json!({"sends": [{"time": "2026-11-29T10:15:10Z", "channel": "sms", "recipient_id": "u-1",
        "entity_type": "purchase_order", "entity_id": "PO-1", "event_type": "purchase_order.approved"}]}))]
    pub struct CompareSends {
        pub sends: Vec<Map<String, Value>>,
    }

    // ---- POST /v1/events ----

    /// A domain event.
    #[derive(ToSchema, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[schema(example = json!({
        "type": "purchase_order.approved",
        "entity": {"type": "purchase_order", "id": "PO-4482", "version": 3},
        "occurred_at": "2026-11-29T10:15:00+05:45",
        "data": {"po": {"number": "PO-4482", "total": "1,20,000"}, "approver": {"name": "Asha"}},
        "recipients": [{"id": "u-19"}, {"id": "u-20", "email": "a@example.com", "phone": "+9779800000000", "locale": "ne", "timezone": "Asia/Kathmandu"}],
        "channels": ["email", "sms", "in_app"]
    }))]
    pub struct EventRequest {
        /// The event type; a route must be configured for it (else 422 unknown_event_type).
        /// No `|` or control characters.
        #[serde(rename = "type")]
        #[schema(min_length = 1, max_length = 256)]
        pub event_type: String,
        pub entity: EntityInput,
        /// The sender's time of the event, RFC 3339 with an offset. Required: never defaulted.
        /// The same instant written with another offset is the same event.
        #[schema(format = DateTime)]
        pub occurred_at: String,
        /// The template's data. May not use the reserved names `event`, `entity`, `recipient`.
        /// Numbers must be exact (no value a double would round).
        #[schema(value_type = Option<Object>)]
        pub data: Option<Map<String, Value>>,
        /// Who to tell, each at most once.
        #[schema(min_items = 1, max_items = 1000)]
        pub recipients: Vec<RecipientInput>,
        /// Replaces the route's channels when given.
        #[schema(min_items = 1)]
        pub channels: Option<Vec<ChannelName>>,
    }

    /// The entity the event is about.
    #[derive(ToSchema, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct EntityInput {
        #[serde(rename = "type")]
        #[schema(min_length = 1, max_length = 256)]
        pub kind: String,
        #[schema(min_length = 1, max_length = 256)]
        pub id: String,
        /// Ordering features (inbox collapse, superseded) apply to versioned entities.
        #[schema(maximum = 9223372036854775807_u64)]
        pub version: Option<u64>,
    }

    /// A recipient; inline fields override the directory for this event only.
    #[derive(ToSchema, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct RecipientInput {
        #[schema(min_length = 1, max_length = 256)]
        pub id: String,
        pub email: Option<String>,
        /// E.164, e.g. +9779800000000.
        pub phone: Option<String>,
        pub locale: Option<String>,
        /// An IANA time zone, e.g. Asia/Kathmandu.
        pub timezone: Option<String>,
        /// A public https URL (addresses inside the deployment are refused).
        pub webhook_url: Option<String>,
    }

    /// The answer to an accepted or replayed event.
    #[derive(ToSchema, Serialize)]
    pub struct EventAccepted {
        /// The event's key (see DESIGN §3).
        pub event_key: String,
        /// True when this is a stored answer replayed.
        pub replayed: bool,
        pub intents: Vec<IntentSummary>,
    }

    #[derive(ToSchema, Serialize)]
    pub struct IntentSummary {
        /// The intent's id: its key.
        pub id: String,
        /// 32 lowercase hex characters derived from the event.
        pub key: String,
        pub channel: ChannelName,
        pub recipient_id: String,
        pub decision: DecisionName,
        pub reason: Option<ReasonName>,
        pub state: StateName,
        /// Whether this request created the intent.
        pub created: bool,
        /// Why planning made the intent dead (`template_error` names the
        /// variable, file and line); only on an intent this request created.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub detail: Option<String>,
    }

    /// The 200 answer of `POST /v1/events`: a replay or existing intents, or a dry run's.
    #[derive(ToSchema, Serialize)]
    #[serde(untagged)]
    pub enum EventAnswer {
        Accepted(EventAccepted),
        DryRun(EventDryRun),
    }

    /// What a real post of this event would record (`?dry_run=true`); nothing was written.
    #[derive(ToSchema, Serialize)]
    pub struct EventDryRun {
        /// Always true: nothing was written.
        pub dry_run: bool,
        pub event_key: String,
        /// The request was seen before: a real post would replay its stored answer.
        pub replay: bool,
        /// What a dry run does not consult, so its intents may differ from a real
        /// post's: always `["suppression_list"]`. Its intents are planned as if no
        /// address were on the suppression list (a dry run writes nothing and leaves
        /// no trace, so it must not confirm a guess at a listed address); a real
        /// post does consult it, and records what it decided.
        pub not_checked: Vec<NotChecked>,
        /// The same, in a sentence.
        pub note: String,
        pub intents: Vec<DryRunIntent>,
    }

    /// A check a dry run leaves out.
    #[derive(ToSchema, Serialize)]
    #[serde(rename_all = "snake_case")]
    pub enum NotChecked {
        SuppressionList,
    }

    /// An intent a real post would create, or report as it stands when it exists already.
    #[derive(ToSchema, Serialize)]
    pub struct DryRunIntent {
        pub key: String,
        pub channel: ChannelName,
        pub recipient_id: String,
        /// The intent exists already: decision, reason and state are as they stand.
        pub exists: bool,
        pub decision: DecisionName,
        pub reason: Option<ReasonName>,
        /// A template error's message, when rendering failed.
        pub detail: Option<String>,
        pub state: StateName,
        /// `shadow`: a real post would plan it observe-only (it would end `shadowed`
        /// where live sends), as the deployment's, route's and channel's `mode`
        /// decide; an intent that exists shows the mode it was planned in.
        pub mode: ModeName,
        /// Masked, e.g. a***@example.com, +97798******00.
        pub destination: Option<String>,
        pub template: TemplateRef,
        /// SHA-256 of the rendered content.
        pub payload_digest: Option<String>,
        /// The rendered content (SMS with its encoding and segments).
        pub content: Option<Content>,
    }

    // ---- intents ----

    #[derive(ToSchema, Serialize)]
    pub struct EntityRef {
        #[serde(rename = "type")]
        pub kind: String,
        pub id: String,
        pub version: Option<i64>,
    }

    #[derive(ToSchema, Serialize)]
    pub struct TemplateRef {
        pub id: String,
        pub revision: Option<String>,
        pub locale: Option<String>,
    }

    /// Frozen content: what was (or will be) sent.
    #[derive(ToSchema, Serialize)]
    pub struct Content {
        pub subject: Option<String>,
        pub body: String,
        pub html: Option<String>,
        /// SMS only: `GSM-7` or `UCS-2`.
        pub encoding: Option<String>,
        /// SMS only: the segments the provider will bill.
        pub segments: Option<u32>,
    }

    /// An intent as lists show it.
    #[derive(ToSchema, Serialize)]
    pub struct Intent {
        pub id: String,
        pub key: String,
        pub channel: ChannelName,
        pub recipient_id: String,
        /// Masked, e.g. a***@example.com, +97798******00.
        pub destination: Option<String>,
        pub event_type: String,
        pub occurred_at: String,
        pub entity: EntityRef,
        pub template: TemplateRef,
        /// SHA-256 of the frozen content.
        pub payload_digest: Option<String>,
        pub decision: DecisionName,
        pub reason: Option<ReasonName>,
        pub detail: Option<String>,
        pub state: StateName,
        /// Fixed when the intent was planned.
        pub mode: ModeName,
        pub attempt_count: i64,
        #[schema(format = DateTime)]
        pub created_at: String,
        #[schema(format = DateTime)]
        pub updated_at: String,
        /// The recipient's preferences version the decision was made with.
        pub preferences_version: Option<i64>,
        /// The newer intent that superseded this one (reason superseded).
        #[schema(required = false)]
        pub superseded_by: Option<String>,
        /// The digest this intent was batched into.
        #[schema(required = false)]
        pub digest_id: Option<String>,
        /// State `shadowed` only: what live would have done at that moment.
        #[schema(required = false)]
        pub would_have_sent: Option<WouldHaveSent>,
    }

    /// Where a shadowed intent would have gone; no provider was called.
    #[derive(ToSchema, Serialize)]
    pub struct WouldHaveSent {
        #[schema(format = DateTime)]
        pub at: String,
        pub channel: ChannelName,
        /// Masked; null for in-app (the recipient's inbox, where no card was shown).
        pub to: Option<String>,
        /// SHA-256 of the frozen content it would have carried.
        pub payload_digest: Option<String>,
    }

    /// One try at delivery.
    #[derive(ToSchema, Serialize)]
    pub struct Attempt {
        pub n: i64,
        #[schema(format = DateTime)]
        pub started_at: String,
        #[schema(format = DateTime)]
        pub finished_at: Option<String>,
        pub outcome: Option<OutcomeName>,
        pub error_class: Option<String>,
        pub provider_status: Option<i64>,
        pub provider_message_id: Option<String>,
        /// The provider's error, with the destination redacted.
        pub error: Option<String>,
        pub retry_after_seconds: Option<f64>,
        #[schema(format = DateTime)]
        pub next_try_at: Option<String>,
        /// The provider it went to (a configured name); null when its worker died before recording it.
        pub provider: Option<String>,
        /// It came after an `unknown` attempt on a provider that cannot recognise a retry, and may have told the recipient twice.
        pub possible_duplicate: bool,
    }

    /// An intent with its frozen content and every attempt.
    #[derive(ToSchema, Serialize)]
    pub struct IntentDetail {
        #[serde(flatten)]
        pub intent: Intent,
        pub content: Option<Content>,
        pub attempts: Vec<Attempt>,
        /// How many messages may have reached the person: the first attempt
        /// accepted or `unknown`, and every possible duplicate after it.
        pub messages_may_have_reached: u64,
        /// The furthest status its receipts reached; null before any.
        pub delivery_status: Option<crate::api::receipts::doc::DeliveryStatusName>,
        pub receipts: Vec<crate::api::receipts::doc::Receipt>,
        /// Each replay from the dead letters, oldest first.
        pub replays: Vec<Replay>,
    }

    /// A replay of a dead letter.
    #[derive(ToSchema, Serialize)]
    pub struct Replay {
        #[schema(format = DateTime)]
        pub at: String,
        /// The reason it had been dead for: the group it was replayed with.
        pub previous_reason: Option<String>,
        /// The token's name (`console:NAME` from the console, `cli` from `herald dlq replay`).
        pub requested_by: Option<String>,
    }

    #[derive(ToSchema, Serialize)]
    pub struct IntentPage {
        pub intents: Vec<Intent>,
        /// Pass as `cursor` for the next page; null on the last.
        pub next: Option<String>,
    }

    // ---- recipients ----

    /// A directory entry to store.
    #[derive(ToSchema, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[schema(example = json!({
        "email": "a@example.com", "phone": "+9779800000000", "locale": "ne", "timezone": "Asia/Kathmandu",
        "preferences": {"channels": {"sms": false}, "quiet_hours": {"start": "21:00", "end": "07:00", "channels": ["sms", "email"]}}
    }))]
    pub struct RecipientUpdate {
        pub email: Option<String>,
        /// E.164.
        pub phone: Option<String>,
        pub locale: Option<String>,
        /// IANA time zone.
        pub timezone: Option<String>,
        pub webhook_url: Option<String>,
        pub preferences: Option<Preferences>,
    }

    /// A recipient's preferences; every change is a new version.
    #[derive(ToSchema, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Preferences {
        /// `false` opts out of a channel (reason opted_out).
        #[schema(value_type = Option<BTreeMap<String, bool>>)]
        pub channels: Option<BTreeMap<String, bool>>,
        pub quiet_hours: Option<QuietHours>,
        /// Batch this recipient's notifications into digests.
        pub digest: Option<bool>,
    }

    #[derive(ToSchema, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct QuietHours {
        /// HH:MM in the recipient's time zone.
        #[schema(pattern = "^[0-9]{2}:[0-9]{2}$")]
        pub start: String,
        /// HH:MM; must differ from start.
        #[schema(pattern = "^[0-9]{2}:[0-9]{2}$")]
        pub end: String,
        /// Defaults to email and SMS.
        pub channels: Option<Vec<ChannelName>>,
    }

    /// A directory entry as stored, its addresses masked.
    #[derive(ToSchema, Serialize)]
    pub struct Recipient {
        pub id: String,
        pub email: Option<String>,
        pub phone: Option<String>,
        pub locale: Option<String>,
        pub timezone: Option<String>,
        pub webhook_url: Option<String>,
        pub preferences: Preferences,
        pub preferences_version: i64,
        #[schema(format = DateTime)]
        pub updated_at: String,
    }

    /// The preferences a past decision was made with.
    #[derive(ToSchema, Serialize)]
    pub struct PreferencesVersion {
        pub recipient_id: String,
        pub version: i64,
        pub preferences: Preferences,
        #[schema(format = DateTime)]
        pub created_at: String,
    }

    /// One in-app card: an entity at its highest version.
    #[derive(ToSchema, Serialize)]
    pub struct Card {
        pub id: String,
        pub entity: CardEntity,
        pub version: Option<i64>,
        pub content: Option<Content>,
        /// Older versions folded into this card.
        pub collapsed: i64,
        pub read: bool,
        pub intent_id: String,
        #[schema(format = DateTime)]
        pub updated_at: String,
    }

    #[derive(ToSchema, Serialize)]
    pub struct CardEntity {
        #[serde(rename = "type")]
        pub kind: String,
        pub id: String,
    }

    #[derive(ToSchema, Serialize)]
    pub struct Inbox {
        pub cards: Vec<Card>,
        pub next: Option<String>,
    }

    #[derive(ToSchema, Serialize)]
    pub struct CardRead {
        pub id: String,
        pub read: bool,
    }

    // ---- dead letters and operations ----

    /// A dead letter: the intent, its tenant, frozen content, the original event
    /// (inline recipients masked) and every attempt.
    #[derive(ToSchema, Serialize)]
    pub struct DeadLetter {
        #[serde(flatten)]
        pub intent: Intent,
        pub tenant: String,
        pub content: Option<Content>,
        /// The event as accepted, until retention prunes it.
        #[schema(value_type = Option<Object>)]
        pub event: Option<Value>,
        pub attempts: Vec<Attempt>,
        pub delivery_status: Option<crate::api::receipts::doc::DeliveryStatusName>,
        pub receipts: Vec<crate::api::receipts::doc::Receipt>,
    }

    #[derive(ToSchema, Serialize)]
    pub struct DeadLetterPage {
        pub dead_letters: Vec<DeadLetter>,
        pub next: Option<String>,
    }

    #[derive(ToSchema, Serialize)]
    pub struct DeadLetterSummary {
        pub total: i64,
        pub by_reason: BTreeMap<String, i64>,
    }

    /// Either `ids`, or `reason` with an optional `since`.
    #[derive(ToSchema, Serialize, Deserialize)]
    #[serde(deny_unknown_fields)]
    #[schema(example = json!({"reason": "provider_5xx", "since": "2026-11-29T00:00:00Z"}))]
    pub struct ReplayRequest {
        #[schema(min_items = 1, max_items = 1000)]
        pub ids: Option<Vec<String>>,
        pub reason: Option<String>,
        #[schema(format = DateTime)]
        pub since: Option<String>,
    }

    #[derive(ToSchema, Serialize)]
    pub struct ReplayResult {
        /// Ids queued again, with their key and frozen content.
        pub replayed: Vec<String>,
        pub skipped: Vec<ReplaySkipped>,
        pub skipped_by_reason: BTreeMap<String, i64>,
    }

    #[derive(ToSchema, Serialize)]
    pub struct ReplaySkipped {
        pub id: String,
        /// not_found, not_dead, no_content or content_pruned.
        pub reason: String,
        pub why: String,
    }

    /// The dead-letter digest as posted to the ops webhook (Slack-compatible `text`).
    #[derive(ToSchema, Serialize)]
    pub struct DlqDigest {
        pub text: String,
        pub total: i64,
        pub by_reason: BTreeMap<String, i64>,
        /// New hard bounces in the window by recipient domain (SMS as `(sms)`).
        pub bounces_by_domain: BTreeMap<String, i64>,
        #[schema(format = DateTime)]
        pub since: String,
        #[schema(format = DateTime)]
        pub until: String,
        #[schema(value_type = Object)]
        pub examples: Value,
        #[schema(value_type = Object)]
        pub replay: Value,
    }

    #[derive(ToSchema, Serialize)]
    pub struct Status {
        pub status: String,
    }
}
