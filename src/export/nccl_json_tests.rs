//! `-J` against the JSON nccl-tests 2.19.6 really wrote (tcpx-analyze's fixture): the same keys
//! in the same order, the same value types, and nccl-tests' statistics recomputed from its own
//! `times_us`.

use super::super::fixtures;
use super::*;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

const FIXTURE: &str = include_str!("../../analysis/tests/fixtures/nccl-tests/nccl_sendrecv_socket_np4.json");

/// A JSON value that keeps its keys in document order.
#[derive(Debug)]
enum Ordered {
    Obj(Vec<(String, Ordered)>),
    Arr(Vec<Ordered>),
    Num,
    Str,
    Bool,
    Null,
}

impl<'de> Deserialize<'de> for Ordered {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Ordered, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordered;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("JSON")
            }
            fn visit_bool<E>(self, _: bool) -> Result<Ordered, E> {
                Ok(Ordered::Bool)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Ordered, E> {
                Ok(Ordered::Num)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Ordered, E> {
                Ok(Ordered::Num)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Ordered, E> {
                Ok(Ordered::Num)
            }
            fn visit_str<E>(self, _: &str) -> Result<Ordered, E> {
                Ok(Ordered::Str)
            }
            fn visit_unit<E>(self) -> Result<Ordered, E> {
                Ok(Ordered::Null)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Ordered, A::Error> {
                let mut v = Vec::new();
                while let Some(x) = a.next_element()? {
                    v.push(x);
                }
                Ok(Ordered::Arr(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Ordered, A::Error> {
                let mut v = Vec::new();
                while let Some((k, x)) = a.next_entry()? {
                    v.push((k, x));
                }
                Ok(Ordered::Obj(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// Every difference between `ours` and nccl-tests' `theirs` at `path`: key order, missing or
/// extra keys, value kinds. Arrays compare their first elements.
fn differences(path: &str, ours: &Ordered, theirs: &Ordered, out: &mut Vec<String>) {
    match (ours, theirs) {
        (Ordered::Obj(a), Ordered::Obj(b)) => {
            let ka: Vec<&str> = a.iter().map(|(k, _)| k.as_str()).collect();
            let kb: Vec<&str> = b.iter().map(|(k, _)| k.as_str()).collect();
            if ka != kb {
                out.push(format!("{path}: keys {ka:?} vs nccl-tests' {kb:?}"));
            }
            for (k, v) in a {
                if let Some((_, w)) = b.iter().find(|(kk, _)| kk == k) {
                    differences(&format!("{path}.{k}"), v, w, out);
                }
            }
        }
        (Ordered::Arr(a), Ordered::Arr(b)) => {
            if let (Some(x), Some(y)) = (a.first(), b.first()) {
                differences(&format!("{path}[0]"), x, y, out);
            }
        }
        (Ordered::Num, Ordered::Num) | (Ordered::Str, Ordered::Str) | (Ordered::Null, Ordered::Null) => {}
        (a, b) => out.push(format!("{path}: {a:?} where nccl-tests has {b:?}")),
    }
}

fn ours() -> Ordered {
    let mut info = fixtures::info();
    info.bandwidth_gate = None;
    let doc = document(&info, &fixtures::results(), None, "2026-11-21T05:00:30Z");
    serde_json::from_str(&serde_json::to_string(&doc).expect("serialize")).expect("parse")
}

#[test]
fn same_keys_in_the_same_order_as_nccl_tests() {
    let theirs: Ordered = serde_json::from_str(FIXTURE).expect("fixture");
    let mut diffs = Vec::new();
    differences("$", &ours(), &theirs, &mut diffs);
    // The one designed difference: no in-place measurement (null, and no in_place_per_iter).
    let expected = [
        "$.results[0]: keys [\"size\", \"count\", \"type\", \"redop\", \"root\", \"out_of_place\", \"out_of_place_per_iter\", \"in_place\", \"actual_iterations\", \"experiment_name\"] vs nccl-tests' [\"size\", \"count\", \"type\", \"redop\", \"root\", \"out_of_place\", \"out_of_place_per_iter\", \"in_place\", \"in_place_per_iter\", \"actual_iterations\", \"experiment_name\"]",
    ];
    let rest: Vec<&String> = diffs
        .iter()
        .filter(|d| !d.starts_with("$.results[0].in_place:"))
        .collect();
    assert_eq!(rest, expected.iter().collect::<Vec<_>>(), "{diffs:#?}");
    assert!(
        diffs.iter().any(|d| d.starts_with("$.results[0].in_place: Null")),
        "{diffs:#?}"
    );
}

#[test]
fn values_as_nccl_tests_writes_them() {
    let mut info = fixtures::info();
    info.bandwidth_gate = Some(crate::report::BandwidthGate::judge(1000.0, Some(1.0)));
    let doc = document(&info, &fixtures::results(), Some("boom"), "2026-11-21T05:00:30Z");
    let v = serde_json::to_value(&doc).expect("value");
    assert_eq!(v["version"], 3);
    assert_eq!(v["start_time"], "2026-11-21 05:00:00");
    assert_eq!(v["end_time"], "2026-11-21 05:00:30");
    assert_eq!(v["errors"][0], "boom");
    assert_eq!(v["env"][0], "NCCL_DEBUG=WARN");
    assert_eq!(v["config"]["per_iter_timing"], "true");
    assert_eq!(v["config"]["blocking_collectives"], "false");
    assert_eq!(v["config"]["step_factor"], 2);
    assert!(v["config"].get("step_bytes").is_none());
    assert_eq!(v["config"]["devices"][1]["hostname"], "b, \"quoted\"");
    let r = &v["results"][1];
    assert_eq!(r["redop"], "sum");
    assert_eq!(r["root"], "    -1");
    assert_eq!(r["out_of_place"]["nwrong"], 3.0);
    assert_eq!(v["out_of_bounds"]["count"], 3);
    assert_eq!(v["out_of_bounds"]["okay"], "false");
    assert_eq!(v["average_bus_bandwidth"]["okay"], "false");
    // times_us: each iteration's slowest rank (rank 1's 0.8/1.0/1.2 against rank 0's 0.9/1.0/1.1).
    let t: Vec<f64> = r["out_of_place_per_iter"]["times_us"]
        .as_array()
        .expect("times")
        .iter()
        .map(|x| x.as_f64().expect("f64"))
        .collect();
    assert_eq!(t, vec![100.0 * 0.9, 100.0, 100.0 * 1.2]);
    assert_eq!(r["out_of_place_per_iter"]["per_process_max_times_us"][1][0], 80.0);
    // Unchecked rows: nwrong null; without rows the average is "nan"; no gate: "unchecked".
    let mut unchecked = fixtures::size(8, 1.0, None);
    unchecked.iters = 3;
    let d = serde_json::to_value(document(&fixtures::info(), &[unchecked], None, "x")).expect("value");
    assert!(d["results"][0]["out_of_place"]["nwrong"].is_null());
    assert_eq!(d["average_bus_bandwidth"]["okay"], "unchecked");
    assert_eq!(d["errors"][0], "");
    let empty = serde_json::to_value(document(&fixtures::info(), &[], None, "x")).expect("value");
    assert_eq!(empty["average_bus_bandwidth"]["bandwidth"], "nan");
    assert_eq!(version_code("2.28.9"), 22809);
    assert_eq!(version_code("2.28.3-1"), 22803);
    assert_eq!(version_code("x"), 0);
}

#[test]
fn statistics_recompute_nccl_tests_own() {
    let theirs: serde_json::Value = serde_json::from_str(FIXTURE).expect("fixture");
    for r in theirs["results"].as_array().expect("results") {
        let want = &r["out_of_place_per_iter"];
        let times: Vec<f64> = want["times_us"]
            .as_array()
            .expect("times")
            .iter()
            .map(|x| x.as_f64().expect("f64"))
            .collect();
        let got = serde_json::to_value(per_iteration(times, Vec::new())).expect("value");
        for k in [
            "min_us", "max_us", "avg_us", "p50_us", "p95_us", "p99_us", "stdev_us", "cv_pct",
        ] {
            let (a, b) = (got[k].as_f64().expect(k), want[k].as_f64().expect(k));
            // nccl-tests prints %lf: 6 decimals.
            assert!(
                (a - b).abs() <= 1e-6 * b.abs().max(1.0),
                "size {}: {k} {a} vs {b}",
                r["size"]
            );
        }
    }
}

#[test]
fn never_replaces_a_file() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let path = tmp.path().join("run.json");
    let doc = document(&fixtures::info(), &fixtures::results(), None, "2026-11-21T05:00:30Z");
    assert_eq!(write(&path, &doc).expect("write"), path);
    assert_eq!(write(&path, &doc).expect("write"), tmp.path().join("run.json.0"));
    assert_eq!(write(&path, &doc).expect("write"), tmp.path().join("run.json.1"));
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 3, "no temporary file left: {names:?}");
    let back: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).expect("read")).expect("json");
    assert_eq!(back["results"][0]["size"], 256);
    // Its directory is proved writable before the sweep, never made: a missing one, and a
    // place that cannot take a file (under a regular file), are refused, naming -J.
    let err = check_destination(&tmp.path().join("new/run.json")).expect_err("no such directory");
    assert!(
        err.to_string().starts_with("-J ") && err.to_string().contains("does not exist"),
        "{err}"
    );
    assert!(!tmp.path().join("new").exists());
    let err = check_destination(&path.join("run.json")).expect_err("under a file");
    assert!(err.to_string().starts_with("-J "), "{err}");
    assert!(check_destination(Path::new("run.json")).is_ok());
}
