//! The GPU pattern must be bit-identical to the lead's host data check. This compiles the root
//! crate's `src/check.rs` as-is (it has no dependencies) and compares it with
//! `tcpx_gpu::pattern`, which `gpu_check` in turn compares with the GPU kernels' output.

#[allow(dead_code)]
#[path = "../../../src/check.rs"]
mod check;

use tcpx_gpu::pattern::{fill_host, pattern_byte, verify_host};

#[test]
fn pattern_byte_matches_check_rs() {
    for (origin, iter) in [(0, 0), (1, 0), (0, 1), (7, 123_456), (u32::MAX, u32::MAX)] {
        for offset in [0u64, 1, 7, 8, 4095, 4096, 1 << 32, (1 << 40) + 3] {
            for d in 0..17 {
                let a = offset + d;
                assert_eq!(
                    pattern_byte(origin, iter, a),
                    check::pattern_byte(origin, iter, a),
                    "origin {origin} iter {iter} offset {a}"
                );
            }
        }
    }
}

#[test]
fn fill_and_verify_match_check_rs() {
    for (len, offset) in [(0usize, 0u64), (1, 3), (8, 8), (1000, 5), (4096 + 7, 12345)] {
        let mut ours = vec![0u8; len];
        let mut theirs = vec![0u8; len];
        fill_host(&mut ours, 4, 9, offset);
        check::fill(&mut theirs, 4, 9, offset);
        assert_eq!(ours, theirs, "len {len} offset {offset}");
        assert_eq!(check::verify(&ours, 4, 9, offset), 0);
        if len > 0 {
            ours[len / 2] ^= 0x40;
            assert_eq!(check::verify(&ours, 4, 9, offset), 1);
            assert_eq!(verify_host(&ours, 4, 9, offset), 1);
        }
    }
}
