//! Endpoint buffers: page-aligned host memory today, CUDA memory behind the same interface later.

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::ptr::NonNull;

/// Alignment of every buffer: one page, as TCPX requires for CUDA registrations and as devmem
/// fragments are laid out.
pub const BUFFER_ALIGN: usize = 4096;

/// A page-aligned, zeroed host allocation that is written once up front, so that page faults
/// never land inside a timed iteration.
pub struct HostBuffer {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain memory owned by this value; access is governed by &/&mut.
unsafe impl Send for HostBuffer {}

impl HostBuffer {
    pub fn new(len: usize) -> Result<Self, String> {
        let layout =
            Layout::from_size_align(len.max(1), BUFFER_ALIGN).map_err(|e| format!("buffer of {len} bytes: {e}"))?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe { alloc_zeroed(layout) };
        let ptr =
            NonNull::new(raw).ok_or_else(|| format!("cannot allocate a {len}-byte buffer; reduce -e (maxbytes)"))?;
        let mut buffer = Self { ptr, len };
        // Touch every page now (calloc-style zero pages are mapped lazily).
        buffer
            .as_mut_slice()
            .iter_mut()
            .step_by(BUFFER_ALIGN)
            .for_each(|b| *b = 0);
        Ok(buffer)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and &mut self guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        let layout = Layout::from_size_align(self.len.max(1), BUFFER_ALIGN).expect("layout was valid at allocation");
        // SAFETY: allocated in `new` with this exact layout.
        unsafe { dealloc(self.ptr.as_ptr(), layout) }
    }
}
