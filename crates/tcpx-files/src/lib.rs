//! How tcpx-perf and tcpx-analyze write and read files, in one place (docs/files.md):
//! - **whole or absent**: [`write_whole`] writes a temporary sibling, checks every write, the
//!   flush, the fsync and the close, then renames it into place; on any error the temporary is
//!   removed and the path keeps what it held (nothing, or its previous whole version). A full
//!   disk is an error naming the path, never a cut-off file.
//! - **a plain file or nothing**: every file is opened with `O_NOFOLLOW`, new ones with
//!   `O_CREAT | O_EXCL` (which refuses any existing name, a dangling link included), and a
//!   symbolic link, a device, a FIFO, a socket or a directory where a file is to be written is
//!   refused with one line naming it. A rename replaces a name, never the file a link points to;
//!   the check before it is what turns a planted link into an error instead of a silent swap.
//! - **no output replaces an input or another output**: [`claim_output`] takes each output of a
//!   command before it acts, refusing a path that another output of the same command names or
//!   that is one of its inputs ([`read`]: the files it reads, remembered by device and inode);
//!   [`write_whole`] refuses an input again at the moment it writes.
//! - **no directory made for a file**: a file's directory must exist ([`claim_output`] and
//!   [`write_whole`] say so in one line); only a directory the user names as one (`--out`) is
//!   made.
//! - **inputs regular, unblocking and bounded**: [`read`].
//!
//! - **stdout and stderr that never panic**: [`console`]'s `print!`/`println!`/`eprint!`/
//!   `eprintln!` replace std's, so a closed pipe does not turn a verdict into a panic.
//!
//! The directory a path names may itself be reached through a link (the user chose it, as
//! `--out results -> /scratch/results`); only the last component, the file, is never followed.
//!
//! Only `std` and `libc`: every crate of the workspace may depend on this one.

pub mod console;
pub mod read;

pub use read::{note_input, open_input, read_input, read_input_text, Bound};

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::IntoRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Whether [`write_whole`] fsyncs the file (and its directory) before it returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// On disk when the call returns: the file, then its directory (the rename).
    Synced,
    /// In the page cache: for files rewritten often (a run's per-size CSV), which a later
    /// [`Durability::Synced`] write or [`sync_dir_files`] makes durable. Write and close errors
    /// (a full disk) are still reported.
    Cached,
}

/// The one-line error for a link (or other non-file) where a file is to be written.
pub fn not_a_file(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} is {what}, not a file: refusing to write through it; remove it or choose another path",
            path.display()
        ),
    )
}

/// `Ok` if nothing is at `path` or it is a regular file; an error naming it and what it is if
/// it is a symbolic link (dangling or not), a directory, a FIFO, a socket or a device.
pub fn refuse_non_file(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_symlink() => Err(not_a_file(path, "a symbolic link")),
        Ok(m) if !m.file_type().is_file() => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is {}, not a regular file: refusing to write to it; remove it or choose another path",
                path.display(),
                read::kind_of(&m)
            ),
        )),
        Ok(_) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(named(path, e)),
    }
}

/// Creates `path`, which must not exist (`O_CREAT | O_EXCL | O_NOFOLLOW`), for writing. An
/// existing link is named as such; any other existing entry is `AlreadyExists`.
pub fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| link_or(path, e))
}

/// Opens `path` for reading and writing, creating it if absent, without following a link
/// (`O_NOFOLLOW`; a link, dangling or not, is an error naming it). It must be a regular file
/// with no other hard link, so that it is this directory's own file and not one linked in from
/// elsewhere. For a file that is reused, as a lock; nothing is truncated.
pub fn open_own_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        // O_NONBLOCK: a FIFO planted under the name must not block the open.
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| link_or(path, e))?;
    let m = file.metadata().map_err(|e| named(path, e))?;
    if !m.file_type().is_file() {
        return Err(not_a_file(path, "not a regular file"));
    }
    if m.nlink() > 1 {
        return Err(not_a_file(path, "a hard link to a file elsewhere"));
    }
    Ok(file)
}

