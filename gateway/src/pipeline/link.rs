//! The link layer of the pipeline: one parse of a received frame's Ethernet header and
//! 802.1Q tag into [`Rx`] (which port, which interface, where the network header starts,
//! which EtherType), and the link-layer header of every frame the pipeline sends.
//!
//! Every later offset into the frame counts from [`Rx::l2_len`], never from a fixed 14.
//!
//! # VLANs (IEEE 802.1Q)
//!
//! An interface is a (port, VLAN) pair ([`Host::interface_on`]): an untagged frame, or one
//! with a priority tag only (VID 0), belongs to the port's untagged interface; a frame
//! tagged `0x8100` with VID `v` to the port's interface with `vlan = v`. Frames for an
//! interface the port does not have are dropped as [`DropReason::UnknownVlan`].
//!
//! Stacked tags are dropped as [`DropReason::VlanStacked`]: an 802.1ad service tag
//! (`0x88A8`) outside, or a second tag inside the first. The gateway terminates single
//! customer VLANs; a stacked frame is a provider bridge's (which would have removed the
//! S-tag before a customer port) or a double-tagging VLAN-hopping attempt, and taking it
//! by its outer tag alone would accept it on a VLAN it was not sent on.
//!
//! On egress [`transmit`] writes the header the egress interface needs: its tag (PCP 0,
//! DEI 0, as a Linux VLAN device sends without an egress QoS map) or none. Where the
//! received frame's header had another length the packet moves by the 4 bytes of the tag
//! within the buffer: the frame may grow by 4 bytes (the reason [`super::MIN_BUFFER`]
//! counts a tag); a frame without that room is dropped as [`DropReason::Oversize`].

use super::{Meta, Verdict};
use crate::counters::DropReason;
use crate::host::Host;
use crate::wire::vlan::TAG_LEN;
use crate::wire::{EtherType, EthernetFrame, MacAddr, VlanTag};

/// Length of an untagged Ethernet header.
const ETH_LEN: usize = EthernetFrame::<&[u8]>::HEADER_LEN;

/// The EtherTypes of IPv4 and IPv6 as their two bytes read in native order.
const IPV4_NE: u16 = u16::from_ne_bytes(0x0800u16.to_be_bytes());
const IPV6_NE: u16 = u16::from_ne_bytes(0x86ddu16.to_be_bytes());

/// What the link-layer parse learned about a received frame; handed to every later step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Rx {
    /// The interface the frame belongs to: an index into [`Host::interfaces`], checked.
    pub iface: u8,
    /// Bytes of the frame in the buffer (`meta.len` clamped to the buffer).
    pub len: usize,
    /// Length of the link-layer header (Ethernet and any tag): the offset of the
    /// network-layer header, bytes.
    pub l2_len: usize,
    /// The driver's [`Meta::l4_csum_partial`].
    pub l4_csum_partial: bool,
    /// The driver's [`Meta::l3_csum_good`].
    pub l3_csum_good: bool,
    /// The driver's [`Meta::l4_csum_good`].
    pub l4_csum_good: bool,
}

/// Parses the link-layer header of the first `meta.len` bytes of `frame` received on port
/// `meta.iface`: the destination MAC must be the port's own, broadcast or an IPv6 multicast
/// mapping, and the frame's
/// VLAN must be one of the port's interfaces. Returns the parse and the EtherType of the
/// network layer (inside the tag, if any).
///
/// # Errors
/// [`DropReason::Truncated`] (shorter than the Ethernet header and tag),
/// [`DropReason::UnknownInterface`] (a port the host does not have: a driver bug),
/// [`DropReason::NotOurMac`], [`DropReason::VlanStacked`], [`DropReason::UnknownVlan`].
#[inline]
pub(super) fn receive(frame: &[u8], meta: &Meta, host: &Host) -> Result<(Rx, EtherType), DropReason> {
    match receive_untagged(frame, meta, host) {
        Some(found) => Ok(found),
        None => receive_parsed(frame, meta, host),
    }
}

