//! Memory: the allocator of the whole extension, and giving freed memory back to the system.
//!
//! Large buffers (the columns of big frames) are mapped from the system directly rather than
//! carved from the C allocator's heap: freeing one returns it to the system at once (glibc
//! would raise its mmap threshold after the first large free and keep later ones in its heap,
//! so a process that parsed 100 MB of frames stayed 70 MB larger after dropping them), and
//! growing one moves its pages, not its bytes (`mremap`). Small allocations stay with the C
//! allocator, and after a batch `release_free_memory` hands back what the batch freed there
//! (the response bodies). Elsewhere than Linux everything is the system allocator's.
//!
//! Tried and left out: asking for transparent huge pages (`MADV_HUGEPAGE`) on large mappings.
//! Interleaved runs on the 2-core VM: repeated parses of 20,000 bodies 2-3% faster (137 ms
//! against 140), but the first parse in a process now and then much slower (up to 250 ms
//! against 150), the kernel compacting memory to find huge pages. Measured again later on
//! mappings of 2 MiB and more: 11% faster, but a huge page is taken whole past the last row
//! written, and the 20,000-id fetch's peak grew from 1.26x to 1.33x its frames (bound 1.3x).
//! Also no gain: `MADV_POPULATE_WRITE` on new mappings (the cost is per page, not per fault).

use std::alloc::{GlobalAlloc, Layout, System};

pub struct Allocator;

#[global_allocator]
static ALLOCATOR: Allocator = Allocator;

/// Returns the C allocator's free memory to the system (glibc's `malloc_trim`); a no-op where
/// there is no such call. Costs a walk over the heap: once per batch, not per body.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases pages of free chunks.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(target_os = "linux")]
mod mapped {
    use std::alloc::Layout;

    /// Allocations at least this large are mappings of their own.
    pub const LARGE: usize = 128 << 10;
    const PAGE: usize = 4096;

    pub fn applies(layout: &Layout) -> bool {
        layout.size() >= LARGE && layout.align() <= PAGE
    }

    /// A fresh mapping (zeroed by the system), or null.
    pub fn map(size: usize) -> *mut u8 {
        // SAFETY: an anonymous private mapping at an address of the system's choosing.
        let pointer = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if pointer == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        pointer.cast()
    }

    /// # Safety
    /// `pointer` and `size` are those of a mapping made by `map` or `remap`.
    pub unsafe fn unmap(pointer: *mut u8, size: usize) {
        // SAFETY: the caller passes a mapping of ours, whole (see # Safety).
        unsafe { libc::munmap(pointer.cast(), size) };
    }

    /// Grows or shrinks a mapping, moving it if need be (the kernel moves the pages, not
    /// their bytes); null if the system refuses (a mapping split in several by someone's
    /// `madvise`, say), leaving the mapping as it was.
    ///
    /// # Safety
    /// `pointer` and `size` are those of a mapping made by `map` or `remap`.
    pub unsafe fn remap(pointer: *mut u8, size: usize, new_size: usize) -> *mut u8 {
        // SAFETY: the caller passes a mapping of ours, whole; the kernel keeps it on failure.
        let moved = unsafe { libc::mremap(pointer.cast(), size, new_size, libc::MREMAP_MAYMOVE) };
        if moved == libc::MAP_FAILED {
            return std::ptr::null_mut();
        }
        moved.cast()
    }
}

// SAFETY: each block is freed by the side that made it, told apart by its layout (size and
// alignment are the same at allocation and deallocation, as `GlobalAlloc` requires).
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        #[cfg(target_os = "linux")]
        if mapped::applies(&layout) {
            return mapped::map(layout.size());
        }
        // SAFETY: GlobalAlloc's contract, passed on to the system allocator unchanged.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        #[cfg(target_os = "linux")]
        if mapped::applies(&layout) {
            return mapped::map(layout.size()); // fresh mappings are zeroed
        }
        // SAFETY: as `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        #[cfg(target_os = "linux")]
        if mapped::applies(&layout) {
            // SAFETY: a layout of this size was mapped by `alloc` (the same rule decides both).
            return unsafe { mapped::unmap(pointer, layout.size()) };
        }
        // SAFETY: a layout of this size came from the system allocator (see `alloc`).
        unsafe { System.dealloc(pointer, layout) }
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        #[cfg(target_os = "linux")]
        {
            // SAFETY: `new_size` with the same alignment is a valid layout (GlobalAlloc's rule).
            let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
            let (mapped_now, mapped_after) = (mapped::applies(&layout), mapped::applies(&new_layout));
            if mapped_now && mapped_after {
                // SAFETY: both sizes are mapped sizes, so `pointer` is a whole mapping of ours.
                let remapped = unsafe { mapped::remap(pointer, layout.size(), new_size) };
                if !remapped.is_null() {
                    return remapped;
                }
            }
            if mapped_now || mapped_after {
                // Across the threshold, or a refused remap: a new block, the bytes copied, the
                // old block freed.
                // SAFETY: `new_layout` is valid (above).
                let moved = unsafe { self.alloc(new_layout) };
                if !moved.is_null() {
                    // SAFETY: two live blocks, each at least the copied length; the old one is
                    // freed with the layout it was made with.
                    unsafe {
                        std::ptr::copy_nonoverlapping(pointer, moved, layout.size().min(new_size));
                        self.dealloc(pointer, layout);
                    }
                }
                return moved;
            }
        }
        // SAFETY: neither size is mapped: the block and its growth are the system allocator's.
        unsafe { System.realloc(pointer, layout, new_size) }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn large_buffers_grow_shrink_and_keep_their_bytes() {
        let mut buffer: Vec<u64> = Vec::with_capacity(16);
        for step in 0..3_000_000u64 {
            buffer.push(step); // crosses the mapping threshold and grows by remapping
        }
        buffer.truncate(1000);
        buffer.shrink_to_fit(); // back below the threshold: copied to the C allocator
        assert!(buffer.iter().enumerate().all(|(i, v)| *v == i as u64));
        let zeroed = vec![0u8; 20 << 20];
        assert!(zeroed.iter().all(|b| *b == 0));
        // Growth by remapping, many times over (EFAULT once came from here, with advice that
        // split the mapping).
        let mut big: Vec<u8> = Vec::with_capacity(5 << 20);
        for round in 0..40u8 {
            big.extend(std::iter::repeat_n(round, 3 << 20));
        }
        assert!(big.chunks(3 << 20).enumerate().all(|(round, chunk)| chunk.iter().all(|b| *b == round as u8)));
        super::release_free_memory();
    }
}
