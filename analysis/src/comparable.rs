//! One rule for what is comparable (issue 54): the configuration that changes a figure, as each
//! side records it (a tcpx-perf run's summary.json, a baseline file's `[config]`, a history's
//! stored configuration), and the one check that refuses a mismatch naming the field. `compare`,
//! `gate -B` and `gate --history` all call [`check`]; the job shape (endpoints, MPI ranks,
//! nodes) goes through it too.

use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// A field's value where the figure has no such setting (an NCCL figure has no `--chunk`):
/// stated in the baseline file, never compared, listed in the report.
pub const NOT_APPLICABLE: &str = "n/a";

/// The configuration a side records: field -> value ([`NOT_APPLICABLE`] where it has none).
pub type Configuration = BTreeMap<String, String>;

/// A field of the configuration, the tcpx-perf flag that sets it and whether a difference is
/// refused (the plugin's build is stated only: a new build of the plugin is what a gate tests).
#[derive(Debug)]
pub struct Field {
    pub name: &'static str,
    pub flag: &'static str,
    pub refused: bool,
}

const fn field(name: &'static str, flag: &'static str) -> Field {
    Field {
        name,
        flag,
        refused: true,
    }
}

/// Every field, in the order reports name them.
pub const FIELDS: &[Field] = &[
    field("endpoints", "-np/--ngpus"),
    field("MPI ranks", "-np"),
    field("nodes", "the hostfile"),
    field("scope", "--scope"),
    field("dir", "--dir"),
    field("mem", "--mem"),
    field("chunk", "--chunk"),
    field("channels", "--channels"),
    field("window", "--window"),
    field("max_peers", "--max-peers"),
    field("iters", "-n"),
    field("warmup", "-w"),
    field("warmup_once", "--warmup-once"),
    field("time_reduction", "-a"),
    field("timing", "--timing"),
    field("plugin", "--plugin"),
    Field {
        name: "plugin_build",
        flag: "--plugin",
        refused: false,
    },
    field("env", "NCCL_*/TCPXEMU_*/UCCL_* variables"),
];

/// Whether `name` is a configuration field (a baseline's `[config]` accepts only these).
pub fn is_field(name: &str) -> bool {
    FIELDS.iter().any(|f| f.name == name)
}

/// The environment variables that change a figure, as summary.json's `env` records them (the
/// MPI and Slurm identities it also keeps do not).
fn figure_env(env: &serde_json::Map<String, Value>) -> String {
    let mut vars: Vec<String> = env
        .iter()
        .filter(|(k, _)| ["NCCL_", "TCPXEMU_", "UCCL_"].iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| format!("{k}={}", v.as_str().map_or_else(|| v.to_string(), str::to_string)))
        .collect();
    vars.sort();
    if vars.is_empty() {
        "(none)".into()
    } else {
        vars.join(" ")
    }
}

/// The configuration a tcpx-perf summary.json records. Fields older runs lack take the value
/// every run had before the flag existed (`timing` per-iteration, `warmup_once` false, `-a`
/// avg); a field a summary cannot show is left out (not compared).
pub fn of_summary(summary: &Value) -> Configuration {
    let mut c = Configuration::new();
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Bool(_) | Value::Number(_) => Some(v.to_string()),
        _ => None,
    };
    let config = summary.get("config");
    for (name, key) in [
        ("scope", "scope"),
        ("dir", "dir"),
        ("mem", "mem"),
        ("chunk", "chunk"),
        ("channels", "channels"),
        ("window", "window"),
        ("iters", "iters"),
        ("warmup", "warmup"),
        ("time_reduction", "time_reduction"),
    ] {
        if let Some(v) = summary.get(key).and_then(text) {
            c.insert(name.into(), v);
        }
    }
    c.entry("time_reduction".into()).or_insert_with(|| "avg".into());
    let timing = summary
        .get("timing")
        .or_else(|| summary.pointer("/settings/timing"))
        .and_then(Value::as_str)
        .unwrap_or("per-iteration");
    c.insert("timing".into(), timing.into());
    let once = config.and_then(|v| v.get("warmup_once")).and_then(Value::as_bool);
    c.insert("warmup_once".into(), once.unwrap_or(false).to_string());
    if let Some(cfg) = config.filter(|v| v.get("max_peers").is_some()) {
        let mp = cfg.get("max_peers").and_then(text).unwrap_or_else(|| "all".into());
        c.insert("max_peers".into(), mp);
    }
    if let Some(p) = summary.pointer("/plugin/name").and_then(Value::as_str) {
        c.insert("plugin".into(), p.into());
    }
    if let Some(s) = summary.pointer("/plugin/sha256").and_then(Value::as_str) {
        c.insert("plugin_build".into(), format!("sha256 {}", &s[..s.len().min(12)]));
    }
    if let Some(env) = summary.get("env").and_then(Value::as_object) {
        c.insert("env".into(), figure_env(env));
    }
    c
}

