//! The parsers on real outputs collected from public sources (`tests/fixtures/wild/README.md`)
//! and on the project's own nccl-tests fixtures. Expected rows are re-derived here from the file
//! text by a separate, simpler reader (header column positions, not the parser's layouts), so a
//! parser that misreads a column or drops a row fails. Negative cases derive from the same
//! files and are labelled as such.

use std::path::PathBuf;
use tcpx_analyze::model::{Family, Format, Run};
use tcpx_analyze::parse::{self, ParseOptions};

fn wild(name: &str) -> (String, String) {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/wild")).join(name);
    (name.to_string(), std::fs::read_to_string(p).unwrap())
}

fn own(name: &str) -> (String, String) {
    let p = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nccl-tests")).join(name);
    (name.to_string(), std::fs::read_to_string(p).unwrap())
}

fn opts(truncated: bool) -> ParseOptions {
    ParseOptions {
        allow_truncated: truncated,
        ..Default::default()
    }
}

/// (size, out-of-place time, algbw, busbw) of each table, read independently: launcher tags
/// removed with plain string search, then the column header's own positions of `time`, `algbw`
/// and `busbw` applied to every line that starts with two integers.
fn expected_tables(text: &str) -> Vec<Vec<(u64, f64, f64, f64)>> {
    let mut tables: Vec<Vec<(u64, f64, f64, f64)>> = Vec::new();
    let mut pos: Option<(usize, usize, usize)> = None;
    for raw in text.lines() {
        let mut l = raw;
        if let Some(i) = l.find(">:") {
            l = &l[i + 2..];
        }
        let l = l.trim();
        let l = match l.split_once(": ") {
            Some((n, rest)) if n.chars().all(|c| c.is_ascii_digit()) => rest,
            _ => l,
        };
        let toks: Vec<&str> = l.trim_start_matches('#').split_whitespace().collect();
        if toks.first() == Some(&"size") && toks.contains(&"busbw") {
            let at = |name: &str| toks.iter().position(|t| *t == name).unwrap();
            let t = toks.iter().position(|t| *t == "time" || *t == "cputime").unwrap();
            pos = Some((t, at("algbw"), at("busbw")));
            tables.push(Vec::new());
            continue;
        }
        if l.starts_with('#') || toks.len() < 2 {
            continue;
        }
        if let (Some((t, a, b)), Ok(size), Ok(_)) = (pos, toks[0].parse::<u64>(), toks[1].parse::<u64>()) {
            let f = |i: usize| toks[i].parse::<f64>().unwrap();
            let table = tables.last_mut().unwrap();
            // Several requested sizes can round down to 0 bytes; the first such row counts.
            if size == 0 && table.iter().any(|r| r.0 == 0) {
                continue;
            }
            table.push((size, f(t), f(a), f(b)));
        }
    }
    tables.retain(|t| !t.is_empty());
    tables
}

/// Asserts that each run holds exactly the rows of its table, value for value.
fn assert_rows_match(name: &str, runs: &[Run], want: &[Vec<(u64, f64, f64, f64)>]) {
    assert_eq!(runs.len(), want.len(), "{name}: runs");
    for (run, rows) in runs.iter().zip(want) {
        let got: Vec<(u64, f64, f64, f64)> = run
            .series
            .iter()
            .flat_map(|s| s.rows.values())
            .map(|r| (r.size, r.summary.time_us, r.summary.algbw, r.summary.busbw))
            .collect();
        let mut want = rows.clone();
        want.sort_by_key(|r| r.0);
        assert_eq!(got, want, "{name}: rows of {}", run.source);
    }
}

struct Case {
    file: (String, String),
    /// A pasted excerpt without the footer: refused unless --allow-truncated.
    truncated: bool,
    pattern: &'static str,
    family: Option<Family>,
    tool: &'static str,
}

fn case(file: (String, String), truncated: bool, pattern: &'static str, tool: &'static str) -> Case {
    Case {
        family: Family::from_name(pattern),
        file,
        truncated,
        pattern,
        tool,
    }
}

