//! The `herald` command line, run as a user runs it: the built binary in a
//! directory of its own, its output read (or not read) through a pipe.

mod common;

use common::{Backend, TestDb, backends};
use std::path::Path;
use std::process::{Command, Output, Stdio};

/// `herald ARGS` in `dir`, with no `HERALD_…` variable but those given.
fn herald(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_herald"));
    cmd.current_dir(dir).args(args);
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("HERALD_") {
            cmd.env_remove(name);
        }
    }
    cmd.envs(env.iter().copied());
    cmd
}

fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    herald(dir, args, env).output().expect("run herald")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const READ_ONLY: [&[&str]; 4] = [
    &["why", "--entity", "purchase_order:PO-1", "--recipient", "u-1"],
    &["dlq", "list"],
    &["dlq", "show", "0123456789abcdef0123456789abcdef"],
    &["shadow", "report"],
];

#[test]
fn commands_that_read_never_create_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let replay: &[&str] = &["dlq", "replay", "--ids", "0123456789abcdef0123456789abcdef"];
    for args in READ_ONLY.iter().copied().chain([replay]) {
        let out = run(dir.path(), args, &[]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("herald.db") && err.contains("herald migrate"), "{args:?}: {err}");
        assert!(!dir.path().join("herald.db").exists(), "{args:?} created a database");
    }
}

#[tokio::test]
async fn an_unmigrated_or_outdated_database_is_a_clear_error_and_is_left_as_it_was() {
    for backend in backends() {
        let db = TestDb::new(backend).await;
        let dir = tempfile::tempdir().unwrap();
        if backend == Backend::Sqlite {
            // an empty file where the database should be
            let file = db.url.trim_start_matches("sqlite://");
            std::fs::write(file, b"").unwrap();
        }
        let env = [("HERALD_DATABASE_URL", db.url.as_str())];
        for args in READ_ONLY {
            let out = run(dir.path(), args, &env);
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(1), "{backend:?} {args:?}: {err}");
            assert!(err.contains("no Herald schema") && err.contains("herald migrate"), "{backend:?}: {err}");
        }
        let still = herald::store::open_existing(&db.url).await.err().expect("still unmigrated").to_string();
        assert!(still.contains("no Herald schema"), "{backend:?}: {still}");
        if backend == Backend::Sqlite {
            let file = db.url.trim_start_matches("sqlite://");
            assert_eq!(std::fs::metadata(file).unwrap().len(), 0, "the empty file was written to");
        }
        let store = db.store().await; // migrates
        assert!(run(dir.path(), READ_ONLY[0], &env).status.success());
        // one migration forgotten: the schema is behind this binary
        let forget = "DELETE FROM _sqlx_migrations WHERE version = (SELECT MAX(version) FROM _sqlx_migrations)";
        common::execute(&db, forget).await;
        let out = run(dir.path(), READ_ONLY[1], &env);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{backend:?}: {err}");
        assert!(err.contains("behind") && err.contains("herald migrate"), "{backend:?}: {err}");
        drop(store);
    }
}

#[test]
fn why_on_a_migrated_database_answers() {
    let dir = tempfile::tempdir().unwrap();
    assert!(run(dir.path(), &["migrate"], &[]).status.success());
    let out = run(dir.path(), READ_ONLY[0], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("no notification was ever planned"), "{}", stdout(&out));
}

fn token_config(dir: &Path, tenants: &[&str]) -> String {
    let mut toml = String::from("database_url = \"sqlite://herald.db\"\ndedupe_window = \"24h\"\n");
    for (i, tenant) in tenants.iter().enumerate() {
        toml.push_str(&format!(
            "[[auth.tokens]]\nname = \"t{i}\"\ntenant = \"{tenant}\"\ntoken_sha256 = \"{}\"\nscopes = [\"ops\"]\n",
            "ab".repeat(32)
        ));
    }
    let path = dir.join("herald.toml");
    std::fs::write(&path, toml).unwrap();
    path.display().to_string()
}