/// Closes `file`, reporting the error `close(2)` gives (NFS reports a failed write-back there);
/// `drop` would ignore it.
pub fn close(file: File) -> io::Result<()> {
    let fd = file.into_raw_fd();
    // SAFETY: `fd` was just taken from an owned File, so it is open and closed only here.
    if unsafe { libc::close(fd) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Writes `path` whole or not at all, never through a link (see the crate documentation).
/// `write` fills a buffered writer on a new temporary sibling of `path`. The error names `path`
/// and says why (`No space left on device`, a link, ...); the temporary is gone either way.
pub fn write_whole(
    path: &Path,
    durability: Durability,
    write: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
) -> io::Result<()> {
    refuse_non_file(path)?;
    place(path)?;
    read::refuse_input(path)?;
    let (tmp, file) = create_temporary(path).map_err(|e| named(path, e))?;
    let step = |e| named(path, e);
    let finished = (|| {
        let mut w = BufWriter::new(file);
        write(&mut w).map_err(step)?;
        w.flush().map_err(step)?;
        let file = w.into_inner().map_err(|e| step(e.into_error()))?;
        if durability == Durability::Synced {
            file.sync_all().map_err(step)?;
        }
        close(file).map_err(step)?;
        // A link planted at `path` while the temporary was written: refused, not replaced.
        refuse_non_file(path)?;
        fs::rename(&tmp, path).map_err(step)
    })();
    if let Err(e) = finished {
        // The original error matters more than a failed clean-up.
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    if durability == Durability::Synced {
        sync_dir(parent_of(path)).map_err(|e| named(path, e))?;
    }
    Ok(())
}

/// [`write_whole`] of `bytes`.
pub fn write_bytes(path: &Path, durability: Durability, bytes: &[u8]) -> io::Result<()> {
    write_whole(path, durability, |w| w.write_all(bytes))
}

/// Where `path` is: its directory, resolved (links followed, as the user may reach it through
/// one), and its name; the one-line error when there is no such directory (none is made) or no
/// file name (`..`, `/`).
fn place(path: &Path) -> io::Result<PathBuf> {
    let Some(name) = path.file_name() else {
        return Err(not_a_file(path, "not a file name"));
    };
    let dir = parent_of(path);
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(fs::canonicalize(dir).map_err(|e| named(path, e))?.join(name)),
        Ok(_) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cannot write {}: {} is not a directory; choose another path",
                path.display(),
                dir.display()
            ),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "cannot write {}: directory {} does not exist (none is made for a file): create it or choose another path",
                path.display(),
                dir.display()
            ),
        )),
        Err(e) => Err(named(path, e)),
    }
}

/// The outputs this process claimed: where each is ([`place`]) and what names it.
static OUTPUTS: Mutex<Vec<(PathBuf, String)>> = Mutex::new(Vec::new());

/// Claims `path` as an output of this command, named `label` (`--drain-list`, `the result
/// directory's summary.json`), before the command acts: nothing or a regular file is there
/// ([`refuse_non_file`]), its directory exists (none is made), it is none of the command's inputs
/// ([`read`]) and no other output of the command is at the same place (the same file however
/// spelled: `out/../out/x`, a link to its directory). Claiming it again under the same label is a
/// no-op. Each refusal is one line naming the path and the fix.
pub fn claim_output(path: &Path, label: &str) -> io::Result<()> {
    refuse_non_file(path)?;
    let at = place(path)?;
    read::refuse_input(path)?;
    let mut outputs = OUTPUTS.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    match outputs.iter().find(|(p, _)| *p == at) {
        Some((_, other)) if other == label => Ok(()),
        Some((_, other)) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} is the path of {other} and also of {label}: give each output a path of its own",
                path.display()
            ),
        )),
        None => {
            outputs.push((at, label.to_string()));
            Ok(())
        }
    }
}

/// fsync of every regular file directly in `dir` (links and other entries are skipped, never
/// opened) and of `dir` itself, for its renames.
pub fn sync_dir_files(dir: &Path) -> io::Result<()> {
    for entry in fs::read_dir(dir).map_err(|e| named(dir, e))? {
        let entry = entry.map_err(|e| named(dir, e))?;
        if !entry.file_type().map_err(|e| named(dir, e))?.is_file() {
            continue;
        }
        let path = entry.path();
        OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(&path)
            .and_then(|f| f.sync_all())
            .map_err(|e| named(&path, e))?;
    }
    sync_dir(dir).map_err(|e| named(dir, e))
}

/// fsync of a directory (its entries: renames, new files).
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory a file path is in (`.` for a bare name).
pub fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

static TEMPORARIES: AtomicU64 = AtomicU64::new(0);

/// A new, exclusively created temporary sibling of `path`: `.NAME.PID.N.tmp` (hidden, unique
/// in this process; a name left by another process is skipped, never opened).
pub fn create_temporary(path: &Path) -> io::Result<(PathBuf, File)> {
    let name = path.file_name().map(OsString::from).unwrap_or_default();
    let name = name.to_string_lossy();
    let mut last = None;
    for _ in 0..64 {
        let n = TEMPORARIES.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()));
        match create_new(&tmp) {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists || e.kind() == io::ErrorKind::InvalidInput => {
                last = Some(e);
            }
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists)))
}

/// `ELOOP` from `O_NOFOLLOW`, or `EEXIST` from `O_EXCL` on a link: the link error naming
/// `path`; anything else unchanged.
fn link_or(path: &Path, e: io::Error) -> io::Error {
    let is_link = || fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if e.raw_os_error() == Some(libc::ELOOP) || (e.kind() == io::ErrorKind::AlreadyExists && is_link()) {
        not_a_file(path, "a symbolic link")
    } else {
        e
    }
}

/// `e` with `cannot write PATH: ` in front (kind kept).
fn named(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("cannot write {}: {e}", path.display()))
}

#[cfg(test)]
mod tests;
