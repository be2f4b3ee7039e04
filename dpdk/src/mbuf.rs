//! [`Mbuf`]: one owned packet buffer (`struct rte_mbuf`), freed on drop.
//!
//! Contract: an `Mbuf` is the only owner of a *direct, unshared* mbuf (reference count 1,
//! not attached to another buffer) — what `rte_pktmbuf_alloc` and every receive path
//! hand out. That is what makes [`Mbuf::data_mut`] sound. This crate never clones or
//! attaches mbufs. [`data`](Mbuf::data) covers the first segment; with no scatter RX
//! offload and frames no longer than the data room, every received mbuf has one segment.
//!
//! `Mbuf` is `#[repr(transparent)]` over a non-null `*mut rte_mbuf`, so a `Vec<Mbuf>` is
//! the array of pointers `rte_eth_rx_burst` / `rte_eth_tx_burst` take, without copying.

use std::ptr::NonNull;

use crate::ffi;

/// One owned packet buffer.
#[repr(transparent)]
pub struct Mbuf(NonNull<ffi::rte_mbuf>);

// SAFETY: an Mbuf exclusively owns its rte_mbuf (refcnt 1, see the module contract);
// DPDK allows an mbuf to be freed or used from any thread (mempool operations are
// thread-safe), which is how mbufs travel between lcores through rings.
unsafe impl Send for Mbuf {}
// SAFETY: &Mbuf only reads the mbuf's header and data; nothing mutates through a shared
// reference.
unsafe impl Sync for Mbuf {}

const _: () = assert!(std::mem::size_of::<Mbuf>() == std::mem::size_of::<*mut ffi::rte_mbuf>());

/// Checksum status reported by the NIC on receive (`RTE_MBUF_F_RX_*_CKSUM_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxCksum {
    /// The NIC said nothing: verify in software.
    Unknown,
    /// The checksum is wrong.
    Bad,
    /// The checksum is right.
    Good,
    /// The checksum field is not valid (e.g. the NIC did not compute it) but the data is
    /// intact: e.g. a virtio device passing an unchecksummed packet from the same host.
    None,
}

impl RxCksum {
    fn from_flags(flags: u64, mask: u64, bad: u64, good: u64) -> Self {
        match flags & mask {
            0 => Self::Unknown,
            f if f == mask => Self::None,
            f if f == bad => Self::Bad,
            f if f == good => Self::Good,
            _ => Self::Unknown,
        }
    }
}

/// Layer 3 of a packet whose checksums the NIC is asked to compute on transmit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxL3 {
    /// IPv4; `header_cksum`: the NIC computes the IPv4 header checksum (the field must
    /// be 0). Needs the port's `TxOffloads::IPV4_CKSUM` when set.
    Ipv4 {
        /// Ask for the IPv4 header checksum.
        header_cksum: bool,
    },
    /// IPv6 (no header checksum).
    Ipv6,
}

/// Layer-4 checksum the NIC is asked to compute on transmit. The L4 checksum field must
/// hold the pseudo-header checksum (not inverted, without the L4 length for TSO), as DPDK
/// requires (`rte_ipv4_phdr_cksum`); needs the port's `TCP_CKSUM` / `UDP_CKSUM` offload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxL4 {
    /// No L4 checksum offload.
    None,
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
}

/// The TX checksum flags of `ol_flags` this crate manages.
const TX_CKSUM_FLAGS: u64 =
    ffi::RTE_MBUF_F_TX_IPV4 | ffi::RTE_MBUF_F_TX_IPV6 | ffi::RTE_MBUF_F_TX_IP_CKSUM | ffi::RTE_MBUF_F_TX_L4_MASK;

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own the mbuf (module contract); it is not used after this.
        unsafe { ffi::rte_pktmbuf_free(self.0.as_ptr()) }
    }
}

impl std::fmt::Debug for Mbuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mbuf")
            .field("len", &self.len())
            .field("pkt_len", &self.pkt_len())
            .field("segments", &self.segments())
            .field("headroom", &self.headroom())
            .field("ol_flags", &format_args!("{:#x}", self.ol_flags()))
            .finish()
    }
}

impl Mbuf {
    /// Takes ownership of a raw mbuf; `None` for NULL.
    ///
    /// # Safety
    /// `ptr` is NULL or a valid mbuf that the caller owns exclusively and hands over:
    /// direct, reference count 1, not used elsewhere afterwards.
    #[inline]
    pub unsafe fn from_raw(ptr: *mut ffi::rte_mbuf) -> Option<Self> {
        NonNull::new(ptr).map(Self)
    }

