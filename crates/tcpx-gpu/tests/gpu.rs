//! Tests that need a GPU (or NVRTC). Without one they print a note and pass, so CI (no GPU)
//! stays green; `examples/gpu_check.rs` is the full GPU check and benchmark.

use tcpx_gpu::nvrtc::{kernel_image, nvrtc_info};
use tcpx_gpu::unpack::{random_fragments, Rng};
use tcpx_gpu::{pattern_byte, Device, Gpu, PinnedFlags, UnpackJob};

fn device() -> Option<Device> {
    match Gpu::probe() {
        Ok(Some(_)) => Some(Device::open(0).expect("open GPU 0")),
        Ok(None) => {
            eprintln!("note: no CUDA driver or GPU here; skipping a GPU test");
            None
        }
        Err(e) => panic!("GPU probe failed: {e}"),
    }
}

#[test]
fn probe_never_panics() {
    let r = Gpu::probe();
    eprintln!("probe: {r:?}");
    assert!(r.is_ok());
}

#[test]
fn kernels_compile_with_nvrtc() {
    // NVRTC needs no GPU: this runs wherever libnvrtc is installed (or TCPX_GPU_NVRTC points).
    match nvrtc_info() {
        Ok((path, v)) => {
            eprintln!("NVRTC {}.{} from {path}", v.0, v.1);
            for cc in [(9, 0), (8, 0)] {
                let img = kernel_image(cc).unwrap_or_else(|e| panic!("{e}"));
                assert!(img.starts_with(b"\x7fELF"), "CUBIN is an ELF image");
            }
        }
        Err(e) => eprintln!("note: {e}; skipping the NVRTC compile test"),
    }
}

#[test]
fn fill_verify_and_unpack_on_gpu() {
    let Some(dev) = device() else { return };
    let s = dev.stream();
    let buf = dev.alloc(1 << 20).unwrap();
    dev.fill(&buf, 3..70_003, 2, 5, 1001, s).unwrap();
    assert_eq!(dev.verify(&buf, 3..70_003, 2, 5, 1001, s).unwrap(), 0);
    let mut host = vec![0u8; 70_000];
    buf.copy_to_host(3, &mut host, s).unwrap();
    for (i, &b) in host.iter().enumerate() {
        assert_eq!(b, pattern_byte(2, 5, 1001 + i as u64));
    }
    buf.copy_from_host(500, &[!host[497]], s).unwrap();
    assert_eq!(dev.verify(&buf, 3..70_003, 2, 5, 1001, s).unwrap(), 1);

    let mut rng = Rng::new(11);
    let layout = random_fragments(1 << 20, &mut rng);
    let payload: Vec<u8> = (0..layout.len).map(|_| rng.next_u64() as u8).collect();
    let mut bounce_h = vec![0u8; layout.bounce_len];
    layout.scatter(&payload, &mut bounce_h);
    let bounce = dev.alloc(layout.bounce_len).unwrap();
    bounce.copy_from_host(0, &bounce_h, s).unwrap();
    let mut metas = dev.alloc_pinned(layout.metas.len() * 16, PinnedFlags::MAPPED).unwrap();
    for (i, m) in layout.metas.iter().enumerate() {
        let b = &mut metas.as_mut_slice()[i * 16..i * 16 + 16];
        b[..4].copy_from_slice(&m.src_off.to_le_bytes());
        b[4..8].copy_from_slice(&m.len.to_le_bytes());
        b[8..].copy_from_slice(&m.dst_off.to_le_bytes());
    }
    let dst = dev.alloc(layout.len).unwrap();
    let job = UnpackJob::new(
        metas.device_ptr().unwrap(),
        layout.metas.len(),
        bounce.as_raw(),
        bounce.len() as u64,
        dst.as_raw(),
        dst.len() as u64,
    );
    dev.unpack(&[job], s).unwrap();
    let mut out = vec![0u8; layout.len];
    dst.copy_to_host(0, &mut out, s).unwrap();
    assert!(out == payload);
    assert_eq!(dev.unpack_errors(s).unwrap(), 0);
}
