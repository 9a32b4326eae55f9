//! `tcpx-analyze`: compare tcpx-perf / nccl-tests results with baselines, gate CI, plot.

// print!/println!/eprint!/eprintln! that never panic on a closed stdout or stderr (a pipe to
// `head`): the exit status stays the run's (see tcpx_files::console).
#[macro_use]
extern crate tcpx_files;

use clap::{Args, Parser, Subcommand};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tcpx_analyze::admit::{self, Allow};
use tcpx_analyze::baseline::{self, Baseline};
use tcpx_analyze::compare::{self, Reference, Settings};
use tcpx_analyze::decision;
use tcpx_analyze::error::{exit, Failure};
use tcpx_analyze::model::{Metric, Run};
use tcpx_analyze::parse::{self, ParseOptions, Placement};
use tcpx_analyze::{plot, report, validate};
use tcpx_units::{format_size_label, parse_size};

const EXIT_CODES: &str = "\
Exit codes:
  0   pass (gate), or success (compare/plot/show)
  1   regression: at least one comparison is a regression
  2   inconclusive: no regression, but at least one comparison is inconclusive (too few
      runs for the run-to-run spread: the verdict says how many would decide; a baseline
      of unknown spread); --allow-inconclusive turns this into 0
  3   invalid input: unreadable/malformed/missing file, incomplete run, missing sizes,
      wrong data (#wrong > 0) or a run status other than ok
  4   refused: apples-to-oranges comparison (different patterns, a mean over a different
      size range, GB/s vs GiB/s, unknown collective, different endpoint/MPI rank/node
      counts); --force overrides and says why
  64  usage error (bad command line)";

#[derive(Parser)]
#[command(
    name = "tcpx-analyze",
    version,
    about = "Statistical comparison of tcpx-perf and nccl-tests results against baselines; CI regression gate; SVG plots",
    after_help = EXIT_CODES
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Compare a candidate with references, one observation per run: geometric-mean ratio over
    /// sizes, its interval, one-sided t tests against the threshold, runs needed; per-size
    /// figures as diagnostics. Exit 0 unless the input is bad or refused.
    Compare(CompareArgs),
    /// Like compare, then turn the verdicts into an exit status (fails closed). See the exit codes.
    #[command(after_help = EXIT_CODES)]
    Gate(GateArgs),
    /// SVG of bandwidth vs size (log2 axis): each run's headline figures with its iterations'
    /// p10-p90 band, baselines overlaid (per-size points, dashed floors, dotted means).
    Plot(PlotArgs),
    /// SVG heatmap of the per-pair link matrix (tcpx-perf pairs.csv) by node and NIC, the run's
    /// node verdicts named and their NIC sides outlined; robust z of the pair rates as another view.
    Heatmap(HeatmapArgs),
    /// Print a parsed input (run or baseline file) as a table.
    Show(ShowArgs),
    /// Write a baseline file (.toml) from trusted run(s), to commit and gate against.
    MakeBaseline(MakeBaselineArgs),
    /// Runs per side a gate needs, for a run-to-run spread (given, or measured from runs).
    RunsNeeded(RunsNeededArgs),
    /// Run history: every run in one database (add), change points (detect), one HTML page (report).
    #[command(subcommand)]
    History(tcpx_analyze::history::cli::HistoryCmd),
}

#[derive(Args)]
struct RunsNeededArgs {
    /// Runs of one configuration to measure the spread from (busbw, geometric mean over sizes).
    inputs: Vec<PathBuf>,
    /// Run-to-run spread (sd of the log of a run's figure, about its CV), e.g. 0.05.
    #[arg(long)]
    spread: Option<f64>,
    /// The slowdown to detect, as a fraction (0.2 = 20% slower).
    #[arg(long, default_value_t = 0.2)]
    slowdown: f64,
    #[command(flatten)]
    rule: RuleArgs,
    #[command(flatten)]
    input: InputOpts,
}

/// The decision rule's settings, shared by compare/gate and runs-needed.
#[derive(Args, Clone)]
struct RuleArgs {
    /// Practical threshold: slowdowns smaller than this fraction are not regressions.
    #[arg(long, default_value_t = 0.05)]
    threshold: f64,
    /// One-sided level of the regression test: the false-alarm rate on unchanged code.
    #[arg(long, default_value_t = 0.01)]
    alpha: f64,
    /// One-sided level of the pass test: the rate at which a slowdown beyond the threshold passes.
    #[arg(long, default_value_t = 0.05)]
    pass_alpha: f64,
}

