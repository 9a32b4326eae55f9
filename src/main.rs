//! `tcpx-perf`: see `tcpx-perf --help` and the README.

// print!/println!/eprint!/eprintln! that never panic on a closed stdout or stderr (a pipe to
// `head`): the exit status stays the run's (see tcpx_files::console).
#[macro_use]
extern crate tcpx_files;

use clap::Parser;
use tcpx_perf::run::{launched, launcher_rank, EXIT_USAGE};

fn main() {
    // Before any thread exists: every thread MPI and the plugin start inherits the blocked mask.
    tcpx_perf::signals::install(launcher_rank());
    if launched() {
        // A launcher that exits without signalling the ranks still ends them, as SIGTERM.
        tcpx_perf::signals::end_with_the_launcher();
    }
    let cli = match tcpx_perf::cli::Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version are not errors: clap prints them and exits 0.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            // Every rank parses the same command line: one line for the whole job, from rank 0,
            // and the usage status (2 means wrong data here, not clap's "bad usage").
            if launcher_rank() == 0 {
                eprintln!("tcpx-perf: usage error: {}", tcpx_perf::cli::nccl_tests::usage_line(&e));
            } else {
                // mpirun ends the job at the first non-zero exit: let rank 0 be first, so that its
                // line is printed before the launcher kills it.
                std::thread::sleep(std::time::Duration::from_millis(500));
            }
            std::process::exit(EXIT_USAGE);
        }
    };
    // Generated documentation (`--print-man`, `--completions SHELL`): no MPI, no plugin.
    if cli.print_man || cli.completions.is_some() {
        std::process::exit(tcpx_perf::cli::docs::print(&cli));
    }
    // `--plan`: a job imagined on this machine; MPI is never started (no mpirun needed).
    if cli.plan.is_some() {
        std::process::exit(tcpx_perf::run::plan(&cli));
    }
    // A signal that arrived first decides the status (128 + signal), from the signal thread.
    tcpx_perf::signals::exit(tcpx_perf::run::run(cli));
}