#[test]
fn with_tokens_and_no_tenant_the_cli_says_which_tenant_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let one = token_config(dir.path(), &["acme", "acme"]);
    assert!(run(dir.path(), &["migrate", "--config", &one], &[]).status.success());
    let out = run(dir.path(), &["dlq", "list", "--config", &one], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("tenant acme"), "{}", stderr(&out));
    // named: nothing to say
    let out = run(dir.path(), &["dlq", "list", "--tenant", "acme", "--config", &one], &[]);
    assert!(out.status.success() && !stderr(&out).contains("tenant"), "{}", stderr(&out));

    let two = token_config(dir.path(), &["acme", "beta"]);
    let out = run(dir.path(), &["why", "--entity", "a:b", "--recipient", "u", "--config", &two], &[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--tenant") && err.contains("acme") && err.contains("beta"), "{err}");
}

/// Runs `args` with stdout (and stderr) going into a pipe whose reader has
/// already gone, as in `herald … | head -0`: every write meets EPIPE.
fn into_closed_pipe(dir: &Path, args: &[&str]) -> std::process::ExitStatus {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let err_writer = writer.try_clone().unwrap();
    herald(dir, args, &[])
        .stdin(Stdio::null())
        .stdout(Stdio::from(writer))
        .stderr(Stdio::from(err_writer))
        .status()
        .unwrap()
}

#[test]
fn every_command_exits_quietly_when_its_reader_goes_away() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(into_closed_pipe(dir.path(), &["migrate"]).code(), Some(0), "migrate");
    let commands: [&[&str]; 7] = [
        &["config", "check"],
        &["templates", "check"],
        READ_ONLY[0],
        READ_ONLY[1],
        READ_ONLY[3],
        &["--help"],
        &["--version"],
    ];
    for args in commands {
        assert_eq!(into_closed_pipe(dir.path(), args).code(), Some(0), "{args:?} did not exit quietly");
    }
    // a failing command keeps its verdict: it is not a panic (101)
    assert_eq!(into_closed_pipe(dir.path(), READ_ONLY[2]).code(), Some(1), "dlq show of a missing intent");
}

#[tokio::test]
async fn an_error_says_its_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["why", "--entity", "a:b", "--recipient", "u", "--config", "absent.toml"], &[]);
    let err = stderr(&out);
    assert!(err.contains("absent.toml") && err.matches("os error 2").count() == 1, "{err}");
    if backends().contains(&Backend::Postgres) {
        let admin = std::env::var("HERALD_TEST_DATABASE_URL").unwrap();
        let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b).to_string();
        let url = format!("{base}/herald_test_never_created");
        let out = run(dir.path(), &["dlq", "list"], &[("HERALD_DATABASE_URL", &url)]);
        let err = stderr(&out);
        assert!(err.matches("does not exist").count() == 1, "{err}");
    }
}

#[test]
fn the_example_configuration_passes_config_check_as_shipped() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = run(repo, &["config", "check", "--config", "herald.example.toml"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("retry horizon   15m30s"), "{}", stdout(&out));
    assert!(stdout(&out).contains("retry-after max 1h"), "the Retry-After ceiling: {}", stdout(&out));
}

#[test]
fn the_example_configuration_writes_the_defaults_it_claims() {
    use herald::config::Config;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let example = Config::load_with_env(Some(&repo.join("herald.example.toml")), &[]).unwrap();
    // the same route and sinks, every other key left to its default
    let dir = tempfile::tempdir().unwrap();
    let minimal = dir.path().join("minimal.toml");
    std::fs::write(
        &minimal,
        "[[routes]]\nevent = \"purchase_order.approved\"\ntemplate = \"po_approved\"\n\
         channels = [\"email\", \"sms\", \"in_app\"]\n\
         [channels.email]\nsink = \"herald-outbox\"\n[channels.sms]\nsink = \"herald-outbox\"\n",
    )
    .unwrap();
    let defaults = Config::load_with_env(Some(&minimal), &[]).unwrap();
    assert_eq!(format!("{example:#?}"), format!("{defaults:#?}"));
}

#[test]
fn a_provider_from_the_environment_replaces_the_shipped_sinks() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let env = [
        ("HERALD_CHANNELS__SMS__URL", "http://127.0.0.1:9/sms"),
        ("HERALD_CHANNELS__EMAIL__SMTP_URL", "smtp://127.0.0.1:2525"),
    ];
    for config in [&[][..], &["--config", "herald.example.toml"][..]] {
        let args: Vec<&str> = ["config", "check"].iter().copied().chain(config.iter().copied()).collect();
        let out = run(repo, &args, &env);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    }
}

