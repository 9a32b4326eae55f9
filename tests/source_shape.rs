//! The shape of `src/` that issue 23 set and that nothing else would keep: the modules' import
//! graph has no circle (each layer knows only the ones below it), nothing below `run` knows the
//! command line (`Cli`), and no function is longer than [`MAX_FN_LINES`] lines.
//!
//! The scan is lexical: comments and the contents of string and char literals are blanked first,
//! test-only code (`#[cfg(test)]` modules, inline or in files of their own) is left out, and a
//! module's dependencies are the top-level modules it names as `crate::NAME` (in `use` lists
//! too). Each check has a test below that feeds it a known fault and expects it to fail.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The longest function `src/` may hold, in lines from `fn` to its closing brace.
const MAX_FN_LINES: usize = 100;

/// Modules that may name the command line: the door (`cli`), the run that turns it into typed
/// settings, and the binary.
const MAY_KNOW_CLI: [&str; 3] = ["cli", "run", "main"];

/// Blanks comments and the contents of string and char literals (newlines kept, so line numbers
/// stay), leaving code whose braces and paths can be counted.
fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |out: &mut String, c: u8| out.push(if c == b'\n' { '\n' } else { ' ' });
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied().unwrap_or(0);
        if c == b'/' && next == b'/' {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && next == b'*' {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
        } else if c == b'r' && (next == b'"' || next == b'#') && !prev_is_ident(b, i) {
            // Raw string r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push(c as char);
                i += 1;
                continue;
            }
            out.push_str("\"\"");
            j += 1;
            loop {
                if j >= b.len() {
                    break;
                }
                if b[j] == b'"' && b[j + 1..].iter().take(hashes).filter(|&&h| h == b'#').count() == hashes {
                    j += 1 + hashes;
                    break;
                }
                blank(&mut out, b[j]);
                j += 1;
            }
            i = j;
        } else if c == b'"' {
            out.push('"');
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    blank(&mut out, b[i]);
                    i += 1;
                }
                if i < b.len() {
                    blank(&mut out, b[i]);
                    i += 1;
                }
            }
            out.push('"');
            i += 1;
        } else if c == b'\'' && (next == b'\\' || b.get(i + 2) == Some(&b'\'')) {
            // A char literal ('x', '\n', '\u{1f}'), not a lifetime.
            out.push_str("' '");
            i += 1;
            if b[i] == b'\\' {
                i += 2;
            }
            while i < b.len() && b[i] != b'\'' {
                i += 1;
            }
            i += 1;
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

fn prev_is_ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// The index of the brace that closes the one at `open`.
fn matching_brace(code: &[u8], open: usize) -> usize {
    let mut depth = 0usize;
    for (k, &c) in code.iter().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return k;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// Removes inline `#[cfg(test)] mod NAME { ... }` blocks; returns the code left and the names of
/// test modules that live in files of their own (`#[cfg(test)] mod NAME;`).
fn drop_test_modules(code: &str) -> (String, Vec<String>) {
    let mut out = code.to_string();
    let mut files = Vec::new();
    while let Some(at) = out.find("#[cfg(test)]") {
        let rest = &out[at + "#[cfg(test)]".len()..];
        let trimmed = rest.trim_start();
        let skipped = rest.len() - trimmed.len();
        let Some(after_mod) = trimmed
            .strip_prefix("mod ")
            .or_else(|| trimmed.strip_prefix("pub(crate) mod "))
        else {
            // A test-only item that is not a module: blank the attribute and go on.
            out.replace_range(at..at + "#[cfg(test)]".len(), &" ".repeat("#[cfg(test)]".len()));
            continue;
        };
        let name: String = after_mod
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let head = at + "#[cfg(test)]".len() + skipped + (trimmed.len() - after_mod.len()) + name.len();
        let tail = out[head..].trim_start();
        let end = if tail.starts_with(';') {
            files.push(name);
            head + (out.len() - head - tail.len()) + 1
        } else {
            let open = head + (out.len() - head - tail.len());
            matching_brace(out.as_bytes(), open) + 1
        };
        let blanked: String = out[at..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..end, &blanked);
    }
    (out, files)
}

/// One source file of `src/`, test code removed.
struct Source {
    path: PathBuf,
    /// The top-level module it belongs to (`engine` for `src/engine/progress/mod.rs`).
    module: String,
    code: String,
}

/// Every non-test source file under `root`.
fn sources(root: &Path) -> Vec<Source> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    let mut test_files = BTreeSet::new();
    let mut out = Vec::new();
    for path in &files {
        let (code, tests) = drop_test_modules(&strip(&std::fs::read_to_string(path).expect("read source")));
        let dir = path.parent().expect("parent");
        for t in tests {
            test_files.insert(dir.join(format!("{t}.rs")));
            test_files.insert(dir.join(&t).join("mod.rs"));
        }
        let rel = path.strip_prefix(root).expect("under src");
        let first = rel
            .components()
            .next()
            .expect("component")
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_string();
        out.push(Source {
            path: path.clone(),
            module,
            code,
        });
    }
    out.retain(|s| !test_files.contains(&s.path));
    out
}

/// The top-level modules each module names (`crate::NAME`, `use crate::{A, B::c}`).
fn module_graph(sources: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for s in sources {
        let deps = graph.entry(s.module.clone()).or_default();
        let code = &s.code;
        let mut at = 0;
        while let Some(k) = code[at..].find("crate::") {
            let start = at + k + "crate::".len();
            at = start;
            if prev_is_ident(code.as_bytes(), start - "crate::".len()) {
                continue; // e.g. `tcpx_crate::` or `$crate::`-like spellings
            }
            let rest = &code[start..];
            if let Some(list) = rest.strip_prefix('{') {
                let end = matching_brace(rest.as_bytes(), 0);
                for item in list[..end.saturating_sub(1)].split(',') {
                    let name: String = item
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect();
                    if !name.is_empty() {
                        deps.insert(name);
                    }
                }
            } else {
                let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                deps.insert(name);
            }
        }
    }
    let names: BTreeSet<String> = graph.keys().cloned().collect();
    for (m, deps) in &mut graph {
        deps.retain(|d| d != m && names.contains(d));
    }
    graph
}

/// A circle of the graph, if there is one (depth-first search, the path when an edge closes it).
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        g: &BTreeMap<String, BTreeSet<String>>,
        m: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(pos) = path.iter().position(|p| p == m) {
            let mut cycle = path[pos..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for d in g.get(m).into_iter().flatten() {
            if let Some(c) = visit(g, d, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph.keys().find_map(|m| visit(graph, m, &mut Vec::new(), &mut done))
}

/// Functions longer than `max` lines: (file, line of `fn`, name, lines).
fn long_functions(path: &Path, code: &str, max: usize) -> Vec<(String, usize, String, usize)> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut at = 0;
    while let Some(k) = code[at..].find("fn ") {
        let start = at + k;
        at = start + 3;
        if prev_is_ident(b, start) {
            continue;
        }
        let name: String = code[start + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if name.is_empty() {
            continue; // `fn(` types
        }
        // The body opens at the first `{` before any `;` (a declaration without a body).
        let Some(open) = code[start..].find(['{', ';']).map(|o| start + o) else {
            continue;
        };
        if b[open] == b';' {
            continue;
        }
        let close = matching_brace(b, open);
        let first = code[..start].matches('\n').count() + 1;
        let last = code[..close.min(code.len())].matches('\n').count() + 1;
        let lines = last - first + 1;
        if lines > max {
            found.push((path.display().to_string(), first, name, lines));
        }
    }
    found
}

fn src_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn src_modules_form_no_import_circle() {
    let graph = module_graph(&sources(&src_root()));
    assert!(graph.len() > 10, "the scan found too few modules: {graph:?}");
    assert!(
        graph["run"].contains("engine"),
        "the scan missed run -> engine: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import circle in src/: {}\nthe graph: {graph:#?}", cycle.join(" -> "));
    }
}

#[test]
fn nothing_below_run_knows_the_command_line() {
    let offenders: Vec<String> = sources(&src_root())
        .iter()
        .filter(|s| !MAY_KNOW_CLI.contains(&s.module.as_str()))
        .filter(|s| {
            s.code.contains("crate::cli")
                || s.code
                    .split(|c: char| !c.is_alphanumeric() && c != '_')
                    .any(|w| w == "Cli")
        })
        .map(|s| s.path.display().to_string())
        .collect();
    assert!(
        offenders.is_empty(),
        "files below run/ that know Cli or crate::cli: {offenders:?}"
    );
}

#[test]
fn no_function_in_src_is_longer_than_the_limit() {
    let sources = sources(&src_root());
    let long: Vec<_> = sources
        .iter()
        .flat_map(|s| long_functions(&s.path, &s.code, MAX_FN_LINES))
        .collect();
    assert!(
        long.is_empty(),
        "functions over {MAX_FN_LINES} lines (file, line, name, lines): {long:#?}"
    );
    // The scan saw the functions at all: some are longer than 30 lines.
    assert!(sources.iter().any(|s| !long_functions(&s.path, &s.code, 30).is_empty()));
}

// The checks themselves, each fed a fault it must find.

#[test]
fn the_circle_check_finds_a_circle() {
    let g: BTreeMap<String, BTreeSet<String>> = [("a", vec!["b"]), ("b", vec!["c"]), ("c", vec!["a"]), ("d", vec![])]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
        .collect();
    assert_eq!(
        find_cycle(&g),
        Some(vec!["a".into(), "b".into(), "c".into(), "a".into()])
    );
    let mut acyclic = g.clone();
    acyclic.get_mut("c").expect("c").clear();
    assert_eq!(find_cycle(&acyclic), None);
}

#[test]
fn the_scan_reads_use_lists_and_skips_comments_strings_and_tests() {
    let code = strip(
        "use crate::{alpha::X, beta};\n// crate::gamma\nfn f() { let s = \"crate::delta {\"; crate::eps::g(); let c = '{'; }\n#[cfg(test)]\nmod tests { use crate::zeta; }\n",
    );
    let (code, _) = drop_test_modules(&code);
    let names = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "m"];
    let sources: Vec<Source> = names
        .iter()
        .map(|n| Source {
            path: PathBuf::from(format!("{n}.rs")),
            module: n.to_string(),
            code: if *n == "m" { code.clone() } else { String::new() },
        })
        .collect();
    let g = module_graph(&sources);
    let deps: Vec<&str> = g["m"].iter().map(String::as_str).collect();
    assert_eq!(deps, ["alpha", "beta", "eps"]);
}

#[test]
fn the_length_check_counts_lines_of_a_long_function() {
    let body = "    let x = 1;\n".repeat(120);
    let code = strip(&format!(
        "fn short() {{ }}\nfn long() {{\n{body}}}\nfn after(s: &str) -> &str {{ \"}}\" }}\n"
    ));
    let long = long_functions(Path::new("x.rs"), &code, MAX_FN_LINES);
    assert_eq!(long.len(), 1, "{long:?}");
    assert_eq!((long[0].1, long[0].2.as_str(), long[0].3), (2, "long", 122));
}

/// Dependencies that link into tcpx-perf, its libraries and plugins once, in one version each
/// (`cargo tree -e normal -d`). libloading above all: the plugin loader and cudarc must share
/// it. A second libloading 0.8 remains in `cargo tree -d` only as a build-time dependency of
/// mpi-sys's bindgen (clang-sys `runtime`), which runs in mpi-sys's build script and is not
/// linked into anything we ship.
#[test]
fn one_version_of_each_linked_crate_that_must_be_one() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args(["tree", "--workspace", "-e", "normal", "-d", "--offline", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8_lossy(&out.stdout);
    for krate in ["libloading", "mpi", "cudarc", "serde", "csv", "clap"] {
        let versions: BTreeSet<&str> = tree
            .lines()
            .filter_map(|l| l.strip_prefix(&format!("{krate} v")))
            .filter_map(|rest| rest.split_whitespace().next())
            .collect();
        assert!(
            versions.is_empty(),
            "{krate} is linked in several versions: {versions:?}\n{tree}"
        );
    }
}
