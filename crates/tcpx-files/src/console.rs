//! `print!`, `println!`, `eprint!` and `eprintln!` that never panic and write whole lines.
//!
//! std's panic when the write fails, which is what a closed pipe does (`tcpx-analyze gate ...
//! 2>&1 | head -1`): the process then ends with 101 and the verdict's exit status is lost. These
//! drop what cannot be written and carry on, so the exit status stays the verdict's.
//!
//! std's also write a formatted line piece by piece (unbuffered stderr: one `write(2)` per
//! literal and per argument). Every rank of a job writes into mpirun's pipes, and ranks failing
//! together then cut into each other's lines (`tcpx-perf: rank tcpx-perf: rank 2: ...`). These
//! format first and hand whole lines to the stream, at most [`CHUNK`] bytes a write. Open MPI's
//! forwarder reads a rank's stream [`READ_SIZE`] bytes at a time and passes each read on as it
//! is, between other ranks' reads: a read that ends inside a line cuts it (`#  Ra` ... `trace 304
//! 20.860 placed` ... `nk 88 on node11`, 512 ranks). So where the stream is a pipe (a rank's
//! stderr under mpirun), a write waits, [`DRAIN_WAIT`] at most, until what the reader has not
//! taken yet and the new lines fit one read: every read then ends at a line's end. A pty (a
//! rank's stdout under mpirun) does not say what its reader has not taken; there chunks of whole
//! lines are what helps, and rank 0 prints its long blocks while the other ranks wait (tcpx-perf's
//! `Mpi::alone`).
//!
//! A crate takes them in place of std's, in every module, with `#[macro_use] extern crate
//! tcpx_files;` at its root (lib.rs and main.rs): macros imported so shadow the prelude's.

use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most bytes of whole lines one write hands over: a pty passes a write on in pieces of 2048
/// (the kernel's `tty_write`), a pipe keeps writes of up to 4096 (`PIPE_BUF`) in one piece.
pub const CHUNK: usize = 2048;
/// What Open MPI's forwarder reads from a rank's stream at once (`ORTE_IOF_BASE_MSG_MAX`).
pub const READ_SIZE: usize = 4096;
/// Longest a write waits for the reader of its pipe (then it writes anyway).
pub const DRAIN_WAIT: Duration = Duration::from_millis(20);

/// One writer at a time per process, so that the wait and the write go together.
static CONSOLE: Mutex<()> = Mutex::new(());

/// Which standard stream a macro writes.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum Stream {
    Out,
    Err,
}

/// `args` formatted, with a newline when `newline`: the whole text before any of it is written.
fn formatted(args: std::fmt::Arguments<'_>, newline: bool) -> String {
    let mut text = std::fmt::format(args);
    if newline {
        text.push('\n');
    }
    text
}

/// Writes `args` (and a newline when `newline`) to the standard stream, in whole lines
/// ([`write_lines`]), dropping what cannot be written. Called by this module's macros.
#[doc(hidden)]
pub fn write_stream(stream: Stream, args: std::fmt::Arguments<'_>, newline: bool) {
    let text = formatted(args, newline);
    let _one = CONSOLE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match stream {
        Stream::Out => {
            let out = std::io::stdout();
            let fd = out.as_raw_fd();
            write_lines(out.lock(), fd, &text);
        }
        Stream::Err => {
            let err = std::io::stderr();
            let fd = err.as_raw_fd();
            write_lines(err.lock(), fd, &text);
        }
    }
}

/// Writes `text` to `out` (whose descriptor is `fd`) in pieces of whole lines of at most
/// [`CHUNK`] bytes (a longer line alone), each waiting on a pipe until it fits one read with
/// what is still unread ([`DRAIN_WAIT`] at most). Errors are dropped.
pub fn write_lines(mut out: impl Write, fd: RawFd, text: &str) {
    let pipe = is_pipe(fd);
    for piece in line_pieces(text, CHUNK) {
        if pipe {
            wait_for_room(fd, piece.len());
        }
        let _ = out.write_all(piece.as_bytes());
    }
}

/// `text` cut after newlines into pieces of at most `most` bytes; a longer line is a piece of
/// its own, and so is a last line without its newline.
pub fn line_pieces(text: &str, most: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut start = 0;
    let mut end = 0;
    for (i, _) in text.match_indices('\n') {
        let line_end = i + 1;
        if line_end - start > most && end > start {
            pieces.push(&text[start..end]);
            start = end;
        }
        end = line_end;
    }
    if end > start {
        pieces.push(&text[start..end]);
    }
    if end < text.len() {
        pieces.push(&text[end..]);
    }
    pieces
}

