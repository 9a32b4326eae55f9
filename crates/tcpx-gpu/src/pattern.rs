//! The deterministic data pattern, host side: the one definition that tcpx-perf's data check,
//! the `tcpx_fill` / `tcpx_verify` CUDA kernels (`kernels/pattern.cu`, a port of this file) and
//! the plugin tests share. `gpu_check` compares the kernels' output with [`pattern_byte`].
//!
//! Byte `a` (an absolute offset in the sender's logical buffer) of the data sent by endpoint
//! `origin` in iteration `iter` is
//!
//! ```text
//! key      = mix(((origin as u64) << 32 | iter as u64) ^ SEED)
//! word(w)  = mix(key + w * GOLDEN)                 (a splitmix64 stream keyed by key)
//! byte(a)  = little-endian byte (a % 8) of word(a / 8)
//! ```
//!
//! Why this shape:
//! - `mix` (the splitmix64 finalizer) is a bijection on `u64`, so different
//!   `(origin, iter)` give different keys, and for a given word index different keys give
//!   different words: a buffer from another origin or a stale iteration differs in every
//!   word (each byte differs with probability 255/256). Different word indices of one
//!   stream also differ, so a block delivered at the wrong offset is caught.
//! - Work is one 64-bit hash per 8 bytes, so fill and verify run at several GB/s on one
//!   core; the receiver verifies in place without a reference copy.
//! - The definition is per absolute byte, so any sub-slice (a chunk, a block of a ring
//!   step, an unaligned tail) can be filled or verified on its own and agrees with the
//!   whole-buffer fill.

use tcpx_units::rng::{mix, GOLDEN};

/// Seed folded into the key so that `(origin 0, iter 0)` is not the all-zero input.
const SEED: u64 = 0x7463_7078_7065_7266; // "tcpxperf"

// inline(always): the per-byte check and fill loops call these billions of times; an
// out-of-line call costs more than the hash (`mix`, tcpx-units' splitmix64 finalizer, is #[inline]).
#[allow(clippy::inline_always)]
#[inline(always)]
fn key(origin: u32, iter: u32) -> u64 {
    mix(((u64::from(origin) << 32) | u64::from(iter)) ^ SEED)
}

#[allow(clippy::inline_always)]
#[inline(always)]
fn word(key: u64, index: u64) -> u64 {
    mix(key.wrapping_add(index.wrapping_mul(GOLDEN)))
}

/// The expected byte at absolute offset `offset` of `origin`'s data in iteration `iter`.
pub fn pattern_byte(origin: u32, iter: u32, offset: u64) -> u8 {
    byte_of(key(origin, iter), offset)
}

#[allow(clippy::inline_always)]
#[inline(always)]
fn byte_of(key: u64, offset: u64) -> u8 {
    (word(key, offset / 8) >> (8 * (offset % 8))) as u8
}

/// Splits `len` bytes starting at absolute `offset` into (head bytes before the first
/// 8-aligned absolute offset, number of whole words, tail bytes).
#[inline]
fn split(len: usize, offset: u64) -> (usize, usize, usize) {
    let head = (((8 - offset % 8) % 8) as usize).min(len);
    let words = (len - head) / 8;
    (head, words, len - head - words * 8)
}

/// Fills `buf` with the pattern: byte `i` = [`pattern_byte`]`(origin, iter, offset + i)`.
/// `offset` is the absolute position of `buf[0]` in the sender's logical buffer.
pub fn fill(buf: &mut [u8], origin: u32, iter: u32, offset: u64) {
    let k = key(origin, iter);
    let (head, words, _) = split(buf.len(), offset);
    let (head_bytes, rest) = buf.split_at_mut(head);
    for (i, b) in head_bytes.iter_mut().enumerate() {
        *b = byte_of(k, offset + i as u64);
    }
    let first_word = (offset + head as u64) / 8;
    let (body, tail_bytes) = rest.split_at_mut(words * 8);
    let mut state = k.wrapping_add(first_word.wrapping_mul(GOLDEN));
    for chunk in body.chunks_exact_mut(8) {
        chunk.copy_from_slice(&mix(state).to_le_bytes());
        state = state.wrapping_add(GOLDEN);
    }
    let tail_start = offset + (head + words * 8) as u64;
    for (i, b) in tail_bytes.iter_mut().enumerate() {
        *b = byte_of(k, tail_start + i as u64);
    }
}

/// Number of differing bytes between two words.
#[inline]
fn differing_bytes(a: u64, b: u64) -> u64 {
    // Fold each byte's 8 bits into its lowest bit, then count the bytes that have one.
    let mut x = a ^ b;
    x |= x >> 4;
    x |= x >> 2;
    x |= x >> 1;
    u64::from((x & 0x0101_0101_0101_0101).count_ones())
}

