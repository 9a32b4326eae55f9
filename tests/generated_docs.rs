//! What is generated from the Rust definitions and committed under docs/: the man page and shell
//! completions (from the clap definitions) and the JSON Schemas of summary.json and the `-J` file
//! (from the types that write them, by schemars). A change to a flag or a field that does not
//! regenerate them fails here; `UPDATE_GENERATED=1 cargo test --release --test generated_docs`
//! rewrites them. Also: `--help` names every environment variable the code reads.

use std::path::{Path, PathBuf};

use clap::CommandFactory;
use clap_complete::Shell;
use tcpx_perf::cli::{docs, Cli};
use tcpx_perf::export::{json, nccl_json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn generated() -> Vec<(&'static str, String)> {
    let pretty = |v: serde_json::Value| serde_json::to_string_pretty(&v).expect("schema") + "\n";
    vec![
        ("docs/man/tcpx-perf.1", docs::man_page()),
        ("docs/completions/tcpx-perf.bash", docs::completions(Shell::Bash)),
        ("docs/completions/_tcpx-perf", docs::completions(Shell::Zsh)),
        ("docs/completions/tcpx-perf.fish", docs::completions(Shell::Fish)),
        ("docs/schema/summary.schema.json", pretty(json::schema())),
        ("docs/schema/nccl-tests-json.schema.json", pretty(nccl_json::schema())),
    ]
}

#[test]
fn committed_copies_are_what_the_code_generates() {
    let update = std::env::var_os("UPDATE_GENERATED").is_some();
    let mut stale = Vec::new();
    for (path, text) in generated() {
        let file = root().join(path);
        if update {
            std::fs::create_dir_all(file.parent().expect("dir")).expect("mkdir");
            std::fs::write(&file, &text).expect("write");
        } else if std::fs::read_to_string(&file).ok().as_deref() != Some(text.as_str()) {
            stale.push(path);
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from what the code generates: UPDATE_GENERATED=1 cargo test --release --test generated_docs"
    );
}

#[test]
fn the_generated_documents_describe_the_flags_and_fields() {
    let man = docs::man_page();
    for flag in ["--output_file", "--warmup-once", "--iter-time", "NCCL_TESTS_MIN_BW"] {
        assert!(
            man.contains(&flag.replace('-', "\\-")) || man.contains(flag),
            "man page lacks {flag}"
        );
    }
    assert!(!man.contains("print\\-man"), "hidden flags stay out of the man page");
    assert!(docs::completions(Shell::Bash).contains("--warmup-once"));
    let s = json::schema();
    for key in [
        "schema_version",
        "complete",
        "status",
        "results",
        "avg_busbw_gbps",
        "placement",
    ] {
        assert!(s["properties"].get(key).is_some(), "summary schema lacks {key}");
    }
    let n = nccl_json::schema();
    for key in [
        "version",
        "config",
        "results",
        "out_of_bounds",
        "average_bus_bandwidth",
        "errors",
    ] {
        assert!(n["properties"].get(key).is_some(), "-J schema lacks {key}");
    }
}

/// Environment variable names the code reads: `var("X")`, `var_os("X")` and `const ..._ENV: &str = "X"`.
fn variables_read(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("dir") {
        let path = entry.expect("entry").path();
        let name = path.to_string_lossy().into_owned();
        if path.is_dir() {
            if !name.ends_with("/target")
                && !name.contains("/tests")
                && !name.contains("/benches")
                && !name.contains("/examples")
            {
                variables_read(&path, out);
            }
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") || name.ends_with("tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("read");
        // Test modules read test-only variables.
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        for pat in ["env::var(\"", "env::var_os(\"", "_ENV: &str = \""] {
            for (i, _) in text.match_indices(pat) {
                let rest = &text[i + pat.len()..];
                if let Some(end) = rest.find('"') {
                    out.push((rest[..end].to_string(), name.clone()));
                }
            }
        }
    }
}

#[test]
fn help_names_every_environment_variable_read() {
    let help = Cli::command().render_long_help().to_string();
    let mut vars = Vec::new();
    variables_read(&root().join("src"), &mut vars);
    for c in ["nccl-net", "tcpx-gpu"] {
        variables_read(&root().join("crates").join(c).join("src"), &mut vars);
    }
    assert!(vars.iter().any(|(v, _)| v == "NCCL_TESTS_MIN_BW"), "{vars:?}");
    let missing: Vec<&(String, String)> = vars.iter().filter(|(v, _)| !help.contains(v.as_str())).collect();
    assert!(missing.is_empty(), "read but not in --help's ENVIRONMENT: {missing:?}");
}