#[test]
fn a_digest_key_that_does_not_parse_stops_config_check_naming_the_route() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("herald.toml");
    let route = "[[routes]]\nevent = \"purchase_order.approved\"\ntemplate = \"po_approved\"\nchannels = [\"email\"]\n\
                 [channels.email]\nsink = \"herald-outbox\"\n";
    let digest =
        |key: &str| format!("{route}[routes.digest]\nwindow = \"1h\"\ntemplate = \"po_approved\"\nkey = {key:?}\n");
    std::fs::write(&config, digest("{{ entity.id }}")).unwrap();
    let out = run(dir.path(), &["config", "check", "--config", "herald.toml"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    std::fs::write(&config, digest("{{ entity.id ")).unwrap();
    let out = run(dir.path(), &["config", "check", "--config", "herald.toml"], &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("routes[0].digest.key:"), "{}", stderr(&out));
}

#[test]
fn the_cli_reads_since_as_strictly_as_the_api() {
    let dir = tempfile::tempdir().unwrap();
    assert!(run(dir.path(), &["migrate"], &[]).status.success());
    for since in ["2026-06-30T23:59:60Z", "2026-11-29"] {
        for args in
            [&["dlq", "list", "--since", since][..], &["dlq", "replay", "--reason", "rejected", "--since", since][..]]
        {
            let out = run(dir.path(), args, &[]);
            let err = stderr(&out);
            assert!(!out.status.success(), "{args:?} accepted {since}");
            assert!(err.contains("--since"), "{args:?}: {err}");
        }
    }
    let out = run(dir.path(), &["dlq", "list", "--since", "2026-06-30T23:59:59Z"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test]
async fn the_shadow_report_prints_what_shadow_would_have_sent() {
    let db = TestDb::new(Backend::Sqlite).await;
    let sms = common::FakeSms::start().await;
    let app = common::TestApp::new(&db).with_sms(&sms).with_mode("shadow").spawn().await;
    let event = common::sms_event("PO-CLI", "+15550001234");
    assert_eq!(app.post_event(&event, Some("cli-1")).await.0, 202);
    assert_eq!(app.post_event(&event, Some("cli-1")).await.0, 200);
    // Once the tally is written, the CLI reads what the API reads.
    common::eventually("the tally of both posts", || async {
        (app.get("/v1/shadow/report").await.1["events_received"] == 2).then_some(())
    })
    .await;
    let key =
        app.get("/v1/intents?entity=purchase_order:PO-CLI").await.1["intents"][0]["key"].as_str().unwrap().to_string();
    app.wait_state(&key, &["shadowed"]).await;
    app.running.stop().await;

    let dir = tempfile::tempdir().unwrap();
    let env = [("HERALD_DATABASE_URL", db.url.as_str())];
    let out = run(dir.path(), &["shadow", "report"], &env);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    let line = |start: &str, has: &str| {
        text.lines().find(|l| l.trim_start().starts_with(start) && l.contains(has)).unwrap_or_default().to_string()
    };
    assert!(line("events received", "").ends_with(" 2"), "{text}");
    assert!(line("duplicate: exact replay", "").ends_with(" 1"), "{text}");
    assert!(line("sms", "would send").contains("would send          1   sent          0"), "{text}");
    assert!(line("GSM-7", "").contains("messages          1   segments          1"), "{text}");
    assert_eq!(sms.calls(), 0);

    let out = run(dir.path(), &["shadow", "report", "--since", "2026-11-29"], &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--since"), "{}", stderr(&out));
}

/// A log read from a file, a pipe or a collector is plain text: each field
/// `name=value` with no terminal escape codes around it, so that a search for
/// `addr=` or `intent=` finds the line. (Until this test, every line carried
/// them wherever stderr went.)
#[test]
fn serve_writes_plain_log_lines_when_stderr_is_not_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("herald.toml"), "listen = \"127.0.0.1:0\"\ndatabase_url = \"sqlite://h.db\"\n")
        .unwrap();
    let (_, text) = serve_until_it_stops_or_listens(dir.path());
    assert!(text.contains("herald is listening"), "serve did not say it was listening: {text:?}");
    assert!(!text.contains('\u{1b}'), "escape codes in a log file: {text:?}");
    assert!(text.contains(" addr=127.0.0.1:"), "the field is not plain name=value: {text:?}");
}

/// `dir/templates`: the repository's `po_approved` less the files named, and
/// `dir/herald.toml`, whose route sends email, SMS and in-app from it.
fn templates_without(dir: &Path, missing: &[&str]) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/po_approved");
    let to = dir.join("templates/po_approved");
    for file in ["template.toml", "fixtures.json"] {
        std::fs::create_dir_all(&to).unwrap();
        std::fs::copy(src.join(file), to.join(file)).unwrap();
    }
    for locale in ["en", "ne"] {
        std::fs::create_dir_all(to.join(locale)).unwrap();
        for entry in std::fs::read_dir(src.join(locale)).unwrap() {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let rel = format!("{locale}/{name}");
            if !missing.contains(&rel.as_str()) {
                std::fs::copy(src.join(&rel), to.join(&rel)).unwrap();
            }
        }
    }
    let config = format!(
        "listen = \"127.0.0.1:0\"\ndatabase_url = \"sqlite://h.db\"\ntemplates_dir = {:?}\n\
         [[routes]]\nevent = \"purchase_order.approved\"\ntemplate = \"po_approved\"\n\
         channels = [\"email\", \"sms\", \"in_app\", \"webhook\"]\n\
         [channels.email]\nsink = \"outbox\"\n[channels.sms]\nsink = \"outbox\"\n",
        dir.join("templates").display().to_string()
    );
    std::fs::write(dir.join("herald.toml"), config).unwrap();
}

/// A deleted `en/sms.j2` passed both checks (the row silently left out of
/// the table), and then every SMS of the route died `template_error`. Each
/// route's channel needs its files in the template's default locale (a
/// webhook and an HTML part are optional); a missing one fails both checks,
/// named by its path.
#[test]
fn a_deleted_template_file_fails_both_checks_naming_it() {
    let complete = tempfile::tempdir().unwrap();
    templates_without(complete.path(), &[]);
    for args in
        [&["templates", "check", "--config", "herald.toml"][..], &["config", "check", "--config", "herald.toml"]]
    {
        let out = run(complete.path(), args, &[]);
        assert!(out.status.success(), "{args:?}: {}{}", stdout(&out), stderr(&out));
    }
    // the issue's case: a translation still has it, so the table alone shows it
    // missing; and with both gone, only the route does
    for missing in [&["en/sms.j2"][..], &["en/sms.j2", "ne/sms.j2"], &["en/email.txt.j2"]] {
        let dir = tempfile::tempdir().unwrap();
        templates_without(dir.path(), missing);
        let file = format!("po_approved/{}", missing[0]);
        let mut checks = vec![
            &["templates", "check", "--config", "herald.toml"][..],
            &["config", "check", "--config", "herald.toml"],
        ];
        if missing.len() == 1 {
            checks.push(&["templates", "check", "--dir", "templates"]);
        }
        for args in checks {
            let out = run(dir.path(), args, &[]);
            let said = format!("{}{}", stdout(&out), stderr(&out));
            assert_eq!(out.status.code(), Some(1), "{missing:?} {args:?}: {said}");
            assert!(said.contains(&file) && said.contains("missing"), "{missing:?} {args:?}: {said}");
            assert!(!said.contains("render within budget") && !said.lines().any(|l| l == "ok"), "{args:?}: {said}");
        }
    }
}

/// `herald serve` refuses to start on a route whose template file is
/// missing, with the message `config check` gives.
#[test]
fn serve_refuses_to_start_with_a_template_file_missing() {
    let dir = tempfile::tempdir().unwrap();
    templates_without(dir.path(), &["en/sms.j2"]);
    let check = stderr(&run(dir.path(), &["config", "check", "--config", "herald.toml"], &[]));
    let message = check.lines().find(|l| l.contains("po_approved/en/sms.j2")).unwrap_or_else(|| panic!("{check}"));
    let message = message.trim_start_matches("config: ").to_string();
    let (code, text) = serve_until_it_stops_or_listens(dir.path());
    assert_eq!(code, Some(1), "serve started: {text}");
    assert!(text.contains(&message), "{message:?} not in {text}");
}

/// `herald serve --config herald.toml` in `dir`: its exit code (`None` if it
/// came up listening, or ran a minute) and what it logged.
fn serve_until_it_stops_or_listens(dir: &Path) -> (Option<i32>, String) {
    use std::time::{Duration, Instant};
    let (mut child, log) = serve_logging_to_a_file(dir);
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline
            || std::fs::read_to_string(&log).unwrap_or_default().contains("herald is listening")
        {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status.and_then(|s| s.code()), std::fs::read_to_string(&log).unwrap_or_default())
}

/// Issue 33: a misspelt template in a route said only that there was no such
/// template. Both checks now name the route, the nearest template and the
/// source of the route, as a misspelt key's error does.
#[test]
fn a_misspelt_template_is_refused_with_the_nearest_one_and_the_routes_source() {
    let dir = tempfile::tempdir().unwrap();
    let route = |template: &str, digest: &str| {
        format!(
            "[[routes]]\nevent = \"purchase_order.approved\"\ntemplate = {template:?}\nchannels = [\"email\"]\n\
             {digest}[channels.email]\nsink = \"herald-outbox\"\n"
        )
    };
    let check = |toml: &str| {
        std::fs::write(dir.path().join("herald.toml"), toml).unwrap();
        let out = run(dir.path(), &["config", "check", "--config", "herald.toml"], &[]);
        assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
        stderr(&out)
    };
    let said = check(&route("po_aproved", ""));
    let expected = "config: routes[0].template: no template \"po_aproved\" in the built-in templates \
                    (route purchase_order.approved); did you mean \"po_approved\"? (from herald.toml)";
    assert_eq!(said.trim_end(), expected);
    let digest = "digest = { window = \"1h\", template = \"po_aprovd\" }\n";
    let said = check(&route("po_approved", digest));
    assert!(said.starts_with("config: routes[0].digest.template: no template \"po_aprovd\""), "{said}");
    assert!(said.contains("did you mean \"po_approved\"? (from herald.toml)"), "{said}");
    // a name near nothing gets no guess
    let said = check(&route("welcome_email", ""));
    assert!(said.contains("no template \"welcome_email\"") && !said.contains("did you mean"), "{said}");
    // routes from the environment name the variable
    let routes = r#"[{event = "purchase_order.approved", template = "po_aproved", channels = ["in_app"]}]"#;
    let out = run(dir.path(), &["config", "check"], &[("HERALD_ROUTES", routes)]);
    let said = stderr(&out);
    assert!(said.contains("did you mean \"po_approved\"? (from environment variable HERALD_ROUTES)"), "{said}");
    // and serve refuses to start with the same words
    std::fs::write(dir.path().join("herald.toml"), route("po_aproved", "")).unwrap();
    let (code, text) = serve_until_it_stops_or_listens(dir.path());
    assert_eq!(code, Some(1), "serve started: {text}");
    assert!(text.contains(expected.trim_start_matches("config: ")), "{text}");
}

/// A variable the fixtures lack is named with its file and line.
#[test]
fn templates_check_names_the_variable_the_fixtures_lack() {
    let dir = tempfile::tempdir().unwrap();
    templates_without(dir.path(), &[]);
    let fixtures = r#"{"data": {"po": {"number": "PO-1"}, "approver": {"name": "Asha"}}, "entity": {"type": "purchase_order", "id": "PO-1"}}"#;
    std::fs::write(dir.path().join("templates/po_approved/fixtures.json"), fixtures).unwrap();
    let out = run(dir.path(), &["templates", "check", "--dir", "templates"], &[]);
    assert_eq!(out.status.code(), Some(1));
    let said = stdout(&out);
    assert!(said.contains("undefined value po.total in po_approved/en/sms.j2:1"), "{said}");
    assert!(said.contains("undefined value po.total in po_approved/en/email.txt.j2:3"), "{said}");
}

/// `herald serve --config herald.toml` in `dir`, its stderr going to
/// `herald.log` there (not a terminal).
fn serve_logging_to_a_file(dir: &std::path::Path) -> (std::process::Child, std::path::PathBuf) {
    let log = dir.join("herald.log");
    let child = herald(dir, &["serve", "--config", "herald.toml"], &[])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start herald serve");
    (child, log)
}

/// Where each of `names` starts in `line`, in characters.
fn column_starts(line: &str, names: &[&str]) -> Vec<usize> {
    names
        .iter()
        .map(|n| {
            let at = line.find(n).unwrap_or_else(|| panic!("{n} not in {line:?}"));
            line[..at].chars().count()
        })
        .collect()
}

/// The text of `line` from character `start`.
fn from_column(line: &str, start: usize) -> String {
    line.chars().skip(start).collect()
}

/// Every row's value of each column starts where its header does, however
/// wide the values (the hand-padded widths put a long reason or stream in
/// the next column's place, and every column after it out of step).
#[tokio::test]
async fn list_columns_line_up_with_their_headers_whatever_the_widths() {
    let db = TestDb::new(Backend::Sqlite).await;
    let sms = common::FakeSms::start().await;
    let phones = ["+15550000401", "+15550000402"];
    for phone in phones {
        sms.script(phone, vec![common::Reply::status(400, serde_json::json!({"error": "invalid_destination"}))]);
    }
    let app = common::TestApp::new(&db).with_sms(&sms).spawn().await;
    let mut keys = Vec::new();
    for (n, phone) in phones.iter().enumerate() {
        let entity = ["PO-1", "PO-A-MUCH-LONGER-ENTITY-ID-THAN-THE-OTHER"][n];
        let (_, body, _) = app.post_event(&common::sms_event(entity, phone), None).await;
        let id = body["intents"][0]["id"].as_str().unwrap().to_string();
        let dead = app.wait_state(&id, &["dead"]).await;
        keys.push(dead["key"].as_str().unwrap_or_else(|| panic!("{dead}")).to_string());
    }
    app.running.stop().await;
    let long_reason = "provider_refused_the_destination_for_good";
    common::execute(&db, &format!("UPDATE intents SET reason = '{long_reason}' WHERE key = '{}'", keys[1])).await;
    let store = db.store().await;
    for (seq, (stream, code)) in
        [("s", "malformed_json"), ("a-stream-name-longer-than-sixteen", "idempotency_key_mismatch_by_far")]
            .into_iter()
            .enumerate()
    {
        let row = herald::store::RejectedMessage {
            id: herald::store::RejectedMessage::id_of(stream, seq as i64 + 1),
            tenant: "default".into(),
            stream: stream.into(),
            consumer: "herald".into(),
            subject: format!("{stream}.events"),
            stream_seq: seq as i64 + 1,
            deliveries: 1,
            status: 400,
            code: code.into(),
            message: "refused".into(),
            body: None,
            created_at: 1_700_000_000_000_000 + seq as i64,
        };
        store.rejected_record(row).await.unwrap();
    }
    drop(store);

    let dir = tempfile::tempdir().unwrap();
    let env = [("HERALD_DATABASE_URL", db.url.as_str())];
    let out = run(dir.path(), &["dlq", "list"], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let starts = column_starts(lines[0], &["ID", "CHANNEL", "REASON", "DIED", "ENTITY"]);
    assert_eq!(lines.len(), 3, "{text}");
    for row in &lines[1..] {
        assert!(keys.iter().any(|k| from_column(row, starts[0]).starts_with(k.as_str())), "{text}");
        assert!(from_column(row, starts[1]).starts_with("sms "), "CHANNEL:\n{text}");
        let reason = from_column(row, starts[2]);
        assert!(reason.starts_with("invalid_destination ") || reason.starts_with(long_reason), "REASON:\n{text}");
        assert!(from_column(row, starts[3]).starts_with("20"), "DIED:\n{text}");
        assert!(from_column(row, starts[4]).starts_with("purchase_order:PO-"), "ENTITY:\n{text}");
    }

    let out = run(dir.path(), &["rejected", "list"], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let starts = column_starts(lines[0], &["ID", "AT", "STREAM", "CODE", "SUBJECT"]);
    let seq_end = column_starts(lines[0], &["SEQ"])[0] + 3;
    assert_eq!(lines.len(), 3, "{text}");
    for row in &lines[1..] {
        let stream = from_column(row, starts[2]);
        let stream = stream.split(' ').next().unwrap();
        assert!(["s", "a-stream-name-longer-than-sixteen"].contains(&stream), "STREAM:\n{text}");
        assert!(from_column(row, starts[1]).starts_with("20"), "AT:\n{text}");
        let code = from_column(row, starts[3]);
        assert!(code.starts_with("malformed_json") || code.starts_with("idempotency_key"), "CODE:\n{text}");
        assert!(from_column(row, starts[4]).starts_with(&format!("{stream}.events")), "SUBJECT:\n{text}");
        let seq: String = row.chars().take(seq_end).collect();
        assert!(seq.ends_with(" 1") || seq.ends_with(" 2"), "SEQ is right-aligned under its header:\n{text}");
    }
}

/// Without `--config`, a command reads the configuration `serve` would:
/// `HERALD_CONFIG`'s file here, whose database is not `./herald.db` — and
/// it says which database it reads, and from where.
#[test]
fn a_command_reads_the_configuration_herald_config_names_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let db = elsewhere.path().join("named.db");
    let config = elsewhere.path().join("herald.toml");
    std::fs::write(&config, format!("database_url = \"sqlite://{}\"\n", db.display())).unwrap();
    let env = [("HERALD_CONFIG", config.to_str().unwrap())];
    let out = run(dir.path(), &["migrate"], &env);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(db.exists(), "migrate wrote the database HERALD_CONFIG names");
    for args in READ_ONLY.iter().copied().chain([&["rejected", "list"][..], &["suppressions", "list"]]) {
        let out = run(dir.path(), args, &env);
        let err = stderr(&out);
        assert!(out.status.code() != Some(101), "{args:?}: {err}");
        let said = format!("reading sqlite://{} (from HERALD_CONFIG={})", db.display(), config.display());
        assert!(err.contains(&said), "{args:?}: {err}");
        assert!(!dir.path().join("herald.db").exists(), "{args:?} used ./herald.db");
        if args != READ_ONLY[2] {
            assert!(out.status.success(), "{args:?}: {err}");
        }
    }
    // and ./herald.toml when there is one, with a password never shown
    std::fs::write(dir.path().join("herald.toml"), format!("database_url = \"sqlite://{}\"\n", db.display())).unwrap();
    let out = run(dir.path(), &["dlq", "list"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("(from ./herald.toml)"), "{}", stderr(&out));
    if backends().contains(&Backend::Postgres) {
        let mut url = url::Url::parse(&std::env::var("HERALD_TEST_DATABASE_URL").unwrap()).unwrap();
        url.set_password(Some("hunter2")).unwrap();
        url.set_path("/herald_test_never_created");
        let out = run(dir.path(), &["dlq", "list"], &[("HERALD_DATABASE_URL", url.as_str())]);
        let err = stderr(&out);
        url.set_password(Some("***")).unwrap();
        assert!(err.contains(&format!("reading {url} (from ./herald.toml)")), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
}

/// Postgres answers each start's `CREATE TABLE IF NOT EXISTS _sqlx_migrations`
/// with a notice, which sqlx logs at info: a line on every start of every
/// process that says nothing is wrong. It stays out of the info log.
#[tokio::test]
async fn a_second_start_on_postgres_logs_no_already_exists_notice() {
    let Some(db) = common::postgres_db().await else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("herald.toml"),
        format!("listen = \"127.0.0.1:0\"\ndatabase_url = \"{}\"\n", db.url),
    )
    .unwrap();
    for start in 0..2 {
        let (_, text) = serve_until_it_stops_or_listens(dir.path());
        assert!(text.contains("herald is listening"), "start {start}: {text}");
        assert!(!text.contains("already exists"), "start {start}: {text}");
    }
}

/// A misspelt template name in a route: `templates check` fails naming the
/// route and suggests the name, as `serve` and `config check` do.
#[test]
fn templates_check_suggests_the_template_a_route_misspelt() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("herald.toml"),
        "[[routes]]\nevent = \"a.b\"\ntemplate = \"po_aproved\"\nchannels = [\"sms\"]\n",
    )
    .unwrap();
    let out = run(dir.path(), &["templates", "check", "--config", "herald.toml"], &[]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{said}");
    assert!(
        said.contains("routes[0] names template po_aproved, which is not here; did you mean po_approved?"),
        "{said}"
    );
}

/// `herald shadow compare`: the send log beside what Herald in shadow mode
/// planned, as a table and as JSON, with the same keyed hashes as the API's;
/// a bad row named by the file, line and column.
#[tokio::test]
async fn shadow_compare_prints_what_differs_from_the_old_notifiers_log() {
    let db = TestDb::new(Backend::Sqlite).await;
    let sms = common::FakeSms::start().await;
    // The clock at the events' time, as when Herald runs beside the old notifier.
    let clock = common::TestClock::at("2026-11-29T04:30:05Z");
    let app = common::TestApp::new(&db).with_sms(&sms).with_mode("shadow").with_clock(clock).spawn().await;
    for (po, phone) in [("PO-1", "+9779800000001"), ("PO-2", "+9779800000002")] {
        let (status, answer, _) = app.post_event(&common::sms_event(po, phone), None).await;
        assert_eq!(status, 202, "{answer}");
        app.wait_state(answer["intents"][0]["key"].as_str().unwrap(), &["shadowed"]).await;
    }
    let log = "time,channel,recipient_id,destination,entity_type,entity_id,event_type\n\
               2026-11-29T04:30:10Z,sms,u-PO-1,,purchase_order,PO-1,purchase_order.approved\n\
               2026-11-29T04:30:20Z,sms,u-PO-1,,purchase_order,PO-1,purchase_order.approved\n\
               2026-11-29T04:30:30Z,sms,,+9779800000009,purchase_order,PO-9,purchase_order.approved\n";
    let resp = (app.client.post(format!("{}/v1/shadow/compare", app.base)))
        .header("content-type", "text/csv")
        .body(log)
        .send()
        .await
        .unwrap();
    let api: serde_json::Value = resp.json().await.unwrap();
    app.running.stop().await;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("old.csv"), log).unwrap();
    let env = [("HERALD_DATABASE_URL", db.url.as_str())];
    let out = run(dir.path(), &["shadow", "compare", "--sends", "old.csv"], &env);
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    let line = |start: &str| text.lines().find(|l| l.trim_start().starts_with(start)).unwrap_or_default().to_string();
    let words = |l: String| l.split_whitespace().map(String::from).collect::<Vec<_>>().join(" ");
    assert_eq!(words(line("sent by both")), "sent by both 1 sms 1", "{text}");
    assert_eq!(words(line("sent only by the old notifier")), "sent only by the old notifier 1 no_route 1", "{text}");
    assert_eq!(words(line("would be sent only by Herald")), "would be sent only by Herald 1 sms 1", "{text}");
    assert_eq!(words(line("sent more than once")), "sent more than once by the old notifier 1 1 extra send", "{text}");
    let hash = api["only_old"]["listed"][0]["recipient"]["hash"].as_str().unwrap();
    assert!(text.contains(&format!("+97798******09 #{hash}")), "the API's hash: {hash}\n{text}");
    let worst = words(line("2 "));
    assert!(
        worst.starts_with("2 sms u-PO-1 purchase_order.approved purchase_order:PO-1") && worst.contains("shadowed"),
        "{text}"
    );
    assert!(!text.contains("9800000009"), "{text}");

    let out = run(dir.path(), &["shadow", "compare", "--sends", "old.csv", "--json", "--window", "5m"], &env);
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["window"], "5m");
    assert_eq!(
        (json["both"].clone(), json["only_herald"]["intents"].clone()),
        (api["both"].clone(), serde_json::json!(1))
    );
    assert_eq!(json["duplicates"]["listed"][0]["sends"], 2);

    std::fs::write(dir.path().join("bad.csv"), log.replace("04:30:20Z", "half past four")).unwrap();
    let out = run(dir.path(), &["shadow", "compare", "--sends", "bad.csv"], &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("herald: bad.csv line 3: time: must be an RFC 3339 timestamp"), "{}", stderr(&out));
    let out = run(dir.path(), &["shadow", "compare", "--sends", "old.txt"], &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--format: old.txt is neither .csv nor .jsonl"), "{}", stderr(&out));
}
