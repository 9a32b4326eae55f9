//! NCCL's C API, loaded at run time: the few types and entry points the baseline calls.
//!
//! The declarations follow the public header `nccl.h` of NCCL 2.28 (the calls used here have
//! kept their signatures since NCCL 2.7; `ncclGetLastError` since 2.13). They are written
//! here from the documented API, not copied: `ncclUniqueId` is 128 opaque bytes passed by
//! value, `ncclComm_t` an opaque pointer, `ncclResult_t`, `ncclDataType_t` and `ncclRedOp_t`
//! C enums (ints), `cudaStream_t` the driver's `CUstream`.
//!
//! Nothing links against NCCL: the library is `dlopen`ed when `--baseline nccl` asks for it,
//! so tcpx-perf builds and runs on machines with neither CUDA nor NCCL.

use std::ffi::{c_char, c_int, c_void, CStr};
use std::path::{Path, PathBuf};

/// `ncclResult_t`.
pub type NcclResult = c_int;
/// `ncclSuccess`.
pub const NCCL_SUCCESS: NcclResult = 0;
/// `ncclComm_t`: an opaque communicator.
pub type NcclComm = *mut c_void;
/// `cudaStream_t` (the same object as the driver's `CUstream`).
pub type CudaStream = *mut c_void;

/// `ncclDataType_t` values used here.
pub const NCCL_UINT8: c_int = 1;
pub const NCCL_FLOAT32: c_int = 7;
/// `ncclRedOp_t`: `ncclSum`.
pub const NCCL_SUM: c_int = 0;

/// Bytes of `ncclUniqueId` (`NCCL_UNIQUE_ID_BYTES`).
pub const UNIQUE_ID_BYTES: usize = 128;

/// `ncclUniqueId`: 128 opaque bytes, passed by value to `ncclCommInitRank`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct NcclUniqueId {
    pub internal: [c_char; UNIQUE_ID_BYTES],
}

impl NcclUniqueId {
    pub fn to_bytes(self) -> Vec<u8> {
        self.internal.iter().map(|&c| c as u8).collect()
    }

    /// `None` unless `bytes` holds exactly [`UNIQUE_ID_BYTES`].
    pub fn from_bytes(bytes: &[u8]) -> Option<NcclUniqueId> {
        let mut internal = [0 as c_char; UNIQUE_ID_BYTES];
        if bytes.len() != UNIQUE_ID_BYTES {
            return None;
        }
        for (d, &s) in internal.iter_mut().zip(bytes) {
            *d = s as c_char;
        }
        Some(NcclUniqueId { internal })
    }
}

type GetVersionFn = unsafe extern "C" fn(*mut c_int) -> NcclResult;
type GetUniqueIdFn = unsafe extern "C" fn(*mut NcclUniqueId) -> NcclResult;
type CommInitRankFn = unsafe extern "C" fn(*mut NcclComm, c_int, NcclUniqueId, c_int) -> NcclResult;
type CommFn = unsafe extern "C" fn(NcclComm) -> NcclResult;
type GetErrorStringFn = unsafe extern "C" fn(NcclResult) -> *const c_char;
type GetLastErrorFn = unsafe extern "C" fn(NcclComm) -> *const c_char;
type SendFn = unsafe extern "C" fn(*const c_void, usize, c_int, c_int, NcclComm, CudaStream) -> NcclResult;
type RecvFn = unsafe extern "C" fn(*mut c_void, usize, c_int, c_int, NcclComm, CudaStream) -> NcclResult;
type AllReduceFn =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, c_int, c_int, NcclComm, CudaStream) -> NcclResult;
type GroupFn = unsafe extern "C" fn() -> NcclResult;

/// The library names tried when `--nccl-lib` is not given (the dynamic loader's own search:
/// `LD_LIBRARY_PATH`, the ld.so cache, the system directories).
pub const DEFAULT_NAMES: [&str; 2] = ["libnccl.so.2", "libnccl.so"];

/// The oldest NCCL that loads `ncclNetPlugin_v7` (GPUDirect-TCPX's only table).
pub const MIN_VERSION: (u32, u32) = (2, 19);

/// Where to find pip's NCCL (PyTorch installs it), for error messages.
const PIP_HINT: &str =
    "pip's NCCL (PyTorch's): --nccl-lib \"$(python3 -c 'import nvidia.nccl as m; print(m.__path__[0])')/lib/libnccl.so.2\"";

