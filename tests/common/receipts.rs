//! Delivery receipts as an in-house gateway sends them: signed per Standard
//! Webhooks with the secret the tests configure as `receipts.generic.secret`.

use super::Spawned;
use serde_json::Value;

pub const RECEIPT_SECRET: &str = "whsec_cmVjZWlwdHMtc2VjcmV0LWZvci10ZXN0cw==";

/// `[channels.email]` on the SMTP server at `smtp_url`, and generic receipts on.
pub fn email_with_receipts(smtp_url: &str) -> String {
    format!(
        "[channels.email]\nsmtp_url = \"{smtp_url}\"\nfrom = \"Herald <noreply@herald.test>\"\ntimeout = \"1s\"\n\
         [receipts.generic]\nsecret = \"{RECEIPT_SECRET}\"\n"
    )
}

/// Posts `text` to `/v1/receipts/generic`, signed with `secret` as of
/// `age_s` seconds ago.
pub async fn post_signed(app: &Spawned, id: &str, text: String, secret: &str, age_s: i64) -> (u16, Value) {
    let key = herald::channel::webhook::decode_secret(secret).unwrap();
    let ts = jiff::Timestamp::now().as_second() - age_s;
    let sig = herald::channel::webhook::sign(&key, id, ts, &text);
    let resp = app
        .client
        .post(format!("{}/v1/receipts/generic", app.base))
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .header("webhook-signature", sig)
        .body(text)
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// A receipt of `body`, signed now with the tests' secret.
pub async fn post(app: &Spawned, id: &str, body: &Value) -> (u16, Value) {
    post_signed(app, id, body.to_string(), RECEIPT_SECRET, 0).await
}
