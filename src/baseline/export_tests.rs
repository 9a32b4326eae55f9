//! The result files with `--baseline nccl` figures (schema 3): what a run writes, read back.

use crate::export::{self, fixtures, RunStatus};
use crate::report::{NcclFigures, NcclInfo};
use crate::stats::summarize;

fn figures(r: &crate::report::SizeResult, speedup: f64) -> NcclFigures {
    let samples: Vec<f64> = r.samples_us.iter().map(|t| t / speedup).collect();
    let time_us = r.time_us / speedup;
    NcclFigures {
        size_bytes: r.size_bytes,
        time_us,
        algbw_gbps: r.algbw_gbps * speedup,
        busbw_gbps: r.busbw_gbps * speedup,
        ratio: 1.0 / speedup,
        batch_time_us: time_us * 0.9,
        batch_algbw_gbps: r.algbw_gbps * speedup / 0.9,
        batch_busbw_gbps: r.busbw_gbps * speedup / 0.9,
        wrong: Some(0),
        stats: summarize(&samples),
        batch_samples_us: samples.iter().map(|t| t * 0.9).collect(),
        samples_us: samples,
    }
}

fn read_csv(path: &std::path::Path) -> Vec<std::collections::HashMap<String, String>> {
    let mut r = ::csv::Reader::from_path(path).expect("open");
    let h = r.headers().expect("header").clone();
    r.records()
        .map(|x| {
            let x = x.expect("record");
            h.iter().map(String::from).zip(x.iter().map(String::from)).collect()
        })
        .collect()
}

#[test]
fn baseline_figures_land_in_every_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("run");
    let mut info = fixtures::info();
    info.nccl = Some(NcclInfo {
        version: "2.28.9".into(),
        evidence: vec!["Using network tcpx-emu".into()],
        baseline_note: Some("different traffic: tcpx-perf's ring crosses nodes on 4 of 4 hops".into()),
        ..NcclInfo::default()
    });
    let mut results = fixtures::results();
    for r in &mut results {
        r.nccl = Some(figures(r, 2.0));
    }
    export::prepare_out_dir(&dir).expect("create");
    export::write_results(&dir, &info, &results, results.len(), &RunStatus::Ok).expect("write");

    let rows = read_csv(&dir.join("results.csv"));
    assert_eq!(rows[1]["schema_version"], "4");
    let f = |k: &str| rows[1][k].parse::<f64>().expect(k);
    assert_eq!(f("nccl_time_us"), 50.0);
    assert_eq!(f("nccl_busbw_gbps"), results[1].busbw_gbps * 2.0);
    assert_eq!(f("nccl_ratio"), 0.5);
    assert_eq!(f("nccl_batch_time_us"), 45.0);
    assert_eq!(rows[1]["nccl_wrong"], "0");

    let samples = read_csv(&dir.join("nccl_samples.csv"));
    assert_eq!(samples.len(), 2 * (3 + 3), "two timings x three samples x two sizes");
    let batch: Vec<_> = samples.iter().filter(|s| s["timing"] == "batch").collect();
    assert_eq!(batch.len(), 6);
    let t: f64 = samples[0]["time_us"].parse().expect("time");
    let a: f64 = samples[0]["algbw_gbps"].parse().expect("algbw");
    assert!(
        (a - 256.0 / t / 1e3).abs() < 1e-12,
        "bandwidth from the sample's own time"
    );

    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).expect("summary")).expect("json");
    assert_eq!(v["nccl_baseline"]["version"], "2.28.9");
    assert_eq!(v["nccl_baseline"]["evidence"][0], "Using network tcpx-emu");
    assert!(v["nccl_baseline"]["timing"]["order"]
        .as_str()
        .expect("order")
        .contains("A B A B"));
    assert_eq!(v["results"][1]["nccl"]["ratio"], 0.5);
    assert!(
        v["results"][1]["nccl"].get("samples_us").is_none(),
        "samples are in nccl_samples.csv"
    );

    // The table: NCCL columns in the header, lined up with the row's cells.
    let header = export::table::header(&info);
    let names = header.lines().rev().nth(1).expect("names line");
    let row = export::table::row(&results[1], "sendrecv");
    assert!(names.ends_with("ratio") && row.ends_with(" 0.50"), "{names}\n{row}");
    assert_eq!(names.len(), row.len(), "{names}\n{row}");
    assert!(header.contains("# NCCL baseline: NCCL 2.28.9"));
    // What differs between the two, said in the header and summary.json.
    assert!(header.contains("\n# NCCL baseline: different traffic: tcpx-perf's ring crosses nodes on 4 of 4 hops\n"));
    assert_eq!(
        v["nccl_baseline"]["baseline_note"],
        "different traffic: tcpx-perf's ring crosses nodes on 4 of 4 hops"
    );
}

#[test]
fn without_the_baseline_the_columns_are_empty_and_no_nccl_file_is_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("run");
    export::prepare_out_dir(&dir).expect("create");
    export::write_results(&dir, &fixtures::info(), &fixtures::results(), 2, &RunStatus::Ok).expect("write");
    let rows = read_csv(&dir.join("results.csv"));
    for k in ["nccl_time_us", "nccl_busbw_gbps", "nccl_ratio", "nccl_wrong"] {
        assert_eq!(rows[0][k], "", "{k}");
    }
    assert!(!dir.join("nccl_samples.csv").exists());
    let header = export::table::header(&fixtures::info());
    assert!(!header.contains("n_busbw"));
}
