//! Finding, loading and initialising a plugin: [`Plugin::open`].
//!
//! Follows NCCL's own loader (plugin-abi.md §1.5):
//! - the file: a path; or a name `X` tried as given, then as `libnccl-net-X.so` when `X` has no `/`
//!   and is not itself `lib*.so`; or `$NCCL_NET_PLUGIN` with the same rules, else `libnccl-net.so`.
//!   `dlopen(RTLD_NOW | RTLD_LOCAL)`, as NCCL does, so a missing dependency fails here, not mid-run;
//! - the version: `dlsym("ncclNetPlugin_v12")` .. `_v7`, newest first, first hit wins (or exactly
//!   the one forced with [`OpenOptions::force_abi`]). The symbol is a data object: its address is read
//!   as the table, it is never called;
//! - `init` with a non-NULL logger, exactly once: for v7..v10 once per process and table (the plugin's
//!   state is global, NCCL >= 2.28 also initialises old plugins once), for v11/v12 once per [`Plugin`]
//!   (each gets its own context, released by `finalize` when the `Plugin` drops).
//!
//! The library is never unloaded (`dlclose`). Plugins leave threads behind that run library code:
//! TCPX's detached connect/accept threads, helper threads of comms a crashed peer never let close.
//! Unmapping the code under them would turn a leak into a crash.

use std::ffi::{c_int, c_void, CStr};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nccl_net_abi as abi;

use crate::error::NetError;
use crate::logger::{self, LogLevel};
use crate::props::Properties;
use crate::table::Table;

/// Where the plugin library comes from.
#[derive(Clone, Debug)]
pub enum PluginSource {
    /// `dlopen` exactly this file.
    Path(PathBuf),
    /// NCCL's `NCCL_NET_PLUGIN=X` rules: `X` as given, then `libnccl-net-X.so`.
    Name(String),
    /// `$NCCL_NET_PLUGIN` if set (same rules as `Name`; a comma-separated list is tried in order;
    /// `none` is refused), else `libnccl-net.so`.
    Env,
}

/// How to open a plugin.
#[derive(Clone, Debug)]
pub struct OpenOptions {
    /// Use exactly this ABI version (7..=12) instead of the newest the library exports.
    pub force_abi: Option<u32>,
    /// Which plugin log lines reach stderr (process-wide: the last `open` wins).
    pub log_level: LogLevel,
    /// Directories searched (in order) before the dynamic loader's own search, for `Name`/`Env`.
    pub search_dirs: Vec<PathBuf>,
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions {
            force_abi: None,
            log_level: LogLevel::Warn,
            search_dirs: Vec::new(),
        }
    }
}

/// A loaded, initialised net plugin. Shared (`Arc`) by every comm made from it, so it is finalised
/// only after the last comm closed.
pub struct Plugin {
    pub(crate) table: Table,
    /// The v11/v12 context from `init` (NULL before v11).
    pub(crate) ctx: *mut c_void,
    /// The v11/v12 init config; boxed and kept because a plugin may keep the pointer.
    _init_config: Box<abi::CommConfigV10>,
    path: PathBuf,
    name: String,
    /// Never dropped: see the module documentation.
    _lib: ManuallyDrop<libloading::Library>,
}

// SAFETY: the table is immutable plain data, `ctx` is an opaque pointer that is only passed back to
// the plugin, and `libloading::Library` is Send + Sync. NCCL calls a plugin's entry points from
// several threads (one proxy thread per comm, setup from others); per-comm calls are serialised by
// the comm types (`&mut self`, not Sync).
unsafe impl Send for Plugin {}
// SAFETY: as above; `&Plugin` only exposes calls that plugins must accept concurrently
// (devices, getProperties, listen, connect).
unsafe impl Sync for Plugin {}

// The library handle and the function table are raw pointers: meaningless in a dump.
#[allow(clippy::missing_fields_in_debug)]
impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("abi", &self.abi())
            .finish()
    }
}

