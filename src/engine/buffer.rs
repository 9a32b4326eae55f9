//! Endpoint buffers: page-aligned host memory today, CUDA memory behind the same interface later.

use std::ptr::NonNull;

/// Alignment of every buffer: one page, as TCPX requires for CUDA registrations and as devmem
/// fragments are laid out.
pub const BUFFER_ALIGN: usize = 4096;

/// Buffers of at least this size are mapped on 2 MiB boundaries and offered transparent huge
/// pages: the kernel's socket copies of large, cache-cold buffers then take far fewer TLB misses.
const HUGE_PAGE: usize = 2 << 20;

/// A page-aligned, zeroed host mapping that is written once up front, so that page faults
/// never land inside a timed iteration.
pub struct HostBuffer {
    map: NonNull<u8>,
    map_len: usize,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain memory owned by this value; access is governed by &/&mut.
unsafe impl Send for HostBuffer {}

impl HostBuffer {
    pub fn new(len: usize) -> Result<Self, String> {
        let huge = len >= HUGE_PAGE;
        let align = if huge { HUGE_PAGE } else { BUFFER_ALIGN };
        let map_len = len.max(1).div_ceil(BUFFER_ALIGN) * BUFFER_ALIGN + if huge { HUGE_PAGE } else { 0 };
        // SAFETY: an anonymous private mapping with no address hint; checked for MAP_FAILED.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(format!(
                "cannot allocate a {len}-byte buffer ({}); reduce -e (maxbytes)",
                std::io::Error::last_os_error()
            ));
        }
        let map = NonNull::new(raw.cast::<u8>()).expect("mmap never returns NULL on success");
        let offset = (align - (raw as usize % align)) % align;
        if huge {
            // Advisory only: without THP (or with it disabled) the buffer simply uses 4 KiB pages.
            // SAFETY: the range lies inside the mapping just created.
            unsafe {
                libc::madvise(
                    raw.cast::<u8>().add(offset).cast(),
                    map_len - offset,
                    libc::MADV_HUGEPAGE,
                )
            };
        }
        // SAFETY: offset < align <= the slack added to map_len.
        let ptr = unsafe { NonNull::new_unchecked(map.as_ptr().add(offset)) };
        let mut buffer = Self { map, map_len, ptr, len };
        // Touch every page now (anonymous pages are mapped lazily).
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
        // SAFETY: the mapping was created in `new` with exactly this address and length.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_zeroed_and_writable() {
        for len in [0, 1, 4096, 5000, HUGE_PAGE + 3] {
            let mut b = HostBuffer::new(len).unwrap();
            assert_eq!(b.len(), len);
            assert_eq!(b.as_mut_ptr() as usize % BUFFER_ALIGN, 0);
            if len >= HUGE_PAGE {
                assert_eq!(b.as_mut_ptr() as usize % HUGE_PAGE, 0);
            }
            assert!(b.as_slice().iter().all(|&x| x == 0));
            b.as_mut_slice().fill(0xab);
            assert!(b.as_slice().iter().all(|&x| x == 0xab));
        }
    }
}
