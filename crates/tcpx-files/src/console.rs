//! `print!`, `println!`, `eprint!` and `eprintln!` that never panic. std's panic when the write
//! fails, which is what a closed pipe does (`tcpx-analyze gate ... 2>&1 | head -1`): the process
//! then ends with 101 and the verdict's exit status is lost. These drop what cannot be written
//! and carry on, so the exit status stays the verdict's.
//!
//! A crate takes them in place of std's, in every module, with `#[macro_use] extern crate
//! tcpx_files;` at its root (lib.rs and main.rs): macros imported so shadow the prelude's.

/// [`std::print!`] that drops its text when stdout is closed, instead of panicking.
#[macro_export]
macro_rules! print {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::write!(::std::io::stdout(), $($arg)*);
    }};
}

/// [`std::println!`] that drops its text when stdout is closed, instead of panicking.
#[macro_export]
macro_rules! println {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stdout(), $($arg)*);
    }};
}

/// [`std::eprint!`] that drops its text when stderr is closed, instead of panicking.
#[macro_export]
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::write!(::std::io::stderr(), $($arg)*);
    }};
}

/// [`std::eprintln!`] that drops its text when stderr is closed, instead of panicking.
#[macro_export]
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use ::std::io::Write as _;
        let _ = ::std::writeln!(::std::io::stderr(), $($arg)*);
    }};
}
