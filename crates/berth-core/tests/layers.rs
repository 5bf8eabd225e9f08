//! The code map's promise, checked: inside every crate of the workspace, modules form layers.
//! A module may use modules below it, never one that uses it back, directly or through a chain.
//!
//! The check reads the source, not the compiler: every `crate::…`, `super::…` and `self::…` path
//! outside test code (use lines, use trees and paths in the code alike) is an edge from the file
//! it is in to the module it names. Edges are compared folder by folder: two files in one folder
//! are compared as the entries of that folder they sit under (`controllers::copies` against
//! `controllers::instances`), and for the crate's root folder as its top-level modules (`store`
//! against `rollouts`). A folder's own `mod.rs` is the face of its entries: an entry using it, or it
//! using an entry, is not a layer crossing. Paths without `crate`, `super` or `self` name either
//! another crate or a module's own child, which never closes a circle.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

type ModPath = Vec<String>;

/// A module file: its path in the crate and its source with comments, strings and test code
/// taken out.
struct Module {
    path: ModPath,
    file: PathBuf,
    code: Vec<Token>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Ident(String),
    Punct(char),
    PathSep,
}

/// The tokens of `text` that paths are made of: identifiers, `::` and punctuation. Comments,
/// string and character literals and lifetimes are dropped.
fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && raw_string(&chars, i) {
            // r"…", r#"…"#: ends at a quote followed by as many hashes.
            let mut j = i + 1;
            let mut hashes = 0;
            while chars.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            j += 1;
            while j < chars.len() {
                if chars[j] == '"' && (1..=hashes).all(|h| chars.get(j + h) == Some(&'#')) {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F}') or a lifetime ('a).
            if next == Some('\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            out.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c == ':' && next == Some(':') {
            out.push(Token::PathSep);
            i += 2;
        } else if c.is_whitespace() || c.is_numeric() {
            i += 1;
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

fn raw_string(chars: &[char], i: usize) -> bool {
    // `r` must start a token (not end an identifier such as `for`), then hashes, then a quote.
    let starts = i == 0 || !(chars[i - 1].is_alphanumeric() || chars[i - 1] == '_');
    let mut j = i + 1;
    while chars.get(j) == Some(&'#') {
        j += 1;
    }
    starts && chars.get(j) == Some(&'"')
}

/// `tokens` without the items marked `#[cfg(test)]` (test modules and helpers).
fn without_tests(tokens: Vec<Token>) -> Vec<Token> {
    let is = |t: Option<&Token>, c: char| t == Some(&Token::Punct(c));
    let ident = |t: Option<&Token>, s: &str| matches!(t, Some(Token::Ident(i)) if i == s);
    let mut out = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let cfg_test = is(tokens.get(i), '#')
            && is(tokens.get(i + 1), '[')
            && ident(tokens.get(i + 2), "cfg")
            && is(tokens.get(i + 3), '(')
            && ident(tokens.get(i + 4), "test")
            && is(tokens.get(i + 5), ')')
            && is(tokens.get(i + 6), ']');
        if !cfg_test {
            out.push(tokens[i].clone());
            i += 1;
            continue;
        }
        // Skip the item: up to its `;`, or through its braces.
        i += 7;
        let mut depth = 0usize;
        while i < tokens.len() {
            match &tokens[i] {
                Token::Punct('{') => depth += 1,
                Token::Punct('}') => {
                    depth -= 1;
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                Token::Punct(';') if depth == 0 => {
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
    }
    out
}

/// Every module file under `src`, by its path in the crate. Files named `tests.rs` are test
/// modules and are left out.
fn modules(src: &Path) -> Vec<Module> {
    let mut found = Vec::new();
    let mut folders = vec![src.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in fs::read_dir(&folder).expect("a source folder") {
            let file = entry.expect("an entry").path();
            if file.is_dir() {
                folders.push(file);
                continue;
            }
            if file.extension().and_then(|e| e.to_str()) != Some("rs") {
                continue;
            }
            let relative = file.strip_prefix(src).expect("under src");
            let mut path: ModPath = relative
                .with_extension("")
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            if matches!(
                path.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                path.pop();
            }
            if path.last().map(String::as_str) == Some("tests")
                || path.first().map(String::as_str) == Some("bin")
            {
                continue;
            }
            let text = fs::read_to_string(&file).expect("a source file");
            found.push(Module {
                path,
                file: relative.to_path_buf(),
                code: without_tests(tokens(&text)),
            });
        }
    }
    found
}

/// The paths `code` names from the crate's root (`crate::`), from its parent (`super::`) or from
/// itself (`self::`), use trees expanded, each resolved against `at` (the module the code is in).
fn references(at: &ModPath, code: &[Token]) -> Vec<ModPath> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < code.len() {
        let (base, mut j) = match &code[i] {
            Token::Ident(s) if s == "crate" => (Vec::new(), i + 1),
            Token::Ident(s) if s == "super" => (at[..at.len().saturating_sub(1)].to_vec(), i + 1),
            Token::Ident(s) if s == "self" => (at.clone(), i + 1),
            _ => {
                i += 1;
                continue;
            }
        };
        // `crate` alone (as in `pub(crate)`) names nothing.
        if code.get(j) != Some(&Token::PathSep) {
            i += 1;
            continue;
        }
        let mut base = base;
        // super::super::…
        while code.get(j) == Some(&Token::PathSep)
            && matches!(code.get(j + 1), Some(Token::Ident(s)) if s == "super")
        {
            base.pop();
            j += 2;
        }
        j = tree(code, j, base, &mut out);
        i = j.max(i + 1);
    }
    out
}

/// Reads a path's tail from `code[j]` (at a `::`), pushing every full path into `out`; answers
/// where it ended.
fn tree(code: &[Token], mut j: usize, mut path: ModPath, out: &mut Vec<ModPath>) -> usize {
    while code.get(j) == Some(&Token::PathSep) {
        match code.get(j + 1) {
            Some(Token::Ident(s)) if s == "self" => j += 2,
            Some(Token::Ident(s)) => {
                path.push(s.clone());
                j += 2;
            }
            Some(Token::Punct('{')) => {
                j += 2;
                loop {
                    match code.get(j) {
                        Some(Token::Punct('}')) => return j + 1,
                        Some(Token::Punct(',')) => j += 1,
                        Some(Token::Ident(s)) if s == "self" => {
                            out.push(path.clone());
                            j += 1;
                        }
                        Some(Token::Ident(s)) if s == "super" => {
                            // `{super::x}` inside a tree is not Rust; skip it.
                            j += 1;
                        }
                        Some(Token::Ident(s)) if s == "as" => j += 2,
                        Some(Token::Ident(s)) => {
                            let mut inner = path.clone();
                            inner.push(s.clone());
                            j = tree(code, j + 1, inner, out);
                        }
                        Some(_) => j += 1,
                        None => return j,
                    }
                }
            }
            _ => break,
        }
    }
    out.push(path);
    j
}

/// An edge between two entries of one folder, and where it was seen.
#[derive(Default)]
struct Folder {
    edges: BTreeMap<String, BTreeMap<String, String>>,
}

/// The crossings of each folder of the crate at `src`.
fn folders(src: &Path) -> BTreeMap<ModPath, Folder> {
    let modules = modules(src);
    let known: BTreeSet<ModPath> = modules.iter().map(|m| m.path.clone()).collect();
    let mut by_folder: BTreeMap<ModPath, Folder> = BTreeMap::new();
    for module in &modules {
        for reference in references(&module.path, &module.code) {
            // The module it names: the longest prefix of the path that is one.
            let Some(target) = (0..=reference.len())
                .rev()
                .map(|n| reference[..n].to_vec())
                .find(|p| known.contains(p))
            else {
                continue;
            };
            let common = module
                .path
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            // One of them is the folder's face (or the same module): no crossing.
            if common == module.path.len() || common == target.len() {
                continue;
            }
            let folder = module.path[..common].to_vec();
            by_folder
                .entry(folder)
                .or_default()
                .edges
                .entry(module.path[common].clone())
                .or_default()
                .entry(target[common].clone())
                .or_insert_with(|| {
                    format!("{} uses {}", module.file.display(), reference.join("::"))
                });
        }
    }
    by_folder
}

/// A circle in `folder`'s edges, spelled out with the line that makes each step, if any.
fn circle(folder: &Folder) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        folder: &Folder,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut ring: Vec<String> = stack[at..].to_vec();
            ring.push(node.to_owned());
            return Some(ring);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_owned());
        for next in folder.edges.get(node).into_iter().flat_map(|e| e.keys()) {
            if let Some(ring) = visit(next, folder, stack, done) {
                return Some(ring);
            }
        }
        stack.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for start in folder.edges.keys() {
        let mut stack = Vec::new();
        if let Some(ring) = visit(start, folder, &mut stack, &mut done) {
            return Some(
                ring.windows(2)
                    .map(|w| format!("{} -> {}: {}", w[0], w[1], folder.edges[&w[0]][&w[1]]))
                    .collect(),
            );
        }
    }
    None
}

fn circles(src: &Path) -> Vec<String> {
    folders(src)
        .iter()
        .filter_map(|(path, folder)| {
            circle(folder).map(|steps| {
                let name = if path.is_empty() {
                    "the crate's root".to_owned()
                } else {
                    path.join("::")
                };
                format!("{name}:\n    {}", steps.join("\n    "))
            })
        })
        .collect()
}

fn workspace_crates() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut found: Vec<PathBuf> = fs::read_dir(&crates)
        .expect("the crates folder")
        .map(|e| e.expect("an entry").path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    found.sort();
    found
}

/// The type each `impl` block of `code` is for (`impl<T> Trait for Type<T>` is for `Type`).
fn implemented(code: &[Token]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, token) in code.iter().enumerate() {
        if *token != Token::Ident("impl".to_owned()) {
            continue;
        }
        // Items that only mention `impl Trait` (an argument or return type) follow `(`, `:`,
        // `>`, `->` or `,`; an impl block starts an item.
        if i > 0
            && matches!(
                &code[i - 1],
                Token::Punct('(' | ':' | ',' | '>' | '<' | '&' | '=') | Token::PathSep
            )
        {
            continue;
        }
        let mut j = i + 1;
        let mut depth = 0usize;
        let mut last: Option<&str> = None;
        while let Some(t) = code.get(j) {
            match t {
                Token::Punct('<') => depth += 1,
                Token::Punct('>') => depth = depth.saturating_sub(1),
                Token::Punct('{') if depth == 0 => break,
                Token::Ident(s) if depth == 0 && s == "for" => last = None,
                Token::Ident(s) if depth == 0 && s == "where" => break,
                Token::Ident(s) if depth == 0 => last = Some(s),
                _ => {}
            }
            j += 1;
        }
        if let Some(name) = last {
            out.push(name.to_owned());
        }
    }
    out
}

#[test]
fn every_type_of_the_domain_the_store_and_core_is_implemented_in_one_place() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut seen = BTreeSet::new();
    let mut spread: Vec<String> = Vec::new();
    for name in ["berth-core", "berth-domain", "berth-store"] {
        let mut places: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for module in modules(&crates.join(name).join("src")) {
            // A top-level module is one place: its file, or its folder. The store is one place
            // whole: its transaction has a file of `impl Tx` per table group.
            let place = match module.path.first() {
                _ if name == "berth-store" => "the store".to_owned(),
                Some(first) => first.clone(),
                None => "lib.rs".to_owned(),
            };
            for ty in implemented(&module.code) {
                places.entry(ty).or_default().insert(place.clone());
            }
        }
        seen.extend(places.keys().cloned());
        spread.extend(
            places
                .iter()
                .filter(|(_, at)| at.len() > 1)
                .map(|(ty, at)| format!("{name}: {ty} in {at:?}")),
        );
    }
    assert!(
        ["Berth", "Tx", "Instance"]
            .iter()
            .all(|t| seen.contains(*t)),
        "{seen:?}"
    );
    assert!(
        spread.is_empty(),
        "types implemented in more than one place: {spread:?}"
    );
}

