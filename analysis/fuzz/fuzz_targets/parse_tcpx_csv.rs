#![no_main]
//! tcpx-perf results.csv / samples.csv / pairs.csv: must return Ok or Err, never panic.
use libfuzzer_sys::fuzz_target;
use tcpx_analyze::parse::tcpx;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok((mut series, _)) = tcpx::parse_results_csv("results.csv", &text) {
        let _ = tcpx::parse_samples_csv("samples.csv", &text, &mut series);
    }
    let _ = tcpx::parse_pairs_csv("pairs.csv", &text);
});