#[test]
fn every_collected_table_parses_with_its_rows() {
    let ar = "all_reduce_perf";
    let cases = [
        case(
            wild("aws_efa_eks_tag_output_error_column.log"),
            false,
            "unknown",
            "nccl-tests",
        ),
        case(wild("awsome_aws_batch_tag_output.md"), false, "unknown", "nccl-tests"),
        case(
            wild("awsome_eks_tag_output_elided_rows.md"),
            false,
            "unknown",
            "nccl-tests",
        ),
        case(wild("awsome_srun_label_p4de_allreduce.md"), true, ar, "nccl-tests"),
        case(wild("awsome_srun_label_p5_allreduce.md"), true, ar, "nccl-tests"),
        case(wild("awsome_topology_aware_elided.md"), false, "unknown", "nccl-tests"),
        case(
            wild("azureml_nd40rs_v100_error_column_no_footer.md"),
            true,
            "unknown",
            "nccl-tests",
        ),
        case(
            wild("azureml_nd96_a100_error_column_no_footer.md"),
            true,
            "unknown",
            "nccl-tests",
        ),
        case(wild("gcp_a3mega_h100_allreduce.md"), false, ar, "nccl-tests"),
        case(wild("rccl_mi300x_k8s_mpirun.md"), false, ar, "rccl-tests"),
        case(wild("rccl_mi300x_slurm_two_cmds.md"), false, ar, "rccl-tests"),
        case(wild("rccl_mi355x_no_footer.md"), true, "unknown", "rccl-tests"),
        case(
            wild("awsome_2023_srun_label_scatter_zero_rows.md"),
            true,
            "unknown",
            "nccl-tests",
        ),
        case(
            wild("deepops_2019_dgx1_slurm_validation.md"),
            false,
            "unknown",
            "nccl-tests",
        ),
        case(
            wild("deepops_2019_dgx2h_na_error_indented.md"),
            false,
            "unknown",
            "nccl-tests",
        ),
        case(
            wild("deepops_2020_roce_k8s_indented.md"),
            false,
            "unknown",
            "nccl-tests",
        ),
        case(
            wild("deepops_2022_network_operator_dgx1.md"),
            false,
            "unknown",
            "nccl-tests",
        ),
        case(
            wild("azureml_k80_info_line_in_table.md"),
            false,
            "unknown",
            "nccl-tests",
        ),
        case(
            wild("coreweave_mpi_operator_kubectl_logs.md"),
            false,
            "unknown",
            "nccl-tests",
        ),
        case(
            wild("coreweave_2025_mpi_operator_elided_preamble.md"),
            false,
            "unknown",
            "nccl-tests",
        ),
        case(
            own("nccl_sendrecv_socket_np4.txt"),
            false,
            "sendrecv_perf",
            "nccl-tests",
        ),
        case(
            own("nccl_sendrecv_socket_tuned_np4.txt"),
            false,
            "sendrecv_perf",
            "nccl-tests",
        ),
        case(
            own("nccl_sendrecv_socket_g4_single_process_debug.log"),
            false,
            "sendrecv_perf",
            "nccl-tests",
        ),
    ];
    let mut rows = 0;
    for c in &cases {
        let (name, text) = &c.file;
        let want = expected_tables(text);
        let runs = parse::parse_text(name, text, &opts(c.truncated)).unwrap_or_else(|e| panic!("{e}"));
        assert_rows_match(name, &runs, &want);
        for r in &runs {
            assert_eq!(r.format, Format::NcclTestsText, "{name}");
            assert_eq!(r.labels["tool"], c.tool, "{name}");
            assert_eq!(r.labels.contains_key("truncated"), c.truncated, "{name}");
            for s in &r.series {
                assert_eq!((s.pattern.as_str(), s.family), (c.pattern, c.family), "{name}");
            }
        }
        if c.truncated {
            let last = want[0].last().unwrap().0;
            let e = parse::parse_text(name, text, &opts(false)).unwrap_err().to_string();
            assert!(
                e.contains("run ended at row ")
                    && e.contains(&format!("(size {last}, line "))
                    && e.contains("truncated"),
                "{e}"
            );
        }
        rows += want.iter().map(Vec::len).sum::<usize>();
    }
    // Every table the independent reader found (an empty reading would pass vacuously).
    assert_eq!(rows, 463);
}