/// A configuration with the job shape ([`crate::model::Run::shape`]'s keys) added: the one
/// map [`check`] compares.
pub fn with_shape(mut c: Configuration, shape: &BTreeMap<&'static str, String>) -> Configuration {
    for (k, v) in shape {
        c.insert((*k).to_string(), v.clone());
    }
    c
}

/// What [`check`] found: refusals (one line per field), what was stated but not refused, and
/// what could not be checked.
#[derive(Debug, Default)]
pub struct Findings {
    pub refusals: Vec<String>,
    pub warnings: Vec<String>,
    /// Per refused field, the value the reference side records (for [`Findings::hint`]).
    reference_values: Vec<(&'static Field, String)>,
}

impl Findings {
    /// One line telling a candidate what would make it comparable with the reference: the
    /// flags and values the reference records.
    pub fn hint(&self) -> Option<String> {
        if self.reference_values.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .reference_values
            .iter()
            .map(|(f, v)| format!("{} {v} ({})", f.name, f.flag))
            .collect();
        Some(format!(
            "comparable with the reference only as a run with {}",
            parts.join(", ")
        ))
    }
}

/// Adds `field` to `side`'s list once.
fn note<'a>(m: &mut BTreeMap<&'a str, Vec<&'a str>>, side: &'a str, field: &'a str) {
    let list = m.entry(side).or_default();
    if !list.contains(&field) {
        list.push(field);
    }
}

/// The one check: for every field, the values the sides record (a side's runs must agree
/// among themselves too). A field two values of which appear is refused, naming the field and
/// each side's value; a side that does not record a field others record, and fields a side
/// marks not applicable, are said in warnings. `sides[0]` is the candidate; the reference's
/// values of refused fields make [`Findings::hint`].
pub fn check(sides: &[(String, Vec<Configuration>)]) -> Findings {
    let mut f = Findings::default();
    // Per side, the fields it marks not applicable, and those it does not record where another
    // side does: one line each.
    let mut not_applicable: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    let mut not_recorded: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for field in FIELDS {
        // Values in the order of the sides that record them (the candidate's first).
        let mut seen: Vec<(&str, BTreeSet<&str>)> = Vec::new();
        let mut unrecorded: BTreeSet<&str> = BTreeSet::new();
        for (side, configs) in sides {
            for c in configs {
                match c.get(field.name).map(String::as_str) {
                    Some(NOT_APPLICABLE) => note(&mut not_applicable, side, field.name),
                    Some(v) => match seen.iter_mut().find(|(x, _)| *x == v) {
                        Some((_, who)) => {
                            who.insert(side.as_str());
                        }
                        None => seen.push((v, BTreeSet::from([side.as_str()]))),
                    },
                    None => {
                        unrecorded.insert(side.as_str());
                    }
                }
            }
        }
        if seen.is_empty() {
            continue;
        }
        for side in unrecorded {
            note(&mut not_recorded, side, field.name);
        }
        if seen.len() < 2 {
            continue;
        }
        let list: Vec<String> = seen
            .iter()
            .map(|(v, who)| format!("{v} ({})", who.iter().copied().collect::<Vec<_>>().join(", ")))
            .collect();
        let line = format!("different {}: {}", field.name, list.join(" vs "));
        if field.refused {
            f.refusals.push(line);
            let reference = seen
                .iter()
                .find(|(_, who)| who.iter().any(|w| Some(*w) != sides.first().map(|s| s.0.as_str())));
            if let Some((v, _)) = reference {
                f.reference_values.push((field, (*v).to_string()));
            }
        } else {
            f.warnings.push(format!("{line} (stated, not refused)"));
        }
    }
    for (side, fields) in not_recorded {
        f.warnings.push(format!(
            "{side} records no {}: not checked against the other side",
            fields.join(", ")
        ));
    }
    for (side, fields) in not_applicable {
        f.warnings
            .push(format!("{side}: not applicable, not compared: {}", fields.join(", ")));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conf(kv: &[(&str, &str)]) -> Configuration {
        kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_difference_names_the_field_and_the_reference_value() {
        let f = check(&[
            (
                "candidate".into(),
                vec![conf(&[("chunk", "131072"), ("channels", "1")])],
            ),
            (
                "baseline b".into(),
                vec![conf(&[("chunk", "524288"), ("channels", "1")])],
            ),
        ]);
        assert_eq!(
            f.refusals,
            ["different chunk: 131072 (candidate) vs 524288 (baseline b)"]
        );
        assert_eq!(
            f.hint().unwrap(),
            "comparable with the reference only as a run with chunk 524288 (--chunk)"
        );
    }

    #[test]
    fn not_applicable_and_unrecorded_fields_are_said() {
        let f = check(&[
            (
                "candidate".into(),
                vec![conf(&[("chunk", "131072"), ("timing", "per-iteration")])],
            ),
            ("baseline b".into(), vec![conf(&[("chunk", NOT_APPLICABLE)])]),
        ]);
        assert!(f.refusals.is_empty());
        assert_eq!(
            f.warnings,
            [
                "baseline b records no timing: not checked against the other side",
                "baseline b: not applicable, not compared: chunk"
            ]
        );
    }
}
