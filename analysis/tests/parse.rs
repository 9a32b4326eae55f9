//! Parsers on the real nccl-tests fixtures and on malformed input (errors name file and line).

mod common;
use common::*;
use tcpx_analyze::model::Family;
use tcpx_analyze::parse::{self, nccl_json, nccl_text, tcpx, ParseOptions, Placement};

fn read(name: &str) -> String {
    std::fs::read_to_string(fixtures().join(name)).unwrap()
}

#[test]
fn text_table_with_per_iteration_columns() {
    let r = nccl_text::parse(
        "np4.txt",
        &read("nccl_sendrecv_socket_np4.txt"),
        &ParseOptions::default(),
    )
    .unwrap();
    let s = &r.series[0];
    assert_eq!(s.pattern, "sendrecv_perf");
    assert_eq!(s.family, Some(Family::Sendrecv));
    assert_eq!(s.rows.len(), 6);
    let first = &s.rows[&1048576];
    assert_eq!(first.summary.time_us, 400.77);
    assert_eq!(first.summary.busbw, 2.62);
    assert_eq!(first.wrong, Some(0.0));
    assert!(first.samples.is_empty());
    assert_eq!(s.rows[&1073741824].summary.time_us, 411725.0);
    assert_eq!(r.wrong_total, Some(0.0));
    assert_eq!(r.labels["ranks"], "4");
    // In-place columns.
    let o = ParseOptions {
        placement: Placement::InPlace,
        ..Default::default()
    };
    let r = nccl_text::parse("np4.txt", &read("nccl_sendrecv_socket_np4.txt"), &o).unwrap();
    assert_eq!(r.series[0].rows[&1048576].summary.time_us, 404.48);
}

#[test]
fn text_table_plain_and_with_nccl_info_lines() {
    let r = nccl_text::parse(
        "t.txt",
        &read("nccl_sendrecv_socket_tuned_np4.txt"),
        &ParseOptions::default(),
    )
    .unwrap();
    assert_eq!(r.series[0].rows.len(), 6);
    assert_eq!(r.series[0].rows[&1048576].summary.busbw, 1.76);
    let r = nccl_text::parse(
        "d.log",
        &read("nccl_sendrecv_socket_g4_single_process_debug.log"),
        &ParseOptions::default(),
    )
    .unwrap();
    let s = &r.series[0];
    assert_eq!(s.rows.len(), 6);
    assert_eq!(s.rows[&4194304].summary.busbw, 3.25);
    assert_eq!(r.labels["avg_busbw_footer"], "3.03766");
}

#[test]
fn json_v3_with_samples() {
    let r = nccl_json::parse(
        "np4.json",
        &read("nccl_sendrecv_socket_np4.json"),
        &ParseOptions::default(),
    )
    .unwrap();
    let s = &r.series[0];
    assert_eq!(s.pattern, "sendrecv_perf");
    assert_eq!(s.rows.len(), 6);
    let row = &s.rows[&1048576];
    assert_eq!(row.samples.len(), 20);
    assert!((row.summary.time_us - 400.772163).abs() < 1e-9);
    // Calibrated samples: mean time equals the headline time.
    let mean = row.samples.iter().map(|x| x.time_us).sum::<f64>() / 20.0;
    assert!((mean - 400.772163).abs() < 1e-6, "{mean}");
    // algbw_i = size / t_i (sendrecv: bytes = size).
    for x in &row.samples {
        assert!((x.algbw - 1048576.0 / x.time_us / 1e3).abs() < 1e-3);
        assert_eq!(x.algbw, x.busbw);
    }
    assert_eq!(r.wrong_total, Some(0.0));
}

fn err_of(name: &str, text: &str) -> String {
    parse::parse_nccl_any(name, text, &ParseOptions::default())
        .unwrap_err()
        .to_string()
}

