//! Run history: every run in one database ([`db`]: an SQLite file, or PostgreSQL for many
//! writers, through [`backend`]; where it is: [`location`]), added through the gate's own loader
//! and checks ([`import`]), change points per configuration and size by E-Divisive with Means
//! ([`edm`], [`detect`]), one self-contained HTML page ([`report_html`]), and the gate's
//! reference taken from the last stable segment of a configuration ([`gate`]); a history moves
//! between databases as JSON lines ([`transfer`]).

pub mod axis;
pub mod backend;
pub mod cli;
pub mod db;
pub mod detect;
pub mod edm;
pub mod gate;
pub mod import;
pub mod location;
pub mod model;
pub mod nodes;
pub mod pg;
pub mod report_html;
pub mod transfer;
pub mod value;

/// Default location of the database (`--db`; `TCPX_HISTORY_DB` when set).
pub const DEFAULT_DB: &str = "results/history.sqlite";

/// The environment variable that gives `--db` when the flag is not given (a CI secret such as
/// `postgres://ci:PASSWORD@db.example/tcpx`; never printed).
pub const DB_ENV: &str = "TCPX_HISTORY_DB";
