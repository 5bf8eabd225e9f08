//! The code map's promise, checked: inside every crate of the workspace, modules form layers.
//! A module may use modules below it, never one that uses it back, directly or through a chain.
//!
//! The check reads the source with `syn`, not the compiler. Every `crate::…`, `super::…` and
//! `self::…` path outside test code (use trees, paths in code and types, and paths inside macro
//! calls) is an edge from the file it is in to the module that *defines* what it names: a name a
//! folder's `mod.rs` re-exports is followed to the file it comes from, so a circle between two
//! files of one folder is seen even when each reaches the other through the folder's face.
//! Edges are compared folder by folder: two files in one folder are compared as the entries of
//! that folder they sit under (`controllers::copies` against `controllers::instances`), and for
//! the crate's root folder as its top-level modules.
//!
//! That needs faces without code of their own: a `mod.rs` declares modules and re-exports, and
//! nothing else (checked below). A crate's root (`lib.rs`, `main.rs`) may hold code; where it
//! does, that code is one more entry of the root folder (`(root)`), so a circle through it is a
//! circle too. A re-export (`pub use`) in a face is what the face shows, not a use.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

type ModPath = Vec<String>;

/// The entry a crate root's own code is in its folder.
const ROOT: &str = "(root)";

/// A module file: its path in the crate, what it defines, how it binds names, and the paths its
/// code (test code taken out) names.
struct Module {
    path: ModPath,
    file: PathBuf,
    /// `mod.rs`, `lib.rs` or `main.rs`: the face of a folder.
    face: bool,
    /// Items defined here (types, functions, traits, constants, statics, macros).
    defines: BTreeSet<String>,
    /// `use` bindings: the name in scope here, and the absolute path it stands for (only those
    /// into this crate).
    bindings: BTreeMap<String, ModPath>,
    /// Glob imports (`use x::*`) into this crate.
    globs: Vec<ModPath>,
    /// The paths into this crate the code names, absolute, each with whether it is a re-export
    /// (a `pub use`) and so no use.
    references: Vec<(ModPath, bool)>,
    /// Items other than `mod` and `use` in a `mod.rs`, by kind.
    code_in_face: Vec<String>,
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg")
                && a.parse_args::<syn::Meta>()
                    .is_ok_and(|m| m.path().is_ident("test")))
    })
}

/// Turns a path's leading segments (`crate`, `super`, `self`, a child module's name) into an
/// absolute module path; `None` for a path into another crate (or a name not a module here).
fn absolute(at: &ModPath, children: &BTreeSet<String>, segs: &[String]) -> Option<ModPath> {
    let here: ModPath = at.clone();
    let mut segs = segs.iter().peekable();
    let mut base = match segs.peek().map(|s| s.as_str()) {
        Some("crate") => {
            segs.next();
            Vec::new()
        }
        Some("self") => {
            segs.next();
            here
        }
        Some("super") => {
            segs.next();
            let mut up = here;
            up.pop();
            up
        }
        Some(first) if children.contains(first) => here,
        _ => return None,
    };
    while segs.peek().map(|s| s.as_str()) == Some("super") {
        segs.next();
        base.pop();
    }
    base.extend(segs.filter(|s| s.as_str() != "self").cloned());
    Some(base)
}

/// The leaves of a use tree: (the name bound, the path), `*` for a glob.
fn use_leaves(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            use_leaves(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                if let Some(last) = prefix.last() {
                    out.push((last.clone(), prefix.clone()));
                }
            } else {
                let mut path = prefix.clone();
                path.push(name.clone());
                out.push((name, path));
            }
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            path.push(r.ident.to_string());
            out.push((r.rename.to_string(), path));
        }
        syn::UseTree::Glob(_) => out.push(("*".to_owned(), prefix.clone())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                use_leaves(t, prefix, out);
            }
        }
    }
}

