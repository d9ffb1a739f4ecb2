//! The operator crate's module layering, checked from its source (no cluster): which top-level
//! module of `crates/operator/src` may name which other one.
//!
//! `controllers`, `admission` and `webhook_server` are siblings and name none of each other;
//! `pull`, `sweep`, `reservation_write` and `runner_directory` sit beside them; `manager` wires
//! them and only `main.rs` names the manager. What they all share, the runtime re-exported in
//! `lib.rs` (`context`, `error`, `metrics`, …), any module may name.
//!
//! [`ALLOWED`] is the measured table of every edge that exists, each going downward. A path
//! (`crate::x`, `super::…::x` that climbs to the crate root, and in `main.rs` `hangar::x`) in
//! code, not in comments or strings, to a module its table row does not list fails the test
//! with the file and line. Adding a downward edge is adding it to the table; an edge no code
//! uses any more fails too, so the table stays the truth. [`the_table_itself_is_layered`]
//! keeps the table from growing a sideways or upward edge.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every top-level module (`main` is the binary, `lib` the crate root) and the other top-level
/// modules it may name, runtime re-exports aside. Downward only.
#[rustfmt::skip]
const ALLOWED: &[(&str, &[&str])] = &[
    ("main",              &["admission", "leader", "manager", "webhook_server"]),
    ("lib",               &[]),
    ("manager",           &["controllers", "pull", "runner_directory", "sweep", "webhook_server"]),
    ("leader",            &[]),
    ("controllers",       &["runner_directory"]),
    ("admission",         &[]),
    // Runners seen at work in deliveries are reported to the runner directory.
    ("webhook_server",    &["reservation_write", "runner_directory"]),
    // The pull recovery routes jobs by the webhook server's table (`candidates`,
    // `WebhookStores`, `HraKey`) and writes with the same compare-and-swap.
    ("pull",              &["reservation_write", "webhook_server"]),
    ("sweep",             &[]),
    ("reservation_write", &[]),
    ("runner_directory",  &[]),
];

/// The `hangar-runtime` modules `lib.rs` re-exports: shared, so anyone may name them (checked
/// against `lib.rs`).
const RUNTIME: &[&str] = &[
    "authority",
    "clock",
    "conditions",
    "context",
    "credentials",
    "error",
    "events",
    "kube_client",
    "metrics",
    "reconciler",
    "runner_pod",
    "serve",
];

/// The siblings that name none of each other.
const SIBLINGS: &[&str] = &["controllers", "admission", "webhook_server"];

/// Only these may name the manager.
const ABOVE_MANAGER: &[&str] = &["main"];

#[test]
fn modules_name_only_what_the_table_allows() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(from, to)| (*from, to.iter().copied().collect()))
        .collect();
    let mut violations = Vec::new();
    // The table covers exactly the modules `lib.rs` declares, and RUNTIME exactly what it
    // re-exports from `hangar-runtime`.
    let lib = strip(&fs::read_to_string(src.join("lib.rs")).unwrap());
    let declared: BTreeSet<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod ")?.strip_suffix(';'))
        .chain(["lib", "main"])
        .collect();
    let rows: BTreeSet<&str> = allowed.keys().copied().collect();
    if declared != rows {
        violations.push(format!(
            "ALLOWED has rows for {rows:?} but src/lib.rs declares {declared:?} (plus lib, main)"
        ));
    }
    let reexported: BTreeSet<&str> = lib
        .split_once("pub use hangar_runtime::{")
        .and_then(|(_, rest)| rest.split_once('}'))
        .map(|(names, _)| names.split(',').map(str::trim).filter(|n| !n.is_empty()))
        .into_iter()
        .flatten()
        .collect();
    if reexported != RUNTIME.iter().copied().collect() {
        violations.push(format!(
            "RUNTIME is {RUNTIME:?} but src/lib.rs re-exports {reexported:?} from hangar-runtime"
        ));
    }
    let mut used: BTreeSet<(String, String)> = BTreeSet::new();
    let files = rust_files(&src);
    assert!(files.len() > 10, "found only {files:?} under {src:?}");
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let (top, depth) = module_of(rel);
        let Some(row) = allowed.get(top.as_str()) else {
            violations.push(format!(
                "src/{}: top-level module `{top}` has no row in ALLOWED (tests/layering.rs)",
                rel.display()
            ));
            continue;
        };
        let text = fs::read_to_string(&file).unwrap();
        // The binary names the library as `hangar`; its own `crate::`/`super::` paths stay in it.
        let paths = match top.as_str() {
            "main" => top_level_paths(&strip(&text), "hangar", depth, false),
            _ => top_level_paths(&strip(&text), "crate", depth, true),
        };
        for (line, target) in paths {
            if target == top || RUNTIME.contains(&target.as_str()) {
                continue;
            }
            if !allowed.contains_key(target.as_str()) {
                violations.push(format!(
                    "src/{}:{line}: `{target}` is neither a module in ALLOWED nor a runtime \
                     re-export in RUNTIME (tests/layering.rs)",
                    rel.display()
                ));
            } else if row.contains(target.as_str()) {
                used.insert((top.clone(), target));
            } else {
                violations.push(format!(
                    "src/{}:{line}: `{top}` names `{target}`, which the layering does not allow \
                     (ALLOWED in tests/layering.rs; ARCHITECTURE.md, dependency rules)",
                    rel.display()
                ));
            }
        }
    }
    for (from, to) in ALLOWED {
        for to in *to {
            if !used.contains(&(from.to_string(), to.to_string())) {
                violations.push(format!(
                    "ALLOWED lists `{from}` → `{to}`, which no code uses any more: remove it"
                ));
            }
        }
    }
    assert!(violations.is_empty(), "{}", violations.join("\n"));
}

