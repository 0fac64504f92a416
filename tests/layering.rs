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

/// Code without its `//` comments and with its string literals emptied (`"..."` stays `""`),
/// so that neither a word in a string nor a URL's `//` is read as code.
fn without_comments(text: &str) -> String {
    let mut code = String::with_capacity(text.len());
    for line in text.lines() {
        let (mut in_string, mut escaped) = (false, false);
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if in_string {
                match (escaped, c) {
                    (false, '\\') => escaped = true,
                    (false, '"') => {
                        in_string = false;
                        code.push('"');
                    }
                    _ => escaped = false,
                }
                continue;
            }
            match c {
                '"' => in_string = true,
                '/' if chars.peek() == Some(&'/') => break,
                _ => {}
            }
            code.push(c);
        }
        code.push('\n');
    }
    code
}

/// The names a file uses as paths: every identifier next to `::` (either side), and every
/// identifier of a `use` statement (groups and several lines included).
fn path_names(text: &str) -> Vec<String> {
    let code = without_comments(text);
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut names = Vec::new();
    let mut in_use = false;
    let mut rest = code.as_str();
    while let Some(at) = rest.find(is_ident) {
        let before = rest[..at].trim_end();
        let len = rest[at..]
            .find(|c: char| !is_ident(c))
            .unwrap_or(rest.len() - at);
        let name = &rest[at..at + len];
        let after = rest[at + len..].trim_start();
        if before.contains(';') {
            in_use = false;
        }
        if in_use || before.ends_with("::") || after.starts_with("::") {
            names.push(name.to_string());
        }
        // A `use` statement starts at the beginning of a statement or item.
        if name == "use" && (before.is_empty() || before.ends_with([';', '{', '}', ')'])) {
            in_use = true;
        }
        rest = &rest[at + len..];
    }
    names
}

/// The names `node/mod.rs` takes from `calls/` modules (`use lock_calls::{A, B};`), which a
/// file under `node/` can reach as `crate::node::A`.
fn reexported_from_calls(node_mod: &str) -> Vec<String> {
    without_comments(node_mod)
        .split(';')
        .filter_map(|statement| {
            let path = statement.trim().split("use ").nth(1)?;
            let module = path.split("::").next()?.trim();
            (CALLS.contains(&module) && path.contains("::")).then(|| {
                path.split("::")
                    .nth(1)
                    .unwrap_or("")
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .filter(|name| name.starts_with(|c: char| c.is_uppercase()))
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
        })
        .flatten()
        .collect()
}

#[test]
fn deployments_know_nothing_of_the_calls_made_on_them() {
    // Inside node/: deploy/ (servers, cluster, Sentinel, TLS, ACL, transport) sits below
    // calls/ (the typed script calls), which use it.
    let node = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/node");
    let node_mod = fs::read_to_string(node.join("mod.rs")).expect("node/mod.rs");
    let mut forbidden: Vec<String> = CALLS.iter().map(|m| m.to_string()).collect();
    let reexported = reexported_from_calls(&node_mod);
    assert!(
        reexported.iter().any(|name| name == "Batches"),
        "node/mod.rs's names from calls/ not found: {reexported:?}"
    );
    forbidden.extend(reexported);
    let mut files = Vec::new();
    rust_files(&node.join("deploy"), &mut files);
    assert!(files.len() >= 8, "found only {} deploy files", files.len());
    let violations: Vec<String> = files
        .iter()
        .flat_map(|file| {
            let text = fs::read_to_string(file).expect("readable source");
            let mut named: Vec<String> = path_names(&text)
                .into_iter()
                .filter(|name| forbidden.contains(name))
                .collect();
            // `Node`'s own field of calls/ state, reached without a path.
            if without_comments(&text).contains(".batches") {
                named.push(".batches".into());
            }
            named
                .into_iter()
                .map(move |name| format!("{}: {name}", file.display()))
        })
        .collect();
    assert!(
        violations.is_empty(),
        "deploy/ naming the calls made on it:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_deploy_check_sees_every_form_of_path() {
    let found = |code: &str| {
        path_names(code)
            .into_iter()
            .filter(|n| CALLS.contains(&n.as_str()) || n == "Batches")
            .collect::<Vec<_>>()
    };
    assert_eq!(
        found("use crate::node::lock_calls::AcquireCall;"),
        ["lock_calls"]
    );
    assert_eq!(
        found("use crate::node::{Node, lock_calls};"),
        ["lock_calls"]
    );
    assert_eq!(
        found("use crate::node::{\n    Node,\n    batch::Traffic,\n};"),
        ["batch"]
    );
    assert_eq!(found("use crate::{node::scan::X};"), ["scan"]);
    assert_eq!(
        found("let b = super::super::calls::batch::MAX;"),
        ["calls", "batch"]
    );
    assert_eq!(found("fn f(b: &crate::node::Batches) {}"), ["Batches"]);
    assert_eq!(found("pub(crate) use crate::node::batch;"), ["batch"]);
    // Comments, strings and plain variables are not paths; a `use` ends at its `;`.
    assert!(found("// uses crate::node::batch\nlet batch = 1; f(batch);").is_empty());
    assert!(found("use a::b; let batch = 1; f(batch, scan);").is_empty());
    assert!(found("let s = \"we use batch here\"; g(batch);").is_empty());
    assert_eq!(
        found("let u = \"redis://a\"; super::lock_calls::x();"),
        ["lock_calls"]
    );
    assert_eq!(
        reexported_from_calls(
            "use lock_calls::Batches;\npub(crate) use release_calls::{Latch, ReleaseArgs};\nuse shape::Conn;"
        ),
        ["Batches", "Latch", "ReleaseArgs"]
    );
}
