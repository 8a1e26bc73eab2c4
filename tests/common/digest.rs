//! A digest route and its templates: the repository's `po_approved` plus a
//! `po_digest` whose SMS lists its members' entity ids.

/// The repository's templates plus a digest template.
pub fn templates_with_digest() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/po_approved");
    for entry in
        ["template.toml", "fixtures.json", "en/sms.j2", "en/in_app.j2", "en/email.subject.j2", "en/email.txt.j2"]
    {
        let to = dir.path().join("po_approved").join(entry);
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(src.join(entry), to).unwrap();
    }
    let digest = dir.path().join("po_digest/en");
    std::fs::create_dir_all(&digest).unwrap();
    std::fs::write(
        dir.path().join("po_digest/template.toml"),
        "revision = \"1\"\ndefault_locale = \"en\"\nsms_max_segments = 3\n",
    )
    .unwrap();
    std::fs::write(digest.join("sms.j2"), "{{ count }} approved: {% for m in members %}{{ m.entity.id }} {% endfor %}")
        .unwrap();
    dir
}

/// `purchase_order.batched` events go to SMS in hourly digests per recipient.
pub const DIGEST_ROUTE: &str = r#"
[[routes]]
event = "purchase_order.batched"
template = "po_approved"
channels = ["sms"]
digest = { window = "1h", key = "{{ entity.type }}", template = "po_digest" }
"#;
