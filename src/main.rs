//! `tcpx-perf`: see `tcpx-perf --help` and the README.

use clap::Parser;

fn main() {
    let cli = tcpx_perf::cli::Cli::parse();
    std::process::exit(tcpx_perf::run::run(cli));
}