#[test]
fn berth_core_has_no_import_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let found = circles(&src);
    assert!(
        found.is_empty(),
        "berth-core has import circles:\n{}",
        found.join("\n")
    );
}

#[test]
fn no_crate_of_the_workspace_has_an_import_circle() {
    let crates = workspace_crates();
    assert!(crates.len() >= 7, "the workspace's crates: {crates:?}");
    let found: Vec<String> = crates
        .iter()
        .flat_map(|src| {
            let name = src
                .parent()
                .and_then(Path::file_name)
                .map(|n| n.to_string_lossy().into_owned());
            circles(src)
                .into_iter()
                .map(move |c| format!("{}: {c}", name.clone().unwrap_or_default()))
        })
        .collect();
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn the_check_finds_a_circle_through_a_chain_and_names_each_step() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let src = dir.path();
    fs::create_dir_all(src.join("low")).unwrap();
    fs::write(
        src.join("lib.rs"),
        "pub mod a; pub mod b; pub mod c; pub mod low;",
    )
    .unwrap();
    // a -> b -> c -> a, through a use tree, an inline path and a super:: path.
    fs::write(
        src.join("a.rs"),
        "use crate::{b::{Thing, other as o}, low};",
    )
    .unwrap();
    fs::write(
        src.join("b.rs"),
        "fn f() { crate::c::g(); } // crate::a::not_this",
    )
    .unwrap();
    fs::write(
        src.join("c.rs"),
        "use super::a::X; const S: &str = \"crate::b::nor_this\";",
    )
    .unwrap();
    fs::write(src.join("low/mod.rs"), "mod x; mod y; pub use x::*;").unwrap();
    // Siblings: x -> y is fine, y -> x only under test.
    fs::write(src.join("low/x.rs"), "use super::y::Y; use super::Face;").unwrap();
    fs::write(
        src.join("low/y.rs"),
        "#[cfg(test)]\nmod tests { use super::super::x::X; }",
    )
    .unwrap();
    let found = circles(src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("the crate's root:"), "{}", found[0]);
    assert!(
        found[0].contains("a -> b: a.rs uses b::Thing"),
        "{}",
        found[0]
    );
    assert!(found[0].contains("b -> c: b.rs uses c::g"), "{}", found[0]);
    assert!(found[0].contains("c -> a: c.rs uses a::X"), "{}", found[0]);
    // A direct pair in a folder is found too.
    fs::write(src.join("low/y.rs"), "use super::x::X;").unwrap();
    fs::write(src.join("c.rs"), "").unwrap();
    let found = circles(src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("low:"), "{}", found[0]);
    assert!(
        found[0].contains("low/y.rs uses low::x::X")
            || found[0].contains("low/x.rs uses low::y::Y"),
        "{}",
        found[0]
    );
}
