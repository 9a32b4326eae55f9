//! The `history` subcommands' command line (`add`, `detect`, `report`, `nodes`, `export`,
//! `import`).

use super::db::{Added, Db};
use super::detect::{detect, table};
use super::edm::EdmSettings;
use super::import::{import_path, AddOptions};
use super::location::Location;
use super::model::rfc3339;
use super::report_html::count;
use crate::error::{exit, Failure};
use crate::parse::{ParseOptions, Placement};
use clap::{Args, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Subcommand)]
pub enum HistoryCmd {
    /// Store complete runs (tcpx-perf result directories, directories of them, nccl-tests /
    /// rccl-tests logs); a run already stored is left alone; a run the gate would refuse is
    /// refused with its reason (exit 3).
    Add(AddArgs),
    /// Change points per configuration and size (and mean busbw) by E-Divisive with Means.
    /// Exit 0: no regression in any newest segment; 1: a regression; 3: bad input.
    Detect(DetectArgs),
    /// One self-contained HTML page: busbw over time per configuration and size, change points,
    /// NCCL of the same runs, a table of the changes.
    Report(ReportArgs),
    /// Each node's verdicts (tcpx-perf's node_verdicts) over the stored runs, the nodes that
    /// were not healthy first (docs/drain.md).
    Nodes(NodesArgs),
    /// Write the whole history (every run with its figures, samples, provenance and node
    /// verdicts) as JSON lines, e.g. to move it into another database with `history import`.
    Export(ExportArgs),
    /// Store the runs of a `history export` file (runs already stored are left alone):
    /// `history export --db FILE -o - | history import --db postgres://... -`.
    Import(ImportArgs),
}

#[derive(Args)]
pub struct NodesArgs {
    #[command(flatten)]
    db: DbArg,
    /// The newest runs to show.
    #[arg(long, default_value_t = 10)]
    last: usize,
}

#[derive(Args, Clone)]
pub struct DbArg {
    /// The history database: an SQLite file, or postgres://USER@HOST[:PORT]/DB (libpq's URL:
    /// sslmode, connect_timeout, ...; the password from the URL or PGPASSWORD). Default: the
    /// environment variable TCPX_HISTORY_DB, else results/history.sqlite.
    #[arg(long, env = super::DB_ENV, hide_env_values = true, default_value = super::DEFAULT_DB)]
    pub db: String,
}

impl DbArg {
    /// Notes a database file as an input of the command (tcpx_files::note_input), before the
    /// command claims its outputs: none of them may replace it.
    pub fn note_input(&self) {
        if let Ok(Location::File(p)) = Location::parse(&self.db, "--db") {
            tcpx_files::note_input(&p);
        }
    }

    /// Claims a database file as the command's output (tcpx_files::claim_output: a regular file
    /// or none yet, in a directory that exists, none of the command's inputs); a server's
    /// database is no file.
    pub fn claim_output(&self) -> Result<(), Failure> {
        match Location::parse(&self.db, "--db")? {
            Location::File(p) => tcpx_files::claim_output(&p, "--db").map_err(|e| Failure::Input(e.to_string())),
            Location::Postgres(_) => Ok(()),
        }
    }

    /// Opens the database (`create`: history add and import, which create or migrate it).
    pub fn open(&self, create: bool) -> Result<Db, Failure> {
        Db::open_at(&Location::parse(&self.db, "--db")?, create)
    }
}

#[derive(Args)]
pub struct ExportArgs {
    #[command(flatten)]
    db: DbArg,
    /// The file to write (JSON lines); `-`: standard output.
    #[arg(long, short = 'o')]
    out: PathBuf,
}

#[derive(Args)]
pub struct ImportArgs {
    /// A file `history export` wrote; `-`: standard input.
    input: PathBuf,
    #[command(flatten)]
    db: DbArg,
}

#[derive(Args)]
pub struct AddArgs {
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    #[command(flatten)]
    db: DbArg,
    /// Start time (RFC 3339 UTC) of inputs that record none (logs); default: the file's mtime.
    #[arg(long)]
    start_time: Option<String>,
    /// nccl-tests placement to read.
    #[arg(long, value_enum, default_value_t = Placement::OutOfPlace)]
    placement: Placement,
    /// Collective to assume for nccl-tests inputs that do not name it.
    #[arg(long)]
    pattern: Option<String>,
    /// Runs stored only where a flag names them; stored with the mark, which every gate
    /// against the history then needs and names.
    #[command(flatten)]
    allow: crate::admit::Allow,
}