impl RuleArgs {
    fn check(&self) -> Result<(), Failure> {
        let level = |x: f64| x > 0.0 && x < 0.5;
        if !(0.0..1.0).contains(&self.threshold) || !level(self.alpha) || !level(self.pass_alpha) {
            return Err(Failure::Usage(
                "--threshold must be in [0,1), --alpha and --pass-alpha in (0,0.5)".into(),
            ));
        }
        Ok(())
    }
}

#[derive(Args)]
struct MakeBaselineArgs {
    /// Run inputs (one pattern), 5 or more for a baseline the gate can judge significance
    /// against: each entry stores one headline figure per run.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Baseline name.
    #[arg(long)]
    name: String,
    /// Free-text description (hardware, plugin, what the baseline stands for).
    #[arg(long, default_value = "")]
    description: String,
    /// Metrics to store (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "busbw")]
    metric: Vec<String>,
    /// Output file.
    #[arg(long, short = 'o')]
    out: PathBuf,
    /// Runs that only a flag naming them admits; the baseline's description says which.
    #[command(flatten)]
    allow: Allow,
    #[command(flatten)]
    input: InputOpts,
}

#[derive(Args, Clone)]
struct InputOpts {
    /// nccl-tests placement to read.
    #[arg(long, value_enum, default_value_t = Placement::OutOfPlace)]
    placement: Placement,
    /// Collective to assume for nccl-tests inputs that do not name it, or name one of no known
    /// family (e.g. sendrecv_perf, all_reduce_perf, alltoall_perf).
    #[arg(long)]
    pattern: Option<String>,
    /// Use the rows of a stdout table that stops before its footer with no error after it (an
    /// excerpt, a cut log); crashed runs are refused regardless.
    #[arg(long)]
    allow_truncated: bool,
}

impl InputOpts {
    fn parse_options(&self) -> ParseOptions {
        ParseOptions {
            placement: self.placement,
            pattern: self.pattern.clone(),
            allow_truncated: self.allow_truncated,
        }
    }
}

#[derive(Args, Clone)]
struct CompareArgs {
    /// Candidate inputs: tcpx-perf result directories (or a directory of them), results.csv,
    /// nccl-tests stdout logs or JSON. Several inputs = several runs of the candidate.
    #[arg(required = true)]
    candidate: Vec<PathBuf>,
    /// References: baseline files (.toml) and/or run inputs like the candidate's (a result
    /// directory, a directory of them, files). Takes several values (`-B A B`); the run inputs
    /// together form one reference, each baseline file is one more. Without -B: NCCL of the
    /// candidates' own runs (tcpx-perf --baseline nccl: same job, same GPUs, same plugin).
    #[arg(long, short = 'B', num_args = 1..)]
    baseline: Vec<PathBuf>,
    /// Reference instead of -B: per candidate configuration, the runs of its last stable segment
    /// in this history database (after its newest change point; see `history detect`).
    /// An SQLite file or postgres://USER@HOST[:PORT]/DB, as `history --db`.
    #[arg(long, conflicts_with = "baseline")]
    history: Option<String>,
    /// Metrics to compare (comma-separated): busbw, algbw, time. Default: all for compare, busbw for gate.
    #[arg(long, value_delimiter = ',')]
    metric: Vec<String>,
    #[command(flatten)]
    rule: RuleArgs,
    /// Gate only these sizes, MIN..MAX (e.g. 1M..64M); mean-over-sizes baselines keep theirs.
    #[arg(long)]
    sizes: Option<String>,
    /// Compare despite apples-to-oranges reasons (they are still reported).
    #[arg(long)]
    force: bool,
    /// Convert baseline values given in GiB/s to GB/s (otherwise such a baseline is refused).
    #[arg(long)]
    convert_units: bool,
    /// Treat baseline values of unknown spread (no `runs` >= 2) as exact: the candidate's
    /// run-to-run spread alone decides (a single candidate run: the point ratio).
    #[arg(long)]
    allow_point_estimates: bool,
    /// Only compare tcpx-perf series whose scope/dir/mem variant contains this text.
    #[arg(long)]
    variant: Option<String>,
    /// Write the Markdown summary to this file (it is also printed).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Write the JSON verdict to this file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Runs the gate refuses unless a flag names them (forced, unchecked, below
    /// NCCL_TESTS_MIN_BW, a results.csv without its summary.json); the verdict says which.
    #[command(flatten)]
    allow: Allow,
    #[command(flatten)]
    input: InputOpts,
}

