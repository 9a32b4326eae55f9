//! GPU check and benchmark for `tcpx-gpu` (needs a GPU; prints SKIP and exits 0 without one).
//!
//! 1. fill / verify: GPU pattern == host pattern (`tcpx_gpu::pattern`, itself tested equal to
//!    `src/check.rs`), verify counts 0 on intact data and exactly 1 after one flipped byte,
//!    nothing outside the range is touched.
//! 2. unpack vs the CPU reference on random layouts (TCPX-like scrambled pages and
//!    adversarial random fragments; descriptors in device memory and in host-mapped memory;
//!    batches of 1..100 jobs; misaligned destinations); corrupt descriptors are counted.
//! 3. benchmark: gather of 4 KiB fragments in random page order vs `cuMemcpyDtoDAsync` of the
//!    same bytes (contiguous), timed with events, buffers rotated over 1 GiB pools so L2 does
//!    not hold them. GB/s = payload bytes / time / 1e9 (each byte is read once and written
//!    once, so DRAM traffic is twice that).
//!
//! Usage: `gpu_check [--quick] [--check-only]` (`--check-only` skips the 1 GiB throughput
//! runs and the benchmark, e.g. under compute-sanitizer). Exit code 0 = all checks passed.

use std::time::Instant;
use tcpx_gpu::nvrtc::nvrtc_info;
use tcpx_gpu::pattern::fill;
use tcpx_gpu::unpack::{random_fragments, scrambled_pages, Layout, Rng, PAGE};
use tcpx_gpu::{
    unpack_reference, Device, DeviceBuffer, Event, Gpu, GpuError, LoadMeta, PinnedFlags, PinnedHostBuffer, Stream,
    UnpackJob,
};

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let check_only = std::env::args().any(|a| a == "--check-only");
    let code = match run(quick, check_only) {
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

fn run(quick: bool, check_only: bool) -> Result<bool, GpuError> {
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
    ok &= check_pattern(&dev, check_only)?;
    ok &= check_unpack(&dev, quick)?;
    ok &= check_events(&dev)?;
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
    let fill_gbs = 5.0 * big.len() as f64 / (e0.elapsed_ms(&e1)? as f64 * 1e-3) / 1e9;
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

/// A batch of receives laid out in one bounce buffer and one destination buffer.
struct Batch {
    layouts: Vec<Layout>,
    bounce_offs: Vec<usize>,
    dst_offs: Vec<usize>,
    bounce_len: usize,
    dst_len: usize,
}

fn make_batch(rng: &mut Rng, njobs: usize, max_len: usize, adversarial: bool) -> Batch {
    let mut b = Batch {
        layouts: Vec::new(),
        bounce_offs: Vec::new(),
        dst_offs: Vec::new(),
        bounce_len: 0,
        dst_len: 0,
    };
    for _ in 0..njobs {
        let len = 1 + rng.below(max_len as u64) as usize;
        let l = if adversarial {
            random_fragments(len, rng)
        } else {
            let pages = len.div_ceil(PAGE);
            scrambled_pages(len, pages + rng.below(4) as usize, rng)
        };
        b.bounce_offs.push(b.bounce_len);
        b.bounce_len += l.bounce_len;
        // Destinations: page-aligned, or (adversarial) shifted by a few bytes.
        let shift = if adversarial { rng.below(16) as usize } else { 0 };
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
    let trials: &[(usize, usize, bool, bool)] = &[
        // (jobs, max receive bytes, adversarial layout, metas host-mapped)
        (1, 4 << 20, false, false),
        (1, 4 << 20, true, false),
        (16, 512 << 10, false, false),
        (16, 4 << 20, false, true),
        (16, 4 << 20, true, true),
        (64, 1 << 20, true, false),
        (100, 256 << 10, false, false),
        (100, 64 << 10, true, true),
        (7, 20_000, true, false),
    ];
    let rounds = if quick { 1 } else { 3 };
    for round in 0..rounds {
        for &(njobs, max_len, adversarial, mapped) in trials {
            let b = make_batch(&mut rng, njobs, max_len, adversarial);
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
            // Round 0: automatic block size; later rounds: fixed 64 and 256 threads.
            dev.unpack_with_block(&jobs, s, [0, 64, 256][round % 3])?;
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
                        if adversarial { "random-frag" } else { "scrambled-pages" },
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
    // Corrupt descriptors are skipped and counted, the rest still lands.
    let mut l = scrambled_pages(64 * PAGE, 64, &mut rng);
    l.metas[5].dst_off = 1 << 40;
    l.metas[9].src_off = u32::MAX - 10;
    let bounce = dev.alloc(l.bounce_len)?;
    let dst = dev.alloc(l.len)?;
    dst.memset(0..l.len, 0, s)?;
    let md = dev.alloc(l.metas.len() * 16)?;
    md.copy_from_host(0, metas_bytes(&l.metas), s)?;
    let job = UnpackJob::new(
        md.as_raw(),
        l.metas.len(),
        bounce.as_raw(),
        bounce.len() as u64,
        dst.as_raw(),
        dst.len() as u64,
    );
    dev.unpack(&[job], s)?;
    let errs = dev.unpack_errors(s)?;
    let too_many = UnpackJob::new(md.as_raw(), 2049, bounce.as_raw(), 1, dst.as_raw(), 1);
    let rejected = dev.unpack(&[too_many], s).is_err();
    ok &= report(
        "unpack corrupt descriptors",
        errs == 2 && rejected,
        format!("2 out-of-range descriptors -> {errs} counted; 2049 fragments rejected on host: {rejected}"),
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
        v.push(a.elapsed_ms(&b)? as f64 * 1e-3 / reps as f64);
    }
    v.sort_by(|x, y| x.partial_cmp(y).unwrap());
    Ok(v[v.len() / 2])
}

struct Pools {
    bounce: DeviceBuffer,
    dst: DeviceBuffer,
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
    let mut rows = Vec::new();
    // (request bytes, requests per launch, adversarial layout)
    let configs: &[(usize, usize, bool)] = &[
        (512 << 10, 16, false),
        (1 << 20, 16, false),
        (2 << 20, 16, false),
        (4 << 20, 16, false),
        (512 << 10, 1, false),
        (4 << 20, 1, false),
        (4 << 20, 16, true),
    ];
    for &(size, batch, adversarial) in configs {
        let per_set = size * batch;
        let sets = (pool / per_set).clamp(4, 256);
        let pages = size / PAGE;
        // Layouts for every set and request; metas in device memory and host-mapped.
        let mut metas: Vec<LoadMeta> = Vec::with_capacity(sets * batch * pages * 2);
        let mut spans = Vec::new();
        for _ in 0..sets * batch {
            let l = if adversarial {
                random_fragments(size, &mut rng)
            } else {
                scrambled_pages(size, pages, &mut rng)
            };
            assert!(l.bounce_len <= size * 2);
            spans.push((metas.len(), l.metas.len()));
            metas.extend_from_slice(&l.metas);
        }
        // Adversarial layouts need up to 1.25x bounce space: space requests 2x apart.
        let stride = if adversarial { size * 2 } else { size };
        let sets = if adversarial {
            (pool / (stride * batch)).min(sets)
        } else {
            sets
        };
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
        let t_fixed = time_op(dev, s, reps, trials, |i| {
            dev.unpack_with_block(&jobs_dev[i % sets], s, 256)
        })?;
        let t_mapped = time_op(dev, s, reps, trials, |i| dev.unpack(&jobs_map[i % sets], s))?;
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
                    )?
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
        rows.push((
            size,
            batch,
            adversarial,
            gbs(t_unpack),
            gbs(t_fixed),
            gbs(t_mapped),
            gbs(t_cpy_req),
            gbs(t_cpy_one),
            t_unpack,
        ));
        drop(md);
        drop(mp);
    }
    println!();
    println!(
        "unpack benchmark on {} ({}), GB/s = payload bytes / time / 1e9, median of {trials} trials",
        dev.info().name,
        dev.arch()
    );
    println!(
        "{:>9} {:>5} {:>13} {:>9} {:>9} {:>10} {:>11} {:>13} {:>9} {:>9} {:>10}",
        "request",
        "batch",
        "layout",
        "unpack",
        "unpack",
        "unpack",
        "memcpy D2D",
        "memcpy D2D",
        "ratio vs",
        "ratio vs",
        "us/launch"
    );
    println!(
        "{:>9} {:>5} {:>13} {:>9} {:>9} {:>10} {:>11} {:>13} {:>9} {:>9} {:>10}",
        "", "", "", "auto blk", "256 thr", "host metas", "per request", "one per batch", "per req", "one", ""
    );
    for (size, batch, adv, u, uf, um, cr, co, t) in rows {
        println!(
            "{:>8}K {:>5} {:>13} {:>9.1} {:>9.1} {:>10.1} {:>11.1} {:>13.1} {:>9.2} {:>9.2} {:>10.1}",
            size >> 10,
            batch,
            if adv { "random-frag" } else { "scrambled-4K" },
            u,
            uf,
            um,
            cr,
            co,
            u / cr,
            u / co,
            t * 1e6
        );
    }
    Ok(())
}
