//! Builds the C logger shim: stable Rust cannot define a C-variadic function, and NCCL's
//! `ncclDebugLogger_t` is `void (*)(level, flags, file, line, fmt, ...)`.

fn main() {
    println!("cargo:rerun-if-changed=src/logger_shim.c");
    cc::Build::new()
        .file("src/logger_shim.c")
        .warnings(true)
        .extra_warnings(true)
        .compile("nccl_net_logger_shim");
}
