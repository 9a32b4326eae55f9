//! `history add`: every real log fixture and real tcpx-perf run round-trips through the database
//! exactly (figures and per-iteration samples), what the gate refuses is refused with the gate's
//! reason and leaves the database as it was, adding twice is a no-op, and the schema is versioned;
//! each on both backends (SQLite, PostgreSQL: tests/backends).

mod backends;
mod common;

use backends::Backend;
use common::{run_analyze, tmpdir, write_run, Spec};
use std::path::{Path, PathBuf};
use tcpx_analyze::history::db::SCHEMA_VERSION;
use tcpx_analyze::model::Sample;
use tcpx_analyze::parse::{self, ParseOptions};

fn fixture_files() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut out = Vec::new();
    for sub in ["nccl-tests", "wild"] {
        for e in std::fs::read_dir(root.join(sub)).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().unwrap() != "README.md" {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

type Flat = Vec<(String, String, u64, Sample, Option<f64>, Vec<Sample>)>;

/// What the gate's loader reads from an input, flattened.
fn parsed(p: &Path) -> Result<Flat, String> {
    let mut runs = parse::load_path(p, &ParseOptions::default()).map_err(|e| e.to_string())?;
    // Unchecked (-c 0), forced, below-MIN_BW runs: refused as the gate refuses them.
    tcpx_analyze::admit::policy(&mut runs, tcpx_analyze::admit::Allow::default()).map_err(|e| e.to_string())?;
    let mut problems = Vec::new();
    tcpx_analyze::compare::check_runs(&runs, "run", &mut problems);
    if !problems.is_empty() {
        return Err(problems.join("; "));
    }
    let mut out = Flat::new();
    for r in &runs {
        for s in &r.series {
            for row in s.rows.values() {
                out.push((
                    s.pattern.clone(),
                    s.variant.clone(),
                    row.size,
                    row.summary,
                    row.wrong,
                    row.samples.clone(),
                ));
            }
        }
    }
    Ok(out)
}

/// Everything the database holds, flattened the same way.
fn stored(b: &Backend, db: &str) -> Flat {
    let db = b.open(db, false);
    let mut out = Flat::new();
    for (cid, c) in db.configs().unwrap() {
        for r in db.runs_of(cid, true).unwrap() {
            for row in r.rows {
                out.push((
                    c.pattern.clone(),
                    c.variant.clone(),
                    row.size,
                    row.summary,
                    row.wrong,
                    row.samples,
                ));
            }
        }
    }
    out
}

fn sorted(mut v: Flat) -> Flat {
    v.sort_by(|a, b| {
        (&a.0, &a.1, a.2, a.3.busbw)
            .partial_cmp(&(&b.0, &b.1, b.2, b.3.busbw))
            .unwrap()
    });
    v
}

#[test]
fn every_real_log_fixture_round_trips_or_is_refused_as_the_gate_refuses_it() {
    for b in backends::all() {
        fixtures_round_trip(&b);
    }
}

fn fixtures_round_trip(b: &Backend) {
    let dir = tmpdir(&format!("history-fixtures-{}", b.name()));
    let (mut accepted, mut refused) = (0, 0);
    for f in fixture_files() {
        let db = b.fresh(&dir, "import-fixture");
        let (code, out) = run_analyze(&["history", "add", "--db", &db, f.to_str().unwrap()]);
        match parsed(&f) {
            Ok(want) => {
                assert_eq!(code, 0, "{}: {out}", f.display());
                assert!(!want.is_empty());
                assert_eq!(sorted(stored(b, &db)), sorted(want), "{}", f.display());
                let (code, again) = run_analyze(&["history", "add", "--db", &db, f.to_str().unwrap()]);
                assert_eq!(code, 0, "{again}");
                assert!(again.contains(": 0 run(s) added"), "{again}");
                accepted += 1;
            }
            Err(why) => {
                assert_eq!(code, 3, "{}: {out}", f.display());
                // The gate's own words (a problem list, or the loader's error).
                let first = why.split("; ").next().unwrap().trim_start_matches("invalid input: ");
                assert!(out.contains(first), "{}: want {first:?} in {out}", f.display());
                assert!(!b.written(&db), "{}: a refused input created the database", f.display());
                refused += 1;
            }
        }
    }
    println!(
        "{}: fixtures: {accepted} stored and read back exactly, {refused} refused with the gate's reason",
        b.name()
    );
    assert!(accepted >= 10, "{accepted}");
}

#[test]
fn real_tcpx_perf_runs_round_trip_with_provenance() {
    for b in backends::all() {
        real_runs_round_trip(&b);
    }
}

fn real_runs_round_trip(b: &Backend) {
    let runs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/runs/ci-sendrecv-identical");
    let db = b.fresh(&tmpdir(&format!("history-runs-{}", b.name())), "import-real-runs");
    let (code, out) = run_analyze(&["history", "add", "--db", &db, runs.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("12 run(s) added"), "{out}");
    assert_eq!(sorted(stored(b, &db)), sorted(parsed(&runs).unwrap()));
    let h = b.open(&db, false);
    let configs = h.configs().unwrap();
    assert_eq!(configs.len(), 1, "one configuration");
    let c = &configs[0].1;
    assert_eq!(
        c.key(),
        "tool=tcpx-perf pattern=sendrecv scope=all dir=bi mem=host plugin=tcpx-emu ranks=2 endpoints=2 nodes=1 chunk=524288 channels=1 window=8"
    );
    let stored = h.runs_of(configs[0].0, false).unwrap();
    assert_eq!(stored.len(), 12);
    assert!(
        stored
            .windows(2)
            .all(|w| w[0].provenance.start_time <= w[1].provenance.start_time),
        "time order"
    );
    let r = &stored[0].provenance;
    assert_eq!(r.start_time, "2026-11-24T03:31:49Z");
    assert_eq!(r.git_commit.as_deref(), Some("b40d096ef0fd"));
    assert_eq!(
        r.plugin_sha256.as_deref(),
        Some("3282ce44dbf46f450c7027225d1cbca5dc560630e15049a1661d8c07e95698fc")
    );
    assert_eq!(r.hosts.as_deref(), Some("vm"));
    assert!(r.source.ends_with("ci-sendrecv-identical/run01"), "{}", r.source);
    // A copy of a run elsewhere is the same run: no-op.
    let copy = tmpdir(&format!("history-runs-copy-{}", b.name())).join("run01");
    std::fs::create_dir_all(&copy).unwrap();
    for f in ["results.csv", "summary.json"] {
        std::fs::copy(runs.join("run01").join(f), copy.join(f)).unwrap();
    }
    let (code, out) = run_analyze(&["history", "add", "--db", &db, copy.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("already stored as run 1"), "{out}");
}

#[test]
fn runs_the_gate_refuses_are_refused_and_nothing_is_written() {
    for b in backends::all() {
        refused_runs(&b);
    }
}

fn refused_runs(b: &Backend) {
    let dir = tmpdir(&format!("history-refuse-{}", b.name()));
    let good = write_run(&dir.join("good"), &Spec::default());
    let db = b.fresh(&dir, "import-refused");
    let (code, out) = run_analyze(&["history", "add", "--db", &db, good.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let cases = [
        (
            "incomplete",
            Spec {
                complete: false,
                ..Spec::default()
            },
            "\"complete\" is not true",
        ),
        (
            "wrong",
            Spec {
                wrong: Some(8),
                ..Spec::default()
            },
            "wrong data (#wrong = ",
        ),
    ];
    for (name, spec, why) in cases {
        let bad = write_run(&dir.join(name), &spec);
        // Given together with a good run: all or nothing.
        let other = write_run(
            &dir.join(format!("{name}-other")),
            &Spec {
                seed: 99,
                ..Spec::default()
            },
        );
        let (code, out) = run_analyze(&[
            "history",
            "add",
            "--db",
            &db,
            other.to_str().unwrap(),
            bad.to_str().unwrap(),
        ]);
        assert_eq!(code, 3, "{name}: {out}");
        assert!(out.contains(why), "{name}: {out}");
        assert_eq!(b.open(&db, false).run_count().unwrap(), 1, "{name}: written anyway");
    }
    // A results.csv alone cannot show the run completed; beside its summary.json it is its
    // directory, already stored.
    let bare = dir.join("bare");
    std::fs::create_dir_all(&bare).unwrap();
    std::fs::copy(good.join("results.csv"), bare.join("results.csv")).unwrap();
    let (code, out) = run_analyze(&[
        "history",
        "add",
        "--db",
        &db,
        bare.join("results.csv").to_str().unwrap(),
    ]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("no summary.json beside it"), "{out}");
    let (code, out) = run_analyze(&[
        "history",
        "add",
        "--db",
        &db,
        good.join("results.csv").to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("already stored as run 1"), "{out}");
    // A run with no start time cannot be placed in time.
    let undated = write_run(
        &dir.join("undated"),
        &Spec {
            seed: 5,
            ..Spec::default()
        },
    );
    let own = std::fs::read_to_string(undated.join("summary.json")).unwrap();
    std::fs::write(
        undated.join("summary.json"),
        own.replace("\"start_time\":\"2026-11-21T05:00:00Z\",", ""),
    )
    .unwrap();
    assert!(!std::fs::read_to_string(undated.join("summary.json"))
        .unwrap()
        .contains("start_time"));
    let (code, out) = run_analyze(&["history", "add", "--db", &db, undated.to_str().unwrap()]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("cannot place the run in time"), "{out}");
}

#[test]
fn schema_is_versioned_and_a_newer_one_is_refused() {
    for b in backends::all() {
        let db = b.fresh(&tmpdir(&format!("history-schema-{}", b.name())), "import-schema");
        assert_eq!(b.open(&db, true).schema_version().unwrap(), SCHEMA_VERSION);
        // Reopening migrates nothing and keeps the version.
        assert_eq!(b.open(&db, false).schema_version().unwrap(), SCHEMA_VERSION);
        b.open(&db, true)
            .set_schema_version_for_tests(SCHEMA_VERSION + 1)
            .unwrap();
        let at = tcpx_analyze::history::location::Location::parse(&db, "--db").unwrap();
        for create in [false, true] {
            let err = tcpx_analyze::history::db::Db::open_at(&at, create)
                .err()
                .expect("a newer schema must be refused")
                .to_string();
            assert!(err.contains("is newer than this tcpx-analyze"), "{err}");
        }
        let (code, out) = run_analyze(&["history", "detect", "--db", &db]);
        assert_eq!(code, 3, "{out}");
        let (code, out) = run_analyze(&["history", "detect", "--db", &b.missing()]);
        assert_eq!(code, 3, "{out}");
        assert_eq!(out.trim().lines().count(), 1, "one line: {out}");
        let why = match b {
            Backend::Sqlite => "no such history database",
            Backend::Postgres(_) => "does not exist: create the database first",
        };
        assert!(out.contains(why), "{out}");
    }
}

#[test]
fn logs_take_their_start_time_from_the_command_line_or_their_mtime() {
    for b in backends::all() {
        start_times(&b);
    }
}

fn start_times(b: &Backend) {
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl-tests/nccl_sendrecv_socket_np4.txt");
    let db = b.fresh(
        &tmpdir(&format!("history-start-time-{}", b.name())),
        "import-start-time",
    );
    let dbs = db.as_str();
    let (code, out) = run_analyze(&[
        "history",
        "add",
        "--db",
        dbs,
        "--start-time",
        "2026-11-25 17:31",
        log.to_str().unwrap(),
    ]);
    assert_eq!(code, 64, "{out}");
    assert!(out.contains("RFC 3339"), "{out}");
    let (code, out) = run_analyze(&[
        "history",
        "add",
        "--db",
        dbs,
        "--start-time",
        "2026-11-20T10:00:00Z",
        log.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}");
    let h = b.open(&db, false);
    let (cid, c) = h.configs().unwrap().remove(0);
    assert_eq!(c.key(), "tool=nccl-tests pattern=sendrecv_perf endpoints=4");
    let r = h.runs_of(cid, false).unwrap().remove(0).provenance;
    assert_eq!(
        (r.start_time.as_str(), r.time_from.as_str()),
        ("2026-11-20T10:00:00Z", "--start-time")
    );
    assert_eq!(r.nccl_version.as_deref(), Some("2.28.9"));
    assert_eq!(r.hosts.as_deref(), Some("vm"));
    // The JSON of the same run is another input (other bytes): stored, its time the file's mtime.
    let json = log.with_extension("json");
    let (code, out) = run_analyze(&["history", "add", "--db", dbs, json.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let h = b.open(&db, false);
    let runs = h.runs_of(cid, false).unwrap();
    assert_eq!(runs.len(), 2, "the text log and the JSON share a configuration");
    assert!(runs.iter().any(|r| r.provenance.time_from == "file mtime"));
}
