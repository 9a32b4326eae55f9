//! Run history: every run in one SQLite database ([`db`]), added through the gate's own loader
//! and checks ([`import`]), change points per configuration and size by E-Divisive with Means
//! ([`edm`], [`detect`]), one self-contained HTML page ([`report_html`]), and the gate's
//! reference taken from the last stable segment of a configuration ([`gate`]).

pub mod cli;
pub mod db;
pub mod detect;
pub mod edm;
pub mod gate;
pub mod import;
pub mod model;
pub mod nodes;
pub mod report_html;

/// Default location of the database.
pub const DEFAULT_DB: &str = "results/history.sqlite";
