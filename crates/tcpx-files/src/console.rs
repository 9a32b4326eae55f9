//! `print!`, `println!`, `eprint!` and `eprintln!` that never panic and write each call's text
//! in one piece.
//!
//! std's panic when the write fails, which is what a closed pipe does (`tcpx-analyze gate ...
//! 2>&1 | head -1`): the process then ends with 101 and the verdict's exit status is lost. These
//! drop what cannot be written and carry on, so the exit status stays the verdict's.
//!
//! std's also write a formatted line piece by piece (unbuffered stderr: one `write(2)` per
//! literal and per argument). Every rank of a job writes into mpirun's pipes, and ranks failing
//! together then cut into each other's lines (`tcpx-perf: rank tcpx-perf: rank 2: ...`). These
//! format first and hand the whole text to one `write_all`: one `write(2)` for a line shorter
//! than a pipe's atomic size (4096 bytes on Linux), which no other process's line can split.
//!
//! A crate takes them in place of std's, in every module, with `#[macro_use] extern crate
//! tcpx_files;` at its root (lib.rs and main.rs): macros imported so shadow the prelude's.

use std::io::Write;

/// Writes `args` (and a newline when `newline`) to `out` in one `write_all`, dropping what
/// cannot be written. Called by this module's macros.
#[doc(hidden)]
pub fn write_whole(mut out: impl Write, args: std::fmt::Arguments<'_>, newline: bool) {
    let mut text = std::fmt::format(args);
    if newline {
        text.push('\n');
    }
    let _ = out.write_all(text.as_bytes());
}

/// [`std::print!`] that drops its text when stdout is closed, instead of panicking.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::console::write_whole(::std::io::stdout(), ::std::format_args!($($arg)*), false)
    };
}

/// [`std::println!`] that drops its text when stdout is closed, instead of panicking.
#[macro_export]
macro_rules! println {
    () => {
        $crate::console::write_whole(::std::io::stdout(), ::std::format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::console::write_whole(::std::io::stdout(), ::std::format_args!($($arg)*), true)
    };
}

/// [`std::eprint!`] that drops its text when stderr is closed, instead of panicking.
#[macro_export]
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::console::write_whole(::std::io::stderr(), ::std::format_args!($($arg)*), false)
    };
}

/// [`std::eprintln!`] that drops its text when stderr is closed, instead of panicking.
#[macro_export]
macro_rules! eprintln {
    () => {
        $crate::console::write_whole(::std::io::stderr(), ::std::format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::console::write_whole(::std::io::stderr(), ::std::format_args!($($arg)*), true)
    };
}

#[cfg(test)]
mod tests {
    use super::write_whole;

    /// Counts the writes it is handed, as `write(2)` calls would be.
    #[derive(Default)]
    struct Writes(Vec<Vec<u8>>);

    impl std::io::Write for &mut Writes {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.push(buf.to_vec());
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn a_formatted_line_is_one_write() {
        let mut w = Writes::default();
        let (rank, msg) = (3, "peer closed the connection");
        write_whole(&mut w, format_args!("tcpx-perf: rank {rank}: error: {msg}"), true);
        assert_eq!(
            w.0,
            [b"tcpx-perf: rank 3: error: peer closed the connection\n".to_vec()]
        );
        // std's writeln! hands the same line over in pieces: what let ranks cut into each other.
        let mut pieces = Writes::default();
        let _ = std::io::Write::write_fmt(&mut &mut pieces, format_args!("tcpx-perf: rank {rank}: error: {msg}\n"));
        assert!(pieces.0.len() > 1, "{:?}", pieces.0);
    }

    #[test]
    fn a_closed_stream_is_no_panic() {
        struct Closed;
        impl std::io::Write for Closed {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        write_whole(Closed, format_args!("lost {}", 1), true);
    }
}
