//! Stable-Rust robustness test for the parsers (the cargo-fuzz targets in `fuzz/` do the same
//! with coverage guidance on nightly): seeded random mutations of the fixtures and of a
//! synthetic tcpx-perf run; the parsers must return Ok or Err, never panic. Bounded in time.

mod common;
use common::*;
use std::time::{Duration, Instant};
use tcpx_analyze::parse::{self, tcpx, ParseOptions};
use tcpx_analyze::stats::Rng;

const TOKENS: &[&str] = &[
    "nan",
    "inf",
    "-1",
    "N/A",
    "1e308",
    "-0",
    "\"",
    ",",
    "\n",
    "#",
    "{",
    "}",
    "[",
    "]",
    "null",
    "\"nan\"",
    "18446744073709551616",
    "0",
    " ",
    "\u{0}",
    "é",
    "# Collective test starting: x",
    "#  size  count i_min",
];

fn mutate(rng: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..=rng.index(8) {
        let pos = rng.index(v.len() + 1);
        match rng.index(6) {
            0 if !v.is_empty() => {
                let p = pos.min(v.len() - 1);
                v[p] = rng.next_u64() as u8;
            }
            1 => {
                let end = (pos + rng.index(64)).min(v.len());
                v.drain(pos..end);
            }
            2 => {
                let t = TOKENS[rng.index(TOKENS.len())].as_bytes();
                v.splice(pos..pos, t.iter().copied());
            }
            3 => {
                // duplicate a chunk (duplicate rows, nested structures)
                let end = (pos + rng.index(200)).min(v.len());
                let chunk = v[pos..end].to_vec();
                v.splice(pos..pos, chunk);
            }
            4 => v.truncate(pos),
            _ => {
                // replace a digit run by another number
                if let Some(i) = v.iter().skip(pos).position(u8::is_ascii_digit) {
                    let i = pos + i;
                    let num = (rng.next_u64() % 100_000).to_string();
                    v.splice(i..=i, num.bytes());
                }
            }
        }
    }
    v
}

fn exercise(name: &str, bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let o = ParseOptions::default();
    let _ = parse::parse_nccl_any(name, &text, &o);
    let _ = parse::nccl_text::parse(name, &text, &o);
    let _ = parse::nccl_json::parse(name, &text, &o);
    if let Ok((mut series, _)) = tcpx::parse_results_csv(name, &text) {
        let _ = tcpx::parse_samples_csv(name, &text, &mut series);
    }
    let _ = tcpx::parse_pairs_csv(name, &text);
    let _ = tcpx_analyze::baseline::parse(name, &text);
}

#[test]
fn parsers_never_panic_on_mutated_input() {
    let mut corpus: Vec<(String, Vec<u8>)> = Vec::new();
    for e in std::fs::read_dir(fixtures()).unwrap() {
        let p = e.unwrap().path();
        corpus.push((p.display().to_string(), std::fs::read(&p).unwrap()));
    }
    let d = tmpdir("robust");
    let run = write_run(
        &d.join("r"),
        &Spec {
            sizes: vec![1 << 20, 1 << 22],
            iters: 3,
            ..Spec::default()
        },
    );
    for f in ["results.csv", "samples.csv", "pairs.csv"] {
        corpus.push((f.to_string(), std::fs::read(run.join(f)).unwrap()));
    }
    for e in std::fs::read_dir(baselines()).unwrap() {
        let p = e.unwrap().path();
        corpus.push((p.display().to_string(), std::fs::read(&p).unwrap()));
    }
    let mut rng = Rng::new(0x5EED_F00D);
    let deadline = Instant::now() + Duration::from_secs(4);
    let mut n = 0usize;
    while Instant::now() < deadline && n < 20_000 {
        let (name, bytes) = &corpus[rng.index(corpus.len())];
        let m = mutate(&mut rng, bytes);
        exercise(name, &m);
        n += 1;
    }
    // Edge cases.
    for t in [
        "",
        "\n",
        "{",
        "[]",
        "{\"version\":3}",
        "schema_version\n",
        "#       size  count\n1 2",
    ] {
        exercise("edge", t.as_bytes());
    }
    assert!(n > 50, "only {n} iterations");
}
