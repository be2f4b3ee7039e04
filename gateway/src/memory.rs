//! Allocation of the packet path's large arrays (conntrack records and index, the neighbour
//! table), backed by transparent huge pages where the kernel offers them.
//!
//! A conntrack lookup touches one random index slot and one random record: with 4 KiB pages
//! a table of a million flows (about 64 MB) misses the TLB on nearly every lookup, and in a
//! virtual machine each miss is a two-dimensional page walk. DPDK keeps its memory in huge
//! pages for this reason; the conntrack arrays live on the ordinary heap, so they ask for
//! transparent huge pages with `madvise(MADV_HUGEPAGE)` before their pages are first
//! written (Linux `Documentation/admin-guide/mm/transhuge.rst`: with `enabled=madvise`, the
//! common default, only advised regions get huge pages, and with `defrag=madvise` a fault
//! in an advised region allocates a huge page directly). The advice is a hint: where the
//! kernel refuses it (no THP, another OS) the arrays are simply built of small pages.

use std::ptr::NonNull;
use std::sync::Arc;

use memmap2::MmapMut;

/// Transparent huge page size on x86-64 and most arm64 kernels.
const HUGE_PAGE: usize = 2 << 20;

/// The smallest array put in huge pages: one of 512 KiB to 2 MiB takes one whole huge page
/// (and up to 2 MiB of small pages beside it, the allocation's padding), as a larger one
/// takes whole huge pages. A gateway's conntrack index at the default capacity (65 536
/// flows: 1.4 MB) was in small pages, and its prefetch in stage 1 was the burst's costliest
/// instruction end to end (docs/optimisation-log.md, "Per poll pass").
const HUGE_FROM: usize = HUGE_PAGE / 4;

/// A fixed-length array of the packet path: on the heap, its elements starting on a
/// huge-page boundary (or less than one element after it, for element sizes that do not
/// divide 2 MiB) when it is at least [`HUGE_FROM`] long, inside an allocation advised for
/// transparent huge pages ([`filled`], [`filled_with`]: every element lies in a huge page
/// where the kernel gives them; a plain boxed slice starts wherever the allocator put it,
/// and its first and last partial huge pages, up to 4 MiB of a neighbour table, stay in
/// small pages); or in a shared file mapping ([`HugeSlice::mapped`], the conntrack tables a
/// restarted gateway adopts). Dereferences to `[T]`; cannot grow.
pub(crate) struct HugeSlice<T> {
    ptr: NonNull<T>,
    len: usize,
    _backing: Backing<T>,
}

/// What keeps a [`HugeSlice`]'s elements alive.
#[allow(dead_code)] // held for ownership only
enum Backing<T> {
    Heap(Box<[T]>),
    Mapped(Arc<MmapMut>),
}

// SAFETY: `HugeSlice<T>` owns its elements (through `_backing`, which keeps the allocation
// or mapping alive and is never shared with another `HugeSlice` over the same bytes), as a
// `Box<[T]>` does.
#[allow(unsafe_code)]
unsafe impl<T: Send> Send for HugeSlice<T> {}
// SAFETY: as above; `&HugeSlice<T>` gives only `&[T]`.
#[allow(unsafe_code)]
unsafe impl<T: Sync> Sync for HugeSlice<T> {}

// The packet path dereferences these arrays several times per packet; a checked slice of
// the storage cost about 45 instructions per established packet (callgrind), so the bounds,
// checked once by the constructors, are not checked again.
impl<T> std::ops::Deref for HugeSlice<T> {
    type Target = [T];
    #[inline(always)]
    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` points to `len` initialised, aligned elements that `_backing` keeps
        // alive and that nothing else references (the constructors).
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr(), self.len)
        }
    }
}

impl<T> std::ops::DerefMut for HugeSlice<T> {
    #[inline(always)]
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`; `&mut self` is the only access.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len)
        }
    }
}

