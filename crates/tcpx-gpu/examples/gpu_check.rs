//! GPU check and benchmark for `tcpx-gpu` (needs a GPU; prints SKIP and exits 0 without one).
//!
//! 1. fill / verify: GPU pattern == host pattern (`tcpx_gpu::pattern`, the one tcpx-perf's
//!    data check uses), verify counts 0 on intact data and exactly 1 after one flipped byte,
//!    nothing outside the range is touched.
//! 2. unpack vs the CPU reference (`unpack_reference`) on random layouts: scrambled whole
//!    pages, the TCPX stream model (`tcpx_stream`: whole pages shifted by the chunk phase,
//!    partial and mid-page fragments at packet and chunk edges), adversarial random fragments,
//!    and the alignment sweep (lengths 1..4096 at every src/dst shift); descriptors in device
//!    memory and in host-mapped memory; batches of 1..100 jobs; misaligned destinations; every
//!    byte of the destination buffers compared, so stray writes count. Corrupt descriptors
//!    are skipped and counted exactly.
//! 3. benchmark: batches of 16 requests of 512 KiB..4 MiB per layout, unpacked in one launch,
//!    vs `cuMemcpyDtoDAsync` of the same bytes (one copy per request, and one copy of the whole
//!    batch), timed with events in the same process, buffers rotated over 1 GiB pools so L2
//!    does not hold them. GB/s = payload bytes / time / 1e9 (each byte is read once and
//!    written once, so DRAM traffic is twice that).
//!
//! Usage: `gpu_check [--quick] [--check-only | --bench-only]` (`--check-only` skips the 1 GiB
//! throughput runs and the benchmark, e.g. under compute-sanitizer; `--bench-only` runs only
//! the unpack benchmark). Exit code 0 = all checks passed.

use std::time::Instant;
use tcpx_gpu::nvrtc::nvrtc_info;
use tcpx_gpu::pattern::fill;
use tcpx_gpu::unpack::{
    alignment_sweep, random_fragments, scrambled_pages, tcpx_stream, Layout, Rng, StreamShape, PAGE,
};
use tcpx_gpu::{
    unpack_reference, Device, DeviceBuffer, Event, Gpu, GpuError, LoadMeta, PinnedFlags, PinnedHostBuffer, Stream,
    UnpackJob,
};

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let check_only = std::env::args().any(|a| a == "--check-only");
    let bench_only = std::env::args().any(|a| a == "--bench-only");
    if check_only && bench_only {
        println!("RESULT: ERROR: --check-only and --bench-only exclude each other: pass one");
        std::process::exit(2);
    }
    let code = match run(quick, check_only, bench_only) {
        Ok(true) => {
            println!("RESULT: PASS");
            0
        }
        Ok(false) => {
            println!("RESULT: FAIL");
            1
        }
        Err(e) => {
            println!("RESULT: ERROR: {e}");
            2
        }
    };
    std::process::exit(code);
}

fn metas_bytes(m: &[LoadMeta]) -> &[u8] {
    // SAFETY: LoadMeta is repr(C, align(16)) with fields 4 + 4 + 8 = 16 bytes = its size, so
    // it has no padding and every byte is initialised.
    unsafe { std::slice::from_raw_parts(m.as_ptr().cast::<u8>(), std::mem::size_of_val(m)) }
}

