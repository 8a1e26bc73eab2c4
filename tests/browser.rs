//! The console in a real headless Chromium, driven over WebDriver
//! (chromedriver), against a Herald this test starts: sign in, search an
//! entity and read its timeline, replay a dead-letter group and see it leave
//! the list, a token without `ops` refused, a form posted without its CSRF
//! token refused, one tenant unable to open another's intent by URL, a
//! template's UCS-2 culprits highlighted (the page reached by keyboard), the
//! health page, and an old notifier's send log compared with what Herald did.
//! Screenshots of the main pages go to `docs/console/`.
//!
//! Runs when `HERALD_TEST_BROWSER=1` (`.ci/run` installs Debian's `chromium`
//! and `chromium-driver` and sets it); set but without a browser, it fails.

mod common;
#[path = "console/support.rs"]
mod support;

use common::{Backend, FakeSms, Reply, TestApp, TestDb, sms_event};
use fantoccini::key::Key;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use support::{post_event, tokens_toml, wait_state};

const OPS_A: &str = "tok-ops-acme";
const WRITER_A: &str = "tok-writer-acme";
const WRITER_B: &str = "tok-writer-globex";
const READER: &str = "tok-reader-acme";
const ADMIN: &str = "tok-admin";

fn wanted() -> bool {
    std::env::var("HERALD_TEST_BROWSER").is_ok_and(|v| !v.is_empty() && v != "0")
}

fn program(env: &str, default: &str) -> PathBuf {
    let path = PathBuf::from(std::env::var(env).unwrap_or_else(|_| default.to_string()));
    assert!(
        path.exists(),
        "HERALD_TEST_BROWSER is set but {} does not exist (apt-get install chromium chromium-driver, or set {env})",
        path.display()
    );
    path
}

/// chromedriver on a free port, ended when dropped.
struct Driver {
    child: Child,
    url: String,
}

impl Driver {
    async fn start() -> Driver {
        let bin = program("HERALD_CHROMEDRIVER", "/usr/bin/chromedriver");
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let child = Command::new(bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        // Owned (and so ended when dropped) before anything can fail.
        let driver = Driver { child, url: format!("http://127.0.0.1:{port}") };
        for _ in 0..100 {
            if reqwest::get(format!("{}/status", driver.url)).await.is_ok_and(|r| r.status().is_success()) {
                return driver;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("chromedriver did not answer on {}", driver.url);
    }

    async fn browser(&self) -> Client {
        let chromium = program("HERALD_CHROMIUM", "/usr/bin/chromium");
        let mut caps = serde_json::Map::new();
        caps.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": chromium,
                // Root in CI: Chromium's own sandbox needs a user namespace it may not have.
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                         "--window-size=1280,900", "--hide-scrollbars", "--force-device-scale-factor=1"]
            }),
        );
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        ClientBuilder::new(connector).capabilities(caps).connect(&self.url).await.expect("a Chromium session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn shots_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/console");
    std::fs::create_dir_all(&dir).expect("docs/console");
    dir
}

async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    std::fs::write(shots_dir().join(format!("{name}.png")), png).expect("write screenshot");
}

/// The text of the element `css` finds, once the page has one. A click that
/// submits a form starts a navigation the click does not wait for: a lookup
/// it interrupts ("aborted by navigation", or an element of the page being
/// left, gone stale) is made again on the page it lands on.
async fn text_of(c: &Client, css: &str) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let found = match c.wait().for_element(Locator::Css(css)).await {
            Ok(element) => element.text().await,
            Err(e) => Err(e),
        };
        match found {
            Ok(text) => return text,
            Err(e) if navigated(&e) && std::time::Instant::now() < deadline => continue,
            Err(e) => panic!("{css}: {e}"),
        }
    }
}

fn navigated(e: &fantoccini::error::CmdError) -> bool {
    let e = e.to_string();
    e.contains("aborted by navigation") || e.contains("stale element")
}