#[derive(Args, Clone)]
struct GateArgs {
    #[command(flatten)]
    c: CompareArgs,
    /// Let inconclusive comparisons pass (by default they fail: exit 2).
    #[arg(long)]
    allow_inconclusive: bool,
}

#[derive(Args)]
struct PlotArgs {
    /// Run inputs to plot (each is one line).
    inputs: Vec<PathBuf>,
    /// Baseline files (.toml) to overlay (several values or repeated).
    #[arg(long, short = 'B', num_args = 1..)]
    baseline: Vec<PathBuf>,
    /// Output SVG file.
    #[arg(long, short = 'o')]
    out: PathBuf,
    /// Metric on the y axis.
    #[arg(long, default_value = "busbw")]
    metric: String,
    /// Plot title.
    #[arg(long)]
    title: Option<String>,
    /// Convert GiB/s baseline values to GB/s.
    #[arg(long)]
    convert_units: bool,
    /// Logarithmic y axis.
    #[arg(long)]
    log_y: bool,
    #[command(flatten)]
    input: InputOpts,
}

#[derive(Args)]
struct HeatmapArgs {
    /// tcpx-perf result directories with pairs.csv.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    #[arg(long, short = 'o')]
    out: PathBuf,
    /// Size to show (bytes or 1K/64M/1G); default: the largest.
    #[arg(long)]
    size: Option<String>,
    /// Pattern to show when pairs.csv holds several.
    #[arg(long)]
    pattern: Option<String>,
    /// Robust z-score limit of the other view, pair rates against each other (Iglewicz-Hoaglin
    /// suggest 3.5): outlined inset and listed, never a verdict.
    #[arg(long, default_value_t = 3.5)]
    z: f64,
    #[arg(long)]
    title: Option<String>,
}

#[derive(Args)]
struct ShowArgs {
    /// A run input or a baseline file (.toml).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    #[command(flatten)]
    input: InputOpts,
}

fn load_runs(paths: &[PathBuf], o: &InputOpts) -> Result<Vec<Run>, Failure> {
    parse::load_paths(paths, &o.parse_options())
}

fn metrics(v: &[String], default: &[Metric]) -> Result<Vec<Metric>, Failure> {
    if v.is_empty() {
        return Ok(default.to_vec());
    }
    v.iter()
        .map(|m| Metric::parse(m).ok_or_else(|| Failure::Usage(format!("unknown metric {m:?} (busbw, algbw, time)"))))
        .collect()
}

fn size_range(v: Option<&str>) -> Result<Option<(u64, u64)>, Failure> {
    let Some(t) = v else { return Ok(None) };
    let bad = || Failure::Usage(format!("--sizes {t:?}: use MIN..MAX, e.g. 1M..64M"));
    let (a, b) = t.split_once("..").ok_or_else(bad)?;
    let (a, b) = (parse_size(a).map_err(|_| bad())?, parse_size(b).map_err(|_| bad())?);
    if a > b {
        return Err(bad());
    }
    Ok(Some((a, b)))
}

fn settings(a: &CompareArgs, default_metrics: &[Metric], allow_inconclusive: bool) -> Result<Settings, Failure> {
    a.rule.check()?;
    Ok(Settings {
        metrics: metrics(&a.metric, default_metrics)?,
        threshold: a.rule.threshold,
        alpha: a.rule.alpha,
        pass_alpha: a.rule.pass_alpha,
        sizes: size_range(a.sizes.as_deref())?,
        force: a.force,
        convert_units: a.convert_units,
        allow_point_estimates: a.allow_point_estimates,
        allow_inconclusive,
        variant: a.variant.clone(),
    })
}

