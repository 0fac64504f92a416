//! The crate's modules form layers: each names only modules of its own layer or below, so the
//! transport never depends on a lock kind and no lock kind depends on the public `Client` API.
//! Read from the source text (every `crate::<module>` path), so a new cycle fails here first.

use std::fs;
use std::path::Path;

/// Lowest first. Modules not listed are lock kinds (layer 5); `client` and `testing` are the
/// top, `lib` may name anything.
const LAYERS: &[&[&str]] = &[
    &["error", "task", "turns", "telemetry"],
    &["config", "keys", "options", "scripts", "terms"],
    &["node"],
    &["local_queue", "hold", "identity", "pubsub"],
    &["shared"],
];
const LOCK_KINDS: usize = 5;
const TOP: usize = 6;

fn layer(module: &str) -> usize {
    // `testing` builds clients (a second one, for `hold_elsewhere`) like the public API does.
    // `blocking` wraps the public API for synchronous callers.
    if module == "client" || module == "testing" || module == "blocking" {
        return TOP;
    }
    LAYERS
        .iter()
        .position(|layer| layer.contains(&module))
        .unwrap_or(LOCK_KINDS)
}

/// Every `crate::<name>` in the code (comments and doc links aside), the first names of a
/// group too (`crate::{a::X, b}` gives `a` and `b`); a capitalised name is a re-export from
/// `lib.rs`.
fn crate_paths(text: &str) -> Vec<String> {
    paths_after(text, "crate::")
}

/// The first name of every path after `prefix` in the code, comments aside, and of each item of
/// a group that follows it (`{a::X, b as c, d::{e, f}}` gives `a`, `b`, `d`).
fn paths_after(text: &str, prefix: &str) -> Vec<String> {
    let code: String = text
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |rest: &str| -> String {
        rest.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    for (at, m) in code.match_indices(prefix) {
        let rest = &code[at + m.len()..];
        let Some(group) = rest.strip_prefix('{') else {
            out.push(ident(rest));
            continue;
        };
        // The items at depth 1 of the group: each starts the text, or follows a comma.
        let mut depth = 1;
        let mut item_start = true;
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 1 => break,
                '}' => depth -= 1,
                ',' if depth == 1 => item_start = true,
                c if c.is_whitespace() => {}
                _ if item_start && depth == 1 => {
                    out.push(ident(&group[i..]));
                    item_start = false;
                }
                _ => {}
            }
        }
    }
    out.retain(|name| !name.is_empty());
    out
}

/// What a file names of other top-level modules: its `crate::` paths, and for a file of the
/// crate's first level (`src/x.rs`, `src/x/mod.rs`), where `super` is the crate, its
/// `super::` paths.
fn crate_paths_of(relative: &Path, text: &str) -> Vec<String> {
    let mut names = crate_paths(text);
    let parts: Vec<_> = relative.components().collect();
    let first_level = parts.len() == 1
        || (parts.len() == 2 && relative.file_name().is_some_and(|f| f == "mod.rs"));
    if first_level {
        names.extend(paths_after(text, "super::"));
    }
    names
}

/// The crate module a file under src/ belongs to (`family/rwlock.rs` -> `family`).
fn top_module(relative: &Path) -> String {
    let first = relative.components().next().expect("a path");
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_string()
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

/// One file's naming of a module: the file (relative to src/), its top module, the name it
/// wrote after `crate::` (or a first-level `super::`), and the module that name comes from (a
/// re-export's, as `lib.rs` lists it; else the name itself).
struct Reference {
    file: String,
    module: String,
    name: String,
    from: String,
}

/// Every module name written in src/ outside `lib.rs`, and every top module seen.
fn references() -> (Vec<Reference>, std::collections::HashSet<String>) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 20, "found only {} source files", files.len());
    let reexported = reexports(&fs::read_to_string(src.join("lib.rs")).expect("lib.rs"));
    assert!(
        reexported.contains(&("Guard".to_string(), "family".to_string())),
        "lib.rs's re-exports not found: {reexported:?}"
    );
    let mut out = Vec::new();
    let mut modules = std::collections::HashSet::new();
    for file in &files {
        let relative = file.strip_prefix(&src).expect("under src/");
        let module = top_module(relative);
        modules.insert(module.clone());
        if module == "lib" {
            continue;
        }
        let text = fs::read_to_string(file).expect("readable source");
        for name in crate_paths_of(relative, &text) {
            let from = reexported
                .iter()
                .find(|(item, _)| *item == name)
                .map_or(&name, |(_, from)| from)
                .clone();
            out.push(Reference {
                file: relative.display().to_string(),
                module: module.clone(),
                name,
                from,
            });
        }
    }
    (out, modules)
}

