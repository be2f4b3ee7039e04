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
    prefetch_address(std::ptr::from_ref(value).cast::<u8>());
}

/// [`prefetch`] of every cache line `*value` touches (a record at an 8-byte offset often
/// straddles a 64-byte boundary): one prefetch per 64 bytes from its first byte, and one of
/// its last. Two instructions for a value of at most 64 bytes.
#[inline(always)]
pub fn prefetch_lines<T>(value: &T) {
    const LINE: usize = 64;
    let first = std::ptr::from_ref(value).cast::<u8>();
    let size = std::mem::size_of::<T>();
    let mut offset = 0;
    while offset < size {
        prefetch_address(first.wrapping_add(offset));
        offset += LINE;
    }
    prefetch_address(first.wrapping_add(size.saturating_sub(1)));
}

/// The prefetch instruction for the line holding `address`, which lies inside a live value.
#[inline(always)]
fn prefetch_address(address: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is a hint that reads nothing architecturally visible and
    // cannot fault; the address lies inside a live reference anyway. SSE, which it needs,
    // is part of the x86-64 baseline.
    #[allow(unsafe_code)]
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(address.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}