/// The paths starting with `crate`, `super` or `self` inside a macro call's tokens.
fn macro_paths(tokens: TokenStream, out: &mut Vec<Vec<String>>) {
    let trees: Vec<TokenTree> = tokens.into_iter().collect();
    let mut i = 0;
    while i < trees.len() {
        if let TokenTree::Group(g) = &trees[i] {
            macro_paths(g.stream(), out);
            i += 1;
            continue;
        }
        let starts = matches!(&trees[i], TokenTree::Ident(id) if id == "crate" || id == "super" || id == "self");
        if !starts {
            i += 1;
            continue;
        }
        let mut path = vec![trees[i].to_string()];
        let mut j = i + 1;
        loop {
            let sep = matches!(trees.get(j), Some(TokenTree::Punct(p)) if p.as_char() == ':')
                && matches!(trees.get(j + 1), Some(TokenTree::Punct(p)) if p.as_char() == ':');
            match (sep, trees.get(j + 2)) {
                (true, Some(TokenTree::Ident(id))) => {
                    path.push(id.to_string());
                    j += 3;
                }
                _ => break,
            }
        }
        if path.len() > 1 {
            out.push(path);
        }
        i = j.max(i + 1);
    }
}

/// What one file's non-test code names and binds.
#[derive(Default)]
struct Reader {
    paths: Vec<Vec<String>>,
    uses: Vec<(bool, String, Vec<String>)>,
    defines: BTreeSet<String>,
    depth: usize,
    items: Vec<String>,
}

impl<'ast> Visit<'ast> for Reader {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs: &[syn::Attribute] = match item {
            syn::Item::Const(i) => &i.attrs,
            syn::Item::Enum(i) => &i.attrs,
            syn::Item::Fn(i) => &i.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Macro(i) => &i.attrs,
            syn::Item::Mod(i) => &i.attrs,
            syn::Item::Static(i) => &i.attrs,
            syn::Item::Struct(i) => &i.attrs,
            syn::Item::Trait(i) => &i.attrs,
            syn::Item::Type(i) => &i.attrs,
            syn::Item::Union(i) => &i.attrs,
            syn::Item::Use(i) => &i.attrs,
            _ => &[],
        };
        if is_cfg_test(attrs) {
            return;
        }
        if self.depth == 0 {
            let (kind, name) = match item {
                syn::Item::Const(i) => ("const", Some(i.ident.to_string())),
                syn::Item::Enum(i) => ("enum", Some(i.ident.to_string())),
                syn::Item::Fn(i) => ("fn", Some(i.sig.ident.to_string())),
                syn::Item::Impl(_) => ("impl", None),
                syn::Item::Macro(i) => ("macro", i.ident.as_ref().map(|i| i.to_string())),
                syn::Item::Mod(i) if i.content.is_none() => ("", None),
                syn::Item::Mod(i) => ("inline mod", Some(i.ident.to_string())),
                syn::Item::Static(i) => ("static", Some(i.ident.to_string())),
                syn::Item::Struct(i) => ("struct", Some(i.ident.to_string())),
                syn::Item::Trait(i) => ("trait", Some(i.ident.to_string())),
                syn::Item::Type(i) => ("type", Some(i.ident.to_string())),
                syn::Item::Union(i) => ("union", Some(i.ident.to_string())),
                syn::Item::Use(_) => ("", None),
                _ => ("other item", None),
            };
            if !kind.is_empty() {
                self.items.push(match &name {
                    Some(n) => format!("{kind} {n}"),
                    None => kind.to_owned(),
                });
            }
            if let Some(name) = name {
                self.defines.insert(name);
            }
        }
        if let syn::Item::Use(u) = item {
            let public = !matches!(u.vis, syn::Visibility::Inherited);
            let mut leaves = Vec::new();
            use_leaves(&u.tree, &mut Vec::new(), &mut leaves);
            if self.depth == 0 {
                for (name, path) in leaves {
                    self.uses.push((public, name, path));
                }
            } else {
                // A use inside a function or an inline module: a use, bound nowhere we follow.
                for (_, path) in leaves {
                    self.paths.push(path);
                }
            }
            return;
        }
        self.depth += 1;
        syn::visit::visit_item(self, item);
        self.depth -= 1;
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    /// `pub(crate)`, `pub(super)`, `pub(in path)`: visibility, not a use.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_path(&mut self, path: &'ast syn::Path) {
        self.paths
            .push(path.segments.iter().map(|s| s.ident.to_string()).collect());
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        macro_paths(mac.tokens.clone(), &mut self.paths);
        syn::visit::visit_macro(self, mac);
    }
}