impl<T> HugeSlice<T> {
    /// The `len` elements at `ptr` inside the file mapping `map`.
    ///
    /// # Safety
    /// `ptr` must point to `len` aligned elements of `T` inside `map`, each a valid value of
    /// `T`, that no other `HugeSlice` or reference covers.
    #[allow(unsafe_code)]
    pub(crate) unsafe fn mapped(ptr: NonNull<T>, len: usize, map: Arc<MmapMut>) -> Self {
        HugeSlice { ptr, len, _backing: Backing::Mapped(map) }
    }
}

/// `len` copies of `value` in a [`HugeSlice`]. Allocates and writes the array: O(len);
/// every page is touched now, so the packet path never takes a first-touch fault.
///
/// # Panics
/// If the allocation fails (as `vec!` does).
pub(crate) fn filled<T: Copy>(len: usize, value: T) -> HugeSlice<T> {
    filled_with(len, || value)
}

/// As [`filled`], each element made by `make` (for elements that are not `Copy`, such as
/// atomics). Arrays of at least [`HUGE_FROM`] get extra elements (made by `make` too, never
/// used) so that the used part can start on a huge-page boundary: a huge page's worth, and
/// for an array shorter than a huge page enough that the whole huge page it starts lies
/// inside the allocation.
///
/// # Panics
/// If the allocation fails (as `vec!` does).
pub(crate) fn filled_with<T>(len: usize, make: impl FnMut() -> T) -> HugeSlice<T> {
    let size = std::mem::size_of::<T>().max(1);
    let bytes = len * size;
    let pad = if bytes >= HUGE_PAGE {
        HUGE_PAGE.div_ceil(size)
    } else if bytes >= HUGE_FROM {
        (2 * HUGE_PAGE).div_ceil(size) - len
    } else {
        0
    };
    let mut v: Vec<T> = Vec::with_capacity(len + pad);
    let base = v.as_mut_ptr() as usize;
    advise_huge_pages(base as *mut u8, (len + pad) * size);
    let start = if pad == 0 { 0 } else { (base.next_multiple_of(HUGE_PAGE) - base).div_ceil(size).min(pad) };
    v.extend(std::iter::repeat_with(make).take(len + pad));
    assert!(start.checked_add(len).is_some_and(|end| end <= v.len()), "the used part lies inside the storage");
    let mut storage = v.into_boxed_slice();
    // `start + len <= storage.len()` (asserted): in bounds, and not null.
    let ptr = NonNull::new(storage[start..].as_mut_ptr()).expect("a slice pointer is never null");
    HugeSlice { ptr, len, _backing: Backing::Heap(storage) }
}

/// Advises the huge-page-aligned part of `[start, start + bytes)` for transparent huge
/// pages; does nothing when that part is empty, or off Linux.
fn advise_huge_pages(start: *mut u8, bytes: usize) {
    let begin = (start as usize).next_multiple_of(HUGE_PAGE);
    let end = (start as usize + bytes) / HUGE_PAGE * HUGE_PAGE;
    if end <= begin {
        return;
    }
    #[cfg(target_os = "linux")]
    // SAFETY: `madvise` with MADV_HUGEPAGE changes no memory contents and no mapping the
    // program relies on: it marks the range, which lies inside the allocation `start` points
    // to (rounded inwards to huge-page boundaries), as eligible for huge pages. An error
    // (EINVAL without THP support) leaves the range as it was, and is ignored on purpose.
    #[allow(unsafe_code)]
    unsafe {
        libc::madvise(begin as *mut libc::c_void, end - begin, libc::MADV_HUGEPAGE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filled_slices_hold_the_value_at_every_size() {
        for len in [0, 1, 7, 4096, HUGE_FROM / 8 - 1, HUGE_FROM / 8, HUGE_PAGE / 8 - 1, (HUGE_PAGE / 8) * 3 + 5] {
            let s = filled(len, 0xa5a5_u64);
            assert_eq!(s.len(), len);
            assert!(s.iter().all(|&x| x == 0xa5a5));
            if len * 8 >= HUGE_FROM {
                assert_eq!(s.as_ptr() as usize % HUGE_PAGE, 0, "a large array starts on a huge page");
            }
        }
    }
}