#[test]
fn malformed_text_names_file_and_line() {
    let good = read("nccl_sendrecv_socket_tuned_np4.txt");
    let bad = good.replace("   951.40    4.41", "   9x1.40    4.41");
    let e = err_of("bad.txt", &bad);
    assert!(e.starts_with("bad.txt:15: time (us)"), "{e}");
    let mut lines: Vec<String> = good.lines().map(String::from).collect();
    let toks: Vec<&str> = lines[15].split_whitespace().collect();
    lines[15] = toks[..toks.len() - 2].join("  ");
    let e = err_of("short.txt", &lines.join("\n"));
    assert!(e.starts_with("short.txt:16: table row has"), "{e}");
    let e = err_of("empty.txt", "# nothing here\nhello\n");
    assert!(
        e.contains("empty.txt") && e.contains("no nccl-tests result table"),
        "{e}"
    );
    let neg = good.replace("   951.40    4.41", "   -951.40    4.41");
    assert!(err_of("neg.txt", &neg).starts_with("neg.txt:15:"));
}

#[test]
fn malformed_json_names_file_and_line() {
    let good = read("nccl_sendrecv_socket_np4.json");
    let e = err_of("x.json", &good[..good.len() / 2]);
    assert!(e.starts_with("x.json:") && e.contains("invalid JSON"), "{e}");
    let e = err_of("v.json", &good.replacen("\"version\":3", "\"version\":2", 1));
    assert!(e.contains("v.json") && e.contains("version 2"), "{e}");
    let e = err_of("t.json", &good.replacen("\"time\":400.772163", "\"time\":\"fast\"", 1));
    assert!(e.contains("$.results[0].out_of_place.time"), "{e}");
    let e = err_of("n.json", "{\"version\":3,\"results\":[{\"size\":1}]}");
    assert!(e.contains("$.results[0].out_of_place"), "{e}");
}

#[test]
fn malformed_csv_names_file_and_line() {
    let d = tmpdir("badcsv");
    let dir = write_run(&d.join("r"), &Spec::default());
    let text = std::fs::read_to_string(dir.join("results.csv")).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    lines[3] = lines[3].replacen(",float,20,", ",float,20,abc", 1);
    let e = tcpx::parse_results_csv("results.csv", &lines.join("\n"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("results.csv:4: time_us"), "{e}");
    let e = tcpx::parse_results_csv("r.csv", "schema_version,pattern\n1,ring\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("r.csv:1: missing column `size_bytes`"), "{e}");
    let e = tcpx::parse_results_csv("r.csv", &text.replacen("\n1,", "\n5,", 1))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("r.csv:2: schema_version \"5\""), "{e}");
    let e = tcpx::parse_results_csv("r.csv", &format!("{text}1,ring,all\n"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("r.csv:") && e.contains("bad CSV record"), "{e}");
    // bytes_planned != bytes_moved
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    let mut f: Vec<String> = lines[2].split(',').map(String::from).collect();
    f[18] = "1".into(); // bytes_moved
    lines[2] = f.join(",");
    let e = tcpx::parse_results_csv("m.csv", &lines.join("\n"))
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("m.csv:3: bytes_planned"), "{e}");
}

#[test]
fn tcpx_dir_with_samples_and_pairs() {
    let d = tmpdir("dir");
    let dir = write_run(&d.join("r"), &Spec::default());
    let runs = parse::load_path(&dir, &ParseOptions::default()).unwrap();
    assert_eq!(runs.len(), 1);
    let s = &runs[0].series[0];
    assert_eq!(s.variant, "scope=all,dir=bi,mem=cuda");
    assert_eq!(s.rows.len(), 7);
    assert!(s.rows.values().all(|r| r.samples.len() == 20));
    assert_eq!(runs[0].pairs.len(), 7 * 12);
    assert_eq!(runs[0].status.as_deref(), Some("ok"));
}

#[test]
fn baseline_errors() {
    use tcpx_analyze::baseline::parse;
    let e = parse("b.toml", "schema_version = 1\nname = \"x\"\npattern = \"ring\"\nunit = \"MB/s\"\n[[entry]]\nmetric=\"busbw\"\nsize=1\nvalue=1.0\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("b.toml") && e.contains("MB/s"), "{e}");
    let e = parse("b.toml", "schema_version = 1\nname = 3\n")
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("b.toml:2:"), "{e}");
    let e = parse("b.toml", "schema_version = 1\nname = \"x\"\npattern = \"ring\"\nunit = \"GB/s\"\n[[entry]]\nmetric=\"busbw\"\nvalue=1.0\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("entry #1") && e.contains("size"), "{e}");
}
