#![allow(dead_code)]

//! A console user over plain HTTP: a cookie jar, no redirects followed, and
//! the CSRF token read from the page as a browser's form would carry it.

use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// `[[auth.tokens]]` for each (name, tenant, token, scopes).
pub fn tokens_toml(tokens: &[(&str, &str, &str, &[&str])]) -> String {
    tokens
        .iter()
        .map(|(name, tenant, token, scopes)| {
            let scopes: Vec<String> = scopes.iter().map(|s| format!("{s:?}")).collect();
            format!(
                "[[auth.tokens]]\nname = {name:?}\ntenant = {tenant:?}\ntoken_sha256 = {:?}\nscopes = [{}]\n",
                hex::encode(Sha256::digest(token.as_bytes())),
                scopes.join(", ")
            )
        })
        .collect()
}

pub struct Page {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Page {
    pub fn location(&self) -> Option<&str> {
        self.headers.get(LOCATION).and_then(|v| v.to_str().ok())
    }

    /// The CSRF token of the page's (first) form.
    pub fn csrf(&self) -> String {
        let at = self.body.find("name=\"csrf\" value=\"").expect("a form with a CSRF token") + 19;
        self.body[at..].split('"').next().unwrap_or_default().to_string()
    }

    pub fn set_cookies(&self) -> Vec<String> {
        self.headers.get_all(SET_COOKIE).iter().filter_map(|v| v.to_str().ok()).map(String::from).collect()
    }
}

pub struct User {
    pub base: String,
    client: reqwest::Client,
    pub cookies: BTreeMap<String, String>,
}

impl User {
    pub fn new(base: &str) -> User {
        let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().expect("client");
        User { base: base.to_string(), client, cookies: BTreeMap::new() }
    }

    fn keep_cookies(&mut self, headers: &HeaderMap) {
        for c in headers.get_all(SET_COOKIE).iter().filter_map(|v| v.to_str().ok()) {
            let pair = c.split(';').next().unwrap_or_default();
            if let Some((name, value)) = pair.split_once('=') {
                if value.is_empty() || c.contains("Max-Age=0") {
                    self.cookies.remove(name);
                } else {
                    self.cookies.insert(name.to_string(), value.to_string());
                }
            }
        }
    }

    fn cookie_header(&self) -> String {
        self.cookies.iter().map(|(n, v)| format!("{n}={v}")).collect::<Vec<_>>().join("; ")
    }

    async fn page(&mut self, resp: reqwest::Response) -> Page {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        self.keep_cookies(&headers);
        Page { status, headers, body: resp.text().await.unwrap_or_default() }
    }

    pub async fn get(&mut self, path: &str) -> Page {
        let resp = self
            .client
            .get(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .send()
            .await
            .expect("GET");
        self.page(resp).await
    }

    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Page {
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .form(form)
            .send()
            .await
            .expect("POST");
        self.page(resp).await
    }

    /// A form with a file input, posted as a browser posts it
    /// (`multipart/form-data`): `fields`, and `file` as (field, file name, content).
    pub async fn post_multipart(
        &mut self,
        path: &str,
        fields: &[(&str, &str)],
        file: Option<(&str, &str, &str)>,
    ) -> Page {
        let boundary = "----herald-test-boundary-7f3a";
        let mut body = String::new();
        for (name, value) in fields {
            body.push_str(&format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            ));
        }
        if let Some((name, file_name, content)) = file {
            body.push_str(&format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; filename=\"{file_name}\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n{content}\r\n"
            ));
        }
        body.push_str(&format!("--{boundary}--\r\n"));
        let resp = self
            .client
            .post(format!("{}{path}", self.base))
            .header("cookie", self.cookie_header())
            .header("content-type", format!("multipart/form-data; boundary={boundary}"))
            .body(body)
            .send()
            .await
            .expect("POST");
        self.page(resp).await
    }

    /// Signs in with `token` as a person would: the form first, then the post.
    pub async fn sign_in(&mut self, token: &str) -> Page {
        let form = self.get("/console/sign-in").await;
        assert_eq!(form.status, 200, "{}", form.body);
        self.post("/console/sign-in", &[("token", token), ("csrf", &form.csrf())]).await
    }
}

/// POST /v1/events with a bearer token.
pub async fn post_event(base: &str, token: &str, event: &Value) -> Value {
    let resp = reqwest::Client::new()
        .post(format!("{base}/v1/events"))
        .bearer_auth(token)
        .json(event)
        .send()
        .await
        .expect("POST /v1/events");
    assert!(resp.status().is_success(), "event refused: {}", resp.status());
    resp.json().await.expect("json")
}

/// Polls an intent (with a token that reads it) until it is in one of `states`.
pub async fn wait_state(base: &str, token: &str, key: &str, states: &[&str]) -> Value {
    let client = reqwest::Client::new();
    let mut last = Value::Null;
    for _ in 0..300 {
        let resp = client.get(format!("{base}/v1/intents/{key}")).bearer_auth(token).send().await.expect("GET");
        if resp.status().is_success() {
            last = resp.json().await.unwrap_or(Value::Null);
            if states.contains(&last["state"].as_str().unwrap_or_default()) {
                return last;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("intent {key} never reached {states:?}; last: {last}");
}