/// [`receive`] of the common frame, in three compares: untagged IPv4 or IPv6 to the port's
/// own MAC, on a port with an untagged interface — `Some` of what the parse concludes for
/// it (the interface, `l2_len` 14, the EtherType), without the parse; `None` for any other
/// frame, which [`receive_parsed`] decides (a property test compares the two:
/// `pipeline/tests/stage1.rs`). Always inlined, so that a caller's later offsets see the
/// constant `l2_len`.
#[inline(always)]
pub(super) fn receive_untagged(frame: &[u8], meta: &Meta, host: &Host) -> Option<(Rx, EtherType)> {
    let len = meta.len.min(frame.len());
    // `EthernetFrame::new_checked(&frame[..len])`: the header within the frame's length.
    let h: &[u8; ETH_LEN] = frame[..len].first_chunk()?;
    let port = host.ports.get(usize::from(meta.iface))?;
    let iface = port.untagged?;
    // The destination MAC as a 32-bit and a 16-bit word against the port's (compared as
    // six bytes, the compiler built two 48-bit integers first), the EtherType as one word.
    let m = &port.mac.0;
    let differ = (u32::from_ne_bytes([h[0], h[1], h[2], h[3]]) ^ u32::from_ne_bytes([m[0], m[1], m[2], m[3]]))
        | u32::from(u16::from_ne_bytes([h[4], h[5]]) ^ u16::from_ne_bytes([m[4], m[5]]));
    if differ != 0 {
        return None;
    }
    // In native order: no byte swap before the compare.
    let ethertype = match u16::from_ne_bytes([h[12], h[13]]) {
        IPV4_NE => EtherType::Ipv4,
        IPV6_NE => EtherType::Ipv6,
        _ => return None,
    };
    let (l4_csum_partial, l3_csum_good, l4_csum_good) = (meta.l4_csum_partial, meta.l3_csum_good, meta.l4_csum_good);
    Some((Rx { iface, len, l2_len: ETH_LEN, l4_csum_partial, l3_csum_good, l4_csum_good }, ethertype))
}

/// [`receive`] by the full parse: any frame (the common one included, with the same
/// result as [`receive_untagged`]).
///
/// # Errors
/// As [`receive`].
#[inline]
pub(super) fn receive_parsed(frame: &[u8], meta: &Meta, host: &Host) -> Result<(Rx, EtherType), DropReason> {
    let len = meta.len.min(frame.len());
    let Ok(eth) = EthernetFrame::new_checked(&frame[..len]) else {
        return Err(DropReason::Truncated);
    };
    let Some(port) = host.ports.get(usize::from(meta.iface)) else {
        return Err(DropReason::UnknownInterface);
    };
    let (l4_csum_partial, l3_csum_good, l4_csum_good) = (meta.l4_csum_partial, meta.l3_csum_good, meta.l4_csum_good);
    let dst_mac = eth.dst_addr();
    if dst_mac != port.mac && !dst_mac.is_broadcast() && !is_ipv6_multicast(dst_mac) {
        return Err(DropReason::NotOurMac);
    }
    let (vid, ethertype, l2_len) = match eth.ethertype() {
        EtherType::Vlan => {
            let Ok(tag) = VlanTag::new_checked(eth.payload()) else {
                return Err(DropReason::Truncated);
            };
            match tag.ethertype() {
                EtherType::Vlan | EtherType::ServiceVlan => return Err(DropReason::VlanStacked),
                inner => (Some(tag.vlan_id()), inner, ETH_LEN + TAG_LEN),
            }
        }
        EtherType::ServiceVlan => return Err(DropReason::VlanStacked),
        other => (None, other, ETH_LEN),
    };
    // The port found above: no second bounds check.
    let Some(iface) = port.interface(vid) else {
        return Err(DropReason::UnknownVlan);
    };
    Ok((Rx { iface, len, l2_len, l4_csum_partial, l3_csum_good, l4_csum_good }, ethertype))
}

/// Whether `mac` is an IPv6 multicast mapping (`33:33:…`, RFC 2464 § 7), as Neighbor
/// Solicitations to a solicited-node address arrive; the IPv6 step decides what to do
/// with the packet.
#[inline]
fn is_ipv6_multicast(mac: MacAddr) -> bool {
    mac.0[0] == 0x33 && mac.0[1] == 0x33
}

/// Length of the link-layer header of a frame sent on an interface with `vlan`: 14, or 18
/// with a tag.
#[inline]
pub(super) fn header_len(vlan: Option<u16>) -> usize {
    if vlan.is_some() {
        ETH_LEN + TAG_LEN
    } else {
        ETH_LEN
    }
}