    /// Gives up ownership; the caller must eventually free the mbuf (`rte_pktmbuf_free`)
    /// or hand it to DPDK.
    #[inline]
    #[must_use = "the mbuf leaks unless freed or handed to DPDK"]
    pub fn into_raw(self) -> *mut ffi::rte_mbuf {
        let ptr = self.0.as_ptr();
        std::mem::forget(self);
        ptr
    }

    /// The raw mbuf, still owned by `self`.
    #[inline]
    pub fn as_ptr(&self) -> *const ffi::rte_mbuf {
        self.0.as_ptr()
    }

    #[inline]
    fn raw(&self) -> &ffi::rte_mbuf {
        // SAFETY: the mbuf is valid while self lives and is not mutated elsewhere
        // (exclusive ownership).
        unsafe { self.0.as_ref() }
    }

    #[inline]
    fn raw_mut(&mut self) -> &mut ffi::rte_mbuf {
        // SAFETY: as in raw(); &mut self makes the access exclusive.
        unsafe { self.0.as_mut() }
    }

    /// Bytes of data in the first segment (`data_len`).
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.raw().data_len)
    }

    /// Whether the first segment holds no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.raw().data_len == 0
    }

    /// Bytes of data in all segments (`pkt_len`).
    #[inline]
    pub fn pkt_len(&self) -> usize {
        self.raw().pkt_len as usize
    }

    /// Number of segments (1 unless chained).
    #[inline]
    pub fn segments(&self) -> u16 {
        self.raw().nb_segs
    }

    /// Free bytes before the data (`data_off`).
    #[inline]
    pub fn headroom(&self) -> usize {
        usize::from(self.raw().data_off)
    }

    /// Free bytes after the data of the first segment.
    #[inline]
    pub fn tailroom(&self) -> usize {
        let m = self.raw();
        usize::from(m.buf_len).saturating_sub(usize::from(m.data_off) + usize::from(m.data_len))
    }

    /// The data of the first segment.
    #[inline]
    pub fn data(&self) -> &[u8] {
        let m = self.raw();
        // SAFETY: buf_addr + data_off .. + data_len lies inside the mbuf's buffer (an
        // mbuf invariant DPDK maintains and every setter here preserves); the buffer is
        // owned by this mbuf and lives as long as it.
        unsafe {
            std::slice::from_raw_parts(m.buf_addr.cast::<u8>().add(usize::from(m.data_off)), usize::from(m.data_len))
        }
    }

    /// The data of the first segment, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let m = self.raw_mut();
        // SAFETY: as in data(); the buffer is exclusively ours (direct mbuf, refcnt 1,
        // module contract) and &mut self excludes other references.
        unsafe {
            std::slice::from_raw_parts_mut(
                m.buf_addr.cast::<u8>().add(usize::from(m.data_off)),
                usize::from(m.data_len),
            )
        }
    }

    /// The buffer from the data's start to the end of the first segment's buffer
    /// (`data_off .. buf_len`): the data, then the tailroom — what a program that rewrites
    /// a received packet in place may grow it into. The data's length is not changed:
    /// set it with [`set_len`](Self::set_len) afterwards.
    #[inline]
    pub fn room_mut(&mut self) -> &mut [u8] {
        let m = self.raw_mut();
        let len = usize::from(m.buf_len).saturating_sub(usize::from(m.data_off));
        // SAFETY: buf_addr + data_off .. buf_addr + buf_len is the first segment's buffer
        // past the headroom (data_off <= buf_len is an mbuf invariant; the saturating
        // subtraction guards it anyway); the buffer is exclusively ours (direct mbuf,
        // refcnt 1, module contract) and &mut self excludes other references.
        unsafe { std::slice::from_raw_parts_mut(m.buf_addr.cast::<u8>().add(usize::from(m.data_off)), len) }
    }

    /// Frees every mbuf of `batch` with one `rte_pktmbuf_free_bulk` (mempool puts batched
    /// per pool, instead of one `rte_pktmbuf_free` each) and empties it.
    #[inline]
    pub fn free_bulk(batch: &mut Vec<Mbuf>) {
        let n = batch.len();
        if n == 0 {
            return;
        }
        // SAFETY: the n elements are owned mbufs laid out as *mut rte_mbuf (Mbuf is
        // transparent); the length is set to 0 first so none is dropped again, and DPDK
        // takes ownership of all of them (a u32 count: a Vec of mbufs never holds 2^32).
        unsafe {
            batch.set_len(0);
            ffi::rte_pktmbuf_free_bulk(batch.as_mut_ptr().cast::<*mut ffi::rte_mbuf>(), n as u32);
        }
    }

    /// Sets the length of a one-segment mbuf's data (`data_len` and `pkt_len`), keeping
    /// where it starts. Bytes exposed by growing are whatever the buffer held. Returns
    /// false (and changes nothing) for chained mbufs or when `len` exceeds the room after
    /// the data's start.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> bool {
        let m = self.raw_mut();
        if m.nb_segs != 1 || len > usize::from(m.buf_len).saturating_sub(usize::from(m.data_off)) {
            return false;
        }
        // Fits in u16: bounded by buf_len above.
        m.data_len = len as u16;
        m.pkt_len = len as u32;
        true
    }

    /// Appends `len` bytes at the end of the packet (last segment) and returns them;
    /// `None` (nothing changed) when the tailroom is too small.
    #[inline]
    pub fn append(&mut self, len: usize) -> Option<&mut [u8]> {
        let n = u16::try_from(len).ok()?;
        // SAFETY: we own the mbuf exclusively; rte_pktmbuf_append returns NULL or a
        // pointer to `len` bytes inside the last segment's buffer, now part of the data.
        let p = unsafe { ffi::rte_pktmbuf_append(self.0.as_ptr(), n) };
        // SAFETY: p (if non-null) points to len bytes owned by this mbuf, borrowed mutably
        // through &mut self.
        NonNull::new(p.cast::<u8>()).map(|p| unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) })
    }

    /// Appends a copy of `bytes`; false (nothing changed) when it does not fit.
    #[inline]
    pub fn extend_from_slice(&mut self, bytes: &[u8]) -> bool {
        match self.append(bytes.len()) {
            Some(room) => {
                room.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }

    /// Prepends `len` bytes (from the headroom) and returns them; `None` (nothing
    /// changed) when the headroom is too small.
    #[inline]
    pub fn prepend(&mut self, len: usize) -> Option<&mut [u8]> {
        let n = u16::try_from(len).ok()?;
        // SAFETY: as in append(); rte_pktmbuf_prepend returns NULL or the new data start.
        let p = unsafe { ffi::rte_pktmbuf_prepend(self.0.as_ptr(), n) };
        // SAFETY: p (if non-null) points to the first `len` bytes of our data.
        NonNull::new(p.cast::<u8>()).map(|p| unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), len) })
    }

    /// Removes `len` bytes from the front of the data; false (nothing changed) when the
    /// first segment is shorter.
    #[inline]
    pub fn adj(&mut self, len: usize) -> bool {
        let Ok(n) = u16::try_from(len) else { return false };
        // SAFETY: we own the mbuf exclusively; rte_pktmbuf_adj checks the length.
        !unsafe { ffi::rte_pktmbuf_adj(self.0.as_ptr(), n) }.is_null()
    }

    /// Removes `len` bytes from the end of the data; false (nothing changed) when the last
    /// segment is shorter.
    #[inline]
    pub fn trim(&mut self, len: usize) -> bool {
        let Ok(n) = u16::try_from(len) else { return false };
        // SAFETY: we own the mbuf exclusively; rte_pktmbuf_trim checks the length.
        unsafe { ffi::rte_pktmbuf_trim(self.0.as_ptr(), n) == 0 }
    }

    /// Resets the mbuf to a fresh, empty one-segment buffer (headroom restored, offload
    /// flags cleared), as allocated.
    #[inline]
    pub fn reset(&mut self) {
        // SAFETY: we own the mbuf exclusively; for a one-segment direct mbuf (module
        // contract) resetting leaves it valid. A chain is first reduced: the next
        // segments would otherwise leak, so reset only the first when not chained.
        unsafe {
            if (*self.0.as_ptr()).nb_segs == 1 {
                ffi::rte_pktmbuf_reset(self.0.as_ptr());
            } else {
                // Free the tail of the chain, keep the head.
                let next = (*self.0.as_ptr()).next;
                (*self.0.as_ptr()).next = std::ptr::null_mut();
                ffi::rte_pktmbuf_free(next);
                ffi::rte_pktmbuf_reset(self.0.as_ptr());
            }
        }
    }

    /// The port the mbuf was received on (`port`).
    #[inline]
    pub fn port(&self) -> u16 {
        self.raw().port
    }

    /// The offload flags (`ol_flags`, `RTE_MBUF_F_*`).
    #[inline]
    pub fn ol_flags(&self) -> u64 {
        self.raw().ol_flags
    }

    /// The RSS hash the NIC computed, when it reported one (`RTE_MBUF_F_RX_RSS_HASH`).
    #[inline]
    pub fn rss_hash(&self) -> Option<u32> {
        let m = self.raw();
        if m.ol_flags & u64::from(ffi::RTE_MBUF_F_RX_RSS_HASH) == 0 {
            return None;
        }
        // SAFETY: reading the `rss` member of the hash union: plain u32 data, any bit
        // pattern is valid.
        Some(unsafe { m.__bindgen_anon_2.hash.rss })
    }

    /// The VLAN tag control information the device took out of the frame on receive
    /// (`RTE_MBUF_F_RX_VLAN_STRIPPED`: the TCI is in `vlan_tci`, the bytes lack the tag);
    /// `None` when the frame holds its tag, or had none. (DPDK does not keep the TPID;
    /// devices strip 802.1Q `0x8100` tags.)
    #[inline]
    pub fn rx_vlan_stripped(&self) -> Option<u16> {
        let m = self.raw();
        (m.ol_flags & u64::from(ffi::RTE_MBUF_F_RX_VLAN_STRIPPED) != 0).then_some(m.vlan_tci)
    }

    /// IPv4 header checksum status on receive.
    #[inline]
    pub fn rx_ip_cksum(&self) -> RxCksum {
        RxCksum::from_flags(
            self.ol_flags(),
            u64::from(ffi::RTE_MBUF_F_RX_IP_CKSUM_MASK),
            u64::from(ffi::RTE_MBUF_F_RX_IP_CKSUM_BAD),
            u64::from(ffi::RTE_MBUF_F_RX_IP_CKSUM_GOOD),
        )
    }

    /// L4 (TCP/UDP) checksum status on receive.
    #[inline]
    pub fn rx_l4_cksum(&self) -> RxCksum {
        RxCksum::from_flags(
            self.ol_flags(),
            u64::from(ffi::RTE_MBUF_F_RX_L4_CKSUM_MASK),
            u64::from(ffi::RTE_MBUF_F_RX_L4_CKSUM_BAD),
            u64::from(ffi::RTE_MBUF_F_RX_L4_CKSUM_GOOD),
        )
    }

    /// Asks the NIC to compute checksums on transmit: sets the TX checksum flags of
    /// `ol_flags` (replacing earlier ones) and the header lengths `l2_len` (Ethernet,
    /// VLAN tags included) and `l3_len` (IP header, options included) in bytes.
    ///
    /// # Panics
    /// When `l2_len > 127` or `l3_len > 511` (the widths of DPDK's fields).
    #[inline]
    pub fn request_tx_cksum(&mut self, l3: TxL3, l4: TxL4, l2_len: u8, l3_len: u16) {
        assert!(l2_len < 128 && l3_len < 512, "l2_len {l2_len} / l3_len {l3_len} exceed rte_mbuf's 7/9-bit fields");
        let mut flags = match l3 {
            TxL3::Ipv4 { header_cksum: true } => ffi::RTE_MBUF_F_TX_IPV4 | ffi::RTE_MBUF_F_TX_IP_CKSUM,
            TxL3::Ipv4 { header_cksum: false } => ffi::RTE_MBUF_F_TX_IPV4,
            TxL3::Ipv6 => ffi::RTE_MBUF_F_TX_IPV6,
        };
        flags |= match l4 {
            TxL4::None => 0,
            TxL4::Tcp => ffi::RTE_MBUF_F_TX_TCP_CKSUM,
            TxL4::Udp => ffi::RTE_MBUF_F_TX_UDP_CKSUM,
        };
        let m = self.raw_mut();
        m.ol_flags = (m.ol_flags & !TX_CKSUM_FLAGS) | flags;
        // SAFETY: the tx_offload union's bit-field view is plain integer data; writing
        // through it is how DPDK's own rte_mbuf_tx_offload helpers set the lengths.
        let lens = unsafe { &mut m.__bindgen_anon_3.__bindgen_anon_1 };
        lens.set_l2_len(u64::from(l2_len));
        lens.set_l3_len(u64::from(l3_len));
    }

    /// The header lengths set for TX offloads: (`l2_len`, `l3_len`).
    #[inline]
    pub fn tx_header_lens(&self) -> (u8, u16) {
        // SAFETY: reading plain integer bit-fields of the tx_offload union.
        let lens = unsafe { &self.raw().__bindgen_anon_3.__bindgen_anon_1 };
        (lens.l2_len() as u8, lens.l3_len() as u16)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mempool::{Mempool, DEFAULT_DATA_ROOM, HEADROOM};
    use crate::testing;
    use crate::Error;

    fn pool(name: &str, n: u32) -> Mempool {
        Mempool::new(testing::eal(), name, n, 0, DEFAULT_DATA_ROOM, None).expect("mempool")
    }

    #[test]
    fn mbufs_return_to_their_pool_when_dropped() {
        let p = pool("t_mbuf_free", 255);
        assert_eq!((p.in_use(), p.available()), (0, 255));
        let one = p.alloc().expect("one mbuf");
        assert_eq!(p.in_use(), 1);
        let mut many = Vec::new();
        p.alloc_bulk(&mut many, 100).expect("100 mbufs");
        assert_eq!((many.len(), p.in_use()), (100, 101));
        many.truncate(40);
        assert_eq!(p.in_use(), 41);
        drop(many);
        drop(one);
        assert_eq!((p.in_use(), p.available()), (0, 255));
    }

    #[test]
    fn alloc_bulk_is_all_or_nothing() {
        let p = pool("t_mbuf_bulk", 63);
        let mut v = vec![p.alloc().unwrap()];
        let err = p.alloc_bulk(&mut v, 63).unwrap_err();
        assert!(matches!(err, Error::Dpdk { .. }), "{err}");
        assert_eq!((v.len(), p.in_use()), (1, 1));
        p.alloc_bulk(&mut v, 62).unwrap();
        assert!(p.alloc().is_none(), "the pool is empty");
        drop(v);
        assert_eq!(p.in_use(), 0);
    }

    #[test]
    fn data_grows_and_shrinks_at_both_ends() {
        let p = pool("t_mbuf_data", 15);
        let mut m = p.alloc().unwrap();
        let room = usize::from(DEFAULT_DATA_ROOM - HEADROOM);
        assert_eq!((m.len(), m.headroom(), m.tailroom(), m.segments()), (0, usize::from(HEADROOM), room, 1));
        assert!(m.is_empty());
        m.append(4).unwrap().copy_from_slice(&[1, 2, 3, 4]);
        assert!(m.extend_from_slice(&[5, 6]));
        assert_eq!(m.data(), &[1, 2, 3, 4, 5, 6]);
        m.prepend(2).unwrap().copy_from_slice(&[0xee, 0xff]);
        assert_eq!(m.data(), &[0xee, 0xff, 1, 2, 3, 4, 5, 6]);
        assert_eq!((m.pkt_len(), m.headroom()), (8, usize::from(HEADROOM) - 2));
        assert!(m.adj(2));
        assert!(m.trim(2));
        assert_eq!(m.data(), &[1, 2, 3, 4]);
        m.data_mut()[0] = 9;
        assert_eq!(m.data(), &[9, 2, 3, 4]);
        assert!(!m.trim(5), "trim beyond the data");
        assert!(!m.adj(5), "adj beyond the data");
        assert!(m.append(room).is_none(), "append beyond the tailroom");
        assert!(m.prepend(usize::from(HEADROOM) + 1).is_none(), "prepend beyond the headroom");
        assert_eq!(m.data(), &[9, 2, 3, 4], "failed calls change nothing");
        assert!(m.set_len(60));
        assert_eq!((m.len(), m.pkt_len()), (60, 60));
        assert!(!m.set_len(room + 1));
        assert!(m.set_len(room));
        m.reset();
        assert_eq!((m.len(), m.headroom(), m.ol_flags()), (0, usize::from(HEADROOM), 0));
    }

    #[test]
    fn the_room_runs_to_the_end_of_the_buffer_and_bulk_free_returns_everything() {
        let p = pool("t_mbuf_room", 63);
        let mut m = p.alloc().unwrap();
        assert!(m.extend_from_slice(&[1, 2, 3]));
        let room = usize::from(DEFAULT_DATA_ROOM - HEADROOM);
        assert_eq!(m.room_mut().len(), room);
        assert_eq!(&m.room_mut()[..3], &[1, 2, 3], "the room starts with the data");
        m.room_mut()[3] = 4;
        assert!(m.set_len(4));
        assert_eq!(m.data(), &[1, 2, 3, 4]);
        m.prepend(4).unwrap().fill(0);
        assert_eq!(m.room_mut().len(), room + 4, "a prepend moves the start");
        let mut v = vec![m];
        p.alloc_bulk(&mut v, 40).unwrap();
        assert_eq!(p.in_use(), 41);
        Mbuf::free_bulk(&mut v);
        assert!(v.is_empty());
        assert_eq!(p.in_use(), 0);
        Mbuf::free_bulk(&mut v);
    }

    #[test]
    fn a_stripped_vlan_tag_is_read_only_with_its_flag() {
        let p = pool("t_mbuf_vlan", 15);
        let mut m = p.alloc().unwrap();
        assert_eq!(m.rx_vlan_stripped(), None);
        m.raw_mut().vlan_tci = 100;
        assert_eq!(m.rx_vlan_stripped(), None, "vlan_tci without RTE_MBUF_F_RX_VLAN_STRIPPED");
        m.raw_mut().ol_flags |= u64::from(ffi::RTE_MBUF_F_RX_VLAN) | u64::from(ffi::RTE_MBUF_F_RX_VLAN_STRIPPED);
        assert_eq!(m.rx_vlan_stripped(), Some(100));
    }

    #[test]
    fn tx_checksum_requests_set_flags_and_header_lengths() {
        let p = pool("t_mbuf_txck", 15);
        let mut m = p.alloc().unwrap();
        m.request_tx_cksum(TxL3::Ipv4 { header_cksum: true }, TxL4::Tcp, 14, 20);
        let f = m.ol_flags();
        assert_eq!(f & ffi::RTE_MBUF_F_TX_L4_MASK, ffi::RTE_MBUF_F_TX_TCP_CKSUM);
        assert_ne!(f & ffi::RTE_MBUF_F_TX_IPV4, 0);
        assert_ne!(f & ffi::RTE_MBUF_F_TX_IP_CKSUM, 0);
        assert_eq!(m.tx_header_lens(), (14, 20));
        // Replacing the request replaces the flags.
        m.request_tx_cksum(TxL3::Ipv4 { header_cksum: false }, TxL4::Udp, 18, 24);
        let f = m.ol_flags();
        assert_eq!(f & ffi::RTE_MBUF_F_TX_L4_MASK, ffi::RTE_MBUF_F_TX_UDP_CKSUM);
        assert_eq!(f & ffi::RTE_MBUF_F_TX_IP_CKSUM, 0);
        assert_eq!(m.tx_header_lens(), (18, 24));
        m.request_tx_cksum(TxL3::Ipv6, TxL4::None, 14, 40);
        assert_eq!(m.ol_flags() & TX_CKSUM_FLAGS, ffi::RTE_MBUF_F_TX_IPV6);
        assert_eq!(m.rx_l4_cksum(), RxCksum::Unknown);
        assert_eq!(m.rss_hash(), None);
    }

    #[test]
    fn into_raw_and_from_raw_hand_over_ownership() {
        let p = pool("t_mbuf_raw", 15);
        let raw = p.alloc().unwrap().into_raw();
        assert_eq!(p.in_use(), 1);
        // SAFETY: raw came from into_raw and is not used again.
        let m = unsafe { Mbuf::from_raw(raw) }.unwrap();
        drop(m);
        assert_eq!(p.in_use(), 0);
        // SAFETY: NULL is allowed.
        assert!(unsafe { Mbuf::from_raw(std::ptr::null_mut()) }.is_none());
    }

    #[test]
    fn mempool_names_are_checked() {
        let eal = testing::eal();
        let long = "x".repeat(crate::mempool::MAX_NAME_LEN + 1);
        assert!(matches!(Mempool::new(eal, &long, 15, 0, DEFAULT_DATA_ROOM, None), Err(Error::InvalidArgument(_))));
        let _a = pool("t_mbuf_dup", 15);
        let err = Mempool::new(eal, "t_mbuf_dup", 15, 0, DEFAULT_DATA_ROOM, None).unwrap_err();
        assert!(err.to_string().contains("rte_pktmbuf_pool_create"), "{err}");
    }
}
