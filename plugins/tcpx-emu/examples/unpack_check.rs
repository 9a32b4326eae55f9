//! GPU check of tcpx-emu's device-unpack mode through the exported `ncclNetPlugin_v7` table, on
//! one GPU, without NCCL: a sender thread and a receiver (this thread), CUDA send and receive
//! buffers. For every completed receive it reads slot `k % 16` of the host-mapped
//! `netUnpackMeta` ring, checks the descriptors on the host (limits, exact cover, inside the
//! bounce buffer), runs tcpx-gpu's unpack kernel from the ring into the receive buffer, and calls
//! `irecvConsumed`; at the end the GPU verifies the whole destination against the sent pattern.
//! Also checked: the accept device handle (its `bounce_buf` set by the first CUDA `regMr`, not
//! by accept), a host-memory receive in unpack mode (cnt 0, bytes in
//! the host buffer), and the 4 MiB limit on CUDA receives. Prints a throughput figure.
//!
//! Drives the plugin as TCPX requires (its contracts are enforced): CUDA registrations of whole
//! 4 KiB pages, a device handle for accept, and `NCCL_DYNAMIC_CHUNK_SIZE` (set to GKE's 524288
//! when unset, with a note).
//!
//! Run with `TCPXEMU_MODE=unpack` (and e.g. `NCCL_NSOCKS_PERTHREAD=4`):
//! `unpack_check [total MiB, default 256] [receives in flight, default 8]`. Exit 0 = pass.

use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

use nccl_net_abi::{
    result_name, DeviceHandleV7, NetHandle, NetUnpackMeta, PropertiesV7, NCCL_INVALID_ARGUMENT, NCCL_NET_DEVICE_UNPACK,
    NCCL_NET_DEVICE_UNPACK_VERSION, NCCL_PTR_CUDA, NCCL_PTR_HOST, NCCL_SUCCESS, NET_HANDLE_MAXSIZE,
    UNPACK_MAX_SLICE_PAGES,
};
use nccl_net_tcpxemu::ncclNetPlugin_v7 as T;
use tcpx_gpu::unpack::{check_exact_cover, validate_metas, UnpackJob};
use tcpx_gpu::{pattern_byte, Device, PinnedFlags};

const MIB: usize = 1 << 20;
const CAP: usize = 4 * MIB;
const ORIGIN: u32 = 7;
const DEADLINE: Duration = Duration::from_secs(60);

macro_rules! ck {
    ($e:expr, $what:expr) => {{
        let r = $e;
        if r != NCCL_SUCCESS {
            return Err(format!("{} failed: {} ({r})", $what, result_name(r)));
        }
    }};
}

/// The message sizes both sides agree on: edge cases first, then 4 MiB messages up to `total`.
fn sizes(total: usize) -> Vec<usize> {
    let mut v = vec![
        4 * MIB,
        1,
        4095,
        4096,
        4097,
        0,
        MIB + 123,
        3 * MIB + 4095,
        524_288,
        524_289,
    ];
    let mut sum: usize = v.iter().sum();
    let mut x = 0x1234_5678u64;
    while sum < total {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let s = if x.is_multiple_of(4) {
            (x as usize >> 8) % CAP + 1
        } else {
            CAP
        }
        .min(total - sum);
        v.push(s);
        sum += s;
    }
    v
}