/// A loaded NCCL: the library (kept open for the process lifetime: NCCL's threads and
/// atexit handlers outlive any comm) and its entry points.
pub struct NcclLib {
    path: PathBuf,
    version: i32,
    get_unique_id: GetUniqueIdFn,
    comm_init_rank: CommInitRankFn,
    comm_destroy: CommFn,
    comm_abort: CommFn,
    get_error_string: GetErrorStringFn,
    get_last_error: Option<GetLastErrorFn>,
    send: SendFn,
    recv: RecvFn,
    all_reduce: AllReduceFn,
    group_start: GroupFn,
    group_end: GroupFn,
}

/// NCCL's version code (`major * 10000 + minor * 100 + patch` since 2.9; `major * 1000 +
/// minor * 100 + patch` before) as (major, minor, patch).
pub fn decode_version(code: i32) -> (u32, u32, u32) {
    let c = code.max(0) as u32;
    if c >= 10000 {
        (c / 10000, (c % 10000) / 100, c % 100)
    } else {
        (c / 1000, (c % 1000) / 100, c % 100)
    }
}

fn sym<T: Copy>(lib: &libloading::Library, path: &Path, name: &str) -> Result<T, String> {
    let cname = format!("{name}\0");
    // SAFETY: `T` is the function-pointer type of `name` as NCCL's header declares it (the
    // module's type aliases); the pointer is only called with those arguments.
    unsafe { lib.get::<T>(cname.as_bytes()) }.map(|s| *s).map_err(|_| {
        format!(
            "'{}' is not an NCCL library (no {name}): pass --nccl-lib the path of libnccl.so.2",
            path.display()
        )
    })
}

impl NcclLib {
    /// Loads NCCL from `path`, or by [`DEFAULT_NAMES`] through the dynamic loader's search, and
    /// checks that it is an NCCL of at least [`MIN_VERSION`]. Every error is one line naming
    /// the fix.
    pub fn open(path: Option<&Path>) -> Result<NcclLib, String> {
        let (lib, shown) = if let Some(p) = path {
            if !p.exists() {
                return Err(format!(
                    "--nccl-lib {}: no such file; give the path of libnccl.so.2 ({PIP_HINT})",
                    p.display()
                ));
            }
            (load(p.as_os_str())?, p.to_path_buf())
        } else {
            let mut errors = Vec::new();
            let mut found = None;
            for name in DEFAULT_NAMES {
                match load(std::ffi::OsStr::new(name)) {
                    Ok(lib) => {
                        found = Some((lib, PathBuf::from(name)));
                        break;
                    }
                    Err(e) => errors.push(e),
                }
            }
            found.ok_or_else(|| {
                format!(
                    "--baseline nccl: NCCL is not on the loader's search path ({} not found): pass --nccl-lib PATH or add its directory to LD_LIBRARY_PATH; {PIP_HINT}",
                    DEFAULT_NAMES.join(", ")
                )
            })?
        };
        let get_version: GetVersionFn = sym(&lib, &shown, "ncclGetVersion")?;
        let this = NcclLib {
            get_unique_id: sym(&lib, &shown, "ncclGetUniqueId")?,
            comm_init_rank: sym(&lib, &shown, "ncclCommInitRank")?,
            comm_destroy: sym(&lib, &shown, "ncclCommDestroy")?,
            comm_abort: sym(&lib, &shown, "ncclCommAbort")?,
            get_error_string: sym(&lib, &shown, "ncclGetErrorString")?,
            get_last_error: sym(&lib, &shown, "ncclGetLastError").ok(),
            send: sym(&lib, &shown, "ncclSend")?,
            recv: sym(&lib, &shown, "ncclRecv")?,
            all_reduce: sym(&lib, &shown, "ncclAllReduce")?,
            group_start: sym(&lib, &shown, "ncclGroupStart")?,
            group_end: sym(&lib, &shown, "ncclGroupEnd")?,
            path: resolved_path(get_version as *const c_void).unwrap_or(shown.clone()),
            version: 0,
        };
        let mut version: c_int = 0;
        // SAFETY: out-pointer to a live c_int; ncclGetVersion has no other precondition.
        let rc = unsafe { get_version(&raw mut version) };
        if rc != NCCL_SUCCESS {
            return Err(format!(
                "{}: ncclGetVersion failed ({}); the library is unusable: pass --nccl-lib a working libnccl.so.2",
                this.path.display(),
                this.error_string(rc)
            ));
        }
        let (major, minor, patch) = decode_version(version);
        if (major, minor) < MIN_VERSION {
            return Err(format!(
                "{}: NCCL {major}.{minor}.{patch} is older than {}.{}, the first NCCL that loads ncclNetPlugin_v7 plugins: pass --nccl-lib a newer libnccl.so.2",
                this.path.display(),
                MIN_VERSION.0,
                MIN_VERSION.1
            ));
        }
        // The library stays mapped for the process lifetime (see the struct's documentation).
        std::mem::forget(lib);
        Ok(NcclLib { version, ..this })
    }

