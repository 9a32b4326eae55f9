//! Unpack mode's bounce space is reserved by a comm's first CUDA registration, not at accept
//! (issue 28.1). Needs a GPU: on a host without one the test says so and passes (the rule itself
//! is unit-tested without a GPU in `gpu::tests`).

use super::*;
use crate::config::Mode;

#[test]
fn receive_comms_that_only_see_host_buffers_reserve_no_bounce_space() {
    if crate::gpu::cuda_present() != Ok(true) {
        eprintln!("no CUDA GPU here: the bounce-space test needs one (skipped)");
        return;
    }
    // Room for one region (16 slots of 8 windows of 512 KiB: 64 MiB): five receive comms used to
    // need five regions at accept, and the second accept failed.
    let c = Config {
        mode: Mode::Unpack,
        bounce_pool_mb: 64,
        ..cfg(2, 512 << 10)
    };
    let all: Vec<_> = (0..5).map(|_| pair(&c)).collect();
    for (s, r, _lc) in &all {
        let u = r.unpack_handle().expect("unpack receive comm");
        assert!(u.handle != 0 && u.meta != 0);
        assert_eq!(u.region, None, "accept reserved bounce space");
        transfer(s, r, &[(1 << 20, 1 << 20), (12_345, 20_000)], 2);
        assert_eq!(
            r.unpack_handle().expect("unpack").region,
            None,
            "a host receive reserved bounce space"
        );
    }
    // The first CUDA registration reserves; the pool is then full, and the next one says so.
    all[0].1.register_cuda().expect("first CUDA registration");
    let u = all[0].1.unpack_handle().expect("unpack");
    assert!(u.region.is_some() && u.bounce != 0, "{u:?}");
    all[0]
        .1
        .register_cuda()
        .expect("a second registration reuses the region");
    // The comms accepted before the pool existed now carry its base in their device handles.
    let dev = tcpx_gpu::Device::current().expect("CUDA context");
    for (_, r, _) in &all[1..] {
        let mut h = [0u8; 24];
        let at = r.unpack_handle().expect("unpack").handle;
        // SAFETY: the handle is 24 bytes of device memory; `h` is read after the synchronize.
        unsafe { dev.stream().memcpy_dtoh_async(h.as_mut_ptr(), at, 24) }.expect("copy the handle");
        dev.stream().synchronize().expect("synchronize");
        let word = |o: usize| u64::from_le_bytes(h[o..o + 8].try_into().expect("8 bytes"));
        assert_eq!((word(8), word(16)), (u.bounce, u64::MAX), "bounce_buf not patched");
    }
    let e = all[1].1.register_cuda().expect_err("the 64 MiB pool holds one region");
    assert!(
        e.msg.contains("TCPXEMU_BOUNCE_POOL_MB") && e.msg.contains("comms open in this process"),
        "{}",
        e.msg
    );
    // A send comm's registration takes staging only, never bounce space.
    all[1].0.register_cuda().expect("send comm registration");
    // Host transfers still work on the comm that reserved.
    let (s, r, _) = &all[0];
    transfer(s, r, &[(3 << 20, 3 << 20)], 1);
}
