//! nccl-tests' flags (v2.19, getopt `t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:`
//! and their long names): each either means here what it means there, or is refused in one line
//! that names tcpx-perf's way to what the user wanted (exit 64, the usage status). A command line
//! carried over from nccl-tests then never fails with clap's bare "unexpected argument".
//! docs/nccl-tests.md has the same table; a test keeps the two and the parser in step.

/// What tcpx-perf does with one of nccl-tests' flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Here {
    /// Accepted with nccl-tests' meaning (the differences in default or scope are in
    /// docs/nccl-tests.md, "Flags whose meaning differs").
    Same,
    /// Refused; the text says what tcpx-perf does instead.
    Refused(&'static str),
}

/// One nccl-tests flag.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    pub short: char,
    pub long: &'static str,
    /// Whether nccl-tests' flag takes a value (every one but `-h`).
    pub takes_value: bool,
    pub here: Here,
}

const fn same(short: char, long: &'static str) -> Flag {
    Flag {
        short,
        long,
        takes_value: short != 'h',
        here: Here::Same,
    }
}

const fn refused(short: char, long: &'static str, instead: &'static str) -> Flag {
    Flag {
        short,
        long,
        takes_value: true,
        here: Here::Refused(instead),
    }
}

/// Every flag of nccl-tests 2.19, in its getopt order.
pub const FLAGS: &[Flag] = &[
    refused(
        't',
        "nthreads",
        "threads per process: use -g N (endpoints per rank, each its own thread) or more ranks",
    ),
    same('g', "ngpus"),
    same('b', "minbytes"),
    same('e', "maxbytes"),
    same('i', "stepbytes"),
    same('f', "stepfactor"),
    same('n', "iters"),
    refused(
        'm',
        "agg_iters",
        "no ops are aggregated in a group: each iteration is one size of traffic; raise -n",
    ),
    same('w', "warmup_iters"),
    refused(
        'N',
        "run_cycles",
        "repeat the sweep as separate runs: launch/repeat.sh N OUT -- FLAGS...",
    ),
    refused(
        'p',
        "parallel_init",
        "setup is already concurrent: --setup-threads N bounds its threads per endpoint",
    ),
    refused(
        'I',
        "per_iter_timing",
        "every run times each iteration (t_min t_max t_p99 cv% t_med); --iter-time max takes the slowest rank's, as -I 1",
    ),
    refused(
        'K',
        "per_iter_skip",
        "no iteration is skipped from the spread: -w N untimed warm-up iterations run first",
    ),
    same('c', "check"),
    refused(
        'o',
        "op",
        "no reduction runs: --pattern ring moves an all-reduce's traffic without the arithmetic",
    ),
    refused(
        'd',
        "datatype",
        "the traffic is bytes: -b/-e are sizes in bytes (type prints float, count size/4)",
    ),
    refused(
        'r',
        "root",
        "no rooted collective: --pattern sendrecv, pairs, ring or fullmesh",
    ),
    refused(
        'z',
        "blocking",
        "how iterations are timed is --timing per-iteration or --timing back-to-back (as -z 0)",
    ),
    refused(
        'y',
        "stream_null",
        "no CUDA stream carries the traffic: the plugin's requests are polled from host threads",
    ),
    same('T', "timeout"),
    same('h', "help"),
    refused(
        'G',
        "cudagraph",
        "no CUDA graph: the traffic is the plugin's requests; back-to-back timing is --timing back-to-back",
    ),
    refused(
        'C',
        "report_cputime",
        "the CPU seconds of each size are always printed after the footer (and in results.csv)",
    ),
    same('a', "average"),
    refused(
        'R',
        "local_register",
        "every buffer is registered with the plugin (regMr); --max-reg sets the largest registration",
    ),
    refused(
        'x',
        "cta_policy",
        "no NCCL kernels run here (--baseline nccl runs NCCL beside tcpx-perf, with NCCL's defaults)",
    ),
    refused(
        'D',
        "device_implementation",
        "no NCCL kernels run here (--baseline nccl runs NCCL beside tcpx-perf, with NCCL's defaults)",
    ),
    refused(
        'V',
        "device_cta_count",
        "no NCCL kernels run here; tcpx-perf's version is --version",
    ),
    same('J', "output_file"),
    refused(
        'S',
        "report_timestamps",
        "summary.json records the run's start_time and end_time (UTC)",
    ),
    refused(
        'M',
        "memory",
        "--plan NODESxGPUSxNICS prints the memory each process and node of a job needs",
    ),
    refused(
        'u',
        "unalign",
        "buffers are page-aligned for registration; no misaligned variant",
    ),
];

/// The nccl-tests flag `arg` names (`-t`, `-t4`, `--nthreads`, `--nthreads=4`), if any.
pub fn flag_named(arg: &str) -> Option<&'static Flag> {
    if let Some(long) = arg.strip_prefix("--") {
        let long = long.split('=').next().unwrap_or(long);
        return FLAGS.iter().find(|f| f.long == long);
    }
    let short = arg.strip_prefix('-')?.chars().next()?;
    FLAGS.iter().find(|f| f.short == short)
}

/// The one line a refused nccl-tests flag gets, for clap's error about `arg`; None when `arg` is
/// no refused nccl-tests flag (clap's own message stands).
pub fn refusal(arg: &str) -> Option<String> {
    let flag = flag_named(arg)?;
    let Here::Refused(instead) = flag.here else { return None };
    Some(format!(
        "nccl-tests' -{} (--{}) is not a tcpx-perf flag: {instead} (docs/nccl-tests.md)",
        flag.short, flag.long
    ))
}

/// The one usage line for a clap error: a refused nccl-tests flag's own, else clap's first line.
pub fn usage_line(e: &clap::Error) -> String {
    let unknown = match e.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(arg)) if e.kind() == clap::error::ErrorKind::UnknownArgument => {
            refusal(arg)
        }
        _ => None,
    };
    unknown.unwrap_or_else(|| {
        let text = e.to_string();
        let first = text.lines().next().unwrap_or("invalid arguments");
        let first = first.strip_prefix("error: ").unwrap_or(first);
        format!("{first}; see tcpx-perf --help")
    })
}
