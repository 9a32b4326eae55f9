use super::*;
use std::os::unix::fs::symlink;

fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_whole_write_replaces_the_file_and_leaves_no_temporary() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("results.csv");
    write_bytes(&p, Durability::Synced, b"one\n").unwrap();
    write_bytes(&p, Durability::Cached, b"two\n").unwrap();
    assert_eq!(fs::read_to_string(&p).unwrap(), "two\n");
    assert_eq!(entries(tmp.path()), ["results.csv"]);
}

/// A link at the path, to a file elsewhere or dangling, is refused naming it: the target is
/// neither written nor created, the link stays, and no temporary is left.
#[test]
fn a_link_at_the_path_is_refused_and_nothing_is_written_through_it() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("out");
    fs::create_dir(&dir).unwrap();
    let victim = tmp.path().join("victim");
    fs::write(&victim, "precious\n").unwrap();
    let p = dir.join("summary.json");
    symlink(&victim, &p).unwrap();
    let e = write_bytes(&p, Durability::Synced, b"x").unwrap_err().to_string();
    assert_eq!(
        e,
        format!(
            "{} is a symbolic link, not a file: refusing to write through it; remove it or choose another path",
            p.display()
        )
    );
    assert_eq!(fs::read_to_string(&victim).unwrap(), "precious\n");
    let dangling = dir.join("results.csv");
    let outside = tmp.path().join("created-outside");
    symlink(&outside, &dangling).unwrap();
    assert!(write_bytes(&dangling, Durability::Synced, b"x").is_err());
    assert!(!outside.exists());
    assert!(create_new(&dangling)
        .unwrap_err()
        .to_string()
        .contains("is a symbolic link"));
    assert!(!outside.exists());
    assert!(open_own_file(&dangling)
        .unwrap_err()
        .to_string()
        .contains("is a symbolic link"));
    assert!(!outside.exists());
    assert_eq!(entries(&dir), ["results.csv", "summary.json"]);
}

/// A temporary name taken by a planted link is skipped, never opened.
#[test]
fn a_planted_temporary_name_is_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("f");
    let victim = tmp.path().join("victim");
    fs::write(&victim, "v").unwrap();
    let next = TEMPORARIES.load(Ordering::Relaxed);
    for n in next..next + 4 {
        symlink(&victim, tmp.path().join(format!(".f.{}.{n}.tmp", std::process::id()))).unwrap();
    }
    write_bytes(&p, Durability::Synced, b"ok").unwrap();
    assert_eq!(fs::read_to_string(&p).unwrap(), "ok");
    assert_eq!(fs::read_to_string(&victim).unwrap(), "v");
}

#[test]
fn a_hard_link_or_a_fifo_is_not_an_own_file() {
    let tmp = tempfile::tempdir().unwrap();
    let victim = tmp.path().join("victim");
    fs::write(&victim, "v").unwrap();
    let p = tmp.path().join("claim");
    fs::hard_link(&victim, &p).unwrap();
    assert!(open_own_file(&p).unwrap_err().to_string().contains("a hard link"));
    let fifo = tmp.path().join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert!(open_own_file(&fifo)
        .unwrap_err()
        .to_string()
        .contains("not a regular file"));
    assert!(write_bytes(&fifo, Durability::Cached, b"x").is_err());
    sync_dir_files(tmp.path()).unwrap();
}

/// A writer that fails midway (as a full disk does) leaves the old file and no temporary.
#[test]
fn a_failed_write_keeps_the_old_file_and_leaves_no_temporary() {
    let tmp = tempfile::tempdir().unwrap();
    let p = tmp.path().join("baseline.toml");
    fs::write(&p, "old\n").unwrap();
    let e = write_whole(&p, Durability::Synced, |w| {
        w.write_all(b"half")?;
        Err(io::Error::from_raw_os_error(libc::ENOSPC))
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .starts_with(&format!("cannot write {}: No space left", p.display())),
        "{e}"
    );
    assert_eq!(fs::read_to_string(&p).unwrap(), "old\n");
    assert_eq!(entries(tmp.path()), ["baseline.toml"]);
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// An input is a regular file: a FIFO (no writer: the open would block without O_NONBLOCK), a
/// link to /dev/zero, a directory are refused at once saying what they are; a file past its
/// bound is refused by its size before a byte is read; a file within it is read whole.
#[test]
fn an_input_is_a_regular_file_within_its_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let fifo = tmp.path().join("results.csv");
    mkfifo(&fifo);
    let zero = tmp.path().join("summary.json");
    symlink("/dev/zero", &zero).unwrap();
    for (p, what) in [
        (&fifo, "a FIFO"),
        (&zero, "a character device"),
        (&tmp.path().to_path_buf(), "a directory"),
    ] {
        let e = read_input(p, Bound::SUMMARY_JSON).unwrap_err().to_string();
        assert_eq!(
            e,
            format!(
                "{}: {what}, not a regular file: refusing to read it; give the file itself",
                p.display()
            )
        );
    }
    let big = tmp.path().join("big.toml");
    File::create(&big)
        .unwrap()
        .set_len(Bound::BASELINE.max_bytes + 1)
        .unwrap();
    let e = read_input(&big, Bound::BASELINE).unwrap_err().to_string();
    assert!(
        e.contains("16.0 MiB, more than a baseline file may be (16.0 MiB)"),
        "{e}"
    );
    let ok = tmp.path().join("ok.csv");
    fs::write(&ok, "a,b\n").unwrap();
    assert_eq!(read_input_text(&ok, Bound::RESULTS_CSV).unwrap(), "a,b\n");
    assert!(read_input(&tmp.path().join("missing"), Bound::LOG).unwrap_err().kind() == io::ErrorKind::NotFound);
}

/// An output is claimed once: a second output at the same place (however spelled) is refused
/// naming both, an input of the command is refused (claimed or written), a missing directory is
/// refused and not made, a FIFO is refused saying so; the same claim again is a no-op.
#[test]
fn an_output_is_none_of_the_inputs_nor_another_output_and_makes_no_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let a = tmp.path().join("a.md");
    claim_output(&a, "--markdown").unwrap();
    claim_output(&a, "--markdown").unwrap();
    let spelled = tmp.path().join(".").join("a.md");
    let e = claim_output(&spelled, "--json").unwrap_err().to_string();
    assert!(e.contains("is the path of --markdown and also of --json"), "{e}");
    let input = tmp.path().join("results.csv");
    fs::write(&input, "x\n").unwrap();
    read_input(&input, Bound::RESULTS_CSV).unwrap();
    let e = claim_output(&input, "-o").unwrap_err().to_string();
    assert!(e.contains("is an input of this command"), "{e}");
    let e = write_bytes(&input, Durability::Cached, b"toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("is an input of this command"), "{e}");
    assert_eq!(fs::read_to_string(&input).unwrap(), "x\n");
    let noted = tmp.path().join("noted");
    fs::write(&noted, "y\n").unwrap();
    note_input(&noted);
    assert!(claim_output(&noted, "-o").is_err());
    let deep = tmp.path().join("no/such/x");
    let e = claim_output(&deep, "-o").unwrap_err().to_string();
    assert!(e.contains("does not exist") && !tmp.path().join("no").exists(), "{e}");
    assert!(write_bytes(&deep, Durability::Cached, b"x")
        .unwrap_err()
        .to_string()
        .contains("does not exist"));
    let fifo = tmp.path().join("fifo");
    mkfifo(&fifo);
    let e = claim_output(&fifo, "-o").unwrap_err().to_string();
    assert!(e.contains("is a FIFO, not a regular file"), "{e}");
}