#[test]
fn old_error_column_is_a_max_error_not_a_count() {
    let (name, text) = wild("aws_efa_eks_tag_output_error_column.log");
    let run = parse::parse_nccl_any(&name, &text, &opts(false)).unwrap();
    let s = &run.series[0];
    assert_eq!(s.rows.len(), 30);
    let r = &s.rows[&8];
    // `2e-07    176.3 ... 1e-07`: the larger of the two placements, and no wrong count.
    assert_eq!((r.max_error, r.wrong), (Some(2e-7), None));
    assert_eq!(s.rows[&4294967296].max_error, Some(5e-7));
    assert_eq!(run.wrong_count(), 0.0);
    assert_eq!(run.labels["ranks"], "16");
    // A new-format row keeps its count.
    let (name, text) = wild("gcp_a3mega_h100_allreduce.md");
    let run = parse::parse_nccl_any(&name, &text, &opts(false)).unwrap();
    assert_eq!(
        (run.series[0].rows[&8].wrong, run.series[0].rows[&8].max_error),
        (Some(0.0), None)
    );
}

#[test]
fn tcpx_perf_stdout_with_three_runs() {
    let (name, text) = wild("tcpx_perf_stdout_three_runs.log");
    let runs = parse::parse_text(&name, &text, &opts(false)).unwrap();
    assert_rows_match(&name, &runs, &expected_tables(&text));
    let got: Vec<(&str, Option<Family>, &str)> = runs
        .iter()
        .map(|r| {
            (
                r.series[0].pattern.as_str(),
                r.series[0].family,
                r.series[0].variant.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("sendrecv", Some(Family::Sendrecv), "scope=all,dir=bi,mem=host"),
            ("fullmesh", Some(Family::Alltoall), "scope=all,dir=bi,mem=host"),
            ("ring", Some(Family::Allreduce), "scope=all,dir=bi,mem=host"),
        ]
    );
    assert!(runs
        .iter()
        .all(|r| r.format == Format::TcpxPerfText && r.wrong_total == Some(0.0)));
    assert_eq!(runs[0].source, format!("{name}:18"));
    // One-run readers say how many runs the file holds.
    let e = parse::nccl_text::parse(&name, &text, &opts(false))
        .unwrap_err()
        .to_string();
    assert!(e.contains("holds 3 runs"), "{e}");
}

#[test]
fn rccl_tests_json_lines() {
    let (name, text) = wild("rccl_tests_json_lines.json");
    let run = parse::parse_nccl_any(&name, &text, &opts(false)).unwrap();
    assert_eq!(run.format, Format::RcclTestsJson);
    let s = &run.series[0];
    assert_eq!((s.pattern.as_str(), s.family), ("AllReduce", Some(Family::Allreduce)));
    // Re-derived: the out-of-place objects, one per size.
    let mut want = Vec::new();
    for l in text.lines() {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        if v["inPlace"] == 0 {
            want.push((
                v["size"].as_u64().unwrap(),
                v["time"].as_f64().unwrap(),
                v["busBw"].as_f64().unwrap(),
            ));
        }
    }
    let got: Vec<_> = s
        .rows
        .values()
        .map(|r| (r.size, r.summary.time_us, r.summary.busbw))
        .collect();
    assert_eq!(got, want);
    assert_eq!(s.rows[&2048].wrong, Some(0.0));
    // The same objects as a list (rccl-tests#140).
    let list = format!("[{}]", text.trim().lines().collect::<Vec<_>>().join(",\n"));
    let r2 = parse::parse_nccl_any("l.json", &list, &opts(false)).unwrap();
    assert_eq!(r2.series[0].rows, s.rows);
    // A cut-off last line names its line.
    let cut = &text[..text.len() - 40];
    let e = parse::parse_nccl_any("c.json", cut, &opts(false))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("c.json:5: not a JSON object") && e.contains("truncated"),
        "{e}"
    );
}