/// Every module file under `src`, read. Files named `tests.rs` and folders named `tests` are
/// test modules and are left out, as is `bin/`.
fn modules(src: &Path) -> Vec<Module> {
    let mut files = Vec::new();
    let mut folders = vec![src.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in fs::read_dir(&folder).expect("a source folder") {
            let file = entry.expect("an entry").path();
            if file.is_dir() {
                folders.push(file);
            } else if file.extension().and_then(|e| e.to_str()) == Some("rs") {
                files.push(file);
            }
        }
    }
    files.sort();
    let mut read = Vec::new();
    for file in files {
        let relative = file.strip_prefix(src).expect("under src").to_path_buf();
        let mut path: ModPath = relative
            .with_extension("")
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        let face = matches!(
            path.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        );
        if face {
            path.pop();
        }
        if path.iter().any(|p| p == "tests") || path.first().map(String::as_str) == Some("bin") {
            continue;
        }
        let text = fs::read_to_string(&file).expect("a source file");
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{} does not parse: {e}", relative.display()));
        let mut reader = Reader::default();
        reader.visit_file(&parsed);
        read.push((path, relative, face, reader));
    }
    let known: BTreeSet<ModPath> = read.iter().map(|(p, ..)| p.clone()).collect();
    read.into_iter()
        .map(|(path, file, face, reader)| {
            let children: BTreeSet<String> = known
                .iter()
                .filter(|k| k.len() == path.len() + 1 && k.starts_with(&path))
                .map(|k| k[path.len()].clone())
                .collect();
            let abs = |segs: &[String]| absolute(&path, &children, segs);
            let mut bindings = BTreeMap::new();
            let mut globs = Vec::new();
            let mut references = Vec::new();
            for (public, name, segs) in &reader.uses {
                let Some(target) = abs(segs) else { continue };
                references.push((target.clone(), *public && face));
                if name == "*" {
                    globs.push(target);
                } else {
                    bindings.insert(name.clone(), target);
                }
            }
            for segs in &reader.paths {
                // A path through a name this file imported is a path through what it imports.
                let target = match segs.first().and_then(|f| bindings.get(f)) {
                    Some(bound) if segs.len() > 1 => {
                        let mut p = bound.clone();
                        p.extend(segs[1..].iter().cloned());
                        Some(p)
                    }
                    _ => abs(segs),
                };
                if let Some(target) = target {
                    references.push((target, false));
                }
            }
            let code_in_face = if face && !path.is_empty() {
                reader.items.clone()
            } else {
                Vec::new()
            };
            Module {
                path,
                file,
                face,
                defines: reader.defines,
                bindings,
                globs,
                references,
                code_in_face,
            }
        })
        .collect()
}

/// The crate's modules by path, and the resolution of a path to the module defining its item.
struct Crate {
    modules: BTreeMap<ModPath, Module>,
}

impl Crate {
    fn read(src: &Path) -> Crate {
        Crate {
            modules: modules(src)
                .into_iter()
                .map(|m| (m.path.clone(), m))
                .collect(),
        }
    }

