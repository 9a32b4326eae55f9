//! Logging through NCCL's `ncclDebugLogger_t`.
//!
//! NCCL hands a C-variadic logger to `init`. Stable Rust cannot define such a function but can call
//! one, so every message is formatted in Rust and passed through a `"%s"` format. The pointer is
//! kept in an atomic so that helper threads can log without locking. Before `init` (the Rust-level
//! tests), WARNs go to stderr and INFOs are dropped.

use std::ffi::{c_char, c_int, c_ulong, CString};
use std::sync::atomic::{AtomicUsize, Ordering};

use nccl_net_abi::{DebugLogger, LogLevel, NCCL_LOG_WARN};

/// The logger's address; 0 while none was given.
static LOGGER: AtomicUsize = AtomicUsize::new(0);

type RawLogger = unsafe extern "C" fn(LogLevel, c_ulong, *const c_char, c_int, *const c_char, ...);

/// Stores NCCL's logger. A NULL logger keeps the previous one (NCCL never passes NULL; a test
/// harness might).
pub fn set_logger(logger: DebugLogger) {
    if let Some(f) = logger {
        LOGGER.store(f as usize, Ordering::Release);
    }
}

/// Emits one message. `file` must be NUL-terminated (the macros below use `concat!(file!(), "\0")`).
pub fn emit(level: LogLevel, flags: c_ulong, file: &'static str, line: u32, msg: &str) {
    let raw = LOGGER.load(Ordering::Acquire);
    if raw == 0 {
        if level == NCCL_LOG_WARN {
            // One write: processes sharing a pipe cannot cut into the line.
            let _ = std::io::Write::write_all(&mut std::io::stderr(), format!("tcpx-emu WARN {msg}\n").as_bytes());
        }
        return;
    }
    // SAFETY: `raw` was stored from a non-NULL `DebugLogger`, a function pointer of exactly this type.
    let logger: RawLogger = unsafe { std::mem::transmute::<usize, RawLogger>(raw) };
    let text = CString::new(msg.replace('\0', "\\0")).unwrap_or_default();
    let file_ptr = if file.ends_with('\0') {
        file.as_ptr().cast::<c_char>()
    } else {
        c"tcpx-emu".as_ptr()
    };
    let line = c_int::try_from(line).unwrap_or(0);
    // SAFETY: all pointers are valid NUL-terminated strings for the duration of the call, and
    // "%s" consumes exactly the one vararg passed.
    unsafe { logger(level, flags, file_ptr, line, c"%s".as_ptr(), text.as_ptr()) };
}

/// `warn!(subsys, "fmt", args..)`: a WARN through NCCL's logger, prefixed like NCCL's own plugins.
#[macro_export]
macro_rules! warn {
    ($flags:expr, $($arg:tt)*) => {
        $crate::log::emit(
            ::nccl_net_abi::NCCL_LOG_WARN,
            $flags,
            concat!(file!(), "\0"),
            line!(),
            &format!("NET/tcpx-emu : {}", format_args!($($arg)*)),
        )
    };
}

/// `info!(subsys, "fmt", args..)`: an INFO through NCCL's logger.
#[macro_export]
macro_rules! info {
    ($flags:expr, $($arg:tt)*) => {
        $crate::log::emit(
            ::nccl_net_abi::NCCL_LOG_INFO,
            $flags,
            concat!(file!(), "\0"),
            line!(),
            &format!("NET/tcpx-emu : {}", format_args!($($arg)*)),
        )
    };
}
