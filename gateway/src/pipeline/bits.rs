//! Set-bit iteration over the pipeline's masks: a queue's occupied slots
//! (`state::PendingQueue`), a burst chunk's frames of one kind (`burst`). A leaf: it uses
//! nothing of the pipeline, so that the modules around it form no cycle.

/// The indices of the set bits of `mask`, lowest first. O(1) a bit.
#[inline(always)]
pub(super) fn ones(mut mask: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let i = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            i
        })
    })
}