fn run(quick: bool, check_only: bool, bench_only: bool) -> Result<bool, GpuError> {
    let info = match Gpu::probe() {
        Ok(Some(i)) => i,
        Ok(None) => {
            println!("SKIP: no CUDA driver or no visible GPU");
            return Ok(true);
        }
        Err(e) => {
            println!("probe failed: {e}");
            return Ok(false);
        }
    };
    println!(
        "driver {}.{}, {} GPU(s)",
        info.driver_version / 1000,
        info.driver_version % 1000 / 10,
        info.count()
    );
    for d in &info.devices {
        println!(
            "  [{}] {} sm_{}{} {} SMs {:.1} GiB pci {}",
            d.ordinal,
            d.name,
            d.compute_capability.0,
            d.compute_capability.1,
            d.sm_count,
            d.total_mem as f64 / (1u64 << 30) as f64,
            d.pci_bus_id
        );
    }
    match nvrtc_info() {
        Ok((p, v)) => println!("NVRTC {}.{} from {p}", v.0, v.1),
        Err(e) => println!("NVRTC: {e}"),
    }
    let t = Instant::now();
    let dev = Device::open(0)?;
    let first = t.elapsed();
    let t = Instant::now();
    let dev2 = Device::open(0)?;
    let second = t.elapsed();
    drop(dev2);
    println!(
        "Device::open(0): {:.1} ms (NVRTC compile for {}), again {:.1} ms (cached image)",
        first.as_secs_f64() * 1e3,
        dev.arch(),
        second.as_secs_f64() * 1e3
    );

    let mut ok = true;
    if !bench_only {
        ok &= check_pattern(&dev, check_only)?;
        ok &= check_unpack(&dev, quick)?;
        ok &= check_events(&dev)?;
    }
    if !check_only {
        bench(&dev, quick)?;
    }
    Ok(ok)
}

fn report(name: &str, pass: bool, detail: String) -> bool {
    println!("[{}] {name}: {detail}", if pass { "ok" } else { "FAIL" });
    pass
}

fn check_pattern(dev: &Device, check_only: bool) -> Result<bool, GpuError> {
    let s = dev.stream();
    let cap = 16 << 20;
    let buf = dev.alloc(cap + 64)?;
    let mut ok = true;
    // (range, absolute offset, origin, iter): aligned and misaligned memory vs absolute offsets.
    let cases: [(std::ops::Range<usize>, u64, u32, u32); 6] = [
        (0..cap, 0, 0, 0),
        (3..1_000_003, 1001, 2, 5),
        (8..4104, 8, 7, 1),
        (5..6, 13, 1, 1),
        (1..(1 << 20) + 1, (1 << 33) + 1, u32::MAX, 9),
        (17..17 + 4093, 5, 3, 3),
    ];
    for (range, offset, origin, iter) in cases {
        let len = range.len();
        buf.memset(0..buf.len(), 0xEE, s)?;
        dev.fill(&buf, range.clone(), origin, iter, offset, s)?;
        let lo = range.start.saturating_sub(8);
        let hi = (range.end + 8).min(buf.len());
        let mut host = vec![0u8; hi - lo];
        buf.copy_to_host(lo, &mut host, s)?;
        let mut want = vec![0u8; len];
        fill(&mut want, origin, iter, offset);
        let body = &host[range.start - lo..range.end - lo];
        let diff = body.iter().zip(&want).filter(|(a, b)| a != b).count();
        let outside = host[..range.start - lo]
            .iter()
            .chain(&host[range.end - lo..])
            .filter(|&&b| b != 0xEE)
            .count();
        let v0 = dev.verify(&buf, range.clone(), origin, iter, offset, s)?;
        let mid = range.start + len / 2;
        buf.copy_from_host(mid, &[!want[len / 2]], s)?;
        let v1 = dev.verify(&buf, range.clone(), origin, iter, offset, s)?;
        let last = range.end - 1;
        buf.copy_from_host(last, &[want[len - 1] ^ 0x01], s)?;
        let v2 = dev.verify(&buf, range.clone(), origin, iter, offset, s)?;
        let expect2 = if len == 1 { 1 } else { 2 };
        let other = dev.verify(&buf, range.clone(), origin, iter.wrapping_add(1), offset, s)?;
        let other_ok = len < 4096 || other as f64 > len as f64 * 0.98;
        ok &= report(
            &format!("fill/verify {len} B at mem+{} abs {offset} ({origin},{iter})", range.start),
            diff == 0 && outside == 0 && v0 == 0 && v1 == 1 && v2 == expect2 && other_ok,
            format!(
                "gpu!=host {diff}, outside touched {outside}, verify intact {v0}, 1 flip {v1}, 2 flips {v2}, other iter {other}"
            ),
        );
    }
    if check_only {
        return Ok(ok);
    }
    // Throughput of fill and verify over 1 GiB.
    let big = dev.alloc(1 << 30)?;
    let (e0, e1) = (Event::new(dev, true)?, Event::new(dev, true)?);
    dev.fill(&big, 0..big.len(), 1, 1, 0, s)?;
    e0.record(s)?;
    for i in 0..5 {
        dev.fill(&big, 0..big.len(), 1, i, 0, s)?;
    }
    e1.record(s)?;
    e1.synchronize()?;
    let fill_gbs = 5.0 * big.len() as f64 / (f64::from(e0.elapsed_ms(&e1)?) * 1e-3) / 1e9;
    let t = Instant::now();
    let wrong = dev.verify(&big, 0..big.len(), 1, 4, 0, s)?;
    let ver_gbs = big.len() as f64 / t.elapsed().as_secs_f64() / 1e9;
    ok &= report(
        "fill/verify 1 GiB",
        wrong == 0,
        format!("fill {fill_gbs:.0} GB/s, verify {ver_gbs:.0} GB/s (incl. sync), wrong {wrong}"),
    );
    Ok(ok)
}

