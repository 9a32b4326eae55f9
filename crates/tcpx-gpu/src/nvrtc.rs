//! Run-time compilation of `kernels/*.cu` with NVRTC, once per GPU architecture per process.
//!
//! Why our own loader instead of cudarc's `nvrtc` module: cudarc 0.19 built for CUDA 12.2
//! (`cuda-12020`, chosen so that 12.2+ drivers work) searches `libnvrtc.so`, `.so.12`, `.so.11`,
//! … but never `libnvrtc.so.13`, which is the only name CUDA 13 hosts (our GPU hosts) install
//! on the loader path, and it panics when none is found. The dozen NVRTC entry points we
//! need have been ABI-stable since CUDA 11, so we `dlopen` NVRTC ourselves from a list that
//! covers CUDA 13 and 12 (and `TCPX_GPU_NVRTC=/path/libnvrtc.so.N` to override), and fail
//! with an error instead of a panic.
//!
//! We ask NVRTC for a CUBIN for the exact `sm_XY` of the device (`--gpu-architecture=sm_XY`),
//! so the driver loads machine code with no PTX JIT step.

use crate::error::GpuError;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

/// The kernel sources, embedded at build time and compiled as one NVRTC program.
pub const KERNEL_SOURCE: &str = concat!(
    include_str!("../../../kernels/pattern.cu"),
    "\n",
    include_str!("../../../kernels/unpack.cu"),
);

/// Environment variable naming the NVRTC shared library to use (a path or a soname).
pub const NVRTC_ENV: &str = "TCPX_GPU_NVRTC";

type Program = *mut c_void;
type CreateFn = unsafe extern "C" fn(
    *mut Program,
    *const c_char,
    *const c_char,
    c_int,
    *const *const c_char,
    *const *const c_char,
) -> c_int;
type CompileFn = unsafe extern "C" fn(Program, c_int, *const *const c_char) -> c_int;
type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> c_int;
type GetFn = unsafe extern "C" fn(Program, *mut c_char) -> c_int;
type DestroyFn = unsafe extern "C" fn(*mut Program) -> c_int;
type ErrStrFn = unsafe extern "C" fn(c_int) -> *const c_char;
type VersionFn = unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int;

struct Nvrtc {
    _lib: libloading::Library,
    _builtins: Vec<libloading::Library>,
    path: String,
    version: (i32, i32),
    create: CreateFn,
    compile: CompileFn,
    log_size: SizeFn,
    log: GetFn,
    cubin_size: SizeFn,
    cubin: GetFn,
    destroy: DestroyFn,
    err_str: ErrStrFn,
}

/// The names tried, in order, when `TCPX_GPU_NVRTC` is unset.
pub fn nvrtc_candidates() -> Vec<String> {
    let mut v = Vec::new();
    if let Ok(p) = std::env::var(NVRTC_ENV) {
        if !p.is_empty() {
            v.push(p);
            return v;
        }
    }
    let names = ["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];
    v.extend(names.iter().map(std::string::ToString::to_string));
    let mut dirs = Vec::new();
    for var in ["CUDA_HOME", "CUDA_PATH"] {
        if let Ok(d) = std::env::var(var) {
            if !d.is_empty() {
                dirs.push(format!("{d}/lib64"));
            }
        }
    }
    dirs.push("/usr/local/cuda/lib64".into());
    dirs.push("/usr/local/cuda/targets/x86_64-linux/lib".into());
    for d in dirs {
        for n in names {
            v.push(format!("{d}/{n}"));
        }
    }
    v
}

/// NVRTC `dlopen`s `libnvrtc-builtins.so.X.Y` by soname when it compiles. When we load NVRTC
/// by absolute path from a directory that is not on the loader path, that lookup fails
/// ("failed to open libnvrtc-builtins.so.13.0"); loading the builtins from the same
/// directory first makes the soname lookup find the already-loaded library.
fn preload_builtins(nvrtc_path: &str) -> Vec<libloading::Library> {
    let Some(dir) = std::path::Path::new(nvrtc_path).parent() else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut libs = Vec::new();
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("libnvrtc-builtins.so.") {
            // SAFETY: loading NVIDIA's builtins library runs only its initialisers.
            if let Ok(l) = unsafe { libloading::Library::new(e.path()) } {
                libs.push(l);
            }
        }
    }
    libs
}

