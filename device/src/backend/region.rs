//! The CPU and WebGPU backends' regions: zeroed, page-aligned host memory.

use crate::error::DeviceError;

/// Zeroed, page-aligned memory for the CPU and WebGPU backends' regions. On Unix it is an anonymous mapping:
/// the kernel hands out zero pages as they are first touched, so opening a device of 100,000 slots neither
/// writes its half gigabyte of rings nor holds pages for the cells no message ever reached. Elsewhere it
/// comes from the allocator, zeroed at once. The parts every actor touches (control blocks, records, states)
/// can be backed by huge pages instead ([`HostRegion::dense`]).
pub(crate) struct HostRegion {
    ptr: *mut u8,
    size: usize,
}

// SAFETY: the region is plain memory; concurrent access follows the protocol described in shared.rs.
unsafe impl Send for HostRegion {}
// SAFETY: as above.
unsafe impl Sync for HostRegion {}

/// The regions' alignment (a page: every shared struct's alignment divides it).
const REGION_ALIGN: usize = 4096;

impl HostRegion {
    pub(crate) fn zeroed(bytes: u64) -> Result<Self, DeviceError> {
        let size = usize::try_from(bytes.max(64))
            .map_err(|_| DeviceError::InvalidConfig(format!("region of {bytes} bytes is too large")))?;
        let ptr =
            Self::map(size).ok_or_else(|| DeviceError::InvalidConfig(format!("could not allocate {bytes} bytes")))?;
        Ok(Self { ptr, size })
    }

    #[cfg(unix)]
    fn map(size: usize) -> Option<*mut u8> {
        // SAFETY: a fresh private anonymous mapping (no address hint, no file): it aliases nothing, and the
        // kernel zero-fills it and aligns it to a page (page sizes are powers of two of at least 4 KiB, so
        // REGION_ALIGN divides them).
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        debug_assert_eq!(ptr as usize % REGION_ALIGN, 0);
        Some(ptr.cast())
    }

    #[cfg(not(unix))]
    fn map(size: usize) -> Option<*mut u8> {
        let layout = std::alloc::Layout::from_size_align(size, REGION_ALIGN).ok()?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(ptr)
    }

    /// Asks the kernel to back bytes `start..end` with transparent huge pages: the arrays with a record for
    /// every slot, which opening the device, every create or every step touches. Page by page, a device of
    /// 100,000 slots takes tens of thousands of faults to start (each write after the zero page's read also
    /// flushes the other cores' TLBs); huge pages take a few dozen. The rings and bulk areas stay out: their pages are touched
    /// only where messages flow. Advice only: where the kernel has no huge pages (or elsewhere than Linux)
    /// nothing changes.
    pub(crate) fn dense(&self, start: u64, end: u64) -> &Self {
        #[cfg(target_os = "linux")]
        {
            const PAGE: u64 = REGION_ALIGN as u64;
            let (start, end) = (start.next_multiple_of(PAGE), (end.min(self.size as u64) / PAGE) * PAGE);
            if end > start {
                // SAFETY: start..end lies inside this mapping (clamped to its size, page-aligned); the advice
                // changes how the kernel backs the pages, never their contents.
                unsafe {
                    libc::madvise(self.ptr.add(start as usize).cast(), (end - start) as usize, libc::MADV_HUGEPAGE);
                }
            }
        }
        #[cfg(not(target_os = "linux"))]
        let _ = (start, end);
        self
    }

    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for HostRegion {
    fn drop(&mut self) {
        #[cfg(unix)]
        // SAFETY: mapped in `map` with this size, unmapped once; nothing refers to the region after its owner
        // (the executors drop their views first).
        unsafe {
            libc::munmap(self.ptr.cast(), self.size);
        }
        #[cfg(not(unix))]
        // SAFETY: allocated in `map` with this layout (checked there), freed once.
        unsafe {
            std::alloc::dealloc(self.ptr, std::alloc::Layout::from_size_align_unchecked(self.size, REGION_ALIGN))
        }
    }
}