#[test]
fn modules_name_only_their_own_layer_or_below() {
    let (references, _) = references();
    let mut violations = Vec::new();
    for r in &references {
        // A capitalised name lib.rs does not list plainly is the public API: for lock kinds
        // and above only.
        let named = match r.from.starts_with(|c: char| c.is_uppercase()) {
            true => LOCK_KINDS,
            false => layer(&r.from),
        };
        if named > layer(&r.module) && r.from != r.module {
            violations.push(format!("{}: crate::{}", r.file, r.name));
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

/// Inside the lock kinds' layer, lowest first: the lock itself (its engine in `lock/`:
/// acquisition, attempts, grants, scoped runs; its guards, releases and the watchdog), then
/// what is built on it.
/// MultiLock and RedLock are made of locks; the family's `Guard` trait covers their guards too;
/// an election is a lock with a published value.
const LOCK_LAYER: &[&[&str]] = &[
    &[
        "guard",
        "lock",
        "owner",
        "queue_place",
        "release",
        "wait",
        "watchdog",
    ],
    &["multi"],
    &["family"],
    &["election"],
];

fn lock_sublayer(module: &str) -> Option<usize> {
    LOCK_LAYER.iter().position(|layer| layer.contains(&module))
}

/// The module each name `lib.rs` re-exports comes from (`pub use family::{Guard, ...}` gives
/// `Guard` -> `family`), so `crate::Guard` counts as naming `family`.
fn reexports(lib: &str) -> Vec<(String, String)> {
    fn leaves(tree: &syn::UseTree, module: &str, out: &mut Vec<(String, String)>) {
        match tree {
            syn::UseTree::Path(p) => leaves(&p.tree, module, out),
            syn::UseTree::Name(n) => out.push((n.ident.to_string(), module.to_string())),
            syn::UseTree::Rename(r) => out.push((r.rename.to_string(), module.to_string())),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| leaves(t, module, out)),
            syn::UseTree::Glob(_) => {}
        }
    }
    let file = syn::parse_file(lib).expect("lib.rs parses");
    let mut out = Vec::new();
    for item in &file.items {
        if let syn::Item::Use(u) = item
            && let syn::UseTree::Path(p) = &u.tree
        {
            leaves(&p.tree, &p.ident.to_string(), &mut out);
        }
    }
    out
}

#[test]
fn lock_kinds_name_only_the_lock_and_kinds_below_them() {
    let (references, modules) = references();
    for module in &modules {
        if module != "lib" && layer(module) == LOCK_KINDS {
            assert!(
                lock_sublayer(module).is_some(),
                "{module}: a lock kind not placed in LOCK_LAYER (tests/layering.rs)"
            );
        }
    }
    for module in LOCK_LAYER.iter().flat_map(|layer| layer.iter()) {
        assert!(
            modules.contains(*module),
            "LOCK_LAYER names {module}, not in src/"
        );
    }
    let violations: Vec<String> = references
        .iter()
        .filter(
            |r| match (lock_sublayer(&r.module), lock_sublayer(&r.from)) {
                (Some(own), Some(named)) => named > own,
                _ => false,
            },
        )
        .map(|r| format!("{}: crate::{} ({})", r.file, r.name, r.from))
        .collect();
    assert!(
        violations.is_empty(),
        "lock kinds naming a kind above them:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_lock_layer_check_sees_a_reexport() {
    let reexported = reexports("pub use family::{Guard, ReadLock as Read};\npub use lock::Lock;");
    assert_eq!(
        reexported,
        [
            ("Guard".to_string(), "family".to_string()),
            ("Read".to_string(), "family".to_string()),
            ("Lock".to_string(), "lock".to_string()),
        ]
    );
    assert_eq!(
        crate_paths("use crate::{election::Election, family::{Guard, kept}, Error as E};"),
        ["election", "family", "Error"]
    );
    assert_eq!(
        crate_paths_of(Path::new("multi/mod.rs"), "use super::election::Election;"),
        ["election"]
    );
    assert!(crate_paths_of(Path::new("multi/redlock/mod.rs"), "use super::member;").is_empty());
    assert!(lock_sublayer("family") > lock_sublayer("multi"));
    assert!(lock_sublayer("election") > lock_sublayer("family"));
    assert!(lock_sublayer("multi") > lock_sublayer("lock"));
}

/// The modules of `node/calls/` (the typed script calls).
const CALLS: &[&str] = &[
    "calls",
    "acked_calls",
    "batch",
    "family_calls",
    "lock_calls",
    "queue_read",
    "release_calls",
    "renew_by_node",
    "scan",
];

/// `Node`'s fields that hold calls/ state, which deploy/ must not reach either.
const CALLS_FIELDS: &[&str] = &["batches"];

/// What a file names, read as Rust: every segment of every path of two segments or more (in
/// code and types) and of every `use` tree (groups and renames included), how many `use`s
/// glob, and every field it accesses.
#[derive(Default)]
struct Named {
    segments: Vec<String>,
    globs: usize,
    fields: Vec<String>,
}

impl<'a> syn::visit::Visit<'a> for Named {
    fn visit_path(&mut self, path: &'a syn::Path) {
        // A one-segment path is a local name (a variable, an imported item): what it imports
        // is seen in its `use`.
        if path.segments.len() > 1 {
            let names = path.segments.iter().map(|s| s.ident.unraw().to_string());
            self.segments.extend(names);
        }
        syn::visit::visit_path(self, path);
    }
    fn visit_use_tree(&mut self, tree: &'a syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => self.segments.push(p.ident.unraw().to_string()),
            syn::UseTree::Name(n) => self.segments.push(n.ident.unraw().to_string()),
            syn::UseTree::Rename(r) => self.segments.push(r.ident.unraw().to_string()),
            syn::UseTree::Glob(_) => self.globs += 1,
            syn::UseTree::Group(_) => {}
        }
        syn::visit::visit_use_tree(self, tree);
    }
    fn visit_member(&mut self, member: &'a syn::Member) {
        if let syn::Member::Named(field) = member {
            self.fields.push(field.unraw().to_string());
        }
        syn::visit::visit_member(self, member);
    }
}

use syn::ext::IdentExt as _;

fn named(source: &str) -> Named {
    let file = syn::parse_file(source).expect("the source parses");
    let mut named = Named::default();
    syn::visit::Visit::visit_file(&mut named, &file);
    named
}

/// The names `node/mod.rs` takes from `calls/` modules (`use lock_calls::{A, B};`), which a
/// file under `node/` could reach as `crate::node::A`.
fn reexported_from_calls(node_mod: &str) -> Vec<String> {
    fn leaves(tree: &syn::UseTree, under_calls: bool, out: &mut Vec<String>) {
        match tree {
            syn::UseTree::Path(p) => {
                let calls = under_calls || CALLS.contains(&p.ident.to_string().as_str());
                leaves(&p.tree, calls, out)
            }
            syn::UseTree::Name(n) if under_calls => out.push(n.ident.to_string()),
            syn::UseTree::Rename(r) if under_calls => out.push(r.rename.to_string()),
            syn::UseTree::Group(g) => g.items.iter().for_each(|t| leaves(t, under_calls, out)),
            _ => {}
        }
    }
    let file = syn::parse_file(node_mod).expect("node/mod.rs parses");
    let mut out = Vec::new();
    for item in &file.items {
        if let syn::Item::Use(u) = item {
            leaves(&u.tree, false, &mut out);
        }
    }
    // The modules themselves (`use calls::{batch, ...}`) are CALLS already.
    out.retain(|name| !CALLS.contains(&name.as_str()));
    out
}

/// What `source` (a file under deploy/) names of calls/: modules, re-exported names, fields,
/// and globs (which could hide any of them).
fn calls_named(source: &str, reexported: &[String]) -> Vec<String> {
    let found = named(source);
    let mut out: Vec<String> = found
        .segments
        .into_iter()
        .filter(|s| CALLS.contains(&s.as_str()) || reexported.contains(s))
        .collect();
    out.extend(
        found
            .fields
            .into_iter()
            .filter(|f| CALLS_FIELDS.contains(&f.as_str()))
            .map(|f| format!(".{f}")),
    );
    out.extend((0..found.globs).map(|_| "a glob import".to_string()));
    out
}

#[test]
fn deployments_know_nothing_of_the_calls_made_on_them() {
    // Inside node/: deploy/ (servers, cluster, Sentinel, TLS, ACL, transport) sits below
    // calls/ (the typed script calls), which use it.
    let node = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/node");
    let node_mod = fs::read_to_string(node.join("mod.rs")).expect("node/mod.rs");
    let reexported = reexported_from_calls(&node_mod);
    assert!(
        reexported.iter().any(|name| name == "Batches"),
        "node/mod.rs's names from calls/ not found: {reexported:?}"
    );
    let mut files = Vec::new();
    rust_files(&node.join("deploy"), &mut files);
    assert!(files.len() >= 8, "found only {} deploy files", files.len());
    let mut violations = Vec::new();
    for file in &files {
        let text = fs::read_to_string(file).expect("readable source");
        // `use super::*;` in a test module names only its own file's items.
        let text = text.replace("use super::*;", "");
        for name in calls_named(&text, &reexported) {
            violations.push(format!("{}: {name}", file.display()));
        }
    }
    assert!(
        violations.is_empty(),
        "deploy/ naming the calls made on it:\n{}",
        violations.join("\n")
    );
}

#[test]
fn the_deploy_check_sees_every_form_of_path() {
    let reexported = vec!["Batches".to_string()];
    let found = |code: &str| calls_named(code, &reexported);
    assert_eq!(
        found("use crate::node::lock_calls::AcquireCall;"),
        ["lock_calls"]
    );
    assert_eq!(
        found("use crate::node::{Node, lock_calls};"),
        ["lock_calls"]
    );
    assert_eq!(
        found("pub(crate) use crate::node::{\n    Node,\n    batch::Traffic,\n};"),
        ["batch"]
    );
    assert_eq!(found("use crate::{node::scan as s};"), ["scan"]);
    assert_eq!(
        found("fn f() { let b = super::super::calls::batch::MAX; }"),
        ["calls", "batch"]
    );
    assert_eq!(found("fn f(b: &crate::node::Batches) {}"), ["Batches"]);
    assert_eq!(
        found("fn f(n: &Node) { let _ = &n.batches; }"),
        [".batches"]
    );
    assert_eq!(found("fn f() { crate::node::r#scan::x(); }"), ["scan"]);
    assert_eq!(found("use crate::node::*;"), ["a glob import"]);
    // Comments, strings and plain variables are not paths.
    assert!(
        found(
            "// uses crate::node::batch\n/* crate::node::scan */\n\
             fn f(batch: u8, scan: u8) { let s = \"use batch; redis://x\"; g(batch, scan); }"
        )
        .is_empty()
    );
    assert_eq!(
        reexported_from_calls(
            "use lock_calls::Batches;\npub(crate) use release_calls::{Latch, ReleaseArgs as Args};\n\
             use calls::{batch, lock_calls};\nuse shape::Conn;"
        ),
        ["Batches", "Latch", "Args"]
    );
}
