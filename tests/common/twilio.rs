//! A fake Twilio on loopback that speaks the Messages API as Twilio does:
//! `POST /2010-04-01/Accounts/{sid}/Messages.json`, form-encoded, HTTP Basic
//! auth with the account SID and auth token; 201 with the message's `sid`,
//! and Twilio's error bodies (`{"code", "message", "more_info", "status"}`)
//! for a bad login (20003), a `To` that is not a number (21211) and a request
//! without a body or sender. Answers per `To` follow a script whose last
//! entry repeats.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const ACCOUNT_SID: &str = "AC0123456789abcdef0123456789abcdef";
pub const AUTH_TOKEN: &str = "twilio-auth-token-s3cret";

/// One scripted answer.
#[derive(Debug, Clone)]
pub struct TwilioReply {
    pub status: u16,
    pub body: Value,
    pub retry_after: Option<String>,
    pub delay: Duration,
}

impl TwilioReply {
    /// Twilio's error body for `code`.
    pub fn error(status: u16, code: u64, message: &str) -> TwilioReply {
        let body = json!({
            "code": code,
            "message": message,
            "more_info": format!("https://www.twilio.com/docs/errors/{code}"),
            "status": status,
        });
        TwilioReply { status, body, retry_after: None, delay: Duration::ZERO }
    }

    /// A created message, as the default answer has it.
    pub fn created() -> TwilioReply {
        TwilioReply { status: 201, body: Value::Null, retry_after: None, delay: Duration::ZERO }
    }

    pub fn retry_after(mut self, value: &str) -> TwilioReply {
        self.retry_after = Some(value.to_string());
        self
    }

    pub fn slow(mut self, delay: Duration) -> TwilioReply {
        self.delay = delay;
        self
    }
}

/// A request as the fake read it.
#[derive(Debug, Clone)]
pub struct MessageRequest {
    pub account_sid: String,
    /// Every header name, lowercased.
    pub header_names: Vec<String>,
    pub content_type: Option<String>,
    pub params: Vec<(String, String)>,
    /// The SID it answered with, when it created a message.
    pub sid: Option<String>,
}

impl MessageRequest {
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct FakeState {
    requests: Vec<MessageRequest>,
    scripts: HashMap<String, VecDeque<TwilioReply>>,
    created: u64,
}

#[derive(Clone)]
pub struct FakeTwilio {
    /// The `base_url` to configure.
    pub base_url: String,
    state: Arc<Mutex<FakeState>>,
}

impl FakeTwilio {
    pub async fn start() -> FakeTwilio {
        let state = Arc::new(Mutex::new(FakeState::default()));
        let app = axum::Router::new()
            .route("/2010-04-01/Accounts/{sid}/Messages.json", axum::routing::post(create_message))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base_url = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeTwilio { base_url, state }
    }

    pub fn script(&self, to: &str, replies: Vec<TwilioReply>) {
        self.state.lock().unwrap().scripts.insert(to.to_string(), replies.into());
    }

    pub fn sent_to(&self, to: &str) -> Vec<MessageRequest> {
        let s = self.state.lock().unwrap();
        s.requests.iter().filter(|r| r.param("To") == Some(to)).cloned().collect()
    }

