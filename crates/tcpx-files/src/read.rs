//! How tcpx-perf and tcpx-analyze read a file a user names: a regular file or nothing, opened
//! without blocking, within a bound for its kind, and remembered as an input of the command so
//! that no output of the same command replaces it ([`crate::claim_output`], [`crate::write_whole`]).
//!
//! - **regular**: the path (a link is followed: a result directory may be reached through one)
//!   must name a regular file. A FIFO, a socket, a device or a directory is refused in one line
//!   saying what it is, before it is read: a FIFO would block the open and the first read until
//!   a writer came, `/dev/zero` never ends. The open itself is `O_NONBLOCK` and the check is
//!   repeated on the open file (`fstat`), so a name swapped in between is refused too.
//! - **bounded**: each kind of file has a [`Bound`]; a file larger than it is refused in one line
//!   before any byte is read, and the read stops one byte past the bound (a file that grows while
//!   it is read).

use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The largest file of one kind that is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// The kind, as the refusal names it (`a summary.json`).
    pub what: &'static str,
    pub max_bytes: u64,
}

const MIB: u64 = 1 << 20;

impl Bound {
    /// tcpx-perf's summary.json: its results, placement and findings (80 KB at 60 ranks).
    pub const SUMMARY_JSON: Bound = Bound {
        what: "a summary.json",
        max_bytes: 256 * MIB,
    };
    /// results.csv: one row per size and pattern.
    pub const RESULTS_CSV: Bound = Bound {
        what: "a results.csv",
        max_bytes: 64 * MIB,
    };
    /// samples.csv, rank_samples.csv, pairs.csv, nccl_samples.csv: a row per iteration, rank or
    /// endpoint pair and size (pairs.csv of a 512-endpoint fullmesh is hundreds of MB).
    pub const DATA_CSV: Bound = Bound {
        what: "a samples or pairs CSV file",
        max_bytes: 1024 * MIB,
    };
    /// A stdout log or a JSON file of nccl-tests, rccl-tests or tcpx-perf.
    pub const LOG: Bound = Bound {
        what: "a log or JSON input",
        max_bytes: 256 * MIB,
    };
    /// A baseline file (.toml).
    pub const BASELINE: Bound = Bound {
        what: "a baseline file",
        max_bytes: 16 * MIB,
    };
    /// `--healthy-hostfile` or `--drain-list` as an earlier run left it (read to see whose it is).
    pub const NODE_LIST: Bound = Bound {
        what: "a node list",
        max_bytes: 16 * MIB,
    };
    /// `tcpx-analyze history export`'s JSON lines (a run's rows a line: a fleet's years).
    pub const HISTORY_EXPORT: Bound = Bound {
        what: "a history export",
        max_bytes: 4096 * MIB,
    };
    /// A plugin or NCCL library, hashed for summary.json.
    pub const LIBRARY: Bound = Bound {
        what: "a shared library",
        max_bytes: 4096 * MIB,
    };
}

/// `1.0 GiB`, `512 MiB`, `12 bytes`.
fn size_text(n: u64) -> String {
    if n >= 1 << 30 {
        format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64)
    } else if n >= MIB {
        format!("{:.1} MiB", n as f64 / MIB as f64)
    } else {
        format!("{n} bytes")
    }
}

/// What a file that is not a regular one is, for the refusal.
pub(crate) fn kind_of(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a file"
    }
}

/// The refusal of `m` at `path` unless it is a regular file within `bound`.
fn check(path: &Path, m: &Metadata, bound: Bound) -> io::Result<()> {
    if !m.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{}: {}, not a regular file: refusing to read it; give the file itself",
                path.display(),
                kind_of(m)
            ),
        ));
    }
    if m.len() > bound.max_bytes {
        return Err(too_large(path, m.len(), bound));
    }
    Ok(())
}

fn too_large(path: &Path, len: u64, bound: Bound) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "{}: {}, more than {} may be ({}): not one; give the file itself",
            path.display(),
            size_text(len),
            bound.what,
            size_text(bound.max_bytes)
        ),
    )
}

