#![no_main]
//! nccl-tests/rccl-tests/tcpx-perf stdout tables, nccl-tests JSON v3 and rccl-tests JSON: must
//! return Ok or Err, never panic.
use libfuzzer_sys::fuzz_target;
use tcpx_analyze::parse::{self, ParseOptions, Placement};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for placement in [Placement::OutOfPlace, Placement::InPlace] {
        let o = ParseOptions {
            placement,
            pattern: None,
            allow_truncated: placement == Placement::InPlace,
        };
        let _ = parse::parse_text("fuzz.txt", &text, &o);
        let _ = parse::nccl_text::parse("fuzz.txt", &text, &o);
        let _ = parse::rccl_json::parse("fuzz.json", &text, &o);
        let _ = parse::nccl_json::parse("fuzz.json", &text, &o);
    }
});
