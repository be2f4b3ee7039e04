//! The cache prefetch hint the burst path issues ahead of its lookups (conntrack index and
//! records, neighbour slots, table records): [`prefetch`], DPDK's `rte_prefetch0`.
//!
//! # Contract
//!
//! A prefetch changes no result: it reads nothing architecturally visible, cannot fault and
//! costs one instruction; on targets other than x86-64 it does nothing.

/// Starts loading the cache line holding `*value` into every cache level (`_mm_prefetch`
/// with `_MM_HINT_T0`, as DPDK's `rte_prefetch0`), so a later read of it does not stall.
/// Never faults and changes no result.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is a hint that reads nothing architecturally visible and
    // cannot fault; the pointer comes from a live reference anyway. SSE, which it needs,
    // is part of the x86-64 baseline.
    #[allow(unsafe_code)]
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(std::ptr::from_ref(value).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
