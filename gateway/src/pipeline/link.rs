//! The link layer of the pipeline: one parse of a received frame's Ethernet header into
//! [`Rx`] (which interface, where the network header starts, which EtherType), and the
//! MAC rewrite of frames answered back to their sender.
//!
//! Every later offset into the frame counts from [`Rx::l2_len`], never from a fixed 14, so
//! a longer link-layer header (an 802.1Q tag) changes this module only.

use super::Meta;
use crate::counters::DropReason;
use crate::host::Host;
use crate::wire::{EtherType, EthernetFrame, MacAddr};

/// What the link-layer parse learned about a received frame; handed to every later step.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rx {
    /// The interface the frame arrived on: an index into [`Host::interfaces`], checked.
    pub iface: u8,
    /// Bytes of the frame in the buffer (`meta.len` clamped to the buffer).
    pub len: usize,
    /// Length of the link-layer header: the offset of the network-layer header, bytes.
    pub l2_len: usize,
    /// The driver's [`Meta::l4_csum_partial`].
    pub l4_csum_partial: bool,
}

/// Parses the link-layer header of the first `meta.len` bytes of `frame`: the receiving
/// interface must exist and the destination MAC must be its own or broadcast.
///
/// # Errors
/// [`DropReason::Truncated`] (shorter than the Ethernet header),
/// [`DropReason::UnknownInterface`] (a driver bug), [`DropReason::NotOurMac`].
#[inline]
pub(super) fn receive(frame: &[u8], meta: &Meta, host: &Host) -> Result<(Rx, EtherType), DropReason> {
    let len = meta.len.min(frame.len());
    let Ok(eth) = EthernetFrame::new_checked(&frame[..len]) else {
        return Err(DropReason::Truncated);
    };
    let Some(iface) = host.interfaces.get(usize::from(meta.iface)) else {
        return Err(DropReason::UnknownInterface);
    };
    let dst_mac = eth.dst_addr();
    if dst_mac != iface.mac && !dst_mac.is_broadcast() {
        return Err(DropReason::NotOurMac);
    }
    let rx = Rx {
        iface: meta.iface,
        len,
        l2_len: EthernetFrame::<&[u8]>::HEADER_LEN,
        l4_csum_partial: meta.l4_csum_partial,
    };
    Ok((rx, eth.ethertype()))
}

/// Addresses the frame in `frame` back to its sender: the destination MAC becomes the
/// received source MAC, the source MAC becomes `own` (the interface's). Used by every
/// answer built in place (ARP reply, echo reply, RST, ICMP error). `frame` holds at least
/// the Ethernet header (checked by [`receive`]).
#[inline]
pub(super) fn turn_around(frame: &mut [u8], own: MacAddr) -> MacAddr {
    let mut e = EthernetFrame::new_unchecked(frame);
    let sender = e.src_addr();
    e.set_dst_addr(sender);
    e.set_src_addr(own);
    sender
}

/// Addresses the frame in `frame` to `dst` from `src` (a forwarded frame).
#[inline]
pub(super) fn address(frame: &mut [u8], dst: MacAddr, src: MacAddr) {
    let mut e = EthernetFrame::new_unchecked(frame);
    e.set_dst_addr(dst);
    e.set_src_addr(src);
}
