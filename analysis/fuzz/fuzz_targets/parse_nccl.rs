#![no_main]
//! nccl-tests stdout tables and JSON v3: must return Ok or Err, never panic.
use libfuzzer_sys::fuzz_target;
use tcpx_analyze::parse::{self, ParseOptions, Placement};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for placement in [Placement::OutOfPlace, Placement::InPlace] {
        let o = ParseOptions {
            placement,
            pattern: None,
        };
        let _ = parse::nccl_text::parse("fuzz.txt", &text, &o);
        let _ = parse::nccl_json::parse("fuzz.json", &text, &o);
    }
});
