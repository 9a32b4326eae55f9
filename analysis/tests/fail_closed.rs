//! Issue 44, tcpx-analyze's part: no output overwrites a file the command reads or another of
//! its outputs; every input is a regular file read without blocking and within a bound (a FIFO,
//! a device, a link to /dev/zero or a 1 GiB file is one line and exit 3 at once); admission
//! refuses malformed `node_verdicts` and a summary.json whose plugin is not results.csv's; the
//! heatmap's Markdown shows host names literally; `history nodes --last 0` is refused. Each case
//! runs the real binary under a deadline: a hang fails the test instead of CI.

mod common;

use common::{tmpdir, write_run, Spec};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_tcpx-analyze");

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// What one run of tcpx-analyze did.
struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// `tcpx-analyze ARGS`, killed (and the test failed) after `limit`.
fn analyze_within(args: &[&str], limit: Duration) -> Ran {
    let start = Instant::now();
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run tcpx-analyze");
    while child.try_wait().expect("wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("tcpx-analyze {args:?} hung: killed after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().expect("output");
    Ran {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        took: start.elapsed(),
    }
}

fn analyze(args: &[&str]) -> Ran {
    analyze_within(args, Duration::from_secs(10))
}

/// A refusal: exit `code`, one line on stderr that contains `needle`; that line.
fn refused(args: &[&str], code: i32, needle: &str) -> String {
    let r = analyze(args);
    assert_eq!(r.code, code, "{args:?}\nstdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    let lines: Vec<&str> = r.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?}: one line\n{}", r.stderr);
    assert!(lines[0].contains(needle), "{args:?}: {:?} lacks {needle:?}", lines[0]);
    lines[0].to_string()
}

/// Every file directly in `dir`, by name.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn edit_summary(dir: &Path, f: impl FnOnce(&mut Value)) {
    let p = dir.join("summary.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_string(&v).unwrap()).unwrap();
}

/// A small complete run at `dir` (3 sizes, 5 iterations).
fn small_run(dir: &Path, seed: u64) -> PathBuf {
    write_run(
        dir,
        &Spec {
            sizes: vec![1 << 20, 2 << 20, 4 << 20],
            iters: 5,
            seed,
            ..Spec::default()
        },
    )
}

/// Item 4: `make-baseline -o RUN/results.csv`, `plot -o RUN/summary.json`, `gate --markdown
/// RUN/results.csv`, `--json` at the reference's summary.json, `heatmap -o RUN/pairs.csv` and
/// `history report -o DB` each refuse in one line (exit 3), and every file they read is as it
/// was; two outputs of one command at one path are refused too. (Before: exit 0, results.csv
/// was TOML.)
#[test]
fn no_output_overwrites_a_file_the_command_reads_or_another_output() {
    let d = tmpdir("fc-clobber");
    let run = small_run(&d.join("run"), 3);
    let base = small_run(&d.join("base"), 4);
    let db = d.join("h.sqlite");
    assert_eq!(analyze(&["history", "add", "--db", s(&db), s(&base)]).code, 0);
    let (runs, bases, db_before) = (snapshot(&run), snapshot(&base), std::fs::read(&db).unwrap());
    let at = |dir: &Path, f: &str| dir.join(f).display().to_string();
    let (res, sum, pairs) = (at(&run, "results.csv"), at(&run, "summary.json"), at(&run, "pairs.csv"));
    let base_sum = at(&base, "summary.json");
    let inputs: [Vec<&str>; 7] = [
        vec!["make-baseline", "--name", "x", "-o", &res, s(&run)],
        vec!["plot", "-o", &sum, s(&run)],
        vec!["gate", s(&run), "-B", s(&base), "--markdown", &res],
        vec!["gate", s(&run), "-B", s(&base), "--json", &base_sum],
        vec!["heatmap", "-o", &pairs, s(&run)],
        vec!["history", "report", "--db", s(&db), "-o", s(&db)],
        vec!["compare", s(&run), "--history", s(&db), "--markdown", s(&db)],
    ];
    for args in &inputs {
        let line = refused(args, 3, "is an input of this command");
        assert!(line.contains("choose another path"), "{line}");
    }
    let both = d.join("verdict.out");
    let line = refused(
        &[
            "gate",
            s(&run),
            "-B",
            s(&base),
            "--markdown",
            s(&both),
            "--json",
            s(&both),
        ],
        3,
        "also",
    );
    assert!(line.contains("--markdown") && line.contains("--json"), "{line}");
    assert!(!both.exists(), "nothing written to a path two outputs share");
    assert_eq!(snapshot(&run), runs, "the run's files are as they were");
    assert_eq!(snapshot(&base), bases, "the reference's files are as they were");
    assert_eq!(std::fs::read(&db).unwrap(), db_before, "the database is as it was");
    // A report beside the run, at a name of its own, is written.
    let md = run.join("verdict.md");
    let r = analyze(&["gate", s(&run), "-B", s(&base), "--markdown", s(&md)]);
    assert!(md.is_file() && r.code != 3, "{}{}", r.stdout, r.stderr);
    // No directory is made for an output: its directory must exist.
    let deep = d.join("no/such/dir/out.toml");
    refused(
        &["make-baseline", "--name", "x", "-o", s(&deep), s(&run)],
        3,
        "does not exist",
    );
    assert!(!d.join("no").exists(), "a directory was made");
}

/// `mkfifo PATH`.
fn fifo(path: &Path) {
    let o = Command::new("mkfifo").arg(path).output().expect("mkfifo");
    assert!(o.status.success(), "mkfifo {}", path.display());
}

/// A character device at `path` (/dev/null's numbers) where this user may make one, else a
/// link to /dev/null.
fn char_device(path: &Path) {
    let made = Command::new("mknod")
        .args([s(path), "c", "1", "3"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !made {
        std::os::unix::fs::symlink("/dev/null", path).unwrap();
    }
}

/// A sparse file one byte past 1 GiB (past every input's bound).
fn huge(path: &Path) {
    std::fs::File::create(path).unwrap().set_len((1 << 30) + 1).unwrap();
}

/// Item 5: a FIFO given as results.csv (show, gate, make-baseline), and a run whose
/// summary.json is a link to /dev/zero, are refused at once in one line (exit 3), naming the
/// file and what it is. (Before: the FIFO hung all three, /dev/zero grew to 2.1 GB.)
#[test]
fn a_fifo_or_a_device_as_input_is_refused_at_once() {
    let d = tmpdir("fc-fifo");
    let base = small_run(&d.join("base"), 4);
    let pipe = d.join("results.csv");
    fifo(&pipe);
    let zero = small_run(&d.join("zero"), 5);
    std::fs::remove_file(zero.join("summary.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", zero.join("summary.json")).unwrap();
    let out = d.join("b.toml");
    for (input, what) in [(&pipe, "a FIFO"), (&zero, "a character device")] {
        for args in [
            vec!["show", s(input)],
            vec!["gate", s(input), "-B", s(&base)],
            vec!["make-baseline", "--name", "x", "-o", s(&out), s(input)],
        ] {
            let r = analyze(&args);
            assert_eq!(r.code, 3, "{args:?}\n{}{}", r.stdout, r.stderr);
            assert!(r.took < Duration::from_secs(3), "{args:?} took {:?}", r.took);
            let line = r.stderr.trim_end();
            assert_eq!(line.lines().count(), 1, "{args:?}\n{line}");
            assert!(
                line.contains(what) && line.contains("not a regular file"),
                "{args:?}: {line}"
            );
        }
    }
    assert!(!out.exists());
}

/// Item 6: `node_verdicts` whose verdict is not healthy/suspect/bad, is missing or null, whose
/// host is missing, empty or given twice, whose evidence is not a string, or which is not a list
/// of objects, are refused by `history add` (and every command: admission) in one line naming
/// node_verdicts; well-formed ones are stored and shown. (Before: admitted; `history nodes`
/// showed `?`, a missing verdict was dropped.)
#[test]
fn malformed_node_verdicts_are_refused_and_well_formed_ones_kept() {
    let d = tmpdir("fc-verdicts");
    let v =
        |host: Value, verdict: Value, evidence: Value| json!({"host": host, "verdict": verdict, "evidence": evidence});
    let cases: Vec<Value> = vec![
        json!([v("n0".into(), "excellent".into(), "x".into())]),
        json!([{"host": "n0", "evidence": "x"}]),
        json!([v("n0".into(), Value::Null, "x".into())]),
        json!([
            v("n0".into(), "healthy".into(), "x".into()),
            v("n0".into(), "bad".into(), "y".into())
        ]),
        json!([null]),
        json!([{"verdict": "healthy", "evidence": "x"}]),
        json!([v("".into(), "healthy".into(), "x".into())]),
        json!([v(Value::Null, "healthy".into(), "x".into())]),
        json!([v("n0".into(), "healthy".into(), 5.into())]),
        json!([{"host": "n0", "verdict": "healthy"}]),
        json!({"n0": "healthy"}),
        json!("healthy"),
    ];
    for (i, nv) in cases.iter().enumerate() {
        let run = small_run(&d.join(format!("r{i}")), 10 + i as u64);
        edit_summary(&run, |s| s["node_verdicts"] = nv.clone());
        let db = d.join(format!("h{i}.sqlite"));
        let line = refused(&["history", "add", "--db", s(&db), s(&run)], 3, "node_verdicts");
        assert!(line.contains("summary.json"), "{nv}: {line}");
        refused(&["show", s(&run)], 3, "node_verdicts");
    }
    let run = small_run(&d.join("ok"), 40);
    edit_summary(&run, |s| {
        // Verdicts are for the run's own nodes (issue 53).
        s["hosts"] = json!([{"rank": 0, "hostname": "n0"}, {"rank": 1, "hostname": "n1"}]);
        s["node_verdicts"] = json!([
            v(
                "n0".into(),
                "healthy".into(),
                "lowest NIC side at 0.91 of the median".into()
            ),
            v("n1".into(), "bad".into(), "eth1 sending at 0.12 of the median".into()),
        ]);
    });
    let db = d.join("ok.sqlite");
    let r = analyze(&["history", "add", "--db", s(&db), s(&run)]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let r = analyze(&["history", "nodes", "--db", s(&db)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("n1") && r.stdout.contains(" B ") && !r.stdout.contains('?'),
        "{}",
        r.stdout
    );
}

/// Item 7: a summary.json whose plugin name or ABI is not results.csv's is refused in one line
/// naming both values (exit 3) by show, gate and history add. (Before: accepted, `show` printed
/// one plugin and the history stored the other.)
#[test]
fn a_plugin_or_abi_that_results_csv_contradicts_is_refused() {
    let d = tmpdir("fc-plugin");
    let base = small_run(&d.join("base"), 4);
    for (i, (field, value, needle)) in [
        ("name", json!("tcpx"), "\"tcpx\""),
        ("abi", json!(7), "7"),
        ("name", json!(3), "3"),
    ]
    .into_iter()
    .enumerate()
    {
        let run = small_run(&d.join(format!("r{i}")), 20 + i as u64);
        edit_summary(&run, |s| s["plugin"][field] = value.clone());
        let db = d.join(format!("h{i}.sqlite"));
        for args in [
            vec!["show", s(&run)],
            vec!["gate", s(&run), "-B", s(&base)],
            vec!["history", "add", "--db", s(&db), s(&run)],
        ] {
            let line = refused(&args, 3, &format!("plugin.{field}"));
            assert!(line.contains(needle) && line.contains("results.csv"), "{line}");
        }
    }
    // Agreeing files pass.
    assert_eq!(analyze(&["show", s(&base)]).code, 0);
}

/// Item 9: the heatmap's Markdown table of outliers shows a host name holding `<!--`, a tag or
/// `|` as text: it cannot hide the rest of a PR comment or break the table. (Before: raw.)
#[test]
fn the_heatmap_table_shows_host_names_literally() {
    let d = tmpdir("fc-heatmap");
    let run = small_run(&d.join("run"), 5);
    let p = run.join("pairs.csv");
    let text = std::fs::read_to_string(&p).unwrap();
    std::fs::write(&p, text.replace("host0", "h<!--x</script>|y")).unwrap();
    let svg = d.join("heat.svg");
    let r = analyze(&["heatmap", "-o", s(&svg), s(&run)]);
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let rows: Vec<&str> = r.stdout.lines().filter(|l| l.starts_with("| 1 (")).collect();
    assert!(!rows.is_empty(), "the slow pair is an outlier:\n{}", r.stdout);
    for row in rows {
        assert!(!row.contains("<!--") && !row.contains("</script>"), "{row}");
        assert!(row.contains("h&lt;!--x&lt;/script>\\|y"), "{row}");
        assert_eq!(row.matches(" | ").count(), 3, "four cells: {row}");
    }
}

/// Item 9: `history nodes --last 0` is refused in one line (usage, exit 64), not shown as the
/// last 1 run.
#[test]
fn history_nodes_last_0_is_refused() {
    let d = tmpdir("fc-last");
    let run = small_run(&d.join("run"), 6);
    let db = d.join("h.sqlite");
    assert_eq!(analyze(&["history", "add", "--db", s(&db), s(&run)]).code, 0);
    let line = refused(&["history", "nodes", "--db", s(&db), "--last", "0"], 64, "--last 0");
    assert!(line.contains("1 or more"), "{line}");
    assert_eq!(analyze(&["history", "nodes", "--db", s(&db), "--last", "1"]).code, 0);
}

/// The files of a result directory a hostile input may stand in for.
const RUN_FILES: [&str; 4] = ["summary.json", "results.csv", "samples.csv", "pairs.csv"];

/// Puts a hostile `kind` at `path`: a FIFO, a character device, a link to /dev/zero, a 1 GiB
/// sparse file or a directory.
fn plant(path: &Path, kind: usize) {
    let _ = std::fs::remove_file(path);
    match kind {
        0 => fifo(path),
        1 => char_device(path),
        2 => std::os::unix::fs::symlink("/dev/zero", path).unwrap(),
        3 => huge(path),
        _ => std::fs::create_dir(path).unwrap(),
    }
}

/// One seeded mutation of summary.json's admitted fields (node_verdicts, plugin, counts).
fn mutate(rng: &mut tcpx_analyze::stats::Rng, v: &mut Value) {
    let pick = |rng: &mut tcpx_analyze::stats::Rng, xs: &[Value]| xs[rng.index(xs.len())].clone();
    let values = [
        Value::Null,
        json!(""),
        json!("healthy"),
        json!("bad"),
        json!("?"),
        json!(-1),
        json!(1e308),
        json!([]),
        json!({}),
        json!([null]),
        json!("tcpx-emu"),
        json!(8),
        json!(u64::MAX),
    ];
    if !v["plugin"].is_object() {
        v["plugin"] = json!({});
    }
    match rng.index(5) {
        0 => {
            let host = pick(rng, &values);
            let verdict = pick(rng, &values);
            let evidence = pick(rng, &values);
            let entry = json!({"host": host, "verdict": verdict, "evidence": evidence});
            let list = v["node_verdicts"].as_array().cloned().unwrap_or_default();
            let mut list = list;
            list.push(entry);
            v["node_verdicts"] = Value::Array(list);
        }
        1 => v["node_verdicts"] = pick(rng, &values),
        2 => v["plugin"]["name"] = pick(rng, &values),
        3 => v["plugin"]["abi"] = pick(rng, &values),
        _ => v["plugin"] = pick(rng, &values),
    }
}

/// The fuzz of admission: every run file replaced in turn by each non-regular or oversized
/// stand-in, through `show` and `history add` (exit 3, one line, within the deadline); then
/// seeded mutations of summary.json's node_verdicts and plugin through the loader in-process.
/// 0 panics and 0 hangs; a few seconds.
#[test]
fn admission_fuzz_with_non_regular_inputs_never_panics_or_hangs() {
    let d = tmpdir("fc-fuzz");
    let mut calls = 0;
    for (k, kind) in ["FIFO", "device", "/dev/zero link", "1 GiB file", "directory"]
        .iter()
        .enumerate()
    {
        for f in RUN_FILES {
            let run = small_run(&d.join(format!("k{k}-{f}")), 50);
            plant(&run.join(f), k);
            let db = d.join(format!("k{k}-{f}.sqlite"));
            for args in [vec!["show", s(&run)], vec!["history", "add", "--db", s(&db), s(&run)]] {
                let r = analyze_within(&args, Duration::from_secs(5));
                calls += 1;
                assert!(r.code == 3, "{kind} at {f}: {args:?}: exit {}\n{}", r.code, r.stderr);
                assert_eq!(r.stderr.lines().count(), 1, "{kind} at {f}: {args:?}\n{}", r.stderr);
                assert!(r.stderr.contains(f), "{kind} at {f}: names the file: {}", r.stderr);
            }
        }
        // The stand-in given as an input itself (a log, a baseline file).
        for name in ["run.log", "base.toml"] {
            let p = d.join(format!("k{k}-{name}"));
            plant(&p, k);
            let r = analyze_within(&["show", s(&p)], Duration::from_secs(5));
            calls += 1;
            assert_eq!(r.code, 3, "{kind} as {name}\n{}", r.stderr);
            assert_eq!(r.stderr.lines().count(), 1, "{kind} as {name}\n{}", r.stderr);
        }
    }
    let template = small_run(&d.join("template"), 60);
    let original = std::fs::read_to_string(template.join("summary.json")).unwrap();
    let mut rng = tcpx_analyze::stats::Rng::new(0x44_F00D);
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut loads = 0;
    while Instant::now() < deadline && loads < 3000 {
        let mut v: Value = serde_json::from_str(&original).unwrap();
        for _ in 0..=rng.index(3) {
            mutate(&mut rng, &mut v);
        }
        std::fs::write(template.join("summary.json"), serde_json::to_string(&v).unwrap()).unwrap();
        let _ = tcpx_analyze::parse::load_path(&template, &tcpx_analyze::parse::ParseOptions::default());
        loads += 1;
    }
    assert!(calls >= 50 && loads > 100, "{calls} calls, {loads} loads");
}