fn sender(dev: Device, handle: NetHandle, sizes: Vec<usize>, host_tail: usize) -> Result<(), String> {
    dev.make_current().map_err(|e| e.to_string())?;
    let t = &T;
    let mut handle = handle;
    let total: usize = sizes.iter().sum::<usize>() + host_tail;
    // TCPX contract #4: CUDA registrations span whole pages.
    let reg_len = total.max(1).next_multiple_of(4096);
    let sbuf = dev.alloc(reg_len).map_err(|e| e.to_string())?;
    dev.fill(&sbuf, 0..total, ORIGIN, 0, 0, dev.stream())
        .map_err(|e| e.to_string())?;
    dev.stream().synchronize().map_err(|e| e.to_string())?;
    let mut sc: *mut c_void = std::ptr::null_mut();
    let end = Instant::now() + DEADLINE;
    while sc.is_null() {
        // SAFETY: a live handle buffer kept in place between retries; out-pointer to `sc`.
        ck!(
            unsafe { t.connect.unwrap()(0, handle.as_mut_ptr().cast(), &raw mut sc, std::ptr::null_mut()) },
            "connect"
        );
        if Instant::now() > end {
            return Err("connect timed out".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut mh: *mut c_void = std::ptr::null_mut();
    // SAFETY: registering our own device buffer.
    ck!(
        unsafe {
            t.reg_mr.unwrap()(
                sc,
                sbuf.as_mut_ptr().cast(),
                reg_len as c_int,
                NCCL_PTR_CUDA,
                &raw mut mh,
            )
        },
        "regMr(CUDA) on the send comm"
    );
    let mut all = sizes.clone();
    all.push(host_tail);
    let mut reqs = std::collections::VecDeque::new();
    let mut off = 0usize;
    let mut next = 0;
    while next < all.len() || !reqs.is_empty() {
        if Instant::now() > end {
            return Err(format!("sender timed out with {} sends in flight", reqs.len()));
        }
        if next < all.len() && reqs.len() < 16 {
            let mut req: *mut c_void = std::ptr::null_mut();
            // SAFETY: `off..off+size` lies in our registered device buffer, alive until the end.
            ck!(
                unsafe {
                    t.isend.unwrap()(
                        sc,
                        sbuf.as_mut_ptr().add(off).cast(),
                        all[next] as c_int,
                        0,
                        mh,
                        &raw mut req,
                    )
                },
                "isend"
            );
            off += all[next];
            next += 1;
            reqs.push_back(req);
            continue;
        }
        let mut done: c_int = 0;
        // SAFETY: testing the oldest outstanding send.
        ck!(
            unsafe { t.test.unwrap()(*reqs.front().unwrap(), &raw mut done, std::ptr::null_mut()) },
            "test(send)"
        );
        if done == 1 {
            reqs.pop_front();
        }
    }
    // SAFETY: our registration and comm, each closed once.
    unsafe {
        t.dereg_mr.unwrap()(sc, mh);
        t.close_send.unwrap()(sc);
    }
    Ok(())
}

fn run() -> Result<(), String> {
    let args: Vec<String> = std::env::args().collect();
    let total_mib: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(256);
    let inflight: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(8).clamp(1, 16);
    let t = &T;
    let dev = Device::open(0).map_err(|e| format!("open GPU 0: {e}"))?;
    dev.make_current().map_err(|e| e.to_string())?;
    println!("GPU 0: {} ({})", dev.info().name, dev.arch());

    if std::env::var_os("NCCL_DYNAMIC_CHUNK_SIZE").is_none() {
        // Single-threaded here: nothing else reads the environment yet.
        std::env::set_var("NCCL_DYNAMIC_CHUNK_SIZE", "524288");
        println!("note: NCCL_DYNAMIC_CHUNK_SIZE was unset; using 524288 (GKE's value; TCPX moves no data without it)");
    }
    // SAFETY: a NULL logger is accepted (WARNs go to stderr).
    ck!(unsafe { t.init.unwrap()(None) }, "init");
    let mut props = std::mem::MaybeUninit::<PropertiesV7>::zeroed();
    // SAFETY: out-pointer to a properties struct.
    ck!(
        unsafe { t.get_properties.unwrap()(0, props.as_mut_ptr()) },
        "getProperties"
    );
    // SAFETY: filled by getProperties.
    let props = unsafe { props.assume_init() };
    println!(
        "props: ptrSupport {:#x} netDeviceType {} netDeviceVersion {} maxRecvs {}",
        props.ptr_support, props.net_device_type, props.net_device_version, props.max_recvs
    );
    if props.ptr_support != NCCL_PTR_HOST | NCCL_PTR_CUDA
        || props.net_device_type != NCCL_NET_DEVICE_UNPACK
        || props.net_device_version != NCCL_NET_DEVICE_UNPACK_VERSION
    {
        return Err("properties are not those of unpack mode: is TCPXEMU_MODE=unpack set?".into());
    }

    let mut handle: NetHandle = [0; NET_HANDLE_MAXSIZE];
    let mut lc: *mut c_void = std::ptr::null_mut();
    // SAFETY: handle buffer and out-pointer.
    ck!(
        unsafe { t.listen.unwrap()(0, handle.as_mut_ptr().cast(), &raw mut lc) },
        "listen"
    );

    let sz = sizes(total_mib * MIB);
    let host_tail = MIB + 7;
    let total: usize = sz.iter().sum();
    let snd = {
        let (dev, sz) = (dev.clone(), sz.clone());
        std::thread::spawn(move || sender(dev, handle, sz, host_tail))
    };

    let mut rc: *mut c_void = std::ptr::null_mut();
    let mut dh = DeviceHandleV7::zeroed();
    let mut dhp: *mut DeviceHandleV7 = &raw mut dh;
    let end = Instant::now() + DEADLINE;
    while rc.is_null() {
        // SAFETY: listen comm from listen; out-pointers; dhp points to our struct.
        ck!(unsafe { t.accept.unwrap()(lc, &raw mut rc, &raw mut dhp) }, "accept");
        if Instant::now() > end {
            return Err("accept timed out".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    println!(
        "accept device handle: type {} version {} handle {:p} size {} needsProxyProgress {}",
        dh.net_device_type, dh.net_device_version, dh.handle, dh.size, dh.needs_proxy_progress
    );
    if dh.net_device_type != NCCL_NET_DEVICE_UNPACK
        || dh.net_device_version != NCCL_NET_DEVICE_UNPACK_VERSION
        || dh.handle.is_null()
        || dh.size != 24
        || dh.needs_proxy_progress != 1
    {
        return Err("accept did not fill the UNPACK device handle".into());
    }
    // The handle as NCCL's kernel reads it: the meta ring from accept on; `bounce_buf` once the
    // GPU's pool exists (made by the first CUDA registration of a receive comm, not at accept).
    let stream = dev.stream();
    let read_handle = || -> Result<[u64; 3], String> {
        let mut h = [0u8; 24];
        // SAFETY: the handle is 24 bytes of device memory; `h` is read after the synchronize.
        unsafe { stream.memcpy_dtoh_async(h.as_mut_ptr(), dh.handle as u64, 24) }.map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())?;
        Ok([0, 8, 16].map(|o| u64::from_le_bytes(h[o..o + 8].try_into().unwrap())))
    };
    let [meta, before, head] = read_handle()?;
    println!("unpackNetDeviceHandle after accept: meta {meta:#x} bounce_buf {before:#x} head {head:#x}");
    if meta == 0 || head != u64::MAX {
        return Err("unpackNetDeviceHandle content is wrong".into());
    }
    // Under UVA the mapped ring's device address is its host address.
    let ring = meta as usize as *const NetUnpackMeta;
    let bounce_len = 16 * CAP;

    let rbuf_len = (total + CAP).next_multiple_of(4096);
    let rbuf = dev.alloc(rbuf_len).map_err(|e| e.to_string())?;
    let mut rmh: *mut c_void = std::ptr::null_mut();
    // SAFETY: our device buffer.
    ck!(
        unsafe {
            t.reg_mr.unwrap()(
                rc,
                rbuf.as_mut_ptr().cast(),
                rbuf_len as c_int,
                NCCL_PTR_CUDA,
                &raw mut rmh,
            )
        },
        "regMr(CUDA) on the recv comm"
    );

    let [_, bounce, _] = read_handle()?;
    println!("unpackNetDeviceHandle after the CUDA regMr: bounce_buf {bounce:#x}");
    if bounce == 0 || (before != 0 && before != bounce) {
        return Err("bounce_buf not set (or changed) by the first CUDA registration".into());
    }
    // The 4 MiB limit: refused with ncclInvalidArgument, no slot taken.
    {
        let mut req: *mut c_void = std::ptr::null_mut();
        let mut p: *mut c_void = rbuf.as_mut_ptr().cast();
        let mut s: c_int = (CAP + 1) as c_int;
        let mut tag: c_int = 0;
        // SAFETY: one-entry arrays.
        let r = unsafe { t.irecv.unwrap()(rc, 1, &raw mut p, &raw mut s, &raw mut tag, &raw mut rmh, &raw mut req) };
        println!(
            "CUDA irecv of 4 MiB + 1: {} (expected ncclInvalidArgument)",
            result_name(r)
        );
        if r != NCCL_INVALID_ARGUMENT {
            return Err("a CUDA receive above 4 MiB was not refused".into());
        }
    }

    let n = sz.len();
    let mut offs = Vec::with_capacity(n);
    let mut o = 0;
    for &s in &sz {
        offs.push(o);
        o += s;
    }
    let mut reqs = std::collections::VecDeque::new();
    let (mut posted, mut consumed) = (0usize, 0usize);
    let mut descs = 0u64;
    let t0 = Instant::now();
    while consumed < n {
        if Instant::now() > end + DEADLINE {
            return Err(format!("receiver timed out: {consumed}/{n} consumed"));
        }
        if posted < n && posted - consumed < inflight {
            let mut req: *mut c_void = std::ptr::null_mut();
            // SAFETY: offs[posted] + CAP lies inside rbuf (total + CAP bytes).
            let mut p: *mut c_void = unsafe { rbuf.as_mut_ptr().add(offs[posted]) }.cast();
            let mut s: c_int = CAP as c_int;
            let mut tag: c_int = 0;
            // SAFETY: one-entry arrays.
            ck!(
                unsafe { t.irecv.unwrap()(rc, 1, &raw mut p, &raw mut s, &raw mut tag, &raw mut rmh, &raw mut req) },
                "irecv"
            );
            reqs.push_back(req);
            posted += 1;
            continue;
        }
        let mut done: c_int = 0;
        let req = *reqs.front().unwrap();
        // SAFETY: the oldest outstanding receive.
        ck!(
            unsafe { t.test.unwrap()(req, &raw mut done, std::ptr::null_mut()) },
            "test(recv)"
        );
        if done == 0 {
            continue;
        }
        let k = consumed;
        let slot = k % 16;
        // SAFETY: the ring is host memory mapped for the device; the slot is ours until
        // irecvConsumed.
        let (cnt, metas) = unsafe {
            let cnt = std::ptr::read_volatile(&raw const (*ring).cnt[slot]);
            (cnt, &(&(*ring).mem[slot])[..(cnt as usize).min(UNPACK_MAX_SLICE_PAGES)])
        };
        let got = validate_metas(metas, bounce_len, sz[k]).map_err(|e| format!("receive {k}: {e}"))?;
        if got != sz[k] {
            return Err(format!("receive {k}: descriptors carry {got} bytes, sent {}", sz[k]));
        }
        check_exact_cover(metas, sz[k]).map_err(|e| format!("receive {k}: {e}"))?;
        descs += cnt;
        let dst = rbuf.as_raw() + offs[k] as u64;
        let job = UnpackJob::from_meta_ring(meta, slot, cnt, bounce, bounce_len as u64, dst, sz[k] as u64)
            .map_err(|e| e.to_string())?;
        dev.unpack(&[job], stream).map_err(|e| e.to_string())?;
        stream.synchronize().map_err(|e| e.to_string())?;
        // SAFETY: the completed request, consumed in order.
        ck!(unsafe { t.irecv_consumed.unwrap()(rc, 1, req) }, "irecvConsumed");
        reqs.pop_front();
        consumed += 1;
    }
    let secs = t0.elapsed().as_secs_f64();
    let errs = dev.unpack_errors(stream).map_err(|e| e.to_string())?;
    let wrong = dev
        .verify(&rbuf, 0..total, ORIGIN, 0, 0, stream)
        .map_err(|e| e.to_string())?;
    println!(
        "CUDA -> CUDA: {n} receives, {total} bytes, {descs} descriptors, {:.2} GB/s ({} in flight); unpack kernel skipped {errs} descriptors; {wrong} wrong bytes",
        total as f64 / secs / 1e9,
        inflight
    );
    if errs != 0 || wrong != 0 {
        return Err("data mismatch after device unpack".into());
    }

    // A host-memory receive in unpack mode: straight into the buffer, cnt 0.
    let mut hbuf = dev
        .alloc_pinned(host_tail, PinnedFlags::PLAIN)
        .map_err(|e| e.to_string())?;
    let mut hmh: *mut c_void = std::ptr::null_mut();
    // SAFETY: our host buffer.
    ck!(
        unsafe {
            t.reg_mr.unwrap()(
                rc,
                hbuf.as_mut_ptr().cast(),
                host_tail as c_int,
                NCCL_PTR_HOST,
                &raw mut hmh,
            )
        },
        "regMr(HOST)"
    );
    let mut req: *mut c_void = std::ptr::null_mut();
    let mut p: *mut c_void = hbuf.as_mut_ptr().cast();
    let mut s: c_int = host_tail as c_int;
    let mut tag: c_int = 0;
    // SAFETY: one-entry arrays.
    ck!(
        unsafe { t.irecv.unwrap()(rc, 1, &raw mut p, &raw mut s, &raw mut tag, &raw mut hmh, &raw mut req) },
        "irecv(host)"
    );
    let mut done: c_int = 0;
    while done == 0 {
        if Instant::now() > end + DEADLINE {
            return Err("host receive timed out".into());
        }
        // SAFETY: the oldest outstanding receive.
        ck!(
            unsafe { t.test.unwrap()(req, &raw mut done, std::ptr::null_mut()) },
            "test(host recv)"
        );
    }
    let slot = n % 16;
    // SAFETY: as above.
    let cnt = unsafe { std::ptr::read_volatile(&raw const (*ring).cnt[slot]) };
    let bad = hbuf
        .as_slice()
        .iter()
        .enumerate()
        .filter(|&(i, &b)| b != pattern_byte(ORIGIN, 0, (total + i) as u64))
        .count();
    println!("host receive in unpack mode: {host_tail} bytes, cnt {cnt}, {bad} wrong bytes");
    // SAFETY: completed, in order.
    ck!(unsafe { t.irecv_consumed.unwrap()(rc, 1, req) }, "irecvConsumed(host)");
    if cnt != 0 || bad != 0 {
        return Err("host receive in unpack mode is wrong".into());
    }
    snd.join().map_err(|_| "sender panicked".to_string())??;
    // SAFETY: our registrations and comms, each closed once.
    unsafe {
        t.dereg_mr.unwrap()(rc, rmh);
        t.dereg_mr.unwrap()(rc, hmh);
        t.close_recv.unwrap()(rc);
        t.close_listen.unwrap()(lc);
    }
    Ok(())
}

fn main() {
    match run() {
        Ok(()) => println!("UNPACK_CHECK PASS"),
        Err(e) => {
            println!("UNPACK_CHECK FAIL: {e}");
            std::process::exit(1);
        }
    }
}