/// `e` with `PATH: ` in front (kind kept).
fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Opens `path` for reading: a regular file within `bound` ([`crate::read`]'s rules), or the
/// one-line error naming it.
fn open_checked(path: &Path, bound: Bound) -> io::Result<(File, Metadata)> {
    check(path, &fs::metadata(path).map_err(|e| named(path, e))?, bound)?;
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| named(path, e))?;
    let m = file.metadata().map_err(|e| named(path, e))?;
    check(path, &m, bound)?;
    Ok((file, m))
}

/// The bytes of `file` (at `path`), at most `bound` of them.
fn read_within(mut file: File, path: &Path, bound: Bound) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    (&mut file)
        .take(bound.max_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| named(path, e))?;
    if bytes.len() as u64 > bound.max_bytes {
        return Err(too_large(path, bytes.len() as u64, bound));
    }
    Ok(bytes)
}

/// Reads an input of this command: a regular file within `bound`, opened without blocking; it is
/// remembered so that no output of the command replaces it. Errors are one line naming `path`.
pub fn read_input(path: &Path, bound: Bound) -> io::Result<Vec<u8>> {
    let (file, m) = open_checked(path, bound)?;
    remember(&m, path);
    read_within(file, path, bound)
}

/// [`read_input`] as UTF-8 text (the error names the path).
pub fn read_input_text(path: &Path, bound: Bound) -> io::Result<String> {
    String::from_utf8(read_input(path, bound)?).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: not UTF-8 text ({e})", path.display()),
        )
    })
}

/// Opens an input of this command for reading in pieces (a library to hash): [`read_input`]'s
/// checks, and the open file, whose reads the caller keeps within `bound` (its length was).
pub fn open_input(path: &Path, bound: Bound) -> io::Result<File> {
    let (file, m) = open_checked(path, bound)?;
    remember(&m, path);
    Ok(file)
}

/// Reads a file this command may replace or remove as its own (an earlier run's list), with
/// [`read_input`]'s checks but not remembered as an input.
pub fn read_own(path: &Path, bound: Bound) -> io::Result<Vec<u8>> {
    let (file, _) = open_checked(path, bound)?;
    read_within(file, path, bound)
}

/// Files this process read as inputs: device and inode, and the path it read them by.
static INPUTS: Mutex<Vec<(u64, u64, PathBuf)>> = Mutex::new(Vec::new());

fn remember(m: &Metadata, path: &Path) {
    let mut inputs = INPUTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if !inputs.iter().any(|(d, i, _)| *d == m.dev() && *i == m.ino()) {
        inputs.push((m.dev(), m.ino(), path.to_path_buf()));
    }
}

/// Remembers the regular file at `path`, if any, as an input of this command before it is read
/// (a command names its inputs first; an output claimed then may not be one of them), or one read
/// by another library (SQLite's database).
pub fn note_input(path: &Path) {
    if let Ok(m) = fs::metadata(path) {
        if m.file_type().is_file() {
            remember(&m, path);
        }
    }
}

/// The path an input of this command was read by, when `path` names the same file.
pub(crate) fn input_at(path: &Path) -> Option<PathBuf> {
    let m = fs::metadata(path).ok()?;
    let inputs = INPUTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    inputs
        .iter()
        .find(|(d, i, _)| *d == m.dev() && *i == m.ino())
        .map(|(_, _, p)| p.clone())
}

/// The refusal of an output at `path` that is an input of this command.
pub(crate) fn refuse_input(path: &Path) -> io::Result<()> {
    match input_at(path) {
        None => Ok(()),
        Some(read) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            if read == path {
                format!(
                    "{} is an input of this command: refusing to overwrite it; choose another path",
                    path.display()
                )
            } else {
                format!(
                    "{} is an input of this command (read as {}): refusing to overwrite it; choose another path",
                    path.display(),
                    read.display()
                )
            },
        )),
    }
}
