//! Documentation generated from the clap definitions, so it cannot drift from the flags: the man
//! page (`tcpx-perf --print-man`, committed as `docs/man/tcpx-perf.1`) and shell completions
//! (`tcpx-perf --completions SHELL`, committed under `docs/completions/`). A test regenerates both
//! and compares them with the committed copies.

use clap::CommandFactory;
use clap_complete::Shell;

use super::Cli;

/// The man page, roff.
pub fn man_page() -> String {
    let mut out = Vec::new();
    // Rendering into a Vec cannot fail (no I/O).
    let _ = clap_mangen::Man::new(Cli::command()).render(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "tcpx-perf", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

/// Prints what `--print-man` / `--completions` ask for; the exit status.
pub fn print(cli: &Cli) -> i32 {
    if cli.print_man {
        print!("{}", man_page());
    }
    if let Some(shell) = cli.completions {
        print!("{}", completions(shell));
    }
    0
}