/// Synthetic, derived from a real fixture: `awsome_aws_batch_tag_output.md` cut after its 10th
/// row, followed by the crash line of NVIDIA/nccl-tests#322.
#[test]
fn crashed_and_cut_runs_are_refused() {
    let (_, text) = wild("awsome_aws_batch_tag_output.md");
    let lines: Vec<&str> = text.lines().collect();
    let crash =
        "HCA-128: Test NCCL failure common.cu:1204 'unhandled cuda error (run with NCCL_DEBUG=INFO for details) / '";
    let crashed = format!("{}\n{crash}\n", lines[..14].join("\n"));
    for truncated in [false, true] {
        let e = parse::parse_text("crash.log", &crashed, &opts(truncated))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!("crash.log:15: run ended at row 10 (size 4096, line 14): {crash} (the run crashed)")
        );
    }
    // The last row cut mid-line.
    let cut = format!("{}\n{}", lines[..13].join("\n"), &lines[13][..60]);
    let e = parse::parse_text("cut.log", &cut, &opts(true)).unwrap_err().to_string();
    assert!(
        e.starts_with("cut.log:14: run ended at row 9 (size 2048, line 13)") && e.contains("cut-off row"),
        "{e}"
    );
    // A short row followed by more rows is a malformed row, not a crash.
    let mut mid: Vec<String> = lines.iter().map(std::string::ToString::to_string).collect();
    mid[13].truncate(60);
    let e = parse::parse_text("mid.log", &mid.join("\n"), &opts(true))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("mid.log:14: table row has 4 fields, expected 13"), "{e}");
    // A garbage value names the line and the column.
    let bad = text.replacen("  12.90    0.00", "  12.90    0.x0", 1);
    let e = parse::parse_text("bad.log", &bad, &opts(false))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "bad.log:5: algbw (GB/s): cannot parse \"0.x0\" as a number");
    // An unknown column layout names the header line and what is expected.
    let odd = text.replacen("redop    root", "redop    frob", 1);
    let e = parse::parse_text("odd.log", &odd, &opts(false))
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with("odd.log:3: column header: unknown column `frob`; expected `size count type"),
        "{e}"
    );
}

/// Synthetic, derived from real fixtures: the pdsh/clush `host: ` prefix, Open MPI's
/// `--timestamp-output` date in front of the tag, and two real logs concatenated.
#[test]
fn derived_prefixes_and_concatenation() {
    let (name, text) = wild("gcp_a3mega_h100_allreduce.md");
    let base = parse::parse_text(&name, &text, &opts(false)).unwrap();
    let pdsh: String = text.lines().map(|l| format!("ztan-mig-235z: {l}\n")).collect();
    let r = parse::parse_text(&name, &pdsh, &opts(false)).unwrap();
    assert_eq!(r[0].series, base[0].series);
    let (name, text) = wild("awsome_aws_batch_tag_output.md");
    let base = parse::parse_text(&name, &text, &opts(false)).unwrap();
    let ts = text.replace("[1,0]<stdout>:", "Mon Mar  4 10:11:12 2024[1,0]<stdout>:");
    assert_eq!(
        parse::parse_text(&name, &ts, &opts(false)).unwrap()[0].series,
        base[0].series
    );
    // Without the prefix handling the table is not found at all.
    let hidden = text.replace("[1,0]<stdout>:", "[1,0]<stdout>;");
    assert!(parse::parse_text(&name, &hidden, &opts(false)).is_err());
    // Two complete logs in one file: one run each, named by their header line.
    let (_, a) = wild("rccl_mi300x_k8s_mpirun.md");
    let (_, b) = wild("gcp_a3mega_h100_allreduce.md");
    let both = format!("{a}\n{b}");
    let runs = parse::parse_text("both.md", &both, &opts(false)).unwrap();
    assert_rows_match("both.md", &runs, &expected_tables(&both));
    let header = b.lines().position(|l| l.contains("size ")).unwrap() + 1;
    assert_eq!(runs[1].source, format!("both.md:{}", a.lines().count() + 1 + header));
}