fn is_pipe(fd: RawFd) -> bool {
    // SAFETY: fstat into a zeroed stat of our own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &raw mut st) } == 0) && (st.st_mode & libc::S_IFMT) == libc::S_IFIFO
}

/// Waits until the pipe `fd` holds at most `READ_SIZE - len` unread bytes, [`DRAIN_WAIT`] at most.
fn wait_for_room(fd: RawFd, len: usize) {
    let room = READ_SIZE.saturating_sub(len);
    let deadline = Instant::now() + DRAIN_WAIT;
    loop {
        let mut unread: libc::c_int = 0;
        // SAFETY: FIONREAD into an int of ours; a pipe answers it on either end.
        if unsafe { libc::ioctl(fd, libc::FIONREAD, &raw mut unread) } != 0 || unread as usize <= room {
            return;
        }
        if Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// [`std::print!`] that drops its text when stdout is closed, instead of panicking.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {
        $crate::console::write_stream($crate::console::Stream::Out, ::std::format_args!($($arg)*), false)
    };
}

/// [`std::println!`] that drops its text when stdout is closed, instead of panicking.
#[macro_export]
macro_rules! println {
    () => {
        $crate::console::write_stream($crate::console::Stream::Out, ::std::format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::console::write_stream($crate::console::Stream::Out, ::std::format_args!($($arg)*), true)
    };
}

/// [`std::eprint!`] that drops its text when stderr is closed, instead of panicking.
#[macro_export]
macro_rules! eprint {
    ($($arg:tt)*) => {
        $crate::console::write_stream($crate::console::Stream::Err, ::std::format_args!($($arg)*), false)
    };
}

/// [`std::eprintln!`] that drops its text when stderr is closed, instead of panicking.
#[macro_export]
macro_rules! eprintln {
    () => {
        $crate::console::write_stream($crate::console::Stream::Err, ::std::format_args!(""), true)
    };
    ($($arg:tt)*) => {
        $crate::console::write_stream($crate::console::Stream::Err, ::std::format_args!($($arg)*), true)
    };
}

#[cfg(test)]
mod tests {
    use super::{formatted, write_lines};

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
        // -1: no descriptor, so no pipe to wait on.
        write_lines(
            &mut w,
            -1,
            &formatted(format_args!("tcpx-perf: rank {rank}: error: {msg}"), true),
        );
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
    fn pieces_are_whole_lines_of_at_most_a_chunk() {
        let text = "a\nbb\nccc\n".to_string() + &"x".repeat(10) + "\ntail";
        assert_eq!(
            super::line_pieces(&text, 6),
            ["a\nbb\n", "ccc\n", "xxxxxxxxxx\n", "tail"],
            "a line longer than a piece is a piece of its own"
        );
        assert_eq!(super::line_pieces("one\n", 2048), ["one\n"]);
        assert!(super::line_pieces("", 2048).is_empty());
    }

    /// A reader that takes `READ_SIZE` bytes a read, slowly, as Open MPI's forwarder does under
    /// load: with the wait for room every read ends at a line's end; without it (all written at
    /// once) reads end inside lines.
    #[test]
    fn a_slow_reader_of_a_pipe_reads_whole_lines() {
        use std::io::{Read, Write};
        use std::os::fd::{AsRawFd, FromRawFd};
        use std::time::Duration;
        let cut_reads = |wait: bool| -> usize {
            let mut fds = [0; 2];
            // SAFETY: two descriptors into our array.
            assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
            // SAFETY: fresh descriptors owned here.
            let (mut r, w) = unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) };
            let reader = std::thread::spawn(move || {
                let mut cut = 0;
                let mut buf = vec![0u8; super::READ_SIZE];
                loop {
                    std::thread::sleep(Duration::from_millis(2));
                    match r.read(&mut buf) {
                        Ok(0) | Err(_) => return cut,
                        Ok(n) => cut += usize::from(buf[n - 1] != b'\n'),
                    }
                }
            });
            for i in 0..300 {
                let line = format!("trace {i} 20.860 connect: handles exchanged {}\n", "x".repeat(i % 90));
                if wait {
                    super::write_lines(&w, w.as_raw_fd(), &line);
                } else {
                    let _ = (&w).write_all(line.as_bytes());
                }
            }
            drop(w);
            reader.join().unwrap()
        };
        assert_eq!(cut_reads(true), 0, "reads cut inside a line");
        assert!(cut_reads(false) > 0, "the control: unpaced lines are read cut");
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
        write_lines(Closed, -1, &formatted(format_args!("lost {}", 1), true));
    }
}
