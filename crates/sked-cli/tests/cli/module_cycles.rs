//! No crate has an import cycle among its modules. Between sibling modules (children of the same
//! parent) dependencies point one way, so a newcomer can read a crate from its leaves up. A
//! reference from deep inside one module to deep inside another counts between the two
//! siblings that hold them; a module using its parent's or its child's items does not count.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;

/// A module's path in its crate: `["tasks", "claim"]` for `src/tasks/claim.rs`.
type Module = Vec<String>;

fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Module = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

/// A file's code without comments and without its unit tests.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths a `use` tree names: `a::{b, c::{d, e}}` is `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let (Some(open), Some(close)) = (tree.find('{'), tree.rfind('}')) else {
        return vec![tree.to_string()];
    };
    if close < open {
        return vec![tree.to_string()];
    }
    let (prefix, inner) = (&tree[..open], &tree[open + 1..close]);
    let (mut parts, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(expand)
        .map(|p| format!("{prefix}{p}"))
        .collect()
}

fn is_ident(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Every path starting with `crate`, `super` or `self` that a file's code names, in its `use`
/// trees and inline.
fn paths(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let starts = |word: &str| {
        code.match_indices(word)
            .filter(|(i, _)| !code[..*i].ends_with(is_ident))
            .map(|(i, _)| i)
            .collect::<Vec<_>>()
    };
    // `use` items start their line (after any visibility).
    let mut at = 0;
    for line in code.split_inclusive('\n') {
        let body = line.trim_start();
        let body = ["pub(crate) ", "pub(super) ", "pub "]
            .iter()
            .find_map(|v| body.strip_prefix(v))
            .unwrap_or(body);
        if let Some(rest) = body.strip_prefix("use ") {
            let start = at + (line.len() - rest.len());
            if let Some(end) = code[start..].find(';') {
                let tree: String = code[start..start + end]
                    .chars()
                    .filter(|c| !c.is_whitespace())
                    .collect();
                out.extend(expand(&tree));
            }
        }
        at += line.len();
    }
    for word in ["crate::", "super::", "self::"] {
        for i in starts(word) {
            let len = code[i..]
                .find(|c: char| !is_ident(c) && c != ':')
                .unwrap_or(code.len() - i);
            out.push(code[i..i + len].trim_end_matches(':').to_string());
        }
    }
    out
}

/// The module a path leads into, among the crate's `modules`; `None` for a path outside it.
fn resolve(me: &Module, path: &str, modules: &BTreeSet<Module>) -> Option<Module> {
    let mut segs = path.split("::").peekable();
    let mut at = match segs.peek().copied()? {
        "crate" => {
            segs.next();
            Vec::new()
        }
        "self" => {
            segs.next();
            me.clone()
        }
        "super" => {
            let mut at = me.clone();
            while segs.peek() == Some(&"super") {
                segs.next();
                at.pop();
            }
            at
        }
        _ => return None,
    };
    for seg in segs {
        let mut next = at.clone();
        next.push(seg.to_string());
        if !modules.contains(&next) {
            break;
        }
        at = next;
    }
    Some(at)
}

/// The dependencies between siblings that a crate's sources make, from each file's references.
fn sibling_edges(src: &Path) -> BTreeSet<(Module, Module)> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Module, String> = files
        .iter()
        .map(|f| (module_of(src, f), std::fs::read_to_string(f).unwrap()))
        .collect();
    let names: BTreeSet<Module> = modules.keys().cloned().collect();
    let mut edges = BTreeSet::new();
    for (me, text) in &modules {
        for path in paths(&code(text)) {
            let Some(to) = resolve(me, &path, &names) else {
                continue;
            };
            if to.starts_with(me) || me.starts_with(&to) {
                continue;
            }
            let shared = me.iter().zip(&to).take_while(|(a, b)| a == b).count();
            edges.insert((me[..=shared].to_vec(), to[..=shared].to_vec()));
        }
    }
    edges
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each cycle among a crate's sibling modules, as `a -> b -> a`.
fn cycles(src: &Path) -> Vec<String> {
    let edges = sibling_edges(src);
    let mut found = BTreeSet::new();
    for (from, to) in &edges {
        // A path back from `to` to `from` closes a cycle through this edge.
        let mut came_from: BTreeMap<&Module, &Module> = BTreeMap::new();
        let mut queue = VecDeque::from([to]);
        while let Some(at) = queue.pop_front() {
            if at == from {
                let mut back = vec![from];
                while back.last() != Some(&to) {
                    back.push(came_from[back.last().unwrap()]);
                }
                // `from`, `to`, …, back to `from`; written from its least module on.
                let mut cycle: Vec<String> = std::iter::once(from)
                    .chain(back.into_iter().rev())
                    .map(|m| m.join("::"))
                    .collect();
                cycle.pop();
                let least = (0..cycle.len()).min_by_key(|&i| &cycle[i]).unwrap();
                cycle.rotate_left(least);
                cycle.push(cycle[0].clone());
                found.insert(cycle.join(" -> "));
                break;
            }
            for (a, b) in &edges {
                if a == at && !came_from.contains_key(b) && b != to {
                    came_from.insert(b, a);
                    queue.push_back(b);
                }
            }
        }
    }
    found.into_iter().collect()
}

#[test]
fn no_crate_has_an_import_cycle_among_its_modules() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut checked = 0;
    let mut found = Vec::new();
    for entry in std::fs::read_dir(crates).unwrap() {
        let src = entry.unwrap().path().join("src");
        if src.is_dir() {
            checked += 1;
            let name = src.parent().unwrap().file_name().unwrap().to_string_lossy();
            found.extend(cycles(&src).into_iter().map(|c| format!("{name}: {c}")));
        }
    }
    assert!(checked >= 7, "found only {checked} crates");
    assert!(
        found.is_empty(),
        "import cycles among sibling modules (make the dependency point one way):\n{}",
        found.join("\n")
    );
}

#[test]
fn the_check_finds_a_cycle_through_nested_modules_and_grouped_imports() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    let write = |path: &str, text: &str| {
        let file = src.join(path);
        std::fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::fs::write(file, text).unwrap();
    };
    write("lib.rs", "//! x\nmod a;\nmod b;\nmod c;\n");
    write(
        "a/mod.rs",
        "//! a\nmod inner;\nuse crate::c::f; // use crate::b;\n",
    );
    write("a/inner.rs", "//! a::inner\nuse crate::{b::{g, h}};\n");
    write("b.rs", "//! b\nfn x() { super::a::y(); }\n");
    write(
        "c.rs",
        "//! c\nuse super::b;\n#[cfg(test)]\nmod tests { use crate::a; }\n",
    );
    assert_eq!(cycles(src), ["a -> b -> a", "a -> c -> b -> a"]);
    write("b.rs", "//! b\n");
    assert!(cycles(src).is_empty(), "{:?}", cycles(src));
}
