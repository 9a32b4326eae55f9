//! The logger every plugin gets from `init`, and the memory of the plugin's last warnings.
//!
//! NCCL's `ncclDebugLogger_t` is C-variadic. Stable Rust cannot define such a function, so
//! `logger_shim.c` (built by `build.rs`) receives the call, formats it with `vsnprintf`, and
//! forwards `(level, flags, file, line, msg)` to `sink` here. Plugins must never get a NULL
//! logger: TCPX stores it and calls it unconditionally.
//!
//! What happens to a message:
//! - it is printed to stderr as `[plugin] WARN file:line: msg` when its level is at or above the
//!   verbosity chosen with [`crate::OpenOptions::log_level`] (a process-wide setting: the logger is
//!   one C function shared by every loaded plugin, so the last `Plugin::open` wins);
//! - WARN and ABORT lines are also remembered (the last few process-wide, and the last one per
//!   thread), so a failing call can say *why* the plugin failed: see [`recent_warnings`];
//! - a message printed [`REPEAT_VERBATIM`] times is counted, not printed, after that, and
//!   [`suppressed_summary`] lists the counts: TCPX logs a WARN on every host-memory receive,
//!   tens of thousands of identical lines per rank and sweep, which would bury everything else.
//!   Messages that differ only in their numbers (ports, tokens, addresses, sizes) are one message
//!   here ([`shape`]): tcpx-emu's "no complete connection after 10 s ... token T on A:P" came
//!   10000-19000 times from a 64 x 8 x 4 job's setup (docs/runs/h200-20261201-issue51).

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_int, c_ulong, CStr};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, Once};
use std::time::{Duration, Instant};

use nccl_net_abi as abi;

/// Which plugin messages reach stderr: those at or above this severity.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogLevel {
    /// Print nothing (warnings are still remembered for error messages).
    None,
    /// WARN (and ABORT) only.
    #[default]
    Warn,
    /// WARN and INFO.
    Info,
    /// Everything, TRACE included.
    Trace,
}

impl LogLevel {
    /// The NCCL level number a message must not exceed to be printed.
    fn threshold(self) -> c_int {
        match self {
            LogLevel::None => abi::NCCL_LOG_NONE,
            LogLevel::Warn => abi::NCCL_LOG_WARN,
            LogLevel::Info => abi::NCCL_LOG_INFO,
            LogLevel::Trace => abi::NCCL_LOG_TRACE,
        }
    }
}

extern "C" {
    fn nccl_net_shim_install(sink: unsafe extern "C" fn(c_int, c_ulong, *const c_char, c_int, *const c_char));
    fn nccl_net_shim_set_threshold(threshold: c_int);
    /// The C-variadic entry point handed to plugins (declared, not defined, in Rust).
    fn nccl_net_shim_logger(level: c_int, flags: c_ulong, file: *const c_char, line: c_int, fmt: *const c_char, ...);
}

/// The printing threshold (an NCCL level). Mirrors the copy inside the C shim, which filters
/// before formatting; this one decides printing, since WARNs always reach [`sink`].
static THRESHOLD: AtomicI32 = AtomicI32::new(abi::NCCL_LOG_WARN);
static INSTALL: Once = Once::new();

/// How many process-wide warnings to keep. Small: only the newest ones explain a failure.
const KEEP_WARNINGS: usize = 8;
/// A remembered warning older than this is not attached to an error: it is more likely to be about
/// something else than about the failing call.
const WARNING_RELEVANCE: Duration = Duration::from_secs(30);

/// Identical printed messages beyond this many are counted instead of printed.
pub const REPEAT_VERBATIM: u64 = 3;
/// Distinct messages tracked for repeats; past this, new messages are printed as they come.
const TRACK_DISTINCT: usize = 4096;

/// Printed lines by [`shape`], with the first of them and how often the shape was seen.
static SEEN: Mutex<Option<HashMap<String, (String, u64)>>> = Mutex::new(None);