/// The layouts the check and the benchmark run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Whole 4 KiB pages in random bounce pages, the last one partial (`scrambled_pages`).
    Pages,
    /// The TCPX stream model with GKE's settings (`tcpx_stream`, `StreamShape::default()`).
    Tcpx,
    /// Random lengths 1..4096 at random in-page offsets (`random_fragments`).
    Random,
    /// Edge lengths at every src/dst shift (`alignment_sweep`); ignores the length asked.
    Sweep,
}

/// Fragment lengths of the alignment sweep: no whole 16-byte word, exactly one, head and tail
/// bytes around a body of 1 or 2 words, and pages less a head, a tail or a byte.
const SWEEP_LENS: [u32; 22] = [
    1, 2, 3, 7, 15, 16, 17, 29, 30, 31, 32, 33, 47, 48, 49, 63, 64, 65, 512, 4080, 4095, 4096,
];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Pages => "scrambled-4K",
            Kind::Tcpx => "tcpx-stream",
            Kind::Random => "random-frag",
            Kind::Sweep => "align-sweep",
        }
    }

    fn layout(self, len: usize, rng: &mut Rng) -> Layout {
        match self {
            Kind::Pages => {
                let pages = len.div_ceil(PAGE);
                scrambled_pages(len, pages + rng.below(4) as usize, rng)
            }
            Kind::Tcpx => tcpx_stream(len, &StreamShape::default(), rng),
            Kind::Random => random_fragments(len, rng),
            Kind::Sweep => alignment_sweep(&SWEEP_LENS, rng),
        }
    }
}

/// A batch of receives laid out in one bounce buffer and one destination buffer.
struct Batch {
    layouts: Vec<Layout>,
    bounce_offs: Vec<usize>,
    dst_offs: Vec<usize>,
    bounce_len: usize,
    dst_len: usize,
}

fn make_batch(rng: &mut Rng, njobs: usize, max_len: usize, kind: Kind) -> Batch {
    let mut b = Batch {
        layouts: Vec::new(),
        bounce_offs: Vec::new(),
        dst_offs: Vec::new(),
        bounce_len: 0,
        dst_len: 0,
    };
    for _ in 0..njobs {
        let len = 1 + rng.below(max_len.max(1) as u64) as usize;
        let l = kind.layout(len, rng);
        b.bounce_offs.push(b.bounce_len);
        b.bounce_len += l.bounce_len;
        // Destinations: page-aligned for whole pages, else shifted by a few bytes.
        let shift = if kind == Kind::Pages { 0 } else { rng.below(16) as usize };
        let off = b.dst_len.next_multiple_of(PAGE) + shift;
        b.dst_offs.push(off);
        b.dst_len = off + l.len;
        b.layouts.push(l);
    }
    b.dst_len += 64;
    b
}

