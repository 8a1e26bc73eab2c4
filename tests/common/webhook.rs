//! A webhook receiver that checks every delivery with its own implementation
//! of the Standard Webhooks verification, and answers per path from a script.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Debug, Clone)]
pub struct Received {
    pub path: String,
    pub id: String,
    pub body: serde_json::Value,
    /// Every header name the delivery carried, lowercased.
    pub header_names: Vec<String>,
    /// Whether the signature verified against the shared secret.
    pub verified: bool,
}

#[derive(Default)]
struct Inner {
    received: Vec<Received>,
    scripts: HashMap<String, Vec<u16>>,
}

#[derive(Clone)]
pub struct FakeReceiver {
    pub base: String,
    secret: String,
    inner: Arc<Mutex<Inner>>,
}

type Shared = (String, Arc<Mutex<Inner>>);

impl FakeReceiver {
    pub async fn start(secret: &str) -> FakeReceiver {
        let inner = Arc::new(Mutex::new(Inner::default()));
        let app = axum::Router::new()
            .route("/hook/{name}", axum::routing::post(receive))
            .with_state((secret.to_string(), inner.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let base = format!("http://{}", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeReceiver { base, secret: secret.into(), inner }
    }

    /// Statuses to answer on `/hook/{name}` in turn; the last repeats. Default
    /// 204. A 3xx redirects to `/hook/{name}-target`; a 4xx or 5xx echoes the
    /// path in its body, as many frameworks' error pages do.
    pub fn script(&self, name: &str, statuses: &[u16]) {
        self.inner.lock().unwrap().scripts.insert(name.into(), statuses.to_vec());
    }

    pub fn received(&self, name: &str) -> Vec<Received> {
        self.inner.lock().unwrap().received.iter().filter(|r| r.path == name).cloned().collect()
    }

    pub fn secret(&self) -> &str {
        &self.secret
    }
}

/// The verification a receiver runs: the timestamp within five minutes, and
/// one of the space-separated `v1,` signatures equal to ours.
fn verify(secret: &str, headers: &HeaderMap, body: &[u8]) -> bool {
    let get = |n: &str| headers.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    let (id, ts, sigs) = (get("webhook-id"), get("webhook-timestamp"), get("webhook-signature"));
    let Ok(ts_num) = ts.parse::<i64>() else {
        return false;
    };
    if (jiff::Timestamp::now().as_second() - ts_num).abs() > 300 {
        return false;
    }
    let Some(key) = secret.strip_prefix("whsec_").and_then(|b| STANDARD.decode(b).ok()) else {
        return false;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(ts.as_bytes());
    mac.update(b".");
    mac.update(body);
    let expected = mac.finalize().into_bytes();
    sigs.split(' ').filter_map(|s| s.strip_prefix("v1,")).filter_map(|s| STANDARD.decode(s).ok()).any(|sig| {
        let mut check = Hmac::<Sha256>::new_from_slice(&key).unwrap();
        check.update(format!("{id}.{ts}.").as_bytes());
        check.update(body);
        sig.len() == expected.len() && check.verify_slice(&sig).is_ok()
    })
}

async fn receive(
    State((secret, inner)): State<Shared>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    let verified = verify(&secret, &headers, &body);
    let mut s = inner.lock().unwrap();
    s.received.push(Received {
        path: name.clone(),
        id: headers.get("webhook-id").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string(),
        body: serde_json::from_slice(&body).unwrap_or_default(),
        header_names: headers.keys().map(|k| k.as_str().to_string()).collect(),
        verified,
    });
    let status = match s.scripts.get_mut(&name) {
        Some(q) if q.len() > 1 => q.remove(0),
        Some(q) if !q.is_empty() => q[0],
        _ => 204,
    };
    let status = StatusCode::from_u16(status).unwrap();
    if status.is_redirection() {
        return (status, [("location", format!("/hook/{name}-target"))]).into_response();
    }
    if !status.is_success() {
        // As many web frameworks do: the refusal names the path it refused.
        return (status, format!("Cannot POST /hook/{name}")).into_response();
    }
    status.into_response()
}