/// The references of `-B`: all run inputs together, then each baseline file. Without `-B`, the
/// NCCL figures recorded in the candidates' own runs (`tcpx-perf --baseline nccl`).
fn references(
    a: &CompareArgs,
    cands: &[Run],
    allow: Allow,
    notes: &mut Vec<String>,
) -> Result<Vec<Reference>, Failure> {
    if let Some(db) = &a.history {
        let at = tcpx_analyze::history::location::Location::parse(db, "--history")?;
        let db = tcpx_analyze::history::db::Db::open_at(&at, false)?;
        let add = tcpx_analyze::history::import::AddOptions {
            parse: a.input.parse_options(),
            start_time: None,
            allow,
        };
        let edm = tcpx_analyze::history::edm::EdmSettings::default();
        let (mut runs, history_notes) = tcpx_analyze::history::gate::references(&db, &a.candidate, &add, &edm)?;
        for n in history_notes {
            println!("history reference: {n}");
        }
        notes.extend(admit::policy(&mut runs, allow)?);
        return Ok(vec![Reference::Runs(runs)]);
    }
    if a.baseline.is_empty() {
        let mut same_run = Vec::new();
        for c in cands {
            match parse::tcpx::nccl_reference(c)? {
                Some(r) => same_run.push(r),
                None => {
                    return Err(Failure::Usage(format!(
                        "{}: no -B given and the run has no NCCL figures (run tcpx-perf --baseline nccl, or give -B BASELINE)",
                        c.source
                    )))
                }
            }
        }
        return Ok(vec![Reference::Runs(same_run)]);
    }
    let (files, runs): (Vec<PathBuf>, Vec<PathBuf>) =
        a.baseline.iter().cloned().partition(|p| baseline::is_baseline_path(p));
    let mut out = Vec::new();
    if !runs.is_empty() {
        let mut refs = load_runs(&runs, &a.input)?;
        notes.extend(admit::policy(&mut refs, allow)?);
        admit::disjoint(cands, &refs)?;
        out.push(Reference::Runs(refs));
    }
    for f in &files {
        let b = baseline::load(f)?;
        notes.extend(admit::baseline_policy(&b, allow)?);
        admit::not_in_baseline(cands, &b)?;
        out.push(Reference::Baseline(Box::new(b)));
    }
    Ok(out)
}

/// Takes the command's outputs before it reads anything ([`tcpx_files::claim_output`]): each a
/// regular file or nothing, in a directory that exists, no two at one path, and none a file of
/// its inputs, which are noted first ([`tcpx_analyze::input::note_inputs`]). One line naming the
/// path otherwise.
fn claim(inputs: &[&[PathBuf]], outputs: &[(&str, Option<&PathBuf>)]) -> Result<(), Failure> {
    for i in inputs {
        tcpx_analyze::input::note_inputs(i);
    }
    for (flag, path) in outputs {
        if let Some(p) = path {
            tcpx_files::claim_output(p, flag).map_err(|e| Failure::Input(e.to_string()))?;
        }
    }
    Ok(())
}

/// Writes a report or baseline whole or not at all, never through a link: a full disk is an
/// error naming `p` (`cannot write P: No space left on device`), never a cut-off file.
fn write_file(p: &Path, text: &str) -> Result<(), Failure> {
    tcpx_files::write_bytes(p, tcpx_files::Durability::Synced, text.as_bytes())
        .map_err(|e| Failure::Input(e.to_string()))
}

/// Writes a minimal JSON verdict when the analysis could not even start (CI still gets a file).
fn write_failure_json(a: &CompareArgs, f: &Failure) {
    if let Some(p) = &a.json {
        let v = serde_json::json!({
            "tool": format!("tcpx-analyze {}", env!("CARGO_PKG_VERSION")),
            "verdict": match f { Failure::Refused(_) => "refused", Failure::Usage(_) => "usage", Failure::Input(_) => "invalid input" },
            "exit_code": f.exit_code(),
            "problems": [f.to_string()],
            "comparisons": [],
        });
        if let Err(e) = write_file(p, &serde_json::to_string_pretty(&v).unwrap_or_default()) {
            eprintln!("tcpx-analyze: {e}");
        }
    }
}

