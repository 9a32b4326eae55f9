#![no_main]
//! Baseline TOML files: must return Ok or Err, never panic.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(b) = tcpx_analyze::baseline::parse("fuzz.toml", &text) {
        for e in &b.entries {
            let _ = e.sizes();
        }
    }
});