/// A line with every run of digits and hex letters that holds a digit (a port, a token, an
/// address's parts, a size) folded to `#`: what stays the same when one warning repeats for
/// another connection.
fn shape(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        if word.bytes().any(|b| b.is_ascii_digit()) && word.bytes().all(|b| b.is_ascii_hexdigit()) {
            out.push('#');
        } else {
            out.push_str(word);
        }
        word.clear();
    };
    for c in line.chars() {
        if c.is_ascii_alphanumeric() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// Whether this line is to be printed: the first [`REPEAT_VERBATIM`] of its shape are.
fn first_few(line: &str) -> bool {
    let mut seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let seen = seen.get_or_insert_with(HashMap::new);
    let key = shape(line);
    if let Some((_, n)) = seen.get_mut(&key) {
        *n += 1;
        return *n <= REPEAT_VERBATIM;
    }
    if seen.len() < TRACK_DISTINCT {
        seen.insert(key, (line.to_owned(), 1));
    }
    true
}

/// The messages whose repeats were not printed: one line each, `"<line> (N more times)"`, most
/// frequent first. Empty when nothing was held back.
pub fn suppressed_summary() -> Vec<String> {
    let seen = SEEN.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut held: Vec<(&String, u64)> = seen
        .iter()
        .flat_map(|m| m.values())
        .filter(|(_, n)| *n > REPEAT_VERBATIM)
        .map(|(line, n)| (line, n - REPEAT_VERBATIM))
        .collect();
    held.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    held.into_iter()
        .map(|(line, n)| format!("{line} ({n} more times like it, not printed)"))
        .collect()
}

#[derive(Clone, Debug)]
struct Warning {
    at: Instant,
    thread: String,
    text: String,
}

static RECENT: Mutex<VecDeque<Warning>> = Mutex::new(VecDeque::new());

thread_local! {
    static THREAD_LAST: RefCell<Option<Warning>> = const { RefCell::new(None) };
}

/// Installs the sink (once per process), sets the verbosity, and returns the logger to pass to
/// `init`: never NULL.
// abi::DebugLogger is the C type: an Option of a function pointer, never None from here.
#[allow(clippy::unnecessary_wraps)]
pub(crate) fn logger_for(level: LogLevel) -> abi::DebugLogger {
    INSTALL.call_once(|| {
        // SAFETY: `sink` has exactly the signature the shim calls; installing is an atomic store.
        unsafe { nccl_net_shim_install(sink) }
    });
    THRESHOLD.store(level.threshold(), Ordering::Relaxed);
    // SAFETY: a relaxed atomic store in the shim.
    unsafe { nccl_net_shim_set_threshold(level.threshold()) };
    Some(nccl_net_shim_logger)
}

fn level_name(level: c_int) -> &'static str {
    match level {
        abi::NCCL_LOG_VERSION => "VERSION",
        abi::NCCL_LOG_WARN => "WARN",
        abi::NCCL_LOG_INFO => "INFO",
        abi::NCCL_LOG_ABORT => "ABORT",
        abi::NCCL_LOG_TRACE => "TRACE",
        _ => "LOG",
    }
}

/// Receives every formatted plugin message from the shim (on whatever thread the plugin logs from).
///
/// Must not unwind into C: nothing here panics (stderr errors are ignored, a poisoned lock is
/// recovered, thread-locals are accessed with `try_with`).
unsafe extern "C" fn sink(level: c_int, _flags: c_ulong, file: *const c_char, line: c_int, msg: *const c_char) {
    // SAFETY: the shim passes a NUL-terminated buffer; `file` comes from the plugin (`__FILE__`)
    // and may be NULL.
    let msg = if msg.is_null() {
        "".into()
    } else {
        unsafe { CStr::from_ptr(msg) }.to_string_lossy()
    };
    let file = if file.is_null() {
        "?".into()
    } else {
        unsafe { CStr::from_ptr(file) }.to_string_lossy()
    };
    // Plugins pass full build paths; the base name is enough to find the line.
    let file = file.rsplit('/').next().unwrap_or(&file);
    let msg = msg.trim_end();

    // ABORT (4) sorts after INFO numerically but is as severe as WARN.
    let severity = if level == abi::NCCL_LOG_ABORT {
        abi::NCCL_LOG_WARN
    } else {
        level
    };
    if level != abi::NCCL_LOG_NONE && severity <= THRESHOLD.load(Ordering::Relaxed) {
        let text = format!("[plugin] {} {}:{}: {}", level_name(level), file, line, msg);
        if first_few(&text) {
            // Whole lines, as tcpx-perf's own: under mpirun a line read in two pieces lets
            // another rank's line between them (tcpx_files::console).
            eprintln_whole(&text);
        }
    }
    if level == abi::NCCL_LOG_WARN || level == abi::NCCL_LOG_ABORT {
        let thread = std::thread::current();
        let w = Warning {
            at: Instant::now(),
            thread: thread
                .name()
                .map_or_else(|| format!("{:?}", thread.id()), str::to_owned),
            text: format!("{file}:{line}: {msg}"),
        };
        let _ = THREAD_LAST.try_with(|t| *t.borrow_mut() = Some(w.clone()));
        let mut recent = RECENT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if recent.len() == KEEP_WARNINGS {
            recent.pop_front();
        }
        recent.push_back(w);
    }
}