fn run_compare(a: &CompareArgs, gate: bool, allow_inconclusive: bool) -> anyhow::Result<i32> {
    let default_metrics: &[Metric] = if gate { &[Metric::Busbw] } else { &Metric::ALL };
    // compare only reports: runs the gate would refuse are named in its warnings.
    let allow = if gate { a.allow } else { Allow::ALL };
    // Outputs that cannot be written as given write nothing, not even the failure JSON.
    // A history file (not a server's database) is an input too.
    let history: Vec<PathBuf> = match a
        .history
        .as_deref()
        .map(|h| tcpx_analyze::history::location::Location::parse(h, "--history"))
    {
        Some(Ok(tcpx_analyze::history::location::Location::File(p))) => vec![p],
        _ => Vec::new(),
    };
    claim(
        &[&a.candidate, &a.baseline, &history],
        &[("--json", a.json.as_ref()), ("--markdown", a.markdown.as_ref())],
    )?;
    let res = (|| {
        let s = settings(a, default_metrics, allow_inconclusive)?;
        let mut cands = load_runs(&a.candidate, &a.input)?;
        let mut notes = admit::policy(&mut cands, allow)?;
        let r = references(a, &cands, allow, &mut notes)?;
        let mut rep = compare::analyze(&cands, &r, &s);
        rep.verdict = format!("{}{}", rep.verdict, admit::verdict_mark(&notes));
        rep.warnings.extend(notes);
        Ok::<_, Failure>(rep)
    })();
    let rep = match res {
        Ok(r) => r,
        Err(f) => {
            write_failure_json(a, &f);
            return Err(f.into());
        }
    };
    let title = if gate {
        "tcpx-analyze gate"
    } else {
        "tcpx-analyze compare"
    };
    let md = report::markdown(&rep, title);
    print!("{md}");
    if let Some(p) = &a.markdown {
        write_file(p, &md)?;
    }
    if let Some(p) = &a.json {
        write_file(p, &report::json(&rep))?;
    }
    if gate {
        Ok(rep.exit_code)
    } else {
        // compare reports; only bad input or a refusal changes its exit status.
        Ok(match rep.exit_code {
            exit::INVALID_INPUT | exit::REFUSED => rep.exit_code,
            _ => exit::PASS,
        })
    }
}

fn run_plot(a: &PlotArgs) -> anyhow::Result<i32> {
    let metric = Metric::parse(&a.metric).ok_or_else(|| Failure::Usage(format!("unknown metric {:?}", a.metric)))?;
    claim(&[&a.inputs, &a.baseline], &[("-o", Some(&a.out))])?;
    let runs = load_runs(&a.inputs, &a.input)?;
    let bases: Vec<Baseline> = a.baseline.iter().map(|p| baseline::load(p)).collect::<Result<_, _>>()?;
    if runs.is_empty() && bases.is_empty() {
        return Err(Failure::Usage("nothing to plot: give inputs and/or --baseline files".into()).into());
    }
    let lines = plot::lines_from_runs(&runs, metric);
    let title = a
        .title
        .clone()
        .unwrap_or_else(|| format!("{} vs message size", metric.name()));
    plot::plot_bandwidth(&a.out, &title, metric, &lines, &bases, a.convert_units, a.log_y).map_err(Failure::Input)?;
    println!("wrote {}", a.out.display());
    Ok(exit::PASS)
}

fn run_heatmap(a: &HeatmapArgs) -> anyhow::Result<i32> {
    let size = match &a.size {
        Some(s) => Some(parse_size(s).map_err(|_| Failure::Usage(format!("bad size {s:?}")))?),
        None => None,
    };
    claim(&[&a.inputs], &[("-o", Some(&a.out))])?;
    let runs = parse::load_paths(&a.inputs, &ParseOptions::default())?;
    let (size, links) = plot::select_pairs(&runs, size, a.pattern.as_deref()).map_err(Failure::Input)?;
    let title = a
        .title
        .clone()
        .unwrap_or_else(|| format!("per-pair bandwidth (GB/s) at {}", format_size_label(size)));
    let contexts = runs
        .iter()
        .map(plot::context)
        .collect::<Result<Vec<_>, _>>()
        .map_err(Failure::Input)?;
    let drawn = plot::plot_heatmap(&a.out, &title, &links, &contexts, a.z).map_err(Failure::Input)?;
    println!(
        "wrote {} ({} links at {})",
        a.out.display(),
        links.len(),
        format_size_label(size)
    );
    print!("{}", plot::report(&drawn, a.z));
    Ok(exit::PASS)
}

