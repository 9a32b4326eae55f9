//! Property test of the unpack host side (runs everywhere, no GPU): random TCPX-like and
//! adversarial fragment layouts must cover every destination byte exactly once, respect
//! NCCL's 2048-fragment / 4 MiB limits, and the CPU reference must reproduce the payload.

use tcpx_gpu::unpack::{
    check_exact_cover, random_fragments, scrambled_pages, unpack_reference, validate_metas, Layout, Rng, MAX_FRAGMENTS,
    MAX_RECEIVE_BYTES, PAGE,
};

fn sizes(rng: &mut Rng) -> Vec<usize> {
    let mut v = vec![
        1,
        15,
        16,
        17,
        PAGE - 1,
        PAGE,
        PAGE + 1,
        512 << 10,
        (1 << 20) + 3,
        MAX_RECEIVE_BYTES - 1,
        MAX_RECEIVE_BYTES,
    ];
    for _ in 0..40 {
        v.push(1 + rng.below(MAX_RECEIVE_BYTES as u64) as usize);
    }
    v
}

fn check_layout(layout: &Layout, rng: &mut Rng) {
    let len = layout.len;
    assert!(layout.metas.len() <= MAX_FRAGMENTS, "{} fragments", layout.metas.len());
    assert!(len <= MAX_RECEIVE_BYTES);
    for m in &layout.metas {
        assert!(m.len as usize <= PAGE && m.len > 0);
        // A fragment never straddles a bounce page (devmem hands out pages).
        assert_eq!(m.src_off as usize / PAGE, (m.src_off + m.len - 1) as usize / PAGE);
    }
    check_exact_cover(&layout.metas, len).unwrap();
    assert_eq!(validate_metas(&layout.metas, layout.bounce_len, len).unwrap(), len);

    // Random payload, scattered into a poisoned bounce buffer, gathered back.
    let payload: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
    let mut bounce = vec![0xA5u8; layout.bounce_len];
    layout.scatter(&payload, &mut bounce);
    let mut dst = vec![0x5Au8; len + 64];
    unpack_reference(&layout.metas, &bounce, &mut dst);
    assert!(dst[..len] == payload[..], "payload mismatch, len {len}");
    assert!(dst[len..].iter().all(|&b| b == 0x5A), "wrote past the payload");
}

#[test]
fn scrambled_pages_layouts() {
    let mut rng = Rng::new(0x7C9A_0001);
    for len in sizes(&mut rng) {
        let pages = len.div_ceil(PAGE);
        let extra = rng.below(pages as u64 + 1) as usize;
        let layout = scrambled_pages(len, pages + extra, &mut rng);
        assert_eq!(layout.metas.len(), pages);
        // Only the last fragment (by destination) may be partial.
        let partial: Vec<_> = layout.metas.iter().filter(|m| m.len as usize != PAGE).collect();
        assert!(partial.len() <= 1);
        if let Some(p) = partial.first() {
            assert_eq!(p.dst_off as usize + p.len as usize, len);
        }
        check_layout(&layout, &mut rng);
    }
}

#[test]
fn random_fragment_layouts() {
    let mut rng = Rng::new(0x7C9A_0002);
    for len in sizes(&mut rng) {
        let layout = random_fragments(len, &mut rng);
        check_layout(&layout, &mut rng);
    }
}

#[test]
fn cover_check_catches_gaps_and_overlaps() {
    let mut rng = Rng::new(3);
    let mut layout = scrambled_pages(5 * PAGE, 8, &mut rng);
    layout.metas[0].len -= 1;
    assert!(check_exact_cover(&layout.metas, layout.len).is_err());
    let mut layout = scrambled_pages(5 * PAGE, 8, &mut rng);
    layout.metas[1] = layout.metas[0];
    assert!(check_exact_cover(&layout.metas, layout.len).is_err());
}
