//! Software prefetch hints shared by the per-packet lookups (conntrack, the table view).
//!
//! A prefetch asks the CPU to start loading a cache line so that a later read of it does not
//! stall; the staged burst (`pipeline::burst`) issues the prefetches of a whole burst before
//! it reads any of them, so their cache misses overlap (DPDK's `rte_prefetch0`, VPP's
//! `CLIB_PREFETCH`). A prefetch never faults and changes no result; on targets other than
//! x86-64 these functions do nothing.

/// Starts loading the cache line holding the first byte of `*value` (`_mm_prefetch` with
/// `_MM_HINT_T0`, as DPDK's `rte_prefetch0`). O(1), one instruction.
#[inline(always)]
pub(crate) fn prefetch<T: ?Sized>(value: &T) {
    line(std::ptr::from_ref(value).cast::<u8>());
}

/// Starts loading every cache line `*value` touches: the line of its first byte and, for a
/// record that straddles a 64-byte boundary (table records are packed at 8-byte offsets:
/// a 40-byte service record or a 20-byte backend record often does), the line of its last
/// byte. At most two prefetch instructions for records up to 64 bytes.
#[inline(always)]
pub(crate) fn prefetch_span<T>(value: &T) {
    let first = std::ptr::from_ref(value).cast::<u8>();
    line(first);
    if size_of::<T>() > 1 {
        // In bounds of `*value`: its last byte.
        line(first.wrapping_add(size_of::<T>() - 1));
    }
}

/// The prefetch instruction for the line holding `p`, which points into a live object.
#[inline(always)]
fn line(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is a hint that reads nothing architecturally visible and
    // cannot fault; the pointer comes from a live reference anyway. SSE, which it needs,
    // is part of the x86-64 baseline.
    #[allow(unsafe_code)]
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
