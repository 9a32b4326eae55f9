//! Property test of the unpack host side (runs everywhere, no GPU): random TCPX-like and
//! adversarial fragment layouts (and the TCPX stream model and the alignment sweep) must cover every destination byte exactly once, respect
//! NCCL's 2048-fragment / 4 MiB limits, and the CPU reference must reproduce the payload.

use tcpx_gpu::unpack::{
    alignment_sweep, check_exact_cover, random_fragments, scrambled_pages, tcpx_stream, unpack_reference,
    validate_metas, Layout, Rng, StreamShape, MAX_FRAGMENTS, MAX_RECEIVE_BYTES, PAGE,
};
use tcpx_gpu::LoadMeta;

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

/// `(src_off - dst_off) % 16`: 0 when a fragment can be copied word for word.
fn misalignment(m: &LoadMeta) -> u64 {
    u64::from(m.src_off).wrapping_sub(m.dst_off) % 16
}

#[test]
fn tcpx_stream_layouts() {
    let mut rng = Rng::new(0x7C9A_0003);
    let shapes = [
        StreamShape::default(),
        StreamShape {
            chunk: 64 << 10,
            short_packet_permille: 200,
            ..StreamShape::default()
        },
        StreamShape {
            chunk: 100_000,
            mss: 1448, // MTU 1500: pieces of packets never fill a page
            ..StreamShape::default()
        },
    ];
    let mut shifted = 0usize;
    let mut whole = 0usize;
    for shape in &shapes {
        // At MSS 1448, 2048 fragments carry about 2.8 MiB (contract #2).
        let most = if shape.mss < PAGE { 2 << 20 } else { MAX_RECEIVE_BYTES };
        for len in sizes(&mut rng).into_iter().filter(|&l| l <= most) {
            let layout = tcpx_stream(len, shape, &mut rng);
            check_layout(&layout, &mut rng);
            shifted += layout.metas.iter().filter(|m| misalignment(m) != 0).count();
            whole += layout.metas.iter().filter(|m| m.len as usize == PAGE).count();
        }
    }
    // The model must produce both what makes TCPX layouts hard (shifted fragments) and what
    // makes them TCPX-like (whole pages), not degenerate into either.
    assert!(
        shifted > 1000 && whole > 10_000,
        "shifted {shifted}, whole pages {whole}"
    );
}

#[test]
fn tcpx_stream_whole_pages_between_chunk_edges() {
    let mut rng = Rng::new(0x7C9A_0004);
    let shape = StreamShape {
        short_packet_permille: 0,
        ..StreamShape::default()
    };
    for len in [MAX_RECEIVE_BYTES, 1 << 20, 3 * PAGE + 5, 700_001] {
        let layout = tcpx_stream(len, &shape, &mut rng);
        check_layout(&layout, &mut rng);
        let chunks = len.div_ceil(shape.chunk);
        // With full packets only, every fragment is a whole page except at most the first and
        // the last of each chunk, and only a chunk's first fragment starts inside its page.
        let partial = layout.metas.iter().filter(|m| m.len as usize != PAGE).count();
        assert!(partial <= 2 * chunks, "{partial} partial fragments in {chunks} chunks");
        let mid_page = layout
            .metas
            .iter()
            .filter(|m| !(m.src_off as usize).is_multiple_of(PAGE))
            .count();
        assert!(mid_page <= chunks, "{mid_page} fragments start inside a page");
        assert!(layout.metas.len() <= len.div_ceil(PAGE) + chunks);
    }
    // A phase of 0: fragments are whole aligned pages but the chunks' last.
    let aligned = StreamShape {
        random_phase: false,
        ..shape
    };
    let layout = tcpx_stream(MAX_RECEIVE_BYTES - 100, &aligned, &mut rng);
    check_layout(&layout, &mut rng);
    assert!(layout
        .metas
        .iter()
        .all(|m| misalignment(m) == 0 && (m.src_off as usize).is_multiple_of(PAGE)));
    assert_eq!(layout.metas.len(), (MAX_RECEIVE_BYTES - 100).div_ceil(PAGE));
}

#[test]
#[should_panic(expected = "use smaller receives")]
fn tcpx_stream_refuses_receives_tcpx_cannot_describe() {
    let shape = StreamShape {
        mss: 1448,
        ..StreamShape::default()
    };
    tcpx_stream(MAX_RECEIVE_BYTES, &shape, &mut Rng::new(1));
}

#[test]
fn tcpx_stream_respects_the_fragment_limit() {
    // Every packet short: the generator must stop shortening before 2048 descriptors.
    let mut rng = Rng::new(0x7C9A_0005);
    let shape = StreamShape {
        short_packet_permille: 1000,
        ..StreamShape::default()
    };
    for len in [MAX_RECEIVE_BYTES, MAX_RECEIVE_BYTES - 1, 2 << 20] {
        let layout = tcpx_stream(len, &shape, &mut rng);
        assert!(layout.metas.len() > len / PAGE + 100, "short packets were produced");
        check_layout(&layout, &mut rng);
    }
}

#[test]
fn alignment_sweep_covers_every_shift() {
    let mut rng = Rng::new(0x7C9A_0006);
    let lens = [1, 2, 15, 16, 17, 30, 31, 32, 33, 100, 4064, 4080, 4095, 4096];
    let layout = alignment_sweep(&lens, &mut rng);
    assert_eq!(layout.metas.len(), lens.len() * 16);
    check_layout(&layout, &mut rng);
    for n in [17u32, 33, 100, 4064, 4080] {
        let mut seen = [false; 16];
        for m in layout.metas.iter().filter(|m| m.len == n) {
            seen[misalignment(m) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s), "length {n}: shifts seen {seen:?}");
    }
}