fn load() -> Result<Nvrtc, String> {
    let candidates = nvrtc_candidates();
    for c in &candidates {
        if c.contains('/') && !std::path::Path::new(c).exists() {
            continue;
        }
        let builtins = if c.contains('/') {
            preload_builtins(c)
        } else {
            Vec::new()
        };
        // SAFETY: loading NVRTC runs its (trusted, vendor) initialisers only.
        let Ok(lib) = (unsafe { libloading::Library::new(c) }) else {
            continue;
        };
        // SAFETY: the symbol types match NVRTC's C prototypes (nvrtc.h, stable since CUDA 11);
        // the fn pointers are kept together with `lib`, which is never unloaded before them.
        unsafe {
            macro_rules! sym {
                ($t:ty, $n:literal) => {
                    match lib.get::<$t>(concat!($n, "\0").as_bytes()) {
                        Ok(s) => *s,
                        Err(e) => {
                            return Err(format!(
                                "{c} lacks {}: {e}; set {NVRTC_ENV} to a CUDA 12 or 13 libnvrtc",
                                $n
                            ))
                        }
                    }
                };
            }
            let version_fn: VersionFn = sym!(VersionFn, "nvrtcVersion");
            let (mut maj, mut min) = (0, 0);
            version_fn(&raw mut maj, &raw mut min);
            let n = Nvrtc {
                path: c.clone(),
                version: (maj, min),
                create: sym!(CreateFn, "nvrtcCreateProgram"),
                compile: sym!(CompileFn, "nvrtcCompileProgram"),
                log_size: sym!(SizeFn, "nvrtcGetProgramLogSize"),
                log: sym!(GetFn, "nvrtcGetProgramLog"),
                cubin_size: sym!(SizeFn, "nvrtcGetCUBINSize"),
                cubin: sym!(GetFn, "nvrtcGetCUBIN"),
                destroy: sym!(DestroyFn, "nvrtcDestroyProgram"),
                err_str: sym!(ErrStrFn, "nvrtcGetErrorString"),
                _lib: lib,
                _builtins: builtins,
            };
            return Ok(n);
        }
    }
    Err(format!(
        "NVRTC not found (tried {}): install the CUDA toolkit's NVRTC or set {NVRTC_ENV}=/path/to/libnvrtc.so.13",
        candidates.join(", ")
    ))
}

fn nvrtc() -> Result<&'static Nvrtc, GpuError> {
    static LIB: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    LIB.get_or_init(load).as_ref().map_err(|e| GpuError::Nvrtc(e.clone()))
}

/// Where NVRTC was loaded from and its version, or why it could not be loaded.
pub fn nvrtc_info() -> Result<(String, (i32, i32)), GpuError> {
    let n = nvrtc()?;
    Ok((n.path.clone(), n.version))
}

impl Nvrtc {
    fn err(&self, what: &str, code: c_int) -> GpuError {
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string for any code.
        let s = unsafe { CStr::from_ptr((self.err_str)(code)) }.to_string_lossy();
        GpuError::Nvrtc(format!(
            "{what} failed with {s} ({code}) using {}: set {NVRTC_ENV} to a working libnvrtc",
            self.path
        ))
    }

    fn program_log(&self, prog: Program) -> String {
        let mut size = 0usize;
        // SAFETY: prog is a live program; the buffer has `size` bytes as NVRTC asked.
        unsafe {
            if (self.log_size)(prog, &raw mut size) != 0 || size == 0 {
                return String::new();
            }
            let mut buf = vec![0u8; size];
            if (self.log)(prog, buf.as_mut_ptr().cast()) != 0 {
                return String::new();
            }
            String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string()
        }
    }

    fn compile_cubin(&self, src: &str, arch: &str) -> Result<Vec<u8>, GpuError> {
        let src_c = CString::new(src).map_err(|_| GpuError::invalid("kernel source has a NUL"))?;
        let name = c"tcpx_gpu.cu";
        let opts: Vec<CString> = [format!("--gpu-architecture={arch}"), "-std=c++17".to_string()]
            .into_iter()
            .map(|s| CString::new(s).expect("no NUL"))
            .collect();
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();
        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: all pointers are valid NUL-terminated strings that outlive the calls; the
        // program is destroyed on every path below.
        unsafe {
            let r = (self.create)(
                &raw mut prog,
                src_c.as_ptr(),
                name.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            );
            if r != 0 {
                return Err(self.err("nvrtcCreateProgram", r));
            }
            let r = (self.compile)(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr());
            if r != 0 {
                let log = self.program_log(prog);
                (self.destroy)(&raw mut prog);
                let log: String = log.lines().take(8).collect::<Vec<_>>().join(" | ");
                return Err(GpuError::Nvrtc(format!(
                    "NVRTC {}.{} ({}) could not compile the kernels for {arch}: {log}: use an NVRTC that supports {arch} (set {NVRTC_ENV})",
                    self.version.0, self.version.1, self.path
                )));
            }
            let mut size = 0usize;
            let r = (self.cubin_size)(prog, &raw mut size);
            if r != 0 || size == 0 {
                (self.destroy)(&raw mut prog);
                return Err(self.err("nvrtcGetCUBINSize", r));
            }
            let mut image = vec![0u8; size];
            let r = (self.cubin)(prog, image.as_mut_ptr().cast());
            (self.destroy)(&raw mut prog);
            if r != 0 {
                return Err(self.err("nvrtcGetCUBIN", r));
            }
            Ok(image)
        }
    }
}

/// The `sm_XY` architecture name for a compute capability.
pub fn arch_name(cc: (u32, u32)) -> String {
    format!("sm_{}{}", cc.0, cc.1)
}

/// Compiles [`KERNEL_SOURCE`] to a CUBIN for `cc`, once per process per architecture; later
/// calls return the cached image. Works without a GPU (NVRTC needs none).
pub fn kernel_image(cc: (u32, u32)) -> Result<Arc<Vec<u8>>, GpuError> {
    type Cache = Mutex<HashMap<(u32, u32), Arc<Vec<u8>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    // Holding the lock while compiling makes concurrent first callers wait for one compile.
    let mut map = cache.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(img) = map.get(&cc) {
        return Ok(img.clone());
    }
    let img = Arc::new(nvrtc()?.compile_cubin(KERNEL_SOURCE, &arch_name(cc))?);
    map.insert(cc, img.clone());
    Ok(img)
}
