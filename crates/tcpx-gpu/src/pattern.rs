//! Host copy of the data pattern the `tcpx_fill` / `tcpx_verify` kernels produce.
//!
//! This must stay bit-identical to the lead's host data check in `src/check.rs` (the root
//! crate) and to `kernels/pattern.cu`. The integration test `tests/pattern_matches_check.rs`
//! compiles `src/check.rs` itself and compares, so a drift in either copy fails CI; the
//! `gpu_check` example compares the GPU output with this function.
//! (Longer term `check.rs` could depend on this crate and the copy disappears.)

const SEED: u64 = 0x7463_7078_7065_7266; // "tcpxperf"
const GOLDEN: u64 = 0x9E37_79B9_7F4A_7C15;

#[inline(always)]
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[inline(always)]
fn key(origin: u32, iter: u32) -> u64 {
    mix((((origin as u64) << 32) | iter as u64) ^ SEED)
}

/// The expected byte at absolute offset `offset` of `origin`'s data in iteration `iter`
/// (identical to `tcpx_perf::check::pattern_byte`).
#[inline]
pub fn pattern_byte(origin: u32, iter: u32, offset: u64) -> u8 {
    let k = key(origin, iter);
    (mix(k.wrapping_add((offset / 8).wrapping_mul(GOLDEN))) >> (8 * (offset % 8))) as u8
}

/// Fills `buf` with the pattern: `buf[i] = pattern_byte(origin, iter, offset + i)`.
pub fn fill_host(buf: &mut [u8], origin: u32, iter: u32, offset: u64) {
    let k = key(origin, iter);
    let mut i = 0usize;
    while i < buf.len() {
        let a = offset + i as u64;
        let w = mix(k.wrapping_add((a / 8).wrapping_mul(GOLDEN))).to_le_bytes();
        let first = (a % 8) as usize;
        let n = (8 - first).min(buf.len() - i);
        buf[i..i + n].copy_from_slice(&w[first..first + n]);
        i += n;
    }
}

/// Counts bytes of `buf` that differ from the pattern.
pub fn verify_host(buf: &[u8], origin: u32, iter: u32, offset: u64) -> u64 {
    let mut want = vec![0u8; buf.len()];
    fill_host(&mut want, origin, iter, offset);
    buf.iter().zip(&want).filter(|(a, b)| a != b).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_matches_byte_definition() {
        for offset in [0u64, 1, 7, 8, 13, (1 << 33) + 5] {
            let mut v = vec![0u8; 77];
            fill_host(&mut v, 3, 9, offset);
            for (i, &b) in v.iter().enumerate() {
                assert_eq!(b, pattern_byte(3, 9, offset + i as u64));
            }
            assert_eq!(verify_host(&v, 3, 9, offset), 0);
            v[5] ^= 1;
            assert_eq!(verify_host(&v, 3, 9, offset), 1);
        }
    }
}