/// Synthetic, derived from a real fixture: the binary renamed to `*_perf_mpi` (nebius/soperator#428
/// runs `all_reduce_perf_mpi`) or to a name of no known family.
#[test]
fn collective_names() {
    let (_, text) = wild("rccl_mi300x_k8s_mpirun.md");
    let mpi = text.replace("build/all_reduce_perf ", "build/all_reduce_perf_mpi ");
    let r = parse::parse_nccl_any("x.md", &mpi, &opts(false)).unwrap();
    assert_eq!(
        (r.series[0].pattern.as_str(), r.series[0].family),
        ("all_reduce_perf_mpi", Some(Family::Allreduce))
    );
    let odd = text.replace("build/all_reduce_perf ", "build/my_bench_perf ");
    let r = parse::parse_nccl_any("x.md", &odd, &opts(false)).unwrap();
    assert_eq!(r.series[0].family, None);
    let forced = ParseOptions {
        pattern: Some("all_reduce_perf".into()),
        ..Default::default()
    };
    let r = parse::parse_nccl_any("x.md", &odd, &forced).unwrap();
    assert_eq!(r.series[0].family, Some(Family::Allreduce));
    assert_eq!(r.labels["collective_as_written"], "my_bench_perf");
    let wrong = ParseOptions {
        pattern: Some("sendrecv_perf".into()),
        ..Default::default()
    };
    let e = parse::parse_nccl_any("x.md", &text, &wrong).unwrap_err().to_string();
    assert!(
        e.contains("names the collective all_reduce_perf (allreduce) but --pattern says sendrecv_perf"),
        "{e}"
    );
    // The file name guess: used for an unnamed table, refused when ambiguous.
    let (_, plain) = wild("awsome_topology_aware_elided.md");
    let r = parse::parse_nccl_any("run_alltoall_8n.txt", &plain, &opts(false)).unwrap();
    assert_eq!(r.series[0].family, Some(Family::Alltoall));
    for ambiguous in ["sendrecv_vs_all_reduce.txt", "alltoallv.txt"] {
        let r = parse::parse_nccl_any(ambiguous, &plain, &opts(false)).unwrap();
        assert_eq!(r.series[0].family, None, "{ambiguous}");
    }
}

/// Synthetic, derived from the project's real `-I -J` fixture: `-K 5` marks the first five
/// `times_us` as skipped; they must not become samples.
#[test]
fn json_skipped_iterations_are_not_samples() {
    let (name, text) = own("nccl_sendrecv_socket_np4.json");
    let base = parse::parse_nccl_any(&name, &text, &opts(false)).unwrap();
    assert!(text.contains("\"skipped_iterations\":0"));
    let k5 = text.replacen("\"skipped_iterations\":0", "\"skipped_iterations\":5", 1);
    let r = parse::parse_nccl_any(&name, &k5, &opts(false)).unwrap();
    let (b, k) = (&base.series[0].rows[&1048576], &r.series[0].rows[&1048576]);
    assert_eq!((b.samples.len(), k.samples.len()), (20, 15));
    // The kept samples are the last 15, rescaled to the same headline mean.
    let ratio: Vec<f64> = b.samples[5..]
        .iter()
        .zip(&k.samples)
        .map(|(x, y)| y.time_us / x.time_us)
        .collect();
    assert!(ratio.iter().all(|q| (q - ratio[0]).abs() < 1e-9), "{ratio:?}");
    let bad = text.replacen("\"skipped_iterations\":0", "\"skipped_iterations\":20", 1);
    let e = parse::parse_nccl_any(&name, &bad, &opts(false))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("skipped_iterations") && e.contains("20 is not a count below"),
        "{e}"
    );
}