/// Counts the bytes of `buf` that differ from the pattern (see [`fill`]); 0 means intact.
/// Words are compared whole; bytes are counted only inside a mismatching word, so an intact
/// buffer costs one hash and one compare per 8 bytes.
pub fn verify(buf: &[u8], origin: u32, iter: u32, offset: u64) -> u64 {
    let k = key(origin, iter);
    let (head, words, _) = split(buf.len(), offset);
    let mut wrong = 0u64;
    for (i, &b) in buf[..head].iter().enumerate() {
        wrong += u64::from(b != byte_of(k, offset + i as u64));
    }
    let first_word = (offset + head as u64) / 8;
    let body = &buf[head..head + words * 8];
    let mut state = k.wrapping_add(first_word.wrapping_mul(GOLDEN));
    for chunk in body.chunks_exact(8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(chunk);
        let got = u64::from_le_bytes(w);
        let want = mix(state);
        if got != want {
            wrong += differing_bytes(got, want);
        }
        state = state.wrapping_add(GOLDEN);
    }
    let tail_start = head + words * 8;
    for (i, &b) in buf[tail_start..].iter().enumerate() {
        wrong += u64::from(b != byte_of(k, offset + (tail_start + i) as u64));
    }
    wrong
}

/// The absolute offset of the first wrong byte, for error messages after [`verify`]
/// reported a non-zero count (a slow byte-by-byte scan: call it only on failure).
pub fn first_mismatch(buf: &[u8], origin: u32, iter: u32, offset: u64) -> Option<u64> {
    let k = key(origin, iter);
    buf.iter()
        .enumerate()
        .find(|&(i, &b)| b != byte_of(k, offset + i as u64))
        .map(|(i, _)| offset + i as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(len: usize, origin: u32, iter: u32, offset: u64) -> Vec<u8> {
        let mut v = vec![0u8; len];
        fill(&mut v, origin, iter, offset);
        v
    }

    #[test]
    fn roundtrip() {
        for len in [0, 1, 7, 8, 9, 63, 64, 4096 + 3] {
            for offset in [0, 1, 5, 8, 1 << 20, (1 << 33) + 3] {
                let v = filled(len, 3, 17, offset);
                assert_eq!(verify(&v, 3, 17, offset), 0, "len {len} offset {offset}");
                assert_eq!(first_mismatch(&v, 3, 17, offset), None);
            }
        }
    }

    #[test]
    fn byte_definition_matches_fill() {
        let v = filled(100, 9, 2, 13);
        for (i, &b) in v.iter().enumerate() {
            assert_eq!(b, pattern_byte(9, 2, 13 + i as u64));
        }
    }

    #[test]
    fn single_flipped_byte_counts_one() {
        for pos in [0, 3, 7, 8, 100, 1000, 1022, 1023] {
            for offset in [0, 3] {
                let mut v = filled(1024, 1, 1, offset);
                v[pos] ^= 0x10;
                assert_eq!(verify(&v, 1, 1, offset), 1, "pos {pos} offset {offset}");
                assert_eq!(first_mismatch(&v, 1, 1, offset), Some(offset + pos as u64));
            }
        }
    }

    #[test]
    fn counts_exact_bytes() {
        let mut v = filled(256, 4, 0, 0);
        // Three bytes in one word, one in the next, all bits of one byte.
        v[16] ^= 1;
        v[17] ^= 0x80;
        v[23] = !v[23];
        v[24] ^= 0xff;
        assert_eq!(verify(&v, 4, 0, 0), 4);
        let zeros = vec![0u8; 1 << 16];
        let wrong = verify(&zeros, 4, 0, 0);
        // Each byte of the pattern is 0 with probability 1/256.
        assert!(wrong > (1 << 16) * 250 / 256, "{wrong}");
        assert_eq!(differing_bytes(0, u64::MAX), 8);
        assert_eq!(differing_bytes(0x0100, 0), 1);
        assert_eq!(differing_bytes(0x8000_0000_0000_0001, 0), 2);
    }

    #[test]
    fn subslices_agree_with_whole_buffer() {
        let base = 1000;
        let whole = filled(4096, 7, 5, base);
        for (start, end) in [(0, 4096), (1, 4095), (3, 11), (5, 6), (8, 16), (13, 2050)] {
            let part = filled(end - start, 7, 5, base + start as u64);
            assert_eq!(&part[..], &whole[start..end], "[{start}, {end})");
            assert_eq!(verify(&whole[start..end], 7, 5, base + start as u64), 0);
        }
        // Memory alignment of the slice does not matter, only the absolute offset does.
        let mut shifted = vec![0u8; 4097];
        fill(&mut shifted[1..], 7, 5, base);
        assert_eq!(&shifted[1..], &whole[..]);
    }

    #[test]
    fn other_origin_iter_or_offset_is_caught() {
        let v = filled(4096, 2, 10, 0);
        for (o, i, off) in [(3, 10, 0), (2, 11, 0), (2, 9, 0), (0, 0, 0), (2, 10, 8), (2, 10, 4096)] {
            let wrong = verify(&v, o, i, off);
            assert!(wrong > 4000, "origin {o} iter {i} offset {off}: {wrong}");
        }
        // Swapped origin and iter must differ too.
        assert_ne!(filled(64, 1, 2, 0), filled(64, 2, 1, 0));
    }

    #[test]
    fn fast_enough() {
        // A loose sanity bound that holds in debug builds too; the release target is
        // several GB/s (64 MiB fill + verify well under 30 ms).
        let mut v = vec![0u8; 4 << 20];
        let t = std::time::Instant::now();
        fill(&mut v, 1, 2, 0);
        assert_eq!(verify(&v, 1, 2, 0), 0);
        assert!(t.elapsed().as_secs_f64() < 5.0);
    }
}