/// Tables (by address) of v7..v10 plugins already initialised in this process: those have one
/// global state and must see `init` once. The lock is held across `init` so two threads opening the
/// same plugin cannot both initialise it.
static INITIALISED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// The library files to try, in order, for a source.
fn candidates(src: &PluginSource, opts: &OpenOptions) -> (String, Vec<PathBuf>) {
    fn by_name(x: &str, dirs: &[PathBuf]) -> Vec<PathBuf> {
        let mut names = vec![x.to_owned()];
        // The dynamic loader matches file names case-sensitively, and so does this.
        #[allow(clippy::case_sensitive_file_extension_comparisons)]
        let is_lib_so = x.starts_with("lib") && x.ends_with(".so");
        if !x.contains('/') && !is_lib_so {
            names.push(format!("libnccl-net-{x}.so"));
        }
        let mut out = Vec::new();
        for n in &names {
            if !n.contains('/') {
                out.extend(dirs.iter().map(|d| d.join(n)));
            }
            out.push(PathBuf::from(n));
        }
        out
    }
    match src {
        PluginSource::Path(p) => {
            // dlopen searches the system for a bare file name; a Path means this file.
            let p = if p.components().count() == 1 && !p.is_absolute() {
                Path::new(".").join(p)
            } else {
                p.clone()
            };
            (p.display().to_string(), vec![p])
        }
        PluginSource::Name(x) => (x.clone(), by_name(x, &opts.search_dirs)),
        PluginSource::Env => match std::env::var("NCCL_NET_PLUGIN") {
            // NCCL >= 2.27 accepts a comma-separated list, tried in order.
            Ok(x) if !x.is_empty() => (
                x.clone(),
                x.split(',')
                    .map(str::trim)
                    .filter(|n| !n.is_empty())
                    .flat_map(|n| by_name(n, &opts.search_dirs))
                    .collect(),
            ),
            _ => ("libnccl-net.so".into(), by_name("libnccl-net.so", &opts.search_dirs)),
        },
    }
}