#[test]
fn the_table_itself_is_layered() {
    for (from, to) in ALLOWED {
        for to in *to {
            assert!(
                !(SIBLINGS.contains(from) && SIBLINGS.contains(to)),
                "`{from}` → `{to}` joins two siblings"
            );
            assert!(
                *to != "manager" || ABOVE_MANAGER.contains(from),
                "`{from}` → `manager`: only {ABOVE_MANAGER:?} wire the manager"
            );
            assert!(
                *to != "main" && *to != "lib",
                "`{from}` → `{to}` points upward"
            );
        }
    }
    // Downward: no cycle, so the table orders the modules into layers.
    let mut left: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(from, to)| (*from, to.iter().copied().collect()))
        .collect();
    while !left.is_empty() {
        let bottom: Vec<&str> = left
            .iter()
            .filter(|(_, to)| to.iter().all(|t| !left.contains_key(t)))
            .map(|(from, _)| *from)
            .collect();
        assert!(!bottom.is_empty(), "ALLOWED has a cycle among {left:?}");
        for module in bottom {
            left.remove(module);
        }
    }
}

#[test]
fn the_scanner_finds_paths_in_code_only() {
    let code = r#"
//! [`crate::manager`] in a doc comment is not an import.
use crate::context::Context;
use crate::{controllers::runner, self as me, webhook_server::{A, B}};
let s = "crate::admission";  /* crate::pull */ let c = '"'; let l: &'static str = "";
fn f() { crate::sweep::run(); super::leader::x(); $crate::nothing; pub(crate) fn g() {} }
mod inner { fn h() { super::super::manager::run(); super::sibling(); } }
"#;
    let found = top_level_paths(&strip(code), "crate", 1, true);
    assert_eq!(
        found,
        [
            (3, "context".to_owned()),
            (4, "controllers".to_owned()),
            (4, "webhook_server".to_owned()),
            (6, "sweep".to_owned()),
            (6, "leader".to_owned()),
            (7, "manager".to_owned()),
        ]
    );
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The top-level module a file under `src/` belongs to, and the depth of its module below the
/// crate root (`pull.rs` and `controllers/mod.rs`: 1; `controllers/runner.rs`: 2).
fn module_of(rel: &Path) -> (String, usize) {
    let parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    let top = parts[0].clone();
    let depth = match top.as_str() {
        "lib" | "main" => 0,
        _ if parts.last().is_some_and(|p| p == "mod") => parts.len() - 1,
        _ => parts.len(),
    };
    (top, depth)
}

/// `text` with comments, string and char literals blanked out (newlines kept, so lines still
/// count).
fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let blank = |c: char| if c == '\n' { '\n' } else { ' ' };
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
        } else if c == 'r' && matches!(next, Some('"' | '#')) && !ident_before(&chars, i, 'b') {
            // A raw string: r"…", r#"…"#, br"…", …
            let mut j = i + 1;
            while chars.get(j) == Some(&'#') {
                j += 1;
            }
            if chars.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            let end = (j + 1..chars.len())
                .find(|&k| chars[k] == '"' && (1..=hashes).all(|h| chars.get(k + h) == Some(&'#')))
                .map_or(chars.len(), |k| k + 1 + hashes);
            out.extend(chars[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < chars.len() {
                    out.push(blank(chars[i]));
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' && (next == Some('\\') || chars.get(i + 2) == Some(&'\'')) {
            // A char literal ('a', '\n', '\''), not a lifetime.
            let end = match next {
                Some('\\') => (i + 3..chars.len())
                    .find(|&k| chars[k] == '\'')
                    .map_or(chars.len(), |k| k + 1),
                _ => i + 3,
            };
            out.extend(chars[i..end].iter().map(|&c| blank(c)));
            i = end;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Whether an identifier ends just before `chars[i]` (other than a lone `allowed` prefix, the
/// `b` of `br"…"`).
fn ident_before(chars: &[char], i: usize, allowed: char) -> bool {
    match i.checked_sub(1).map(|p| chars[p]) {
        Some(p) if p == allowed => i.checked_sub(2).is_some_and(|q| is_ident(chars[q])),
        Some(p) => is_ident(p),
        None => false,
    }
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every top-level module `code` names, with its line: through `root::` (`crate`, or
/// `hangar` in the binary), including each item of a `root::{…}` group, and, when `climb`,
/// through a `super::` chain that reaches the crate root from a module `depth` below it (an
/// inline `mod x { … }` adds one).
fn top_level_paths(code: &str, root: &str, depth: usize, climb: bool) -> Vec<(usize, String)> {
    let chars: Vec<char> = code.chars().collect();
    let word_at =
        |i: usize| -> String { chars[i..].iter().take_while(|c| is_ident(**c)).collect() };
    let path_sep_at = |i: usize| chars.get(i..i + 2).is_some_and(|s| s == [':', ':']);
    let skip_space = |mut i: usize| {
        while chars.get(i).is_some_and(|c| c.is_whitespace()) {
            i += 1;
        }
        i
    };
    let mut found = Vec::new();
    let mut line = 1;
    // The brace depths inside the inline modules opened so far.
    let mut inline_mods: Vec<isize> = Vec::new();
    let mut braces: isize = 0;
    let mut mod_pending = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\n' => line += 1,
            '{' => {
                braces += 1;
                if mod_pending {
                    inline_mods.push(braces);
                    mod_pending = false;
                }
            }
            '}' => {
                if inline_mods.last() == Some(&braces) {
                    inline_mods.pop();
                }
                braces -= 1;
            }
            ';' => mod_pending = false,
            _ => {}
        }
        let prev = i.checked_sub(1).map(|p| chars[p]);
        if !is_ident(c) || prev.is_some_and(|p| is_ident(p) || p == '$' || p == ':') {
            i += 1;
            continue;
        }
        let word = word_at(i);
        let after = i + word.len();
        if word == "mod" {
            mod_pending = true;
        } else if path_sep_at(after) && (word == root || climb && word == "super") {
            // Where the path is after its `root::` or `super::`s: 0 is the crate root.
            let mut level = depth + inline_mods.len();
            let mut j = i;
            if word == root {
                level = 0;
                j = skip_space(after + 2);
            } else {
                while level > 0 && word_at(j) == "super" && path_sep_at(j + 5) {
                    level -= 1;
                    j = skip_space(j + 7);
                }
            }
            if level == 0 {
                if chars.get(j) == Some(&'{') {
                    found.extend(group_heads(&chars, j, line));
                } else {
                    found.push((line, word_at(j)));
                }
            }
        }
        i = after;
    }
    found.retain(|(_, w)| !w.is_empty() && w != "self");
    found
}

/// The first segment of each item of the use group opening at `chars[open]` (`{`), with its
/// line (`line` is that of the `{`).
fn group_heads(chars: &[char], open: usize, mut line: usize) -> Vec<(usize, String)> {
    let mut heads = Vec::new();
    let mut depth = 0;
    let mut expect_head = true;
    for (k, &c) in chars.iter().enumerate().skip(open) {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            '\n' => line += 1,
            ',' if depth == 1 => expect_head = true,
            c if depth == 1 && expect_head && is_ident(c) => {
                let head: String = chars[k..].iter().take_while(|c| is_ident(**c)).collect();
                heads.push((line, head));
                expect_head = false;
            }
            _ => {}
        }
    }
    heads
}