/// The detector's settings.
#[derive(Args, Clone)]
pub struct EdmArgs {
    /// Significance level of the permutation test.
    #[arg(long, default_value_t = EdmSettings::default().significance)]
    pub significance: f64,
    /// Permutations per test.
    #[arg(long, default_value_t = EdmSettings::default().permutations)]
    pub permutations: usize,
    /// Fewest runs a segment may hold.
    #[arg(long, default_value_t = EdmSettings::default().min_segment)]
    pub min_segment: usize,
    /// Exponent of the distance, in (0, 2).
    #[arg(long, default_value_t = EdmSettings::default().alpha)]
    pub edm_alpha: f64,
    /// Seed of the permutations (the same seed gives the same answer).
    #[arg(long, default_value_t = EdmSettings::default().seed)]
    pub seed: u64,
}

impl EdmArgs {
    pub fn settings(&self) -> Result<EdmSettings, Failure> {
        let open = |x: f64, hi: f64| x > 0.0 && x < hi;
        if !open(self.significance, 1.0) || !open(self.edm_alpha, 2.0) || self.permutations < 19 || self.min_segment < 2
        {
            return Err(Failure::Usage(
                "--significance in (0,1), --edm-alpha in (0,2), --permutations >= 19, --min-segment >= 2".into(),
            ));
        }
        if 1.0 / (self.permutations as f64 + 1.0) > self.significance {
            return Err(Failure::Usage(format!(
                "--permutations {} cannot reach --significance {}: use at least {}",
                self.permutations,
                self.significance,
                (1.0 / self.significance).ceil() as usize
            )));
        }
        Ok(EdmSettings {
            alpha: self.edm_alpha,
            significance: self.significance,
            permutations: self.permutations,
            min_segment: self.min_segment,
            seed: self.seed,
        })
    }
}

#[derive(Args)]
pub struct DetectArgs {
    #[command(flatten)]
    db: DbArg,
    #[command(flatten)]
    edm: EdmArgs,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
pub struct ReportArgs {
    #[command(flatten)]
    db: DbArg,
    #[command(flatten)]
    edm: EdmArgs,
    /// Output HTML file.
    #[arg(long, short = 'o')]
    out: PathBuf,
}

fn now() -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    rfc3339(s)
}

fn add(a: &AddArgs) -> Result<i32, Failure> {
    let o = AddOptions {
        parse: ParseOptions {
            placement: a.placement,
            pattern: a.pattern.clone(),
            allow_truncated: false,
        },
        start_time: a.start_time.clone(),
        allow: a.allow,
    };
    // The database is this command's output: a regular file or none yet, in a directory that
    // exists, none of the runs' files.
    crate::input::note_inputs(&a.inputs);
    a.db.claim_output()?;
    // Every input is read and checked before anything is written: a refused input leaves the
    // database as it was.
    let mut records = Vec::new();
    for p in &a.inputs {
        records.extend(import_path(p, &o)?);
    }
    let db = a.db.open(true)?;
    let at = now();
    let (mut new, mut present) = (0, 0);
    for (k, r) in records.iter().enumerate() {
        let added = db.add(r, &at).map_err(|e| match e {
            Failure::Input(m) => Failure::Input(format!(
                "{m}; {} not stored ({} of {}), the {new} added before it are stored whole: run the same `history add` again (stored runs are skipped)",
                r.provenance.source,
                k + 1,
                records.len()
            )),
            e => e,
        })?;
        match added {
            Added::New(id) => {
                new += 1;
                println!("added run {id}: {} ({})", r.provenance.source, r.provenance.start_time);
                if let Some(w) = &r.allowed {
                    println!("  marked {w} (admitted by --allow-*): every gate against it must allow and names it");
                }
            }
            Added::Present(id) => {
                present += 1;
                println!("already stored as run {id}: {}", r.provenance.source);
            }
            Added::Copy(id, why) => {
                present += 1;
                println!(
                    "already stored as run {id}: {} is the same run ({why})",
                    r.provenance.source
                );
            }
        }
    }
    println!(
        "{}: {new} run(s) added, {present} already stored, {} in all",
        db.name(),
        db.run_count()?
    );
    Ok(exit::PASS)
}

fn run_detect(a: &DetectArgs) -> Result<i32, Failure> {
    let s = a.edm.settings()?;
    let db = a.db.open(false)?;
    let d = detect(&db, &s)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&d).unwrap_or_default());
    } else {
        print!("{}", table(&d));
    }
    Ok(d.exit_code)
}

