//! The bottom of the module graph stays the bottom: `lifecycle` (the rules
//! that move an intent) and `store` (which applies them) use nothing above
//! them, so a rule cannot hide in the module that calls it, and the store can
//! be read without the worker, the planner or the suppression service.
//! Checked on the source text, doc comments and comments left out.

use std::collections::BTreeSet;
use std::path::Path;

/// Every `crate::NAME` a directory's code (not its comments) uses.
fn uses(dir: &Path) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(std::fs::read_dir(&path).expect("a source folder").map(|e| e.expect("an entry").path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("a source file");
        for line in text.lines() {
            let code = line.split("//").next().unwrap_or_default();
            for (i, _) in code.match_indices("crate::") {
                let name: String = code[i + "crate::".len()..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                out.insert((name, path.display().to_string()));
            }
        }
    }
    out
}

fn check(dir: &str, allowed: &[&str]) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let above: Vec<_> = uses(&root).into_iter().filter(|(name, _)| !allowed.contains(&name.as_str())).collect();
    assert!(above.is_empty(), "{dir} uses modules above it: {above:?}");
}

#[test]
fn the_lifecycle_uses_only_the_bottom_of_the_graph() {
    check("src/lifecycle", &["lifecycle", "intent", "event", "clock"]);
}

#[test]
fn the_store_uses_nothing_above_it() {
    check("src/store", &["store", "lifecycle", "intent", "event", "recipient", "clock"]);
}