/// nccl-tests of early 2020 (NCCL 2.4-era headers) on a DGX-2: five runs pasted one after another,
/// each named by its `Running: ... ./build/X_perf` line. all_gather has no `redop` column and
/// prints three 0-byte rows (8, 16 and 32 B round down to 0 over 12 ranks, as in reduce_scatter)
/// and a failed check
/// (`4 FAILED`, `1e+00` errors); broadcast has `root` without `redop`.
#[test]
fn five_old_runs_in_one_file() {
    let (name, text) = wild("wohlbier_dgx2_five_runs.md");
    let runs = parse::parse_text(&name, &text, &opts(false)).unwrap();
    assert_rows_match(&name, &runs, &expected_tables(&text));
    let got: Vec<(&str, Option<Family>)> = runs
        .iter()
        .map(|r| (r.series[0].pattern.as_str(), r.series[0].family))
        .collect();
    assert_eq!(
        got,
        [
            ("all_gather_perf", None),
            ("all_reduce_perf", Some(Family::Allreduce)),
            ("broadcast_perf", None),
            ("reduce_perf", None),
            ("reduce_scatter_perf", None),
        ]
    );
    let wrong: Vec<Option<f64>> = runs.iter().map(|r| r.wrong_total).collect();
    assert_eq!(wrong, [Some(4.0), Some(0.0), Some(0.0), Some(0.0), Some(0.0)]);
    let ag = &runs[0];
    assert_eq!(ag.labels["ranks"], "12");
    assert_eq!(ag.labels["repeated_zero_size_rows"], "2");
    let s = &ag.series[0];
    assert_eq!((s.rows.len(), s.rows[&0].summary.time_us), (29, 57.30));
    assert_eq!(s.rows[&4294967280].max_error, Some(1.0));
    assert_eq!(runs[1].source, format!("{name}:75"));
    // reduce_scatter rounds the same three sizes down to 0.
    let zeros: Vec<Option<&str>> = runs
        .iter()
        .map(|r| r.labels.get("repeated_zero_size_rows").map(String::as_str))
        .collect();
    assert_eq!(zeros, [Some("2"), None, None, None, Some("2")]);
}

/// What the 2019-2022 pastes say beyond their rows: `N/A` errors (`-c 0`), ranks from the device
/// list, and no rank count where the author cut the device list with `...`.
#[test]
fn old_pastes_metadata() {
    let (name, text) = wild("deepops_2019_dgx2h_na_error_indented.md");
    let run = parse::parse_nccl_any(&name, &text, &opts(false)).unwrap();
    let r = &run.series[0].rows[&8589934592];
    assert_eq!((r.summary.busbw, r.max_error, r.wrong), (81.53, None, None));
    assert_eq!(run.wrong_total, Some(0.0));
    let (name, text) = wild("azureml_k80_info_line_in_table.md");
    let run = parse::parse_nccl_any(&name, &text, &opts(false)).unwrap();
    assert_eq!(run.labels["ranks"], "4");
    assert_eq!(run.labels["avg_busbw_footer"], "2.54225");
    let (name, text) = wild("coreweave_mpi_operator_kubectl_logs.md");
    let run = parse::parse_nccl_any(&name, &text, &opts(false)).unwrap();
    assert!(!run.labels.contains_key("ranks"), "{:?}", run.labels);
    // The same file with the author's cut removed counts the five devices it lists.
    let whole = text.replacen("NVIDIA A100-SXM4-80GB\n...\n", "NVIDIA A100-SXM4-80GB\n", 1);
    assert_ne!(whole, text);
    let run = parse::parse_nccl_any(&name, &whole, &opts(false)).unwrap();
    assert_eq!(run.labels["ranks"], "5");
    // srun --label, scatter's `none` redop, three 0-byte rows and no footer (an excerpt).
    let (name, text) = wild("awsome_2023_srun_label_scatter_zero_rows.md");
    let run = parse::parse_nccl_any(&name, &text, &opts(true)).unwrap();
    assert_eq!(run.labels["repeated_zero_size_rows"], "2");
    assert_eq!(run.labels["truncated"], "after row 29");
    assert_eq!(run.series[0].rows[&0].summary.time_us, 0.15);
    assert_eq!(run.series[0].rows[&2147483648].summary.busbw, 79.20);
}