async fn sign_in(c: &Client, base: &str, token: &str) {
    c.goto(&format!("{base}/console/sign-in")).await.expect("sign-in page");
    let field = c.wait().for_element(Locator::Css("#token")).await.expect("token field");
    field.send_keys(token).await.expect("type the token");
    c.find(Locator::Css("form button[type=submit]")).await.expect("button").click().await.expect("sign in");
}

#[tokio::test]
async fn the_console_works_in_a_real_browser() {
    if !wanted() {
        // Set HERALD_TEST_BROWSER=1, with chromium and chromium-driver installed.
        common::skipped("browser", "HERALD_TEST_BROWSER");
        return;
    }
    let driver = Driver::start().await;
    let db = TestDb::new(Backend::Sqlite).await;
    let sms = FakeSms::start().await;
    for phone in ["+9779800000011", "+9779800000012"] {
        // Refused once; accepted when replayed.
        sms.script(phone, vec![Reply::status(400, json!({"error": "rejected"})), Reply::ok("m-replayed")]);
    }
    sms.script("+9779800000013", vec![Reply::status(503, json!({})); 4]);
    let outbox = tempfile::tempdir().unwrap();
    let toml = format!(
        "[channels.email]\nsink = {:?}\nfrom = \"Herald <noreply@example.com>\"\ntimeout = \"1s\"\n{}",
        outbox.path().display().to_string(),
        tokens_toml(&[
            ("ops-acme", "acme", OPS_A, &["ops", "intents:read"]),
            ("erp-acme", "acme", WRITER_A, &["events:write", "intents:read"]),
            ("erp-globex", "globex", WRITER_B, &["events:write", "intents:read"]),
            ("reader-acme", "acme", READER, &["intents:read"]),
            ("admin", "acme", ADMIN, &["admin", "ops"]),
        ])
    );
    let app = TestApp::new(&db).with_sms(&sms).with_toml(&toml).spawn().await;
    let base = app.base.clone();

    // Acme's purchase order, told by email, SMS and in-app.
    let po = json!({
        "type": "purchase_order.approved",
        "entity": {"type": "purchase_order", "id": "PO-4482", "version": 3},
        "occurred_at": "2026-11-29T10:15:00+05:45",
        "data": {"po": {"number": "PO-4482", "total": "1,20,000"}, "approver": {"name": "Asha"}},
        "recipients": [{"id": "u-20", "email": "asha@example.com", "phone": "+9779800000000"},
                       {"id": "u-21", "phone": "+9779800000001", "locale": "ne"}],
        "channels": ["email", "sms", "in_app"]
    });
    let posted = post_event(&base, WRITER_A, &po).await;
    let intents: Vec<Value> = posted["intents"].as_array().unwrap().clone();
    let key_of = |channel: &str, recipient: &str| {
        let found = intents.iter().find(|i| i["channel"] == channel && i["recipient_id"] == recipient);
        found.unwrap()["key"].as_str().unwrap().to_string()
    };
    // u-21 reads Nepali, so their SMS is UCS-2; they have no address, so no email.
    let (email, sms_key) = (key_of("email", "u-20"), key_of("sms", "u-21"));
    wait_state(&base, WRITER_A, &email, &["sent"]).await;
    wait_state(&base, WRITER_A, &sms_key, &["sent"]).await;
    // Three dead letters in two groups.
    let mut dead = Vec::new();
    for (po, phone) in [("PO-11", "+9779800000011"), ("PO-12", "+9779800000012"), ("PO-13", "+9779800000013")] {
        let posted = post_event(&base, WRITER_A, &sms_event(po, phone)).await;
        let key = posted["intents"][0]["key"].as_str().unwrap().to_string();
        wait_state(&base, WRITER_A, &key, &["dead"]).await;
        dead.push(key);
    }
    // Globex's, which acme must not reach.
    let theirs = post_event(&base, WRITER_B, &sms_event("PO-9", "+9779800000009")).await;
    let theirs = theirs["intents"][0]["key"].as_str().unwrap().to_string();

    let c = driver.browser().await;

    // A token without the ops scope is refused.
    sign_in(&c, &base, READER).await;
    assert!(text_of(&c, "#problem").await.contains("lacks the ops scope"));
    screenshot(&c, "sign-in-refused").await;

    // Sign in.
    c.goto(&format!("{base}/console/sign-in")).await.unwrap();
    screenshot(&c, "sign-in").await;
    sign_in(&c, &base, OPS_A).await;
    assert_eq!(text_of(&c, "#tenant").await, "acme");

    // Search an entity and read its timeline.
    let q = c.wait().for_element(Locator::Css("#q")).await.unwrap();
    q.send_keys("purchase_order:PO-4482").await.unwrap();
    c.find(Locator::Css("form.search button")).await.unwrap().click().await.unwrap();
    let results = text_of(&c, "#results").await;
    assert!(results.contains("email") && results.contains("sms") && results.contains("in_app"), "{results}");
    screenshot(&c, "search").await;
    // The whole row is the link: a click on the row's channel cell opens the timeline.
    let cells = c.find_all(Locator::Css(&format!("a[href='/console/intents/{email}']"))).await.unwrap();
    assert!(cells.len() > 5, "every cell of the row links: {}", cells.len());
    cells[4].click().await.unwrap();
    let timeline = text_of(&c, "#timeline").await;
    for expected in ["Event received", "Decided: send", "Attempt 1: accepted", "Now sent"] {
        assert!(timeline.contains(expected), "{expected:?} not in {timeline}");
    }
    assert!(!c.source().await.unwrap().contains("asha@example.com"), "the address is masked");
    let frame = c.find(Locator::Css("iframe.email")).await.expect("the HTML part in a frame");
    assert_eq!(frame.attr("sandbox").await.unwrap().as_deref(), Some(""), "a sandbox with no allowances");
    screenshot(&c, "timeline-email").await;
    c.goto(&format!("{base}/console/intents/{sms_key}")).await.unwrap();
    assert_eq!(text_of(&c, "#sms-encoding").await, "UCS-2");
    let marked = c.find_all(Locator::Css("#sms-text mark")).await.unwrap();
    assert!(!marked.is_empty(), "the SMS as it went out marks what forced UCS-2");
    screenshot(&c, "timeline-sms").await;

    // Tenant A cannot open tenant B's intent by URL.
    c.goto(&format!("{base}/console/intents/{theirs}")).await.unwrap();
    assert!(text_of(&c, "#problem").await.contains("No intent"));
    assert!(!c.source().await.unwrap().contains("PO-9"));

    // Dead letters: two groups; replay one and see it leave the list.
    c.goto(&format!("{base}/console/dead-letters")).await.unwrap();
    let groups = text_of(&c, "#groups").await;
    assert!(groups.contains("rejected") && groups.contains("retries_exhausted"), "{groups}");
    c.find(Locator::Css("#group-rejected summary")).await.unwrap().click().await.unwrap();
    screenshot(&c, "dead-letters").await;
    c.find(Locator::Css("#replay-rejected")).await.unwrap().click().await.unwrap();
    c.wait().for_element(Locator::Css("#confirm")).await.unwrap();
    screenshot(&c, "replay-confirm").await;

    // The same form without its CSRF token is refused, and replays nothing.
    let strip = "document.querySelector('form[action=\"/console/dead-letters/replay\"] input[name=csrf]').remove()";
    c.execute(strip, vec![]).await.unwrap();
    c.find(Locator::Css("#confirm")).await.unwrap().click().await.unwrap();
    assert!(text_of(&c, "#problem").await.contains("did not carry"));
    assert!(text_of(&c, "h1").await.contains("Form refused"));
    wait_state(&base, WRITER_A, &dead[0], &["dead"]).await;

    c.goto(&format!("{base}/console/dead-letters/replay?reason=rejected")).await.unwrap();
    c.wait().for_element(Locator::Css("#confirm")).await.unwrap().click().await.unwrap();
    assert!(text_of(&c, "#result").await.starts_with("2 queued again"));
    screenshot(&c, "replay-result").await;
    for key in &dead[..2] {
        wait_state(&base, WRITER_A, key, &["sent"]).await;
    }
    // The replay is an entry of the timeline, between the attempts, and its
    // time reads to the second with its age.
    c.goto(&format!("{base}/console/intents/{}", dead[0])).await.unwrap();
    let timeline = text_of(&c, "#timeline").await;
    let order = ["Attempt 1: permanent", "Replayed from the dead letters by console:", "Attempt 2: accepted"];
    let at: Vec<Option<usize>> = order.iter().map(|line| timeline.find(line)).collect();
    assert!(at.iter().all(Option::is_some) && at.is_sorted(), "{order:?} in order in {timeline}");
    assert!(timeline.contains(" UTC (just now)") || timeline.contains(" s ago)"), "{timeline}");
    c.execute("document.querySelector('li.replay').scrollIntoView({block: 'center'})", vec![]).await.unwrap();
    screenshot(&c, "timeline-replayed").await;
    c.goto(&format!("{base}/console/dead-letters")).await.unwrap();
    let groups = text_of(&c, "#groups").await;
    assert!(!groups.contains("rejected") && groups.contains("retries_exhausted"), "{groups}");

    // Templates: the Nepali SMS's UCS-2 culprits highlighted, each named
    // for a screen reader; reached from the keyboard alone.
    c.goto(&format!("{base}/console/search")).await.unwrap();
    let body = c.find(Locator::Css("body")).await.unwrap();
    body.send_keys(&Key::Tab.to_string()).await.unwrap();
    assert_eq!(c.active_element().await.unwrap().text().await.unwrap(), "Skip to content", "the first stop");
    let mut reached = false;
    for _ in 0..8 {
        c.active_element().await.unwrap().send_keys(&Key::Tab.to_string()).await.unwrap();
        if c.active_element().await.unwrap().attr("href").await.unwrap().as_deref() == Some("/console/templates") {
            c.active_element().await.unwrap().send_keys(&Key::Enter.to_string()).await.unwrap();
            reached = true;
            break;
        }
    }
    assert!(reached, "the Templates link is reachable by Tab");
    let verdict = text_of(&c, "#verdict").await;
    assert!(verdict.contains("render within budget"), "{verdict}");
    let ne = c.wait().for_element(Locator::Css("#po_approved-ne-sms")).await.unwrap();
    assert!(ne.text().await.unwrap().contains("UCS-2"));
    let first = ne.find(Locator::Css("mark")).await.expect("a culprit marked");
    let title = first.attr("title").await.unwrap().unwrap_or_default();
    assert!(title.starts_with("U+0938 U+094D") && title.ends_with(" forced UCS-2"), "{title}");
    assert!(first.text().await.unwrap().starts_with("स्वीकृत"), "{:?}", first.text().await);
    let style = "return getComputedStyle(document.querySelector('#po_approved-ne-sms mark')).backgroundColor";
    assert_eq!(c.execute(style, vec![]).await.unwrap(), json!("rgb(255, 224, 138)"), "highlighted");
    let hidden = ne.find(Locator::Css("mark .visually-hidden")).await.unwrap();
    assert_eq!(hidden.html(true).await.unwrap(), format!(" ({title})"), "the culprits named for a screen reader");
    let en = text_of(&c, "#po_approved-en-sms").await;
    assert!(en.contains("GSM-7") && en.contains("ok"), "{en}");
    screenshot(&c, "templates").await;

    // Health: acme's queue and the last hour's attempts.
    c.goto(&format!("{base}/console/health")).await.unwrap();
    assert_eq!(text_of(&c, "#queue-due").await, "0");
    let attempts = text_of(&c, "#attempts").await;
    assert!(attempts.contains("accepted") && attempts.contains("permanent"), "{attempts}");
    screenshot(&c, "health").await;

    // The old notifier's log beside what Herald did: PO-4482's email to u-20
    // three times, its SMS to u-21, an email to u-21 (who has no address), and
    // an SMS about an order Herald never heard of. Pasted, as a person would.
    // Its sends came as Herald planned the same events: a few seconds after.
    let planned = wait_state(&base, WRITER_A, &email, &["sent"]).await["created_at"].as_str().unwrap().to_string();
    let planned: jiff::Timestamp = planned.parse().unwrap();
    let t = |s: i64| planned.checked_add(jiff::SignedDuration::from_secs(60 - s)).unwrap().to_string();
    let log = format!(
        "time,channel,recipient_id,destination,entity_type,entity_id,event_type\n\
         {},email,u-20,,purchase_order,PO-4482,purchase_order.approved\n\
         {},email,u-20,,purchase_order,PO-4482,purchase_order.approved\n\
         {},email,u-20,,purchase_order,PO-4482,purchase_order.approved\n\
         {},sms,u-21,,purchase_order,PO-4482,purchase_order.approved\n\
         {},email,u-21,,purchase_order,PO-4482,purchase_order.approved\n\
         {},sms,,+9779800000077,purchase_order,PO-77,purchase_order.approved\n",
        t(50),
        t(40),
        t(30),
        t(50),
        t(50),
        t(20)
    );
    c.goto(&format!("{base}/console/shadow/compare")).await.unwrap();
    let area = c.wait().for_element(Locator::Css("#sends")).await.unwrap();
    area.send_keys(&log).await.unwrap();
    c.find(Locator::Css("#compare")).await.unwrap().click().await.unwrap();
    assert_eq!(text_of(&c, "#both").await, "2");
    // Herald's alone: u-20's SMS and in-app card, u-21's card, and the two
    // dead letters replayed and sent (the third is still dead: not sent).
    assert_eq!(text_of(&c, "#only-herald").await, "5");
    assert!(text_of(&c, "#duplicated").await.starts_with("1 (2 extra sends)"));
    let worst = text_of(&c, "#duplicates tbody tr").await.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(worst.starts_with("3 email u-20 purchase_order.approved purchase_order:PO-4482"), "{worst}");
    c.find(Locator::Css("#reason-no_route summary")).await.unwrap().click().await.unwrap();
    let groups = text_of(&c, "#only-old-groups").await;
    assert!(groups.contains("suppressed no_destination") && groups.contains("no_route"), "{groups}");
    assert!(groups.contains("+97798******77 #"), "masked, with its hash: {groups}");
    assert!(!c.source().await.unwrap().contains("9800000077"), "no number in clear");
    assert_eq!(c.find(Locator::Css("#sends")).await.unwrap().prop("value").await.unwrap().as_deref(), Some(""));
    c.execute("window.scrollTo(0, document.querySelector('#comparison').offsetTop - 8)", vec![]).await.unwrap();
    screenshot(&c, "shadow-compare").await;

    // Sign out.
    c.find(Locator::Css("form.who button")).await.unwrap().click().await.unwrap();
    c.wait().for_element(Locator::Css("#token")).await.expect("back at the sign-in form");
    c.goto(&format!("{base}/console/dead-letters")).await.unwrap();
    c.wait().for_element(Locator::Css("#token")).await.expect("signed out: sent to sign in");

    // The deployment operator reads every tenant's, each row naming its tenant.
    sign_in(&c, &base, ADMIN).await;
    assert_eq!(text_of(&c, "#admin").await, "admin: every tenant");
    c.goto(&format!("{base}/console/search?q=purchase_order%3APO-9")).await.unwrap();
    let results = text_of(&c, "#results").await;
    assert!(results.contains("globex") && results.contains("PO-9"), "{results}");
    screenshot(&c, "admin-search").await;

    c.close().await.unwrap();
    app.running.stop().await;
}
