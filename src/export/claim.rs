//! One job per result directory. Rank 0 claims `--out` before anything is written there: two
//! jobs given one directory (a script started twice, a copied command line) would otherwise both
//! pass the "new or empty" check and write a mix of two runs.
//!
//! The claim is a file in the directory, [`CLAIM_FILE`], locked with `flock` for the life of the
//! process. The kernel drops the lock however the process ends (exit, signal, `kill -9`, a
//! crash), so a claim is stale exactly when its file is unlocked: no pid to guess about, and it
//! works across hosts on file systems with locks (NFSv4 and local ones). The file holds one line
//! naming its job (host, pid, start time), which a refused job prints; it stays in the directory
//! as a note of who wrote it. The file is opened, never created exclusively and never removed, so
//! every job locks the same inode: there is no window in which two jobs each lock a different
//! file under the one name. It is opened without following a link (a link is refused, naming
//! it), and rewritten only once locked in a directory holding nothing else: a refused job
//! changes nothing in the directory it refused.

use std::fs::{self, File};
use std::io::{self, Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The claim file in a result directory (listed in results/README.md).
pub const CLAIM_FILE: &str = ".tcpx-perf-claim";

/// How long a refused job waits for the holder's line (a holder writes it right after locking).
const HOLDER_LINE_WAIT: Duration = Duration::from_secs(1);

/// The claim this process holds: the open file keeps the lock until the process ends; and
/// whether this process made the directory.
static HELD: Mutex<Option<(PathBuf, File, bool)>> = Mutex::new(None);

/// Claims `dir` for this process (creating it and its parents) until the process ends. `Ok(Some)`
/// is a note that it took over a stale claim (its job is gone); claiming a directory this process
/// already holds does nothing. A directory another running job holds is an error naming that job
/// and `--out`.
pub fn claim(dir: &Path) -> io::Result<Option<String>> {
    let mut held = HELD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if held.as_ref().is_some_and(|(d, _, _)| d == dir) {
        return Ok(None);
    }
    let path = dir.join(CLAIM_FILE);
    let made = fs::symlink_metadata(dir).is_err();
    if fs::symlink_metadata(&path).is_err() {
        // A folder of someone else's files is refused before a claim file is made in it.
        super::prepare_out_dir(dir)?;
    }
    let cannot = |e: io::Error| {
        io::Error::new(
            e.kind(),
            format!(
                "cannot claim result directory {}: {e}; choose another --out",
                path.display()
            ),
        )
    };
    // Never through a link: a claim file that is a symbolic link (to any file, or dangling) or
    // a hard link to a file elsewhere is refused in one line naming it.
    let mut file = tcpx_files::open_own_file(&path).map_err(|e| {
        if e.kind() == io::ErrorKind::InvalidInput {
            e
        } else {
            cannot(e)
        }
    })?;
    match file.try_lock() {
        Ok(()) => {}
        Err(fs::TryLockError::WouldBlock) => {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!(
                    "result directory {} is in use by another job ({}): wait for it to end, or choose another --out",
                    dir.display(),
                    holder_line(&mut file)
                ),
            ))
        }
        Err(fs::TryLockError::Error(e)) => {
            return Err(cannot(io::Error::new(
                e.kind(),
                format!("no file lock ({e}): put --out on a file system with locks"),
            )))
        }
    }
    // Locked, and only now rewritten: a finished run's folder (or one written to since the
    // check above) is refused with its claim left as it was.
    super::prepare_out_dir(dir)?;
    let before = read_line(&mut file).map_err(cannot)?;
    let mine = format!(
        "host {}, pid {}, started {}",
        this_host(),
        std::process::id(),
        crate::report::now_rfc3339()
    );
    file.set_len(0).map_err(cannot)?;
    file.rewind().map_err(cannot)?;
    writeln!(file, "{mine}")
        .and_then(|()| file.sync_all())
        .map_err(cannot)?;
    *held = Some((dir.to_path_buf(), file, made));
    Ok((!before.is_empty()).then(|| {
        format!(
            "{} held a claim of a job that is gone ({before}); this job took it over",
            dir.display()
        )
    }))
}

/// A run refused before it measured gives back the directory it made for its claim: the claim
/// file and the directory go, when the directory holds nothing else (a refused run leaves
/// nothing new; a directory it did not make keeps its claim, a note of who tried).
pub fn abandon_if_new() {
    let mut held = HELD.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let Some((dir, file, true)) = held.take() else {
        return;
    };
    let only_claim = fs::read_dir(&dir).is_ok_and(|entries| entries.flatten().all(|e| e.file_name() == CLAIM_FILE));
    if only_claim {
        let _ = fs::remove_file(dir.join(CLAIM_FILE));
        let _ = fs::remove_dir(&dir);
    }
    drop(file);
}

/// The holder's line, waiting briefly for a holder that has locked but not yet written it.
fn holder_line(file: &mut File) -> String {
    let start = Instant::now();
    loop {
        match read_line(file) {
            Ok(line) if !line.is_empty() => return line,
            Err(e) => return format!("its claim file cannot be read: {e}"),
            Ok(_) if start.elapsed() >= HOLDER_LINE_WAIT => return "it has not named itself yet".into(),
            Ok(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn read_line(file: &mut File) -> io::Result<String> {
    let mut text = String::new();
    file.rewind()?;
    file.read_to_string(&mut text)?;
    Ok(text.lines().next().unwrap_or("").trim().to_string())
}

/// This host's name as the kernel gives it (the UTS namespace's, as MPI's processor name).
fn this_host() -> String {
    fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown host".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A claim file nobody locks (its job was killed) is taken over, with a note naming the old
    /// holder; claiming again in the same process does nothing; the file names this process.
    #[test]
    fn a_stale_claim_is_taken_over_and_a_second_claim_is_a_no_op() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("run");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join(CLAIM_FILE), "host gone, pid 1, started 2020-01-01T00:00:00Z\n").unwrap();
        let note = claim(&dir).expect("stale: taken over").expect("a note");
        assert!(
            note.contains("(host gone, pid 1, started 2020-01-01T00:00:00Z)"),
            "{note}"
        );
        assert_eq!(claim(&dir).expect("held already"), None);
        let line = fs::read_to_string(dir.join(CLAIM_FILE)).unwrap();
        assert!(
            line.contains(&format!(", pid {}, started ", std::process::id())),
            "{line}"
        );
    }

    /// A claim file another open file holds locked (a running job) refuses, naming its line and
    /// the flag; the directory is left as it was.
    #[test]
    fn a_held_claim_refuses_naming_its_job() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let dir = tmp.path().join("busy");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(CLAIM_FILE);
        fs::write(&path, "host other, pid 4242, started 2026-01-01T00:00:00Z\n").unwrap();
        let holder = File::open(&path).unwrap();
        holder.try_lock().expect("lock as the running job");
        let err = claim(&dir).expect_err("held").to_string();
        assert_eq!(
            err,
            format!(
                "result directory {} is in use by another job (host other, pid 4242, started 2026-01-01T00:00:00Z): wait for it to end, or choose another --out",
                dir.display()
            )
        );
        assert_eq!(
            fs::read_to_string(&path).unwrap(),
            "host other, pid 4242, started 2026-01-01T00:00:00Z\n"
        );
    }
}