fn check_unpack(dev: &Device, quick: bool) -> Result<bool, GpuError> {
    let s = dev.stream();
    let mut rng = Rng::new(0x5EED_0001);
    let mut ok = true;
    let trials: &[(usize, usize, Kind, bool)] = &[
        // (jobs, max receive bytes, layout, metas host-mapped)
        (1, 4 << 20, Kind::Pages, false),
        (1, 4 << 20, Kind::Random, false),
        (1, 4 << 20, Kind::Tcpx, false),
        (1, 0, Kind::Sweep, false),
        (5, 0, Kind::Sweep, true),
        (16, 512 << 10, Kind::Pages, false),
        (16, 4 << 20, Kind::Pages, true),
        (16, 4 << 20, Kind::Random, true),
        (16, 4 << 20, Kind::Tcpx, true),
        (16, 1 << 20, Kind::Tcpx, false),
        (64, 1 << 20, Kind::Random, false),
        (100, 256 << 10, Kind::Pages, false),
        (100, 64 << 10, Kind::Random, true),
        (30, 100_000, Kind::Tcpx, false),
        (7, 20_000, Kind::Random, false),
    ];
    let rounds = if quick { 1 } else { 3 };
    for round in 0..rounds {
        for &(njobs, max_len, kind, mapped) in trials {
            let b = make_batch(&mut rng, njobs, max_len, kind);
            let mut bounce_h: Vec<u8> = (0..b.bounce_len).map(|_| rng.next_u64() as u8).collect();
            let mut dst_h = vec![0x5Au8; b.dst_len];
            let mut all_metas: Vec<LoadMeta> = Vec::new();
            let mut meta_offs = Vec::new();
            for (k, l) in b.layouts.iter().enumerate() {
                let payload: Vec<u8> = (0..l.len).map(|_| rng.next_u64() as u8).collect();
                let region = &mut bounce_h[b.bounce_offs[k]..b.bounce_offs[k] + l.bounce_len];
                l.scatter(&payload, region);
                meta_offs.push(all_metas.len() * 16);
                all_metas.extend_from_slice(&l.metas);
            }
            for (k, l) in b.layouts.iter().enumerate() {
                let region = &bounce_h[b.bounce_offs[k]..b.bounce_offs[k] + l.bounce_len];
                unpack_reference(&l.metas, region, &mut dst_h[b.dst_offs[k]..]);
            }
            let bounce = dev.alloc(b.bounce_len)?;
            bounce.copy_from_host(0, &bounce_h, s)?;
            let dst = dev.alloc(b.dst_len)?;
            dst.memset(0..b.dst_len, 0x5A, s)?;
            let mb = metas_bytes(&all_metas);
            let meta_dev;
            let meta_pinned;
            let meta_base = if mapped {
                let mut p = dev.alloc_pinned(mb.len(), PinnedFlags::MAPPED)?;
                p.as_mut_slice().copy_from_slice(mb);
                meta_pinned = Some(p);
                meta_pinned.as_ref().unwrap().device_ptr()?
            } else {
                let d = dev.alloc(mb.len().max(16))?;
                d.copy_from_host(0, mb, s)?;
                meta_dev = Some(d);
                meta_dev.as_ref().unwrap().as_raw()
            };
            let jobs: Vec<UnpackJob> = b
                .layouts
                .iter()
                .enumerate()
                .map(|(k, l)| {
                    UnpackJob::new(
                        meta_base + meta_offs[k] as u64,
                        l.metas.len(),
                        bounce.as_raw() + b.bounce_offs[k] as u64,
                        l.bounce_len as u64,
                        dst.as_raw() + b.dst_offs[k] as u64,
                        l.len as u64,
                    )
                })
                .collect();
            // Round 0: automatic block size; later rounds: 64 threads with at most 3 blocks per
            // job (blocks loop over chunks, prefetching descriptors), and 256 threads.
            dev.unpack_tuned(&jobs, s, [0, 64, 256][round % 3], [0, 3, 0][round % 3])?;
            let mut out = vec![0u8; b.dst_len];
            dst.copy_to_host(0, &mut out, s)?;
            let mism = out.iter().zip(&dst_h).filter(|(a, b)| a != b).count();
            let errs = dev.unpack_errors(s)?;
            let bytes: usize = b.layouts.iter().map(|l| l.len).sum();
            let frags: usize = b.layouts.iter().map(|l| l.metas.len()).sum();
            if round == 0 || mism != 0 || errs != 0 {
                ok &= report(
                    &format!(
                        "unpack r{round} {njobs} jobs {} metas{}",
                        kind.name(),
                        if mapped { " host-mapped" } else { " device" }
                    ),
                    mism == 0 && errs == 0,
                    format!("{bytes} B in {frags} fragments: {mism} mismatching bytes, {errs} kernel errors"),
                );
            } else {
                ok &= mism == 0 && errs == 0;
            }
        }
    }
    // Corrupt descriptors are skipped and counted exactly; the rest still lands. 64 whole
    // pages on a 64-page bounce region: one fragment ends exactly at the region's end and one
    // exactly at the destination's end (both valid); three are out of range, one of them by a
    // single byte.
    let mut l = scrambled_pages(64 * PAGE, 64, &mut rng);
    let last_dst = l.metas.iter().position(|m| m.dst_off as usize == 63 * PAGE).unwrap();
    let others: Vec<usize> = (0..l.metas.len()).filter(|&i| i != last_dst).take(2).collect();
    l.metas[last_dst].len += 1;
    l.metas[others[0]].dst_off = 1 << 40;
    l.metas[others[1]].src_off = u32::MAX - 10;
    let bounce = dev.alloc(l.bounce_len)?;
    let dst = dev.alloc(l.len + PAGE)?;
    dst.memset(0..l.len + PAGE, 0, s)?;
    let md = dev.alloc(l.metas.len() * 16)?;
    md.copy_from_host(0, metas_bytes(&l.metas), s)?;
    let job = UnpackJob::new(
        md.as_raw(),
        l.metas.len(),
        bounce.as_raw(),
        l.bounce_len as u64,
        dst.as_raw(),
        l.len as u64,
    );
    dev.unpack(&[job], s)?;
    let errs = dev.unpack_errors(s)?;
    let mut past = [1u8; 1];
    dst.copy_to_host(l.len, &mut past, s)?;
    let want = 3;
    let too_many = UnpackJob::new(md.as_raw(), 2049, bounce.as_raw(), 1, dst.as_raw(), 1);
    let rejected = dev.unpack(&[too_many], s).is_err();
    ok &= report(
        "unpack corrupt descriptors",
        errs == want && rejected && past[0] == 0,
        format!(
            "{want} out-of-range descriptors -> {errs} counted, byte past the destination {}; 2049 fragments rejected on host: {rejected}",
            if past[0] == 0 { "untouched" } else { "WRITTEN" }
        ),
    );
    Ok(ok)
}

