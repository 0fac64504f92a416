//! The crate's modules form layers: each names only modules of its own layer or below, so the
//! transport never depends on a lock kind and no lock kind depends on the public `Client` API.
//! Read from the source text (every `crate::<module>` path), so a new cycle fails here first.

use std::fs;
use std::path::Path;

/// Lowest first. Modules not listed are lock kinds (layer 5); `client` and `testing` are the
/// top, `lib` may name anything.
const LAYERS: &[&[&str]] = &[
    &["error", "task", "turns", "telemetry"],
    &["config", "keys", "scripts", "terms"],
    &["node"],
    &["local_queue", "hold", "identity", "open_holds", "pubsub"],
    &["shared"],
];
const LOCK_KINDS: usize = 5;
const TOP: usize = 6;

fn layer(module: &str) -> usize {
    // `testing` builds clients (a second one, for `hold_elsewhere`) like the public API does.
    if module == "client" || module == "testing" {
        return TOP;
    }
    LAYERS
        .iter()
        .position(|layer| layer.contains(&module))
        .unwrap_or(LOCK_KINDS)
}

/// Every `crate::<name>` in the code (comments and doc links aside); a capitalised name is a
/// re-export from `lib.rs`.
fn crate_paths(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    code.match_indices("crate::")
        .map(|(at, m)| {
            code[at + m.len()..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| !name.is_empty())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn modules_name_only_their_own_layer_or_below() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 20, "found only {} source files", files.len());
    let mut violations = Vec::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src/");
        let first = relative.components().next().expect("a path");
        let module = first
            .as_os_str()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if module == "lib" {
            continue;
        }
        let own = layer(&module);
        let text = fs::read_to_string(file).expect("readable source");
        for name in crate_paths(&text) {
            let reexport = name.starts_with(|c: char| c.is_uppercase());
            // A re-export (`crate::Client`) is the public API: for lock kinds and above only.
            let named = if reexport { LOCK_KINDS } else { layer(&name) };
            if named > own && name != module {
                violations.push(format!("{}: crate::{name}", relative.display()));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "modules naming a higher layer:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_check_sees_a_transport_module_naming_a_lock_kind() {
    // The rule itself: were node/ to name the lock module, or shared.rs the client, it fails.
    assert!(layer("lock") > layer("node"));
    assert!(layer("client") > layer("shared"));
    // Elections are a lock kind built on the lock: below the client, above the engine.
    assert_eq!(layer("election"), LOCK_KINDS);
    assert!(layer("election") > layer("pubsub"));
    assert_eq!(
        crate_paths("use crate::lock::Lock; crate::Client"),
        ["lock", "Client"]
    );
}

/// The modules of `node/calls/` (the typed script calls).
const CALLS: &[&str] = &[
    "calls",
    "acked_calls",
    "batch",
    "family_calls",
    "lock_calls",
    "release_calls",
    "renew_by_node",
    "scan",
];

/// What a `node/deploy/` file names inside `node`: `crate::node::<name>` and `super::<name>`.
fn node_paths(text: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    ["crate::node::", "super::"]
        .iter()
        .flat_map(|prefix| {
            code.match_indices(prefix).map(|(at, m)| {
                code[at + m.len()..]
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect::<String>()
            })
        })
        .filter(|name| !name.is_empty())
        .collect()
}

#[test]
fn deployments_know_nothing_of_the_calls_made_on_them() {
    // Inside node/: deploy/ (servers, cluster, Sentinel, TLS, ACL, transport) sits below
    // calls/ (the typed script calls), which use it.
    let deploy = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/node/deploy");
    let mut files = Vec::new();
    rust_files(&deploy, &mut files);
    assert!(files.len() >= 8, "found only {} deploy files", files.len());
    let violations: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = fs::read_to_string(file).expect("readable source");
            node_paths(&text)
                .into_iter()
                .filter(|name| CALLS.contains(&name.as_str()))
                .map(move |name| format!("{}: {name}", file.display()))
        })
        .collect();
    assert!(
        violations.is_empty(),
        "deploy/ naming the calls made on it:\n{}",
        violations.join("\n")
    );
    // The check itself sees such a path.
    assert_eq!(
        node_paths("use crate::node::lock_calls::AcquireCall; super::batch"),
        ["lock_calls", "batch"]
    );
}
