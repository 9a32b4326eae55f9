//! The library's modules form layers: each knows only the ones below it, so the import graph
//! of `analysis/src` (one node per top-level module, an edge for every `crate::module` path in
//! code) has no cycle. docs/design.md describes the layers; this test keeps them true.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level module a source file belongs to (`compare/groups.rs` -> `compare`); `None` for
/// the crate roots (`lib.rs`, `main.rs`), which are not layers.
fn module_of(rel: &Path) -> Option<String> {
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_owned())
}

/// Code without comments: `//` to the end of the line (doc comments included, as a doc link
/// is no dependency). Good enough for this crate, which has no `//` inside string literals
/// followed by `crate::`.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every `crate::name` in `code`, and the names inside `use crate::{a, b::c}` groups.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().last();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // e.g. `tcpx_crate::`, not this crate
        }
        if let Some(group) = rest.strip_prefix('{') {
            // The first name of each item at the group's own depth (`{a::{b, c}, d}` -> a, d).
            let (mut depth, mut item_start) = (0usize, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if item_start && (c.is_alphanumeric() || c == '_') => {
                        item_start = false;
                        out.insert(
                            group[i..]
                                .chars()
                                .take_while(|c| c.is_alphanumeric() || *c == '_')
                                .collect(),
                        );
                    }
                    _ => {}
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.insert(name);
            }
        }
    }
    out
}

fn graph_of(src: &Path) -> Graph {
    let mut g = Graph::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let Some(module) = module_of(p.strip_prefix(src).unwrap()) else {
                continue;
            };
            let code = code_of(&std::fs::read_to_string(&p).unwrap());
            let deps = g.entry(module.clone()).or_default();
            deps.extend(crate_paths(&code).into_iter().filter(|d| *d != module));
        }
    }
    g
}

/// A cycle of `g` as the list of modules along it, if any.
fn find_cycle(g: &Graph) -> Option<Vec<String>> {
    // Iterative three-colour DFS: 0 unseen, 1 on the current path, 2 done.
    let mut colour: BTreeMap<&str, u8> = BTreeMap::new();
    for start in g.keys() {
        if colour.get(start.as_str()).copied().unwrap_or(0) != 0 {
            continue;
        }
        let mut path: Vec<(&str, Vec<&str>)> = vec![(start, g[start].iter().map(String::as_str).collect())];
        colour.insert(start, 1);
        while let Some((node, pending)) = path.last_mut() {
            let node = *node;
            let Some(next) = pending.pop() else {
                colour.insert(node, 2);
                path.pop();
                continue;
            };
            match colour.get(next).copied().unwrap_or(0) {
                0 => {
                    colour.insert(next, 1);
                    let deps = g
                        .get(next)
                        .map(|d| d.iter().map(String::as_str).collect())
                        .unwrap_or_default();
                    path.push((next, deps));
                }
                1 => {
                    let from = path.iter().position(|(n, _)| *n == next).unwrap();
                    let mut cycle: Vec<String> = path[from..].iter().map(|(n, _)| (*n).to_owned()).collect();
                    cycle.push(next.to_owned());
                    return Some(cycle);
                }
                _ => {}
            }
        }
    }
    None
}

#[test]
fn analysis_modules_import_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = graph_of(&src);
    // The walk must have seen the crate's layers, or an empty graph would pass.
    for m in ["model", "parse", "stats", "decision", "baseline", "compare", "report"] {
        assert!(g.contains_key(m), "module {m} not found under {}", src.display());
    }
    assert!(g["compare"].contains("model"), "compare's imports were not read: {g:?}");
    if let Some(cycle) = find_cycle(&g) {
        panic!("import cycle in analysis/src: {} (graph: {g:?})", cycle.join(" -> "));
    }
}

#[test]
fn the_checker_sees_cycles_and_ignores_comments() {
    let g: Graph = [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec!["a"])]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.into_iter().map(str::to_owned).collect()))
        .collect();
    assert_eq!(find_cycle(&g).unwrap().len(), 4, "a -> b -> c -> a");
    let code = code_of("use crate::{model::{Run, Series}, stats};\n/// see [`crate::decision`]\nlet x = crate::error::E; // crate::plot\nother_crate::x");
    assert_eq!(
        crate_paths(&code),
        ["error", "model", "stats"]
            .into_iter()
            .map(str::to_owned)
            .collect::<BTreeSet<_>>()
    );
}