fn check_events(dev: &Device) -> Result<bool, GpuError> {
    let s2 = dev.new_stream()?;
    let e = Event::new(dev, false)?;
    let b = dev.alloc(256 << 20)?;
    dev.fill(&b, 0..b.len(), 0, 0, 0, &s2)?;
    e.record(&s2)?;
    let early = e.query()?;
    e.synchronize()?;
    let late = e.query()?;
    let mut p = dev.alloc_pinned(4096, PinnedFlags::PLAIN)?;
    // SAFETY: p is not touched until the stream synchronizes below.
    unsafe { s2.memcpy_dtoh_async(p.as_mut_ptr(), b.as_raw(), 4096)? };
    s2.synchronize()?;
    let mut want = vec![0u8; 4096];
    fill(&mut want, 0, 0, 0);
    Ok(report(
        "events + pinned async copy",
        late && p.as_slice() == &want[..],
        format!("query right after record {early}, after sync {late}, pinned DtoH matches pattern"),
    ))
}

/// Times `reps` calls of `op(i)` on `s` with events, `trials` times; returns the median
/// seconds per call.
fn time_op(
    dev: &Device,
    s: &Stream,
    reps: usize,
    trials: usize,
    mut op: impl FnMut(usize) -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    let (a, b) = (Event::new(dev, true)?, Event::new(dev, true)?);
    for i in 0..3 {
        op(i)?;
    }
    let mut v = Vec::new();
    for t in 0..trials {
        a.record(s)?;
        for i in 0..reps {
            op(t * reps + i)?;
        }
        b.record(s)?;
        b.synchronize()?;
        v.push(f64::from(a.elapsed_ms(&b)?) * 1e-3 / reps as f64);
    }
    v.sort_by(|x, y| x.partial_cmp(y).unwrap());
    Ok(v[v.len() / 2])
}