/// The plugin's most relevant recent warning, for an error message: the last one logged on the
/// calling thread (taken, so it explains only one error), else the newest one from any thread
/// (plugins log from helper threads too), provided it is recent. `None` when there is none.
pub(crate) fn last_warning() -> Option<String> {
    let now = Instant::now();
    let mine = THREAD_LAST.try_with(|t| t.borrow_mut().take()).ok().flatten();
    if let Some(w) = mine.filter(|w| now.duration_since(w.at) <= WARNING_RELEVANCE) {
        return Some(format!("plugin's last WARN: {}", w.text));
    }
    let recent = RECENT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let w = recent
        .back()
        .filter(|w| now.duration_since(w.at) <= WARNING_RELEVANCE)?;
    Some(format!(
        "plugin's last WARN ({:.1} s ago, thread {}): {}",
        now.duration_since(w.at).as_secs_f64(),
        w.thread,
        w.text
    ))
}

/// The last few plugin warnings, oldest first, for diagnostics (stall dumps).
pub fn recent_warnings() -> Vec<String> {
    let recent = RECENT.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    recent.iter().map(|w| format!("[{}] {}", w.thread, w.text)).collect()
}

/// A message from this crate itself (close failures and the like), never on the hot path.
pub(crate) fn local_warn(msg: std::fmt::Arguments<'_>) {
    if THRESHOLD.load(Ordering::Relaxed) >= abi::NCCL_LOG_WARN {
        eprintln_whole(&format!("[nccl-net] WARN {msg}"));
    }
}

/// `line` on stderr, whole ([`tcpx_files::console::write_stream`]), errors dropped.
fn eprintln_whole(line: &str) {
    tcpx_files::console::write_stream(tcpx_files::console::Stream::Err, format_args!("{line}"), true);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shim_formats_and_remembers_warnings() {
        let logger = logger_for(LogLevel::None).expect("never NULL");
        // SAFETY: calling the shim as a plugin would, with a matching format string.
        unsafe {
            logger(
                abi::NCCL_LOG_WARN,
                abi::NCCL_NET,
                c"/x/y/emu.rs".as_ptr(),
                42,
                c"bad %s %d".as_ptr(),
                c"thing".as_ptr(),
                7 as c_int,
            );
        }
        let w = last_warning().expect("remembered");
        assert!(w.contains("emu.rs:42: bad thing 7"), "{w}");
        // Taken: the same warning explains one error from this thread; the global copy remains.
        let again = last_warning().expect("global copy");
        assert!(again.contains("ago"), "{again}");
        assert!(recent_warnings().iter().any(|w| w.contains("bad thing 7")));
        logger_for(LogLevel::Warn);
    }

    #[test]
    fn repeated_lines_are_printed_a_few_times_then_counted() {
        let line = "[plugin] WARN t.cc:1: requested receive on host mem buffer (test)";
        let printed = (0..1000).filter(|_| first_few(line)).count() as u64;
        assert_eq!(printed, REPEAT_VERBATIM);
        assert!(first_few("[plugin] WARN t.cc:2: another line (test)"));
        let summary = suppressed_summary();
        let mine: Vec<&String> = summary.iter().filter(|l| l.contains("(test)")).collect();
        assert_eq!(mine.len(), 1, "{summary:?}");
        assert!(
            mine[0].ends_with(&format!("({} more times like it, not printed)", 1000 - REPEAT_VERBATIM)),
            "{mine:?}"
        );
    }

    /// One warning for a thousand connections (its token, address and port each time another)
    /// is printed 3 times, then counted; a warning that differs in words is its own.
    #[test]
    fn lines_that_differ_only_in_their_numbers_count_as_one() {
        let line = |i: u32| {
            format!(
                "[plugin] WARN conn.rs:499: accept: no complete connection after 10 s: token {:016x} on 198.18.{}.{}:{} (shape test)",
                u64::from(i) * 0x9e37_79b9_7f4a_7c15,
                i % 4,
                i % 64,
                30000 + i
            )
        };
        let printed = (0..1000).filter(|&i| first_few(&line(i))).count() as u64;
        assert_eq!(printed, REPEAT_VERBATIM);
        assert!(first_few(
            "[plugin] WARN conn.rs:499: accept: a connection was rejected (shape test)"
        ));
        assert_eq!(
            shape("token ab12 on 10.0.0.1:4242 after 10 s"),
            "token # on #.#.#.#:# after # s"
        );
        assert_eq!(
            shape("receive on host mem buffer"),
            "receive on host mem buffer",
            "words stay"
        );
        let summary = suppressed_summary();
        let mine: Vec<&String> = summary.iter().filter(|l| l.contains("(shape test)")).collect();
        assert_eq!(mine.len(), 1, "{summary:?}");
        assert!(mine[0].contains(&line(0)), "the first of them is shown: {mine:?}");
    }
}