/// Writes at the start of `frame` the link-layer header of a frame to `dst` from `src`,
/// tagged with `vlan` (PCP 0, DEI 0) when given, carrying `ethertype`. Returns the header
/// length (14, or 18 with a tag). `frame` must hold it.
#[inline]
pub(super) fn write_header(
    frame: &mut [u8],
    dst: MacAddr,
    src: MacAddr,
    vlan: Option<u16>,
    ethertype: EtherType,
) -> usize {
    let mut eth = EthernetFrame::new_unchecked(&mut *frame);
    eth.set_dst_addr(dst);
    eth.set_src_addr(src);
    match vlan {
        None => {
            eth.set_ethertype(ethertype);
            ETH_LEN
        }
        Some(vid) => {
            eth.set_ethertype(EtherType::Vlan);
            let mut tag = VlanTag::new_unchecked(&mut frame[ETH_LEN..ETH_LEN + TAG_LEN]);
            tag.set_tci(vid);
            tag.set_ethertype(ethertype);
            ETH_LEN + TAG_LEN
        }
    }
}

/// Sends the network-layer packet at `frame[rx.l2_len..][..l3_len]` on interface `out`
/// to `dst`: writes the link-layer header `out` needs (its MAC as source, its tag),
/// moving the packet when that header's length differs from the received one, and returns
/// [`Verdict::Transmit`] on `out`'s port.
///
/// # Errors (as verdicts)
/// [`DropReason::NoRoute`] for an interface the host does not have; [`DropReason::Oversize`]
/// when a tag must be added and the buffer has no room for it.
///
/// The untagged case is inlined into the caller, the rest ([`transmit_general`]) is not: its
/// saved registers cost a new flow's SYN more than the two stores it makes.
#[inline(always)]
pub(super) fn transmit(frame: &mut [u8], rx: &Rx, l3_len: usize, out: u8, dst: MacAddr, host: &Host) -> Verdict {
    // Untagged in and out (the common case): the header keeps its length and EtherType;
    // only the two addresses change ([`write_header`] would write the EtherType back).
    if let Some(o) = host.interfaces.get(usize::from(out)).filter(|o| o.vlan.is_none() && rx.l2_len == ETH_LEN) {
        if let Some(h) = frame.first_chunk_mut::<12>() {
            h[..6].copy_from_slice(&dst.0);
            h[6..].copy_from_slice(&o.mac.0);
            return Verdict::Transmit { iface: o.port, len: ETH_LEN + l3_len };
        }
    }
    transmit_general(frame, rx, l3_len, out, dst, host)
}

/// [`transmit`] of anything but the untagged case: a tag added, removed or changed, or an
/// interface the host does not have.
#[inline(never)]
fn transmit_general(frame: &mut [u8], rx: &Rx, l3_len: usize, out: u8, dst: MacAddr, host: &Host) -> Verdict {
    let Some(o) = host.interfaces.get(usize::from(out)) else {
        return Verdict::Drop(DropReason::NoRoute);
    };
    // The network layer's EtherType: the last field of the received header.
    let ethertype = EtherType::from(u16::from_be_bytes([frame[rx.l2_len - 2], frame[rx.l2_len - 1]]));
    let l2_len = header_len(o.vlan);
    let len = l2_len + l3_len;
    if l2_len != rx.l2_len {
        if len > frame.len() {
            return Verdict::Drop(DropReason::Oversize);
        }
        frame.copy_within(rx.l2_len..rx.l2_len + l3_len, l2_len);
    }
    write_header(frame, dst, o.mac, o.vlan, ethertype);
    Verdict::Transmit { iface: o.port, len }
}

/// Sends the answer built in place at `frame[rx.l2_len..][..l3_len]` back to the sender of
/// the received frame (its source MAC), out the interface it came in by.
#[inline]
pub(super) fn answer(frame: &mut [u8], rx: &Rx, l3_len: usize, host: &Host) -> Verdict {
    let sender = EthernetFrame::new_unchecked(&frame[..ETH_LEN]).src_addr();
    transmit(frame, rx, l3_len, rx.iface, sender, host)
}