struct Pools {
    bounce: DeviceBuffer,
    dst: DeviceBuffer,
}

/// One benchmark row.
struct Row {
    size: usize,
    batch: usize,
    kind: Kind,
    frags_per_req: f64,
    shifted_pct: f64,
    unpack: f64,
    mapped: f64,
    capped: f64,
    mapped_capped: f64,
    cpy_req: f64,
    cpy_one: f64,
    secs: f64,
}

fn bench(dev: &Device, quick: bool) -> Result<(), GpuError> {
    let s = dev.stream();
    let pool = 1usize << 30;
    let pools = Pools {
        bounce: dev.alloc(pool)?,
        dst: dev.alloc(pool)?,
    };
    dev.fill(&pools.bounce, 0..pool, 9, 9, 0, s)?;
    dev.fill(&pools.dst, 0..pool, 8, 8, 0, s)?;
    s.synchronize()?;
    let trials = if quick { 3 } else { 7 };
    let mut rng = Rng::new(0xBE4C);
    // Blocks of the automatic size resident on the whole GPU: the grid of the "1 wave"
    // variant, whose blocks loop over descriptor chunks (prefetching the next chunk's).
    let ki = dev.unpack_kernel_info()?;
    let resident = (ki.blocks_per_sm.max(1) as u32) * dev.info().sm_count.max(1);
    let mut rows = Vec::new();
    // (request bytes, requests per launch, layout)
    let mut configs: Vec<(usize, usize, Kind)> = Vec::new();
    for kind in [Kind::Pages, Kind::Tcpx, Kind::Random] {
        for size in [512 << 10, 1 << 20, 2 << 20, 4 << 20] {
            configs.push((size, 16, kind));
        }
    }
    configs.extend([
        (512 << 10, 1, Kind::Pages),
        (4 << 20, 1, Kind::Pages),
        (4 << 20, 1, Kind::Tcpx),
    ]);
    for (size, batch, kind) in configs {
        let per_set = size * batch;
        // Every layout needs at most 1.3x its bytes of bounce space: requests 2x apart.
        let stride = size * 2;
        let sets = (pool / (stride * batch)).clamp(4, 256);
        // Layouts for every set and request; metas in device memory and host-mapped.
        let mut metas: Vec<LoadMeta> = Vec::new();
        let mut spans = Vec::new();
        let mut shifted = 0usize;
        for _ in 0..sets * batch {
            let l = kind.layout(size, &mut rng);
            assert!(l.bounce_len <= stride && l.len == size);
            spans.push((metas.len(), l.metas.len()));
            shifted += l
                .metas
                .iter()
                .filter(|m| u64::from(m.src_off).wrapping_sub(m.dst_off) % 16 != 0)
                .count();
            metas.extend_from_slice(&l.metas);
        }
        let mb = metas_bytes(&metas);
        let md = dev.alloc(mb.len())?;
        md.copy_from_host(0, mb, s)?;
        let mut mp: PinnedHostBuffer = dev.alloc_pinned(mb.len(), PinnedFlags::MAPPED)?;
        mp.as_mut_slice().copy_from_slice(mb);
        let mp_dev = mp.device_ptr()?;
        let mk = |base: u64| -> Vec<Vec<UnpackJob>> {
            (0..sets)
                .map(|st| {
                    (0..batch)
                        .map(|r| {
                            let k = st * batch + r;
                            let (off, cnt) = spans[k];
                            UnpackJob::new(
                                base + off as u64 * 16,
                                cnt,
                                pools.bounce.as_raw() + (k * stride) as u64,
                                stride as u64,
                                pools.dst.as_raw() + (k * size) as u64,
                                size as u64,
                            )
                        })
                        .collect()
                })
                .collect()
        };
        let jobs_dev = mk(md.as_raw());
        let jobs_map = mk(mp_dev);
        let reps = ((16usize << 30) / per_set).clamp(64, 4096) / trials;
        let t_unpack = time_op(dev, s, reps, trials, |i| dev.unpack(&jobs_dev[i % sets], s))?;
        let t_mapped = time_op(dev, s, reps, trials, |i| dev.unpack(&jobs_map[i % sets], s))?;
        let cap = resident.div_ceil(batch as u32);
        let t_capped = time_op(dev, s, reps, trials, |i| {
            dev.unpack_tuned(&jobs_dev[i % sets], s, 0, cap)
        })?;
        let t_mapped_capped = time_op(dev, s, reps, trials, |i| {
            dev.unpack_tuned(&jobs_map[i % sets], s, 0, cap)
        })?;
        let t_cpy_req = time_op(dev, s, reps, trials, |i| {
            let st = i % sets;
            for r in 0..batch {
                let k = st * batch + r;
                // SAFETY: both ranges lie inside the 1 GiB pools (k * stride + size <= pool).
                unsafe {
                    s.memcpy_dtod_async(
                        pools.dst.as_raw() + (k * size) as u64,
                        pools.bounce.as_raw() + (k * stride) as u64,
                        size,
                    )?;
                };
            }
            Ok(())
        })?;
        let t_cpy_one = time_op(dev, s, reps, trials, |i| {
            let st = i % sets;
            // SAFETY: the set's range lies inside both pools.
            unsafe {
                s.memcpy_dtod_async(
                    pools.dst.as_raw() + (st * per_set) as u64,
                    pools.bounce.as_raw() + (st * per_set) as u64,
                    per_set,
                )
            }
        })?;
        let errs = dev.unpack_errors(s)?;
        if errs != 0 {
            println!("bench: {errs} unpack kernel errors (descriptor out of range)");
        }
        let gbs = |t: f64| per_set as f64 / t / 1e9;
        rows.push(Row {
            size,
            batch,
            kind,
            frags_per_req: metas.len() as f64 / (sets * batch) as f64,
            shifted_pct: 100.0 * shifted as f64 / metas.len() as f64,
            unpack: gbs(t_unpack),
            mapped: gbs(t_mapped),
            capped: gbs(t_capped),
            mapped_capped: gbs(t_mapped_capped),
            cpy_req: gbs(t_cpy_req),
            cpy_one: gbs(t_cpy_one),
            secs: t_unpack,
        });
        drop(md);
        drop(mp);
    }
    println!();
    println!(
        "unpack benchmark on {} ({}), kernel: {} registers/thread, {} B spilled, {} blocks of 256 threads/SM",
        dev.info().name,
        dev.arch(),
        ki.registers,
        ki.local_bytes,
        ki.blocks_per_sm
    );
    println!(
        "GB/s = payload bytes / time / 1e9, median of {trials} trials; ratio = unpack / one memcpy D2D of the batch"
    );
    println!(
        "{:>8} {:>5} {:>12} {:>9} {:>8} {:>9} {:>10} {:>9} {:>10} {:>11} {:>10} {:>8} {:>11} {:>9}",
        "request",
        "batch",
        "layout",
        "frags/req",
        "shifted",
        "unpack",
        "unpack",
        "unpack",
        "unpack",
        "memcpy D2D",
        "memcpy D2D",
        "ratio",
        "ratio",
        "us/launch"
    );
    println!(
        "{:>8} {:>5} {:>12} {:>9} {:>8} {:>9} {:>10} {:>9} {:>10} {:>11} {:>10} {:>8} {:>11} {:>9}",
        "",
        "",
        "",
        "",
        "",
        "dev metas",
        "host metas",
        "dev 1wave",
        "host 1wave",
        "per request",
        "one",
        "dev",
        "host metas",
        ""
    );
    for r in rows {
        println!(
            "{:>7}K {:>5} {:>12} {:>9.1} {:>7.1}% {:>9.1} {:>10.1} {:>9.1} {:>10.1} {:>11.1} {:>10.1} {:>8.2} {:>11.2} {:>9.1}",
            r.size >> 10,
            r.batch,
            r.kind.name(),
            r.frags_per_req,
            r.shifted_pct,
            r.unpack,
            r.mapped,
            r.capped,
            r.mapped_capped,
            r.cpy_req,
            r.cpy_one,
            r.unpack / r.cpy_one,
            r.mapped / r.cpy_one,
            r.secs * 1e6
        );
    }
    Ok(())
}