    /// The file the loader mapped.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `major.minor.patch`.
    pub fn version_string(&self) -> String {
        let (a, b, c) = decode_version(self.version);
        format!("{a}.{b}.{c}")
    }

    /// NCCL's name for `rc`, with the last error's detail when NCCL has one.
    pub fn error_string(&self, rc: NcclResult) -> String {
        // SAFETY: ncclGetErrorString returns a static NUL-terminated string for any value.
        let name = unsafe { cstr((self.get_error_string)(rc)) };
        let detail = self
            .get_last_error
            // SAFETY: NULL asks for the last error of any communicator; the result is a
            // NUL-terminated string owned by NCCL (or NULL).
            .map(|f| unsafe { cstr(f(std::ptr::null_mut())) })
            .unwrap_or_default();
        let detail = detail.trim();
        if detail.is_empty() {
            format!("{name} ({rc})")
        } else {
            format!("{name} ({rc}): {detail}")
        }
    }

    fn check(&self, rc: NcclResult, call: &str) -> Result<(), String> {
        if rc == NCCL_SUCCESS {
            Ok(())
        } else {
            Err(format!("{call} failed: {}", self.error_string(rc)))
        }
    }

    pub fn unique_id(&self) -> Result<NcclUniqueId, String> {
        let mut id = NcclUniqueId {
            internal: [0; UNIQUE_ID_BYTES],
        };
        // SAFETY: out-pointer to a live ncclUniqueId.
        self.check(unsafe { (self.get_unique_id)(&raw mut id) }, "ncclGetUniqueId")?;
        Ok(id)
    }

    /// `ncclCommInitRank` (the caller made the rank's GPU current).
    pub fn comm_init_rank(&self, nranks: usize, id: NcclUniqueId, rank: usize) -> Result<NcclComm, String> {
        let mut comm: NcclComm = std::ptr::null_mut();
        // SAFETY: out-pointer to a live handle; the id is passed by value as the ABI says.
        let rc = unsafe { (self.comm_init_rank)(&raw mut comm, nranks as c_int, id, rank as c_int) };
        self.check(rc, "ncclCommInitRank")?;
        Ok(comm)
    }

    /// # Safety
    /// `comm` is a communicator from [`comm_init_rank`](Self::comm_init_rank), not used after.
    pub unsafe fn comm_destroy(&self, comm: NcclComm) -> Result<(), String> {
        // SAFETY: the caller's contract.
        self.check(unsafe { (self.comm_destroy)(comm) }, "ncclCommDestroy")
    }

    /// # Safety
    /// As [`comm_destroy`](Self::comm_destroy).
    pub unsafe fn comm_abort(&self, comm: NcclComm) {
        // SAFETY: the caller's contract.
        unsafe { (self.comm_abort)(comm) };
    }

    pub fn group_start(&self) -> Result<(), String> {
        // SAFETY: no arguments; groups nest.
        self.check(unsafe { (self.group_start)() }, "ncclGroupStart")
    }

    pub fn group_end(&self) -> Result<(), String> {
        // SAFETY: no arguments.
        self.check(unsafe { (self.group_end)() }, "ncclGroupEnd")
    }

    /// # Safety
    /// `buf..buf+bytes` is device memory of `comm`'s GPU that stays valid and unmodified until
    /// `stream` has passed the operation; `stream` belongs to that GPU.
    pub unsafe fn send(
        &self,
        buf: u64,
        bytes: usize,
        peer: usize,
        comm: NcclComm,
        stream: CudaStream,
    ) -> Result<(), String> {
        // SAFETY: the caller's contract.
        let rc = unsafe { (self.send)(buf as *const c_void, bytes, NCCL_UINT8, peer as c_int, comm, stream) };
        self.check(rc, "ncclSend")
    }