    /// The `[channels.sms]` block for this fake, plus `extra` lines.
    pub fn toml(&self, sender: &str, timeout: &str) -> String {
        format!(
            "[channels.sms]\nprovider = \"twilio\"\naccount_sid = \"{ACCOUNT_SID}\"\nauth_token = \"{AUTH_TOKEN}\"\n\
             base_url = \"{}\"\ntimeout = \"{timeout}\"\n{sender}\n",
            self.base_url
        )
    }
}

fn authorised(headers: &HeaderMap) -> bool {
    let expected = base64::engine::general_purpose::STANDARD.encode(format!("{ACCOUNT_SID}:{AUTH_TOKEN}"));
    headers.get("authorization").and_then(|v| v.to_str().ok()) == Some(format!("Basic {expected}").as_str())
}

async fn create_message(
    State(state): State<Arc<Mutex<FakeState>>>,
    Path(sid): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let params: Vec<(String, String)> = url::form_urlencoded::parse(&body).into_owned().collect();
    let mut request = MessageRequest {
        account_sid: sid.clone(),
        header_names: headers.keys().map(|k| k.as_str().to_string()).collect(),
        content_type: headers.get("content-type").and_then(|v| v.to_str().ok()).map(String::from),
        params,
        sid: None,
    };
    let to = request.param("To").unwrap_or_default().to_string();
    let reply = {
        let mut s = state.lock().unwrap();
        let reply = if !authorised(&headers) || sid != ACCOUNT_SID {
            TwilioReply::error(401, 20003, "Authenticate")
        } else if request.param("Body").is_none_or(str::is_empty) {
            TwilioReply::error(400, 21602, "Message body is required.")
        } else if request.param("From").is_none() && request.param("MessagingServiceSid").is_none() {
            TwilioReply::error(400, 21603, "A 'From' or 'MessagingServiceSid' parameter is required to send a message")
        } else if !to.starts_with('+') || to.len() < 9 {
            TwilioReply::error(400, 21211, &format!("The 'To' number {to} is not a valid phone number."))
        } else {
            match s.scripts.get_mut(&to) {
                Some(q) if q.len() > 1 => q.pop_front().unwrap(),
                Some(q) if q.len() == 1 => q[0].clone(),
                _ => TwilioReply::created(),
            }
        };
        let mut reply = reply;
        if reply.status == 201 && reply.body.is_null() {
            s.created += 1;
            let message_sid = format!("SM{:032x}", s.created);
            request.sid = Some(message_sid.clone());
            reply.body = json!({
                "sid": message_sid,
                "account_sid": sid,
                "to": to,
                "from": request.param("From"),
                "messaging_service_sid": request.param("MessagingServiceSid"),
                "body": request.param("Body"),
                "status": "queued",
                "num_segments": "1",
            });
        }
        s.requests.push(request);
        reply
    };
    if !reply.delay.is_zero() {
        // A slow Twilio on purpose: the delay is what the test is about.
        tokio::time::sleep(reply.delay).await;
    }
    let mut resp = (StatusCode::from_u16(reply.status).unwrap(), axum::Json(reply.body)).into_response();
    if let Some(ra) = reply.retry_after {
        resp.headers_mut().insert("retry-after", ra.parse().unwrap());
    }
    resp
}

/// Twilio's request signature, computed here independently of Herald's
/// verifier: base64(HMAC-SHA1(token, URL + each sorted parameter's name and value)).
pub fn twilio_signature(token: &str, url: &str, params: &[(String, String)]) -> String {
    use hmac::{Hmac, Mac};
    let mut sorted = params.to_vec();
    sorted.sort();
    let mut data = url.to_string();
    for (k, v) in &sorted {
        data.push_str(k);
        data.push_str(v);
    }
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(token.as_bytes()).unwrap();
    mac.update(data.as_bytes());
    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
}

/// One status callback as Twilio sends it.
pub struct Callback<'a> {
    pub status: &'a str,
    pub error_code: Option<&'a str>,
    /// Sign with this token instead of the account's.
    pub token: &'a str,
    pub account_sid: &'a str,
}

impl<'a> Callback<'a> {
    pub fn status(status: &'a str) -> Callback<'a> {
        Callback { status, error_code: None, token: AUTH_TOKEN, account_sid: ACCOUNT_SID }
    }

    pub fn error(mut self, code: &'a str) -> Callback<'a> {
        self.error_code = Some(code);
        self
    }
}

impl FakeTwilio {
    /// Posts a status callback for `message` to its `StatusCallback`, the way
    /// Twilio would reach it through a proxy: signed over the public URL it
    /// was given, delivered to `herald_base` (where the test's Herald listens).
    pub async fn callback(&self, herald_base: &str, message: &MessageRequest, cb: Callback<'_>) -> (u16, Value) {
        let url = message.param("StatusCallback").expect("a StatusCallback").to_string();
        let mut params: Vec<(String, String)> = vec![
            ("AccountSid".into(), cb.account_sid.into()),
            ("ApiVersion".into(), "2010-04-01".into()),
            ("MessageSid".into(), message.sid.clone().unwrap_or_default()),
            ("SmsSid".into(), message.sid.clone().unwrap_or_default()),
            ("MessageStatus".into(), cb.status.into()),
            ("SmsStatus".into(), cb.status.into()),
            ("To".into(), message.param("To").unwrap_or_default().into()),
            ("From".into(), message.param("From").unwrap_or_default().into()),
        ];
        if let Some(code) = cb.error_code {
            params.push(("ErrorCode".into(), code.into()));
        }
        let signature = twilio_signature(cb.token, &url, &params);
        let path = url.splitn(4, '/').nth(3).map(|p| format!("/{p}")).unwrap_or_default();
        let resp = reqwest::Client::new()
            .post(format!("{herald_base}{path}"))
            .header("x-twilio-signature", signature)
            .form(&params)
            .send()
            .await
            .expect("callback");
        let status = resp.status().as_u16();
        (status, resp.json().await.unwrap_or(Value::Null))
    }
}