    /// The module that defines what `path` names: the module it names, or the one whose file
    /// defines its item, following `use` bindings and globs (re-exports) to their source.
    /// `None` when the name is not found in this crate (another crate's item re-exported).
    fn resolve(&self, path: &[String], depth: usize) -> Option<ModPath> {
        let n = (0..=path.len())
            .rev()
            .find(|n| self.modules.contains_key(&path[..*n]))?;
        let module = &self.modules[&path[..n]];
        let Some(name) = path.get(n) else {
            return Some(module.path.clone());
        };
        if module.defines.contains(name) || depth > 16 {
            return Some(module.path.clone());
        }
        if let Some(bound) = module.bindings.get(name) {
            let mut full = bound.clone();
            full.extend(path[n + 1..].iter().cloned());
            return self.resolve(&full, depth + 1);
        }
        module.globs.iter().find_map(|glob| {
            let mut full = glob.clone();
            full.extend(path[n..].iter().cloned());
            self.resolve(&full, depth + 1)
        })
    }

    /// The crossings of each folder: entry → entry, with the line that makes it.
    fn folders(&self) -> BTreeMap<ModPath, Folder> {
        let mut by_folder: BTreeMap<ModPath, Folder> = BTreeMap::new();
        for module in self.modules.values() {
            for (reference, reexport) in &module.references {
                if *reexport {
                    continue;
                }
                let target = match self.resolve(reference, 0) {
                    Some(target) => target,
                    None => {
                        // Not defined here: as far as the longest module prefix goes, unless
                        // that is a face, whose unresolved names are other crates' re-exports.
                        let prefix = (0..=reference.len())
                            .rev()
                            .map(|n| reference[..n].to_vec())
                            .find(|p| self.modules.contains_key(p))
                            .unwrap_or_default();
                        if self.modules[&prefix].face {
                            continue;
                        }
                        prefix
                    }
                };
                let (from, to) = (&module.path, &target);
                if from == to {
                    continue;
                }
                let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
                // An entry of a folder is the next step below the common part; the code of a
                // face that is an ancestor is that folder's `(root)` entry.
                let entry = |p: &ModPath| -> String {
                    p.get(common).cloned().unwrap_or_else(|| ROOT.to_owned())
                };
                let (a, b) = (entry(from), entry(to));
                // A face without code is nothing to cross to (what it names was resolved
                // above); only a crate root may have code.
                if (a == ROOT || b == ROOT) && common > 0 {
                    continue;
                }
                let folder = from[..common].to_vec();
                by_folder
                    .entry(folder)
                    .or_default()
                    .edges
                    .entry(a)
                    .or_default()
                    .entry(b)
                    .or_insert_with(|| {
                        format!("{} uses {}", module.file.display(), reference.join("::"))
                    });
            }
        }
        by_folder
    }
}

