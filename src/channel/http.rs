//! HTTP calls for the SMS and webhook channels: each bounded by the call's
//! deadline, with a transport failure classified by whether the request can
//! have reached the other side.

use super::{Outcome, parse_retry_after, short_error};
use crate::intent::Reason;
use std::time::Duration;
use tokio::time::{Instant, timeout_at};

/// A client whose connects (name lookup, TCP and TLS) give up well inside
/// the call's timeout; the whole call is bounded by [`send`].
pub fn client(timeout: Duration) -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder().connect_timeout(super::connect_timeout(timeout)).build()
}

/// Sends the request and waits for the response's head, by `deadline`.
pub async fn send(req: reqwest::RequestBuilder, deadline: Instant) -> Result<reqwest::Response, Outcome> {
    send_checked(req, deadline, |_| None).await
}

/// [`send`], with a say in how a transport error is classified: `refused`
/// answers for the errors it recognises (a destination guard's refusal),
/// everything else is classified by [`classify_error`].
pub async fn send_checked(
    req: reqwest::RequestBuilder,
    deadline: Instant,
    refused: impl Fn(&reqwest::Error) -> Option<Outcome>,
) -> Result<reqwest::Response, Outcome> {
    match timeout_at(deadline, req.send()).await {
        Ok(Ok(resp)) => Ok(resp),
        Ok(Err(e)) => Err(refused(&e).unwrap_or_else(|| classify_error(e))),
        // The connect phase gives up by itself well before this, so the
        // request was on its way or waiting for an answer.
        Err(_) => Err(Outcome::Unknown {
            class: Reason::Timeout,
            error: "no answer in time after the request was sent; the provider may have acted on it".into(),
        }),
    }
}

/// The response's body, by `deadline`. The status has already answered; a
/// body that is lost or late only costs the detail (and is logged).
pub async fn body(resp: reqwest::Response, deadline: Instant) -> Option<String> {
    match timeout_at(deadline, resp.text()).await {
        Ok(Ok(text)) => Some(text),
        Ok(Err(e)) => {
            tracing::warn!(error = %e.without_url(), "the provider's response body could not be read");
            None
        }
        Err(_) => {
            tracing::warn!("the provider's response body did not arrive in time");
            None
        }
    }
}

/// `Retry-After` of a response, as the provider wrote it (the retry policy
/// caps it).
pub fn retry_after(resp: &reqwest::Response) -> Option<Duration> {
    let value = resp.headers().get("retry-after")?.to_str().ok()?;
    parse_retry_after(value, jiff::Timestamp::now())
}

/// A transport error. Failing to connect (refused, no such host, a connect
/// or TLS handshake that did not finish) sent nothing: retryable. A request
/// that could not be built never left: permanent. Anything else happened
/// once the request may have left: a timeout or a broken connection is
/// `unknown` (DESIGN rule 8).
///
/// reqwest writes the URL into its errors (normalised: host lowercased,
/// escapes added, dot segments gone), and a webhook's URL is a destination;
/// so it is taken out here, where the text is made.
pub fn classify_error(e: reqwest::Error) -> Outcome {
    let e = &e.without_url();
    if e.is_connect() {
        return Outcome::Retryable {
            class: Reason::Unreachable,
            status: None,
            error: short_error(&format!("could not connect, nothing was sent: {}", chain(e))),
            retry_after: None,
        };
    }
    if e.is_builder() {
        return Outcome::Permanent {
            reason: Reason::Rejected,
            status: None,
            error: short_error(&format!("the request could not be built: {e}")),
        };
    }
    if e.is_timeout() {
        return Outcome::Unknown {
            class: Reason::Timeout,
            error: short_error(&format!("timed out after the request was sent: {}", chain(e))),
        };
    }
    Outcome::Unknown {
        class: Reason::ConnectionLost,
        error: short_error(&format!("the connection failed after the request was sent: {}", chain(e))),
    }
}

/// The error with its causes (reqwest's own text rarely says what happened).
fn chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