fn report(a: &ReportArgs) -> Result<i32, Failure> {
    let s = a.edm.settings()?;
    a.db.note_input();
    tcpx_files::claim_output(&a.out, "-o").map_err(|e| Failure::Input(e.to_string()))?;
    let db = a.db.open(false)?;
    let d = detect(&db, &s)?;
    // Run links are relative to the page's directory (they work in a CI artifact).
    let report_dir = a
        .out
        .parent()
        .map(|p| if p.as_os_str().is_empty() { Path::new(".") } else { p })
        .and_then(|p| std::fs::canonicalize(p).ok());
    let page = super::report_html::html(&d, db.name(), &db.node_verdicts()?, report_dir.as_deref());
    // Whole or absent (a full disk leaves no cut-off page), never through a link.
    tcpx_files::write_bytes(&a.out, tcpx_files::Durability::Synced, page.as_bytes())
        .map_err(|e| Failure::Input(e.to_string()))?;
    println!(
        "wrote {} ({}, {})",
        a.out.display(),
        count(d.series.len(), "series", "series"),
        count(
            d.series.iter().map(|s| s.changes.len()).sum::<usize>(),
            "change point",
            "change points"
        )
    );
    Ok(exit::PASS)
}

fn export(a: &ExportArgs) -> Result<i32, Failure> {
    a.db.note_input();
    if a.out.as_os_str() == "-" {
        // `-o - >> DB` would append the export to the database it reads.
        super::transfer::refuse_stdout_database(&Location::parse(&a.db.db, "--db")?)?;
    } else {
        tcpx_files::claim_output(&a.out, "-o").map_err(|e| Failure::Input(e.to_string()))?;
    }
    let db = a.db.open(false)?;
    let n = if a.out.as_os_str() == "-" {
        super::transfer::export(&db, &mut std::io::stdout().lock())?
    } else {
        // Whole or absent, never through a link (as the report).
        let mut bytes = Vec::new();
        let n = super::transfer::export(&db, &mut bytes)?;
        tcpx_files::write_bytes(&a.out, tcpx_files::Durability::Synced, &bytes)
            .map_err(|e| Failure::Input(e.to_string()))?;
        n
    };
    // Standard output may be the export itself: the summary goes to standard error.
    eprintln!("{}: exported {}", db.name(), count(n, "run", "runs"));
    Ok(exit::PASS)
}

fn import(a: &ImportArgs) -> Result<i32, Failure> {
    let name = a.input.display().to_string();
    let mut input: Box<dyn std::io::BufRead> = if name == "-" {
        // Bounded as a file is, and never the database written (`- < DB`).
        super::transfer::stdin_export(&Location::parse(&a.db.db, "--db")?)?
    } else {
        // A regular file, opened without blocking (a FIFO is refused), of a bounded size.
        let f = tcpx_files::open_input(&a.input, tcpx_files::Bound::HISTORY_EXPORT)
            .map_err(|e| Failure::Input(e.to_string()))?;
        Box::new(std::io::BufReader::new(f))
    };
    a.db.claim_output()?;
    // The whole file is read and checked before the database is opened.
    let export = super::transfer::read(&mut input, &name)?;
    let db = a.db.open(true)?;
    let done = super::transfer::import(&db, export)?;
    for c in &done.copies {
        println!("{c}");
    }
    println!(
        "{}: {} imported, {} already stored, {} in all",
        db.name(),
        count(done.added, "run", "runs"),
        done.present,
        db.run_count()?
    );
    Ok(exit::PASS)
}

/// Runs one `history` subcommand: its exit status.
pub fn run(c: &HistoryCmd) -> Result<i32, Failure> {
    match c {
        HistoryCmd::Add(a) => add(a),
        HistoryCmd::Detect(a) => run_detect(a),
        HistoryCmd::Report(a) => report(a),
        HistoryCmd::Nodes(a) => {
            if a.last == 0 {
                return Err(Failure::Usage(
                    "--last 0 shows no run: give 1 or more (the newest runs to show; default 10)".into(),
                ));
            }
            let db = a.db.open(false)?;
            print!("{}", super::nodes::table(&db.node_verdicts()?, a.last));
            Ok(exit::PASS)
        }
        HistoryCmd::Export(a) => export(a),
        HistoryCmd::Import(a) => import(a),
    }
}