/// An edge between two entries of one folder, and where it was seen.
#[derive(Default)]
struct Folder {
    edges: BTreeMap<String, BTreeMap<String, String>>,
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
    Crate::read(src)
        .folders()
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

/// The `mod.rs` files under `src` that hold more than declarations and re-exports, with what.
fn faces_with_code(src: &Path) -> Vec<String> {
    modules(src)
        .into_iter()
        .filter(|m| m.face && !m.code_in_face.is_empty())
        .map(|m| format!("{}: {}", m.file.display(), m.code_in_face.join(", ")))
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

fn crate_name(src: &Path) -> String {
    src.parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

#[test]
fn every_type_of_the_domain_the_store_and_core_is_implemented_in_one_place() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut seen = BTreeSet::new();
    let mut spread: Vec<String> = Vec::new();
    for name in ["berth-core", "berth-domain", "berth-store"] {
        let src = crates.join(name).join("src");
        let mut places: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for module in modules(&src) {
            // A top-level module is one place: its file, or its folder. The store is one place
            // whole: its transaction has a file of `impl Tx` per table group.
            let place = match module.path.first() {
                _ if name == "berth-store" => "the store".to_owned(),
                Some(first) => first.clone(),
                None => "lib.rs".to_owned(),
            };
            let text = fs::read_to_string(src.join(&module.file)).expect("a source file");
            let file = syn::parse_file(&text).expect("parses");
            for item in &file.items {
                let syn::Item::Impl(block) = item else {
                    continue;
                };
                if is_cfg_test(&block.attrs) {
                    continue;
                }
                if let syn::Type::Path(ty) = &*block.self_ty
                    && let Some(last) = ty.path.segments.last()
                {
                    places
                        .entry(last.ident.to_string())
                        .or_default()
                        .insert(place.clone());
                }
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
fn no_crate_of_the_workspace_has_an_import_circle() {
    let crates = workspace_crates();
    assert!(crates.len() >= 10, "the workspace's crates: {crates:?}");
    let found: Vec<String> = crates
        .iter()
        .flat_map(|src| {
            let name = crate_name(src);
            circles(src)
                .into_iter()
                .map(move |c| format!("{name}: {c}"))
        })
        .collect();
    assert!(found.is_empty(), "import circles:\n{}", found.join("\n"));
}

#[test]
fn every_mod_rs_of_the_workspace_declares_and_re_exports_only() {
    let found: Vec<String> = workspace_crates()
        .iter()
        .flat_map(|src| {
            let name = crate_name(src);
            faces_with_code(src)
                .into_iter()
                .map(move |f| format!("{name}/src/{f}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "mod.rs files with code of their own (move it to a file named for its job):\n{}",
        found.join("\n")
    );
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
    // a -> b -> c -> a, through a use tree, a path in code, and a super:: path in a macro.
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
        "fn g() { println!(\"{}\", super::a::X); } const S: &str = \"crate::b::nor_this\";",
    )
    .unwrap();
    fs::write(
        src.join("low/mod.rs"),
        "mod x; mod y; pub use x::*; pub use y::Y;",
    )
    .unwrap();
    // Siblings: x -> y is fine, y -> x only under test.
    fs::write(src.join("low/x.rs"), "use super::Y; pub struct X;").unwrap();
    fs::write(
        src.join("low/y.rs"),
        "pub struct Y;\n#[cfg(test)]\nmod tests { use super::super::X; }",
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
}

#[test]
fn the_check_finds_a_circle_between_two_files_that_meet_only_through_their_folders_face() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let src = dir.path();
    fs::create_dir_all(src.join("low")).unwrap();
    fs::write(src.join("lib.rs"), "pub mod low;").unwrap();
    fs::write(
        src.join("low/mod.rs"),
        "mod x; mod y; pub use x::*; pub use y::Y;",
    )
    .unwrap();
    // Each names the other only as `super::Name`: the face re-exports both.
    fs::write(src.join("low/x.rs"), "use super::Y; pub struct X;").unwrap();
    fs::write(
        src.join("low/y.rs"),
        "pub struct Y; fn f() -> super::X { todo!() }",
    )
    .unwrap();
    let found = circles(src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(found[0].starts_with("low:"), "{}", found[0]);
    assert!(
        found[0].contains("low/x.rs uses low::Y") && found[0].contains("low/y.rs uses low::X"),
        "{}",
        found[0]
    );
    // The same two files without the second use: no circle.
    fs::write(src.join("low/y.rs"), "pub struct Y;").unwrap();
    assert!(circles(src).is_empty());
}

#[test]
fn the_check_finds_a_circle_through_a_crate_roots_own_code_and_code_in_a_mod_rs() {
    let dir = tempfile::tempdir().expect("a temporary folder");
    let src = dir.path();
    fs::create_dir_all(src.join("low")).unwrap();
    // The root's code uses a, and a uses the root's own function.
    fs::write(
        src.join("lib.rs"),
        "pub mod a; pub mod low; fn helper() { a::f(); }",
    )
    .unwrap();
    fs::write(src.join("a.rs"), "pub fn f() { crate::helper(); }").unwrap();
    fs::write(
        src.join("low/mod.rs"),
        "mod x; pub use x::X; pub fn work() {}",
    )
    .unwrap();
    fs::write(src.join("low/x.rs"), "pub struct X;").unwrap();
    let found = circles(src);
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].contains("(root) -> a") && found[0].contains("a -> (root)"),
        "{}",
        found[0]
    );
    let faces = faces_with_code(src);
    assert_eq!(faces, vec!["low/mod.rs: fn work".to_owned()]);
}