fn run_show(a: &ShowArgs) -> anyhow::Result<i32> {
    for p in &a.inputs {
        if baseline::is_baseline_path(p) {
            let b = baseline::load(p)?;
            println!("baseline {} ({}), pattern {}", b.name, b.file, b.pattern);
            println!(
                "  runs: {}; shape: {:?}; plugin: {}",
                b.runs.map_or("unknown".into(), |r| r.to_string()),
                b.shape(),
                b.job.plugin.as_deref().unwrap_or("unknown")
            );
            if !b.description.is_empty() {
                println!("  {}", b.description);
            }
            let config: Vec<String> = b.config.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!(
                "  config: {}",
                if config.is_empty() {
                    "not recorded (nothing of how its runs were made is checked)".to_string()
                } else {
                    config.join(" ")
                }
            );
            for (k, v) in &b.provenance {
                println!("  {k}: {v}");
            }
            println!("| metric | statistic | sizes | value(s) | spread | unit | note |");
            println!("|---|---|---|---|---|---|---|");
            for e in &b.entries {
                let vals = e.values.iter().map(|v| format!("{v}")).collect::<Vec<_>>().join(", ");
                println!(
                    "| {} | {:?} | {}..{} | {vals} | {} | {} | {} |",
                    e.metric,
                    e.statistic,
                    format_size_label(e.size_min),
                    format_size_label(e.size_max),
                    e.spread.map_or("-".into(), |s| format!("{:.1}%", s * 100.0)),
                    e.unit.as_str(),
                    e.note
                );
            }
            continue;
        }
        for run in load_runs(std::slice::from_ref(p), &a.input)? {
            println!("run {} ({:?})", run.source, run.format);
            for (k, v) in &run.labels {
                println!("  {k}: {v}");
            }
            if let Some(w) = run.wrong_total {
                println!("  wrong total: {w}");
            }
            if let Some(s) = &run.status {
                println!("  status: {s}");
            }
            for ser in &run.series {
                let fam = ser.family.map_or("unknown", tcpx_analyze::model::Family::short);
                println!("\npattern {} (family {fam}) {}", ser.pattern, ser.variant);
                println!("| size | time (us) | algbw (GB/s) | busbw (GB/s) | #wrong | n samples | median busbw | min busbw | max busbw |");
                println!("|---|---|---|---|---|---|---|---|---|");
                for r in ser.rows.values() {
                    let b: Vec<f64> = r.samples.iter().map(|s| s.busbw).collect();
                    let (med, lo, hi) = if b.is_empty() {
                        ("-".to_string(), "-".to_string(), "-".to_string())
                    } else {
                        (
                            format!("{:.3}", tcpx_units::median(&b)),
                            format!("{:.3}", b.iter().copied().fold(f64::INFINITY, f64::min)),
                            format!("{:.3}", b.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
                        )
                    };
                    println!(
                        "| {} | {:.2} | {:.3} | {:.3} | {} | {} | {med} | {lo} | {hi} |",
                        format_size_label(r.size),
                        r.summary.time_us,
                        r.summary.algbw,
                        r.summary.busbw,
                        r.wrong.map_or_else(|| "N/A".into(), |w| w.to_string()),
                        r.samples.len()
                    );
                }
            }
            if !run.pairs.is_empty() {
                println!("\n{} pair links", run.pairs.len());
            }
        }
    }
    Ok(exit::PASS)
}

fn run_make_baseline(a: &MakeBaselineArgs) -> anyhow::Result<i32> {
    claim(&[&a.inputs], &[("-o", Some(&a.out))])?;
    let mut runs = load_runs(&a.inputs, &a.input)?;
    // What each run needed, before the policy counts its status as ok.
    let waived = admit::waived(&runs);
    let notes = admit::policy(&mut runs, a.allow)?;
    for n in &notes {
        println!("{n}");
    }
    for r in &runs {
        if r.wrong_count() > 0.0 || r.status.as_deref().is_some_and(|s| s != "ok") {
            return Err(Failure::Input(format!("{}: wrong data or failed run: not a baseline", r.source)).into());
        }
    }
    let ms = metrics(&a.metric, &[Metric::Busbw])?;
    let description = if notes.is_empty() {
        a.description.clone()
    } else {
        format!("{}{}: {}", a.description, admit::verdict_mark(&notes), notes.join("; "))
    };
    let text = baseline::from_runs(&a.name, &runs, &ms, &description, &waived).map_err(Failure::Input)?;
    write_file(&a.out, &text)?;
    println!("wrote {}", a.out.display());
    Ok(exit::PASS)
}

fn run_runs_needed(a: &RunsNeededArgs) -> anyhow::Result<i32> {
    a.rule.check()?;
    if !(0.0..1.0).contains(&a.slowdown) {
        return Err(Failure::Usage("--slowdown must be in [0,1)".into()).into());
    }
    // The gate calls a slowdown a regression only beyond the threshold: no number of runs
    // detects one at or below it.
    if a.slowdown <= a.rule.threshold {
        return Err(Failure::Usage(format!(
            "--slowdown {} is at or below the gate's --threshold {}: the gate never calls such a slowdown a regression; give a larger --slowdown (or a smaller --threshold)",
            a.slowdown, a.rule.threshold
        ))
        .into());
    }
    let r = &a.rule;
    let spread = match (a.spread, a.inputs.is_empty()) {
        (Some(s), true) => validate::spread(s)?,
        (None, false) => {
            let runs = load_runs(&a.inputs, &a.input)?;
            let logs: Vec<f64> = runs
                .iter()
                .map(|r| {
                    let v: Vec<f64> = r
                        .series
                        .iter()
                        .flat_map(|s| s.rows.values())
                        .map(|x| x.summary.busbw)
                        .collect();
                    if v.iter().any(|x| *x < compare::NEAR_ZERO_GBPS) {
                        return Err(Failure::Input(format!(
                            "{}: a busbw below {} GB/s",
                            r.source,
                            compare::NEAR_ZERO_GBPS
                        )));
                    }
                    Ok(v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64)
                })
                .collect::<Result<_, _>>()?;
            if logs.len() < 3 {
                return Err(Failure::Input("give >= 3 runs to measure a spread".into()).into());
            }
            let s = tcpx_analyze::stats::var(&logs).sqrt();
            println!(
                "measured run-to-run spread over {} runs (busbw, geometric mean over sizes): {:.1}%",
                logs.len(),
                s * 100.0
            );
            s
        }
        _ => return Err(Failure::Usage("give either --spread or runs to measure it from".into()).into()),
    };
    let margin = (1.0 - r.threshold).ln();
    let need = |ratio: f64, level: f64| decision::runs_needed(spread, ratio.ln() - margin, level, decision::POWER);
    let say = |n: Option<usize>| n.map_or(format!("more than {}", decision::MAX_RUNS), |n| n.to_string());
    println!(
        "spread {:.1}%, threshold {:.1}%, alpha {} (regression) / {} (pass), power {:.0}%:",
        spread * 100.0,
        r.threshold * 100.0,
        r.alpha,
        r.pass_alpha,
        decision::POWER * 100.0
    );
    println!(
        "  runs per side to call a {:.0}% slowdown a regression: {}",
        a.slowdown * 100.0,
        say(need(1.0 - a.slowdown, r.alpha))
    );
    println!(
        "  runs per side to pass an unchanged configuration: {}",
        say(need(1.0, r.pass_alpha))
    );
    Ok(exit::PASS)
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return match e.kind() {
                clap::error::ErrorKind::DisplayHelp | clap::error::ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::from(exit::USAGE as u8),
            };
        }
    };
    let res = match &cli.cmd {
        Cmd::Compare(a) => run_compare(a, false, false),
        Cmd::Gate(g) => run_compare(&g.c, true, g.allow_inconclusive),
        Cmd::Plot(a) => run_plot(a),
        Cmd::Heatmap(a) => run_heatmap(a),
        Cmd::Show(a) => run_show(a),
        Cmd::MakeBaseline(a) => run_make_baseline(a),
        Cmd::RunsNeeded(a) => run_runs_needed(a),
        Cmd::History(h) => tcpx_analyze::history::cli::run(h).map_err(anyhow::Error::from),
    };
    match res {
        Ok(code) => ExitCode::from(code as u8),
        Err(e) => {
            // A Failure (the library's typed errors, in context) carries its documented exit
            // code; any other error is bad input.
            let code = e
                .downcast_ref::<Failure>()
                .map_or(exit::INVALID_INPUT, Failure::exit_code);
            eprintln!("tcpx-analyze: {e:#}");
            ExitCode::from(code as u8)
        }
    }
}