    /// # Safety
    /// As [`send`](Self::send), and nothing else reads or writes the range meanwhile.
    pub unsafe fn recv(
        &self,
        buf: u64,
        bytes: usize,
        peer: usize,
        comm: NcclComm,
        stream: CudaStream,
    ) -> Result<(), String> {
        // SAFETY: the caller's contract.
        let rc = unsafe { (self.recv)(buf as *mut c_void, bytes, NCCL_UINT8, peer as c_int, comm, stream) };
        self.check(rc, "ncclRecv")
    }

    /// Sum of `count` floats from `send` into `recv` over the communicator.
    ///
    /// # Safety
    /// As [`recv`](Self::recv) for both ranges (`count * 4` bytes each).
    pub unsafe fn all_reduce(
        &self,
        send: u64,
        recv: u64,
        count: usize,
        comm: NcclComm,
        stream: CudaStream,
    ) -> Result<(), String> {
        // SAFETY: the caller's contract.
        let rc = unsafe {
            (self.all_reduce)(
                send as *const c_void,
                recv as *mut c_void,
                count,
                NCCL_FLOAT32,
                NCCL_SUM,
                comm,
                stream,
            )
        };
        self.check(rc, "ncclAllReduce")
    }
}

fn load(name: &std::ffi::OsStr) -> Result<libloading::Library, String> {
    // SAFETY: loading NCCL runs its initialisers, which is what the user asked for with
    // --baseline nccl; RTLD_LOCAL keeps its symbols out of the plugin's way.
    unsafe { libloading::os::unix::Library::open(Some(name), libc::RTLD_NOW | libc::RTLD_LOCAL) }
        .map(Into::into)
        .map_err(|e| {
            format!(
                "cannot load NCCL from '{}': {}; pass --nccl-lib the path of libnccl.so.2 ({PIP_HINT})",
                name.to_string_lossy(),
                e.to_string().lines().next().unwrap_or("")
            )
        })
}

/// The file that holds `addr` (the path the loader actually used for a bare name).
fn resolved_path(addr: *const c_void) -> Option<PathBuf> {
    // SAFETY: dladdr only reads the loader's tables; `info` is a valid out-struct.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(addr, &raw mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    Some(PathBuf::from(unsafe { cstr(info.dli_fname) }))
}

/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives the call.
unsafe fn cstr(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: the caller's contract.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_id_is_128_bytes_and_round_trips() {
        assert_eq!(std::mem::size_of::<NcclUniqueId>(), 128);
        let bytes: Vec<u8> = (0..128u32).map(|i| (i * 7) as u8).collect();
        let id = NcclUniqueId::from_bytes(&bytes).expect("128 bytes");
        assert_eq!(id.to_bytes(), bytes);
        assert!(NcclUniqueId::from_bytes(&bytes[..127]).is_none());
    }

    #[test]
    fn versions_decode_both_encodings() {
        assert_eq!(decode_version(22803), (2, 28, 3));
        assert_eq!(decode_version(21903), (2, 19, 3));
        assert_eq!(decode_version(2804), (2, 8, 4));
    }

    #[test]
    fn a_missing_file_is_refused_in_one_line() {
        let err = NcclLib::open(Some(Path::new("/nonexistent/libnccl.so.2")))
            .err()
            .expect("refused");
        assert!(
            err.starts_with("--nccl-lib /nonexistent/libnccl.so.2: no such file"),
            "{err}"
        );
        assert!(!err.contains('\n'));
    }

    #[test]
    fn a_file_that_is_not_a_library_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("libnccl.so.2");
        std::fs::write(&p, b"not an ELF file").expect("write");
        let err = NcclLib::open(Some(&p)).err().expect("refused");
        assert!(err.starts_with("cannot load NCCL from"), "{err}");
        assert!(err.contains("--nccl-lib"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn a_library_without_nccl_symbols_is_refused() {
        // libc is loadable everywhere and exports no NCCL symbol.
        let err = NcclLib::open(Some(Path::new(libc_path().as_str())))
            .err()
            .expect("refused");
        assert!(err.contains("is not an NCCL library (no ncclGetVersion)"), "{err}");
    }

    /// The libc this test process runs with (a real shared library without NCCL symbols).
    fn libc_path() -> String {
        resolved_path(libc::getpid as *const c_void)
            .map(|p| p.display().to_string())
            .expect("dladdr finds libc")
    }
}