/// `dlopen`s the first candidate that loads. Search-dir candidates that do not exist are skipped
/// silently; other failures are all reported, so a broken library is not hidden by a later miss.
fn load(shown: &str, cands: &[PathBuf], opts: &OpenOptions) -> Result<(libloading::Library, PathBuf), NetError> {
    let mut errors: Vec<String> = Vec::new();
    for c in cands {
        let in_search_dir = opts.search_dirs.iter().any(|d| c.parent() == Some(d.as_path()));
        if in_search_dir && !c.exists() {
            continue;
        }
        // SAFETY: loading a library runs its initialisers; loading a net plugin is this crate's
        // purpose, and the caller chose the file.
        let r = unsafe { libloading::os::unix::Library::open(Some(c), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        match r {
            Ok(lib) => return Ok((lib.into(), c.clone())),
            Err(e) => errors.push(if cands.len() == 1 {
                e.to_string()
            } else {
                format!("'{}': {e}", c.display())
            }),
        }
    }
    let reason = if errors.is_empty() {
        "no candidate file exists".to_owned()
    } else {
        errors.join("; ")
    };
    Err(NetError::Open {
        path: PathBuf::from(shown),
        reason,
    })
}

/// The address of `ncclNetPlugin_v{version}` in `lib`, if exported and non-NULL.
fn symbol(lib: &libloading::Library, name: &str) -> Option<*const c_void> {
    // SAFETY: a data symbol looked up as a pointer type: `*sym` is the symbol's address, which is
    // only read as a table after checking it is non-NULL.
    let sym = unsafe { lib.get::<*const c_void>(name) }.ok()?;
    let p: *const c_void = *sym;
    (!p.is_null()).then_some(p)
}

/// The file the dynamic loader actually mapped for an address inside it (for `Name` sources).
fn file_of(addr: *const c_void) -> Option<PathBuf> {
    // SAFETY: dladdr only inspects the loader's tables; `info` is a valid out-struct.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let ok = unsafe { libc::dladdr(addr, &raw mut info) };
    if ok == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader.
    let s = unsafe { CStr::from_ptr(info.dli_fname) }.to_string_lossy().into_owned();
    let p = PathBuf::from(s);
    Some(std::fs::canonicalize(&p).unwrap_or(p))
}

/// A plugin library loaded and its table chosen and read, not initialised.
struct Located {
    lib: libloading::Library,
    path: PathBuf,
    version: u32,
    sym: *const c_void,
    table: Table,
    name: String,
}

/// Finds and loads the library of `src` and reads its table (the rules of [`Plugin::open`]), without
/// calling into the plugin.
fn locate(src: &PluginSource, opts: &OpenOptions) -> Result<Located, NetError> {
    if let Some(v) = opts.force_abi {
        if !(7..=12).contains(&v) {
            return Err(NetError::Usage(format!(
                "force_abi = {v}: supported net ABI versions are 7..=12"
            )));
        }
    }
    let (shown, cands) = candidates(src, opts);
    if matches!(src, PluginSource::Env) && shown.eq_ignore_ascii_case("none") {
        // NCCL >= 2.28: "none" disables external net plugins; there is nothing to drive then.
        return Err(NetError::Usage(
            "NCCL_NET_PLUGIN=none disables net plugins; name one with --plugin".into(),
        ));
    }
    let (lib, loaded_as) = load(&shown, &cands, opts)?;

    let exported: Vec<(u32, *const c_void)> = abi::PLUGIN_SYMBOLS
        .iter()
        .filter_map(|&(v, name)| symbol(&lib, name).map(|p| (v, p)))
        .collect();
    let path = exported.first().and_then(|&(_, p)| file_of(p)).unwrap_or(loaded_as);
    let chosen = match opts.force_abi {
        Some(v) => exported.iter().find(|&&(ev, _)| ev == v).copied(),
        None => exported.first().copied(),
    };
    let Some((version, sym)) = chosen else {
        return Err(NetError::MissingSymbol {
            path,
            wanted: opts.force_abi,
            found: exported.iter().map(|&(v, _)| v).collect(),
        });
    };

    // SAFETY: `sym` is the non-NULL address of `ncclNetPlugin_v{version}`, which by the ABI has
    // that version's layout.
    let table = unsafe { Table::read(version, sym) }
        .ok_or_else(|| NetError::Usage(format!("unsupported net ABI version {version}")))?;
    let missing = table.missing_entries();
    if !missing.is_empty() {
        return Err(NetError::Open {
            path,
            reason: format!("ncclNetPlugin_v{version} has NULL entries: {}", missing.join(", ")),
        });
    }
    let name = {
        let p = table.name_ptr();
        if p.is_null() {
            "<unnamed>".to_owned()
        } else {
            // SAFETY: the table's name is a NUL-terminated static string of the plugin.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    };

    Ok(Located {
        lib,
        path,
        version,
        sym,
        table,
        name,
    })
}

/// What a plugin library says it is, read without initialising it: [`Plugin::identify`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// The library file (as resolved by the dynamic loader).
    pub path: PathBuf,
    /// The table's `name` (`<unnamed>` when NULL).
    pub name: String,
    /// The ABI version of the table read (the newest exported, or the one forced).
    pub abi: u32,
}

impl Plugin {
    /// Loads a plugin's library and reads its table's name and version without calling `init`
    /// (nor any other entry point): what a plan needs to know which plugin it plans for. The
    /// library stays loaded (never `dlclose`d, as [`Plugin::open`]'s); loading runs its
    /// initialisers.
    pub fn identify(src: &PluginSource, opts: &OpenOptions) -> Result<Identity, NetError> {
        let found = locate(src, opts)?;
        // Never unloaded: see the module documentation.
        let _lib = ManuallyDrop::new(found.lib);
        Ok(Identity {
            path: found.path,
            name: found.name,
            abi: found.version,
        })
    }

    /// Loads, probes and initialises a plugin. See the module documentation for the rules.
    pub fn open(src: &PluginSource, opts: &OpenOptions) -> Result<Arc<Plugin>, NetError> {
        let Located {
            lib,
            path,
            version,
            sym,
            table,
            name,
        } = locate(src, opts)?;
        let logger = logger::logger_for(opts.log_level);
        let mut init_config = Box::new(abi::CommConfigV10 {
            traffic_class: abi::NCCL_NET_TRAFFIC_CLASS_UNDEF,
        });
        let mut ctx: *mut c_void = std::ptr::null_mut();
        // Any value identifies "the communicator" to a v11+ plugin; the pid keeps it distinct between
        // processes in logs.
        let comm_id = u64::from(std::process::id());
        let init_once = version <= 10;
        let mut initialised = INITIALISED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if !init_once || !initialised.contains(&(sym as usize)) {
            // SAFETY: the logger is the shim (never NULL); ctx and config are valid for v11+, and the
            // config box is kept alive in the Plugin.
            let rc = unsafe { table.init(logger, &mut ctx, &raw mut *init_config, comm_id) };
            if rc != abi::NCCL_SUCCESS {
                return Err(NetError::call(
                    "init",
                    rc,
                    "",
                    format!("plugin '{name}' (ABI v{version}) from '{}'", path.display()),
                ));
            }
            if init_once {
                initialised.push(sym as usize);
            }
        }
        drop(initialised);

        Ok(Arc::new(Plugin {
            table,
            ctx,
            _init_config: init_config,
            path,
            name,
            _lib: ManuallyDrop::new(lib),
        }))
    }

    /// The library file (as resolved by the dynamic loader).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The plugin's own name (the table's `name`, e.g. `GPUDirectTCPX_v7`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The ABI version in use (7..=12).
    pub fn abi(&self) -> u32 {
        self.table.version()
    }

    /// Number of net devices.
    pub fn device_count(&self) -> Result<usize, NetError> {
        let mut n: c_int = 0;
        // SAFETY: the plugin is initialised; `n` is a valid out-pointer.
        let rc = unsafe { self.table.devices(&mut n) };
        if rc != abi::NCCL_SUCCESS {
            return Err(NetError::call("devices", rc, "", ""));
        }
        usize::try_from(n).map_err(|_| {
            NetError::call(
                "devices",
                abi::NCCL_INTERNAL_ERROR,
                "",
                format!("plugin reported {n} devices"),
            )
        })
    }

    /// Properties of device `dev`, normalised over ABI versions.
    pub fn properties(&self, dev: usize) -> Result<Properties, NetError> {
        let d = self.dev_index(dev)?;
        // SAFETY: the plugin is initialised.
        unsafe { self.table.properties(d) }
            .map_err(|rc| NetError::call("getProperties", rc, "", format!("device {dev}")))
    }

    /// Whether the plugin implements `regMrDmaBuf` (NCCL prefers it for GPU memory when the
    /// plugin reports `NCCL_PTR_DMABUF`).
    pub fn has_reg_mr_dma_buf(&self) -> bool {
        self.table.has_reg_mr_dma_buf()
    }

    /// Whether the plugin has `irecvConsumed` ([`crate::RecvComm::consume`] calls it when present).
    pub fn has_irecv_consumed(&self) -> bool {
        self.table.has_irecv_consumed()
    }

    // A method, so that a later ABI with more devices can check against this plugin's count.
    #[allow(clippy::unused_self)]
    pub(crate) fn dev_index(&self, dev: usize) -> Result<c_int, NetError> {
        c_int::try_from(dev).map_err(|_| NetError::Usage(format!("device index {dev} out of range")))
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        // Every comm holds an Arc<Plugin>, so none is open any more.
        // SAFETY: ctx is the context init returned for this Plugin, finalised once.
        if let Some(rc) = unsafe { self.table.finalize(self.ctx) } {
            if rc != abi::NCCL_SUCCESS {
                logger::local_warn(format_args!(
                    "finalize of net plugin '{}' failed: {} ({rc})",
                    self.name,
                    abi::result_name(rc)
                ));
            }
        }
        // `_lib` is ManuallyDrop and deliberately never dropped: see the module documentation.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_rules_follow_nccl() {
        let o = OpenOptions {
            search_dirs: vec!["/opt/p".into()],
            ..Default::default()
        };
        let (_, c) = candidates(&PluginSource::Name("tcpx".into()), &o);
        let c: Vec<String> = c.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            c,
            [
                "/opt/p/tcpx",
                "tcpx",
                "/opt/p/libnccl-net-tcpx.so",
                "libnccl-net-tcpx.so"
            ]
        );
        let (_, c) = candidates(&PluginSource::Name("libfoo.so".into()), &OpenOptions::default());
        assert_eq!(c, [PathBuf::from("libfoo.so")]);
        let (_, c) = candidates(&PluginSource::Name("/x/y.so".into()), &o);
        assert_eq!(c, [PathBuf::from("/x/y.so")]);
        let (_, c) = candidates(&PluginSource::Path("y.so".into()), &o);
        assert_eq!(c, [PathBuf::from("./y.so")]);
    }

    #[test]
    fn bad_force_abi_is_usage() {
        let o = OpenOptions {
            force_abi: Some(6),
            ..Default::default()
        };
        assert!(matches!(
            Plugin::open(&PluginSource::Path("/nonexistent.so".into()), &o),
            Err(NetError::Usage(_))
        ));
    }
}
