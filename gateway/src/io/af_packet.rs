//! AF_PACKET driver: one socket per (worker, interface), with memory-mapped `TPACKET_V3` rings.
//!
//! Contract: an [`AfPacketSocket`] owns one `AF_PACKET`/`SOCK_RAW` socket bound to one
//! interface and a single shared mapping holding its receive ring (`TPACKET_V3`, block
//! based) followed by its transmit ring (frame based, as `TPACKET_V2`; `TPACKET_V3`
//! transmit rings need Linux ≥ 4.11). After [`AfPacketSocket::open`] the data path makes
//! no system call except [`AfPacketSocket::tx_flush`] (one `sendto` per burst that queued
//! frames) and, for idle workers, [`AfPacketSocket::wait_readable`]. Frames are whole
//! Ethernet frames, without the 802.1Q tag when the kernel stripped one (it is reported in
//! [`RxFlags::vlan_tci`]) — except those of [`AfPacketSocket::rx_frames`], which hands the
//! worker frames **in the ring** to rewrite in place, with the tag put back and room to
//! grow, and holds their blocks until [`AfPacketSocket::release_rx`].
//!
//! The ring protocol follows the kernel's `Documentation/networking/packet_mmap.rst`:
//! a receive block belongs to user space while its `block_status` has `TP_STATUS_USER`
//! (read with Acquire), and is handed back by storing `TP_STATUS_KERNEL` (Release) once
//! every frame in it has been consumed; a transmit slot may be written while its
//! `tp_status` is `TP_STATUS_AVAILABLE` (Acquire) and is handed to the kernel by storing
//! `TP_STATUS_SEND_REQUEST` (Release) after its contents and `tp_len`.
//!
//! Several sockets on one interface share its traffic through a `PACKET_FANOUT` group with
//! the classic BPF program of [`super::fanout::steering_program`] (see
//! [`AfPacketSocket::join_fanout`]).
//!
//! Socket options set by `open`, and why:
//! - `PACKET_VERSION = TPACKET_V3`: block-based receive ring (batched wake-ups, variable-size frames);
//! - `PACKET_LOSS = 1`: a malformed transmit frame is discarded by the kernel (slot made
//!   available again) instead of stopping the transmit ring at that slot;
//! - `PACKET_QDISC_BYPASS = 1`: frames go straight to the driver's queue, like DPDK would;
//! - `PACKET_IGNORE_OUTGOING = 1`: the socket does not read back its own transmissions
//!   (a fanout group needs `PACKET_FANOUT_FLAG_IGNORE_OUTGOING` for the same effect, which
//!   `join_fanout` sets);
//! - `SO_SNDBUFFORCE` (or `SO_SNDBUF`) to the transmit ring's size, best effort, so the
//!   socket's send buffer does not throttle a full transmit ring.

// This module is the boundary to the kernel: socket options and ioctls through raw
// pointers, one `mmap` shared with the kernel, and atomic accesses to ring headers the
// kernel writes concurrently. Every unsafe block states why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use libc::{c_int, c_void, sock_filter, socklen_t};

use crate::pipeline::MIN_BUFFER;

/// Length of an Ethernet header (destination, source, EtherType).
const ETH_HLEN: usize = 14;
/// `TP_STATUS_CSUM_VALID` (`<linux/if_packet.h>`, Linux 3.17).
const TP_STATUS_CSUM_VALID: u32 = 1 << 7;
/// Length of one 802.1Q tag, which the kernel allows on top of the MTU.
const VLAN_HLEN: usize = 4;

/// Offset of `block_status` in a `tpacket_block_desc` (<linux/if_packet.h>).
const BLOCK_STATUS_OFF: usize =
    offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, block_status);
/// Offset of `num_pkts` in a `tpacket_block_desc`.
const BLOCK_NUM_PKTS_OFF: usize =
    offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, num_pkts);
/// Offset of `offset_to_first_pkt` in a `tpacket_block_desc`.
const BLOCK_FIRST_PKT_OFF: usize =
    offset_of!(libc::tpacket_block_desc, hdr) + offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt);
/// Offset of `tp_status` in a `tpacket3_hdr`.
const TP_STATUS_OFF: usize = offset_of!(libc::tpacket3_hdr, tp_status);
/// Where a transmit frame's data starts in its slot: the kernel reads it at
/// `tp_hdrlen - sizeof(struct sockaddr_ll)` (`tpacket_parse_header` in
/// net/packet/af_packet.c; `PACKET_TX_HAS_OFF` is not used), i.e. right after the aligned
/// `tpacket3_hdr`.
const TX_DATA_OFF: usize = libc::TPACKET3_HDRLEN - size_of::<libc::sockaddr_ll>();

const _: () = assert!(BLOCK_STATUS_OFF == 8 && BLOCK_NUM_PKTS_OFF == 12 && BLOCK_FIRST_PKT_OFF == 16);
const _: () = assert!(size_of::<libc::tpacket3_hdr>() == 48 && TP_STATUS_OFF == 20);
const _: () = assert!(TX_DATA_OFF == 48);

/// Geometry of the rings of one socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Receive block size in bytes: a multiple of the page size. A block is handed to user
    /// space when full or when the retire timeout expires; the largest frame that can be
    /// received whole is a little under one block.
    pub block_size: u32,
    /// Number of receive blocks.
    pub block_count: u32,
    /// Transmit slot size in bytes (a multiple of 16, at most `block_size`): the largest
    /// frame [`AfPacketSocket::tx_send`] accepts is `frame_size - 48`, and never more than
    /// the interface's MTU + 18 (Ethernet header and one 802.1Q tag).
    pub frame_size: u32,
    /// Receive block retire timeout in milliseconds: how long a partly filled block waits
    /// before user space sees it (the latency floor when traffic is light). 0 lets the
    /// kernel derive it from the link speed.
    pub retire_timeout_ms: u32,
    /// Number of transmit slots requested (rounded up to fill the last transmit block).
    pub tx_frame_count: u32,
}

impl Default for RingConfig {
    /// 8 receive blocks of 1 MiB, 2048-byte transmit slots (1514-byte frames fit), 1 ms
    /// retire timeout, 1024 transmit slots.
    fn default() -> Self {
        Self { block_size: 1 << 20, block_count: 8, frame_size: 2048, retire_timeout_ms: 1, tx_frame_count: 1024 }
    }
}

/// What the kernel says about a received frame besides its bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxFlags {
    /// `TP_STATUS_CSUMNOTREADY`: the frame was generated locally with checksum offload
    /// pending; its L4 checksum field holds only the pseudo-header sum.
    pub csum_not_ready: bool,
    /// `TP_STATUS_CSUM_VALID`: the kernel (or the NIC, `CHECKSUM_UNNECESSARY`) verified the
    /// frame's L4 checksum.
    pub csum_valid: bool,
    /// The frame was cut to fit the ring (`tp_snaplen < tp_len`): the slice is a prefix.
    pub truncated: bool,
    /// `TP_STATUS_VLAN_VALID`: the frame carried an 802.1Q tag, which the kernel removed
    /// from the bytes (hardware or software VLAN acceleration); this is its TCI.
    pub vlan_tci: Option<u16>,
    /// The removed tag's TPID: `tp_vlan_tpid` when the kernel marks it valid
    /// (`TP_STATUS_VLAN_TPID_VALID`, Linux ≥ 3.14: `0x8100` or `0x88A8`), else `0x8100`;
    /// 0 without [`Self::vlan_tci`].
    pub vlan_tpid: u16,
}

/// A received frame in the receive ring (or in a spare buffer of the socket), handed out by
/// [`AfPacketSocket::rx_frames`] to be rewritten in place: `as_mut()` is the frame's bytes
/// and the room after them. Valid until the socket's next
/// [`release_rx`](AfPacketSocket::release_rx) (see the safety contract there).
#[derive(Debug)]
pub struct RingFrame {
    data: NonNull<u8>,
    room: usize,
}

impl AsMut<[u8]> for RingFrame {
    #[inline]
    fn as_mut(&mut self) -> &mut [u8] {
        // SAFETY: `rx_frames` hands out `room` writable bytes at `data` that nothing else
        // refers to (a frame's part of a block the process holds, or a spare slot), valid
        // until the release its caller promised not to reach while this frame lives.
        unsafe { std::slice::from_raw_parts_mut(self.data.as_ptr(), self.room) }
    }
}

impl AsRef<[u8]> for RingFrame {
    #[inline]
    fn as_ref(&self) -> &[u8] {
        // SAFETY: as in `as_mut`, shared.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.room) }
    }
}

/// Spare buffers of a socket beyond one per receive block (see [`AfPacketSocket::rx_frames`]).
const SPARE_EXTRA: usize = 8;

/// Ring sizes derived from a [`RingConfig`] and the page size.
#[derive(Clone, Copy, Debug)]
struct Layout {
    rx_block_size: usize,
    rx_block_count: usize,
    rx_frame_size: usize,
    tx_block_size: usize,
    tx_block_count: usize,
    tx_frame_size: usize,
    tx_frames_per_block: usize,
}

impl Layout {
    /// Validates `cfg` with the kernel's rules (`packet_set_ring`), with a message naming
    /// the field at fault.
    fn new(cfg: &RingConfig, page: usize) -> Result<Self, String> {
        let block = cfg.block_size as usize;
        let frame = cfg.frame_size as usize;
        if block == 0 || !block.is_multiple_of(page) {
            return Err(format!("block_size {block} is not a positive multiple of the page size {page}"));
        }
        if cfg.block_count == 0 {
            return Err("block_count is 0".into());
        }
        if cfg.block_size.checked_mul(cfg.block_count).is_none() {
            return Err(format!("block_size × block_count ({block} × {}) exceeds 4 GiB", cfg.block_count));
        }
        if !frame.is_multiple_of(libc::TPACKET_ALIGNMENT) || frame < TX_DATA_OFF + ETH_HLEN || frame > block {
            return Err(format!(
                "frame_size {frame} must be a multiple of {} in {}..={block}",
                libc::TPACKET_ALIGNMENT,
                TX_DATA_OFF + ETH_HLEN
            ));
        }
        if cfg.tx_frame_count == 0 {
            return Err("tx_frame_count is 0".into());
        }
        // Transmit blocks of (at least) four slots, whole pages.
        let tx_block_size = (frame * 4).div_ceil(page) * page;
        let tx_frames_per_block = tx_block_size / frame;
        let tx_block_count = (cfg.tx_frame_count as usize).div_ceil(tx_frames_per_block);
        if u32::try_from(tx_block_size * tx_block_count).is_err() {
            return Err(format!("tx_frame_count {} is too large", cfg.tx_frame_count));
        }
        Ok(Self {
            rx_block_size: block,
            rx_block_count: cfg.block_count as usize,
            rx_frame_size: frame,
            tx_block_size,
            tx_block_count,
            tx_frame_size: frame,
            tx_frames_per_block,
        })
    }

    fn rx_len(&self) -> usize {
        self.rx_block_size * self.rx_block_count
    }

    fn tx_len(&self) -> usize {
        self.tx_block_size * self.tx_block_count
    }

    fn tx_frame_count(&self) -> usize {
        self.tx_frames_per_block * self.tx_block_count
    }
}

/// One `AF_PACKET` socket bound to one interface, with its receive and transmit rings.
///
/// Owned by one worker thread (`Send`, not `Sync`). Dropping it unmaps the rings and
/// closes the socket (which leaves its fanout group).
pub struct AfPacketSocket {
    fd: OwnedFd,
    ifname: String,
    ifindex: i32,
    mac: [u8; 6],
    /// The mapping: receive ring at offset 0, transmit ring at `layout.rx_len()`.
    ring: NonNull<u8>,
    ring_len: usize,
    layout: Layout,
    /// Receive block being consumed.
    rx_block: usize,
    /// Frames of `rx_block` already delivered.
    rx_frame_idx: u32,
    /// Offset in `rx_block` of the next frame to deliver (valid when `rx_frame_idx > 0`).
    rx_frame_off: usize,
    /// The header of that frame, read before the frame delivered ahead of it could grow
    /// over it ([`rx_frames`](Self::rx_frames)).
    rx_next_hdr: Option<libc::tpacket3_hdr>,
    /// Blocks before `rx_block` whose frames were all delivered by `rx_frames` but which
    /// are not handed back yet ([`release_rx`](Self::release_rx)).
    rx_held: usize,
    /// Buffers for frames `rx_frames` cannot hand over in the ring (too little room after
    /// them): `spare_count` slots of `spare_len` bytes (a leaked `Box<[u8]>`, freed in
    /// `Drop`, so that the frames' pointers into it are the only references), `spare_used`
    /// of them taken.
    spare: NonNull<u8>,
    spare_count: usize,
    spare_len: usize,
    spare_used: usize,
    /// Next transmit slot to fill.
    tx_head: usize,
    /// A slot was marked `TP_STATUS_SEND_REQUEST` and may not have been sent yet.
    tx_pending: bool,
    /// The largest frame `tx_send` accepts.
    tx_max_len: usize,
}

// SAFETY: the socket exclusively owns its file descriptor, mapping and spare buffers; nothing in it is tied
// to the creating thread (no thread-local state, no reference shared with another value).
// Moving it to a worker thread moves that ownership with it. It is not `Sync` (the raw
// pointer keeps it so): the ring cursors must have a single user.
unsafe impl Send for AfPacketSocket {}

impl std::fmt::Debug for AfPacketSocket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacketSocket")
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("fd", &self.fd.as_raw_fd())
            .field("layout", &self.layout)
            .finish_non_exhaustive()
    }
}

/// An error that says which interface and which operation failed, keeping the OS error's kind.
fn context(ifname: &str, what: &str, err: io::Error) -> io::Error {
    io::Error::new(err.kind(), format!("AF_PACKET socket on interface {ifname:?}: {what}: {err}"))
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// `setsockopt(fd, level, name, value, sizeof value)`.
fn setsockopt<T>(fd: &OwnedFd, level: c_int, name: c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` points to a live `T` of `size_of::<T>()` bytes that the kernel only
    // reads during the call; the fd is open for the lifetime of `fd`.
    let r = unsafe {
        libc::setsockopt(fd.as_raw_fd(), level, name, (value as *const T).cast::<c_void>(), size_of::<T>() as socklen_t)
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// An `ifreq` naming `ifname`, for the `SIOCGIF*` ioctls.
fn ifreq(ifname: &str) -> io::Result<libc::ifreq> {
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("AF_PACKET: {ifname:?} is not a valid interface name (1 to {} bytes, no NUL)", libc::IFNAMSIZ - 1),
        ));
    }
    // SAFETY: `ifreq` is plain old data (a name array and a union of integers, addresses and
    // a pointer); all-zero is a valid value of every field.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in ifr.ifr_name.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    Ok(ifr)
}

/// `ioctl(fd, request, &mut ifr)` for the `SIOCGIF*` requests, which fill `ifr.ifr_ifru`.
fn ioctl_ifreq(fd: &OwnedFd, request: libc::c_ulong, ifr: &mut libc::ifreq) -> io::Result<()> {
    // SAFETY: every request passed here (SIOCGIFINDEX, SIOCGIFHWADDR, SIOCGIFMTU) reads the
    // NUL-terminated name and writes within `struct ifreq`, which `ifr` is, exclusively
    // borrowed for the call.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, ifr as *mut libc::ifreq) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A view of a `u32` ring header field the kernel reads or writes concurrently.
///
/// # Safety
/// `p` must be 4-byte aligned and point into a live shared mapping of the ring that
/// outlives `'a`; the field must only be accessed atomically by this process.
unsafe fn shared_u32<'a>(p: *mut u8) -> &'a AtomicU32 {
    // SAFETY: the caller guarantees alignment, validity for `'a` and atomic-only access
    // from this process; the kernel's side of the protocol is the documented ring protocol.
    unsafe { AtomicU32::from_ptr(p.cast::<u32>()) }
}

impl AfPacketSocket {
    /// Opens a socket on `ifname` with rings shaped by `cfg`, bound to the interface for
    /// every EtherType (`ETH_P_ALL`).
    ///
    /// The socket is created with protocol 0 (receiving nothing), configured, mapped, and
    /// only then bound with `ETH_P_ALL`, so the ring never holds frames of other interfaces.
    /// It receives everything the interface receives until it joins a fanout group.
    ///
    /// # Errors
    /// `InvalidInput` for a bad `cfg`, a bad name or a non-Ethernet interface; otherwise the
    /// OS error (`PermissionDenied` without `CAP_NET_RAW`, `NotFound`/`ENODEV` for an
    /// unknown interface, …) with the interface and the failing call in the message.
    pub fn open(ifname: &str, cfg: &RingConfig) -> io::Result<Self> {
        let page = page_size();
        let layout = Layout::new(cfg, page).map_err(|m| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("AF_PACKET socket on interface {ifname:?}: ring config: {m}"),
            )
        })?;
        let mut ifr = ifreq(ifname)?;
        let cx = |what: &str, e: io::Error| context(ifname, what, e);

        // SAFETY: plain system call; the result is checked before use.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            return Err(cx("socket(AF_PACKET, SOCK_RAW)", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a freshly created descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        ioctl_ifreq(&fd, libc::SIOCGIFINDEX, &mut ifr).map_err(|e| cx("ioctl(SIOCGIFINDEX)", e))?;
        // SAFETY: SIOCGIFINDEX succeeded, so the kernel wrote the `ifru_ifindex` member.
        let ifindex = unsafe { ifr.ifr_ifru.ifru_ifindex };
        ioctl_ifreq(&fd, libc::SIOCGIFHWADDR, &mut ifr).map_err(|e| cx("ioctl(SIOCGIFHWADDR)", e))?;
        // SAFETY: SIOCGIFHWADDR succeeded, so the kernel wrote the `ifru_hwaddr` member.
        let hwaddr = unsafe { ifr.ifr_ifru.ifru_hwaddr };
        if hwaddr.sa_family != libc::ARPHRD_ETHER {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "AF_PACKET socket on interface {ifname:?}: not an Ethernet interface (ARPHRD type {})",
                    hwaddr.sa_family
                ),
            ));
        }
        let mut mac = [0u8; 6];
        for (m, b) in mac.iter_mut().zip(hwaddr.sa_data) {
            *m = b as u8;
        }
        ioctl_ifreq(&fd, libc::SIOCGIFMTU, &mut ifr).map_err(|e| cx("ioctl(SIOCGIFMTU)", e))?;
        // SAFETY: SIOCGIFMTU succeeded, so the kernel wrote the `ifru_mtu` member.
        let mtu = usize::try_from(unsafe { ifr.ifr_ifru.ifru_mtu }).unwrap_or(0);

        let one: c_int = 1;
        let version = libc::tpacket_versions::TPACKET_V3 as c_int;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_VERSION, &version)
            .map_err(|e| cx("setsockopt(PACKET_VERSION, TPACKET_V3)", e))?;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_LOSS, &one).map_err(|e| cx("setsockopt(PACKET_LOSS)", e))?;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &one)
            .map_err(|e| cx("setsockopt(PACKET_QDISC_BYPASS)", e))?;
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one)
            .map_err(|e| cx("setsockopt(PACKET_IGNORE_OUTGOING)", e))?;

        let rx_req = libc::tpacket_req3 {
            tp_block_size: layout.rx_block_size as u32,
            tp_block_nr: layout.rx_block_count as u32,
            tp_frame_size: layout.rx_frame_size as u32,
            tp_frame_nr: ((layout.rx_block_size / layout.rx_frame_size) * layout.rx_block_count) as u32,
            tp_retire_blk_tov: cfg.retire_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_RX_RING, &rx_req)
            .map_err(|e| cx(&format!("setsockopt(PACKET_RX_RING, {rx_req:?})"), e))?;
        // The kernel rejects a retire timeout, private area or feature word on a TX ring.
        let tx_req = libc::tpacket_req3 {
            tp_block_size: layout.tx_block_size as u32,
            tp_block_nr: layout.tx_block_count as u32,
            tp_frame_size: layout.tx_frame_size as u32,
            tp_frame_nr: layout.tx_frame_count() as u32,
            tp_retire_blk_tov: 0,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_TX_RING, &tx_req)
            .map_err(|e| cx(&format!("setsockopt(PACKET_TX_RING, {tx_req:?}) (needs Linux >= 4.11)"), e))?;
        let sndbuf = c_int::try_from(layout.tx_len()).unwrap_or(c_int::MAX);
        if setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, &sndbuf).is_err() {
            // Without CAP_NET_ADMIN: as much as net.core.wmem_max allows. Not fatal.
            let _ = setsockopt(&fd, libc::SOL_SOCKET, libc::SO_SNDBUF, &sndbuf);
        }

        let ring_len = layout.rx_len() + layout.tx_len();
        // A spare slot holds any frame the transmit ring could send, with a tag put back.
        let spare_len = (layout.tx_frame_size - TX_DATA_OFF + VLAN_HLEN).max(MIN_BUFFER).next_multiple_of(64);
        let spare_count = layout.rx_block_count + SPARE_EXTRA;
        // SAFETY: a fresh shared mapping (no address hint) of exactly the size of the two rings
        // the kernel just allocated for this socket (RX then TX, as packet_mmap lays them
        // out); the result is checked before use.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(cx(&format!("mmap of the rings ({ring_len} bytes)"), io::Error::last_os_error()));
        }
        let ring = NonNull::new(p.cast::<u8>()).ok_or_else(|| cx("mmap", io::Error::other("returned NULL")))?;
        // From here on, Drop unmaps.
        let sock = Self {
            fd,
            ifname: ifname.to_owned(),
            ifindex,
            mac,
            ring,
            ring_len,
            layout,
            rx_block: 0,
            rx_frame_idx: 0,
            rx_frame_off: 0,
            rx_next_hdr: None,
            rx_held: 0,
            spare: NonNull::from(Box::leak(vec![0u8; spare_len * spare_count].into_boxed_slice())).cast::<u8>(),
            spare_count,
            spare_len,
            spare_used: 0,
            tx_head: 0,
            tx_pending: false,
            tx_max_len: (layout.tx_frame_size - TX_DATA_OFF).min(mtu + ETH_HLEN + VLAN_HLEN),
        };

        // SAFETY: `sockaddr_ll` is plain old data; all-zero is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex;
        // SAFETY: `sll` is a valid `sockaddr_ll` of the length passed; the kernel only reads it.
        let r = unsafe {
            libc::bind(
                sock.fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
                size_of::<libc::sockaddr_ll>() as socklen_t,
            )
        };
        if r != 0 {
            return Err(cx(&format!("bind(ifindex {ifindex}, ETH_P_ALL)"), io::Error::last_os_error()));
        }
        Ok(sock)
    }

    /// The interface name given to [`open`](Self::open).
    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// The interface's index.
    pub fn ifindex(&self) -> i32 {
        self.ifindex
    }

    /// The interface's MAC address when the socket was opened (`SIOCGIFHWADDR`).
    pub fn mac_addr(&self) -> [u8; 6] {
        self.mac
    }

    /// The largest frame [`tx_send`](Self::tx_send) accepts, in bytes: the transmit slot's
    /// capacity, capped at the interface's MTU (when the socket was opened) + 18 (Ethernet
    /// header and one 802.1Q tag), as the kernel would refuse more.
    pub fn max_tx_frame_len(&self) -> usize {
        self.tx_max_len
    }

    /// Joins the `PACKET_FANOUT` group `group_id` of this interface, in `PACKET_FANOUT_CBPF`
    /// mode with `PACKET_FANOUT_FLAG_IGNORE_OUTGOING`, then installs `program` as the
    /// group's steering program (`PACKET_FANOUT_DATA`).
    ///
    /// The kernel delivers each frame to socket `program's return value % group size`,
    /// sockets numbered in the order they joined (a socket leaving moves the last one into
    /// its place). Workers must therefore join in worker order (socket `i` = worker `i`),
    /// all with the same program, before traffic matters; [`super::fanout::steering_program`]
    /// is the program that keeps both directions of a NAT flow on one worker. Frames the
    /// socket received before joining stay in its ring. No rollover: a full ring drops
    /// rather than moving a flow to another worker.
    ///
    /// Group ids are per network namespace; one group per interface.
    ///
    /// # Errors
    /// The OS error with context: `EINVAL` if the interface is down, the socket is already
    /// in a group, or the group exists with another mode or interface; an invalid program.
    pub fn join_fanout(&self, group_id: u16, program: &[sock_filter]) -> io::Result<()> {
        let cx = |what: &str, e: io::Error| context(&self.ifname, what, e);
        let type_flags = libc::PACKET_FANOUT_CBPF | libc::PACKET_FANOUT_FLAG_IGNORE_OUTGOING;
        let arg: c_int = (u32::from(group_id) | (type_flags << 16)) as c_int;
        setsockopt(&self.fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg).map_err(|e| {
            let hint = if e.raw_os_error() == Some(libc::EINVAL) {
                " (is the interface up? is the group already used with another mode, flags or interface?)"
            } else {
                ""
            };
            cx(&format!("setsockopt(PACKET_FANOUT, group {group_id}, CBPF){hint}"), e)
        })?;
        let len = u16::try_from(program.len()).map_err(|_| {
            cx(
                "PACKET_FANOUT_DATA",
                io::Error::new(io::ErrorKind::InvalidInput, "program longer than 65535 instructions"),
            )
        })?;
        let fprog = libc::sock_fprog { len, filter: program.as_ptr().cast_mut() };
        // The kernel copies the program during the call and never writes through `filter`.
        setsockopt(&self.fd, libc::SOL_PACKET, libc::PACKET_FANOUT_DATA, &fprog)
            .map_err(|e| cx(&format!("setsockopt(PACKET_FANOUT_DATA, {} instructions)", program.len()), e))
    }

    /// Address of receive block `i`.
    fn rx_block_ptr(&self, i: usize) -> *mut u8 {
        debug_assert!(i < self.layout.rx_block_count);
        // SAFETY: `i < rx_block_count`, so the offset is inside the receive ring, which is
        // inside the mapping.
        unsafe { self.ring.as_ptr().add(i * self.layout.rx_block_size) }
    }

    /// Address of transmit slot `i`.
    fn tx_slot_ptr(&self, i: usize) -> *mut u8 {
        let l = &self.layout;
        debug_assert!(i < l.tx_frame_count());
        let off =
            l.rx_len() + (i / l.tx_frames_per_block) * l.tx_block_size + (i % l.tx_frames_per_block) * l.tx_frame_size;
        debug_assert!(off + l.tx_frame_size <= self.ring_len);
        // SAFETY: `i < tx_frame_count`, so the slot lies inside the transmit ring, inside the mapping.
        unsafe { self.ring.as_ptr().add(off) }
    }

    /// Delivers up to `max` received frames to `f`, in arrival order, without blocking.
    ///
    /// Walks the blocks the kernel has retired (`TP_STATUS_USER`) frame by frame and hands a
    /// block back (`TP_STATUS_KERNEL`) as soon as all its frames were delivered; the
    /// position inside a partly consumed block is kept for the next call. The slice is only
    /// valid during the call to `f`. Returns the number of frames delivered.
    pub fn rx_burst(&mut self, max: usize, mut f: impl FnMut(&[u8], RxFlags)) -> usize {
        let delivered = self.walk(max, |data, len, _room, flags| {
            // SAFETY: `walk` hands over `len` readable bytes of a user-owned block, which
            // stays so until `release_rx` below; the slice does not outlive this call.
            f(unsafe { std::slice::from_raw_parts(data.as_ptr(), len) }, flags)
        });
        self.release_rx();
        delivered
    }

    /// Delivers up to `max` received frames **in the ring** to `f`, in arrival order, without
    /// blocking: each as a [`RingFrame`] (its bytes and the room after them, to rewrite in
    /// place), its length and its flags. A tag the kernel stripped is back in the frame
    /// (so `RxFlags::vlan_tci` is `None`), truncated frames (`tp_snaplen < tp_len`) are
    /// skipped. Every frame has at least [`MIN_BUFFER`] bytes of room, and 4 more than its
    /// length: where the ring has less after a frame (the last frame of a block, a tiny
    /// frame), it is copied into one of the socket's spare buffers instead; when those are
    /// all taken, or the frame is too large for one, it is skipped too. Returns the frames
    /// taken off the ring and how many of them were skipped.
    ///
    /// The blocks of the frames delivered stay the process's until
    /// [`release_rx`](Self::release_rx), and the spare buffers taken stay taken.
    ///
    /// # Safety
    /// Every `RingFrame` delivered must be dropped before the next `release_rx` (or
    /// `rx_burst`, which releases) and before the socket is dropped: after that its memory
    /// is the kernel's again (or unmapped).
    pub unsafe fn rx_frames(&mut self, max: usize, mut f: impl FnMut(RingFrame, usize, RxFlags)) -> (usize, usize) {
        let mut skipped = 0;
        let (spare, spare_len, spare_count) = (self.spare, self.spare_len, self.spare_count);
        let mut spare_used = self.spare_used;
        let taken = self.walk(max, |mut data, mut len, mut room, mut flags| {
            if flags.truncated {
                skipped += 1;
                return;
            }
            if let Some(tci) = flags.vlan_tci.take() {
                // The 4 bytes before the frame are its own (sockaddr_ll and padding, which
                // nothing reads; `walk` keeps the frame before from growing into them):
                // move the MAC addresses there and write the tag after them.
                // SAFETY: `data - 4 .. data + len` lies in this frame's part of a
                // user-owned block (`walk`'s contract); `ptr::copy` allows the overlap.
                unsafe {
                    let start = data.as_ptr().sub(VLAN_HLEN);
                    std::ptr::copy(data.as_ptr(), start, 2 * 6);
                    let tag = start.add(2 * 6);
                    tag.copy_from_nonoverlapping(flags.vlan_tpid.to_be_bytes().as_ptr(), 2);
                    tag.add(2).copy_from_nonoverlapping(tci.to_be_bytes().as_ptr(), 2);
                    data = NonNull::new_unchecked(start);
                }
                (len, room) = (len + VLAN_HLEN, room + VLAN_HLEN);
                flags.vlan_tpid = 0;
            }
            if room < MIN_BUFFER.max(len + VLAN_HLEN) {
                if spare_used == spare_count || len + VLAN_HLEN > spare_len {
                    skipped += 1;
                    return;
                }
                // SAFETY: slot `spare_used < spare_count` lies inside `spare`, which lives
                // as long as the socket and is reachable only through these pointers; the
                // frame's `len` bytes are readable (`walk`) and fit (checked above).
                unsafe {
                    let slot = spare.as_ptr().add(spare_used * spare_len);
                    slot.copy_from_nonoverlapping(data.as_ptr(), len);
                    data = NonNull::new_unchecked(slot);
                }
                spare_used += 1;
                room = spare_len;
            }
            f(RingFrame { data, room }, len, flags);
        });
        self.spare_used = spare_used;
        (taken, skipped)
    }

    /// Hands back to the kernel every receive block whose frames were all delivered and
    /// frees the spare buffers (see [`rx_frames`](Self::rx_frames)).
    pub fn release_rx(&mut self) {
        let n = self.layout.rx_block_count;
        for k in 0..self.rx_held {
            let block = self.rx_block_ptr((self.rx_block + n - self.rx_held + k) % n);
            // SAFETY: as in `walk`: aligned, inside the live mapping, atomic-only access.
            let status = unsafe { shared_u32(block.add(BLOCK_STATUS_OFF)) };
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
        self.rx_held = 0;
        self.spare_used = 0;
    }

    /// The ring walk of [`rx_burst`](Self::rx_burst) and [`rx_frames`](Self::rx_frames):
    /// calls `f(data, len, room, flags)` for up to `max` frames — `data` points to the
    /// frame's `len` bytes in a block the process owns, followed by `room - len` more bytes
    /// it may overwrite: up to 4 bytes short of where the next frame's bytes start in the
    /// block (the next frame's header is read first), or to the end of the block; the 4
    /// bytes before `data` are the frame's own. A block whose frames were all delivered is
    /// held (`rx_held`) for [`release_rx`](Self::release_rx). Returns the frames delivered.
    fn walk(&mut self, max: usize, mut f: impl FnMut(NonNull<u8>, usize, usize, RxFlags)) -> usize {
        let block_size = self.layout.rx_block_size;
        let hdr_len = size_of::<libc::tpacket3_hdr>();
        let mut delivered = 0usize;
        while delivered < max && self.rx_held < self.layout.rx_block_count {
            let block = self.rx_block_ptr(self.rx_block);
            // SAFETY: a block starts on a page boundary, so `block_status` is aligned; it is
            // inside the mapping, which lives as long as `self`; this process accesses it only
            // through `shared_u32`.
            let status = unsafe { shared_u32(block.add(BLOCK_STATUS_OFF)) };
            if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: in bounds (fixed offsets in the block descriptor); after the Acquire
            // load above the kernel has published the descriptor and does not touch the
            // block until we store TP_STATUS_KERNEL. Frames never grow over the descriptor
            // (it precedes the first frame).
            let (num_pkts, first) = unsafe {
                (
                    block.add(BLOCK_NUM_PKTS_OFF).cast::<u32>().read(),
                    block.add(BLOCK_FIRST_PKT_OFF).cast::<u32>().read() as usize,
                )
            };
            if self.rx_frame_idx == 0 {
                self.rx_frame_off = first;
                self.rx_next_hdr = None;
            }
            // Reads the header at `off` of this block, if it lies inside it.
            let read_hdr = |off: usize| {
                if off.checked_add(hdr_len).is_none_or(|end| end > block_size) {
                    debug_assert!(false, "tpacket3_hdr at {off} outside the block");
                    return None;
                }
                // SAFETY: the header lies inside this user-owned block (checked just above);
                // read unaligned so no alignment assumption is needed.
                Some(unsafe { block.add(off).cast::<libc::tpacket3_hdr>().read_unaligned() })
            };
            while self.rx_frame_idx < num_pkts && delivered < max {
                let off = self.rx_frame_off;
                let Some(h) = self.rx_next_hdr.take().or_else(|| read_hdr(off)) else {
                    self.rx_frame_idx = num_pkts;
                    break;
                };
                let (mac, snaplen) = (usize::from(h.tp_mac), h.tp_snaplen as usize);
                if off + mac + snaplen > block_size || mac < hdr_len + VLAN_HLEN {
                    debug_assert!(false, "frame at {off}+{mac} ({snaplen} bytes) outside the block");
                    self.rx_frame_idx = num_pkts;
                    break;
                }
                let next_off = off + h.tp_next_offset as usize;
                // The room ends 4 bytes before the next frame's bytes (they may take a tag
                // back there), after its header was read, or at the block's end.
                let mut end = block_size;
                if self.rx_frame_idx + 1 < num_pkts {
                    self.rx_next_hdr = read_hdr(next_off);
                    end = self.rx_next_hdr.map_or(off + mac + snaplen, |n| {
                        (next_off + usize::from(n.tp_mac))
                            .saturating_sub(VLAN_HLEN)
                            .clamp(off + mac + snaplen, block_size)
                    });
                }
                let flags = RxFlags {
                    csum_not_ready: h.tp_status & libc::TP_STATUS_CSUMNOTREADY != 0,
                    csum_valid: h.tp_status & TP_STATUS_CSUM_VALID != 0,
                    truncated: h.tp_snaplen < h.tp_len,
                    vlan_tci: (h.tp_status & libc::TP_STATUS_VLAN_VALID != 0).then_some(h.hv1.tp_vlan_tci as u16),
                    vlan_tpid: match h.tp_status & (libc::TP_STATUS_VLAN_VALID | libc::TP_STATUS_VLAN_TPID_VALID) {
                        0 => 0,
                        libc::TP_STATUS_VLAN_VALID => 0x8100,
                        _ => h.hv1.tp_vlan_tpid,
                    },
                };
                // SAFETY: `off + mac <= block_size` (checked above), inside the block; not null.
                let data = unsafe { NonNull::new_unchecked(block.add(off + mac)) };
                f(data, snaplen, end - (off + mac), flags);
                delivered += 1;
                self.rx_frame_idx += 1;
                self.rx_frame_off = next_off;
            }
            if self.rx_frame_idx < num_pkts {
                break; // `max` reached inside the block: keep our place.
            }
            self.rx_held += 1;
            self.rx_block = (self.rx_block + 1) % self.layout.rx_block_count;
            self.rx_frame_idx = 0;
        }
        delivered
    }

    /// Copies `frame` into the next transmit slot and marks it for sending; the frame leaves
    /// at the next [`tx_flush`](Self::tx_flush). No system call.
    ///
    /// Returns false, leaving the ring unchanged, when the next slot is still owned by the
    /// kernel (ring full: flush, and count the drop) or when the frame is shorter than an
    /// Ethernet header or longer than [`max_tx_frame_len`](Self::max_tx_frame_len).
    pub fn tx_send(&mut self, frame: &[u8]) -> bool {
        if frame.len() < ETH_HLEN || frame.len() > self.tx_max_len {
            return false;
        }
        let slot = self.tx_slot_ptr(self.tx_head);
        // SAFETY: slots start at multiples of the frame size (a multiple of 16) inside
        // page-aligned blocks, so `tp_status` is aligned; the mapping outlives `self`; this
        // process accesses it only through `shared_u32`.
        let status = unsafe { shared_u32(slot.add(TP_STATUS_OFF)) };
        // The kernel may leave timestamp bits next to TP_STATUS_AVAILABLE; a slot that
        // failed (TP_STATUS_WRONG_FORMAT, not expected with PACKET_LOSS) may be rewritten too.
        if status.load(Ordering::Acquire) & (libc::TP_STATUS_SEND_REQUEST | libc::TP_STATUS_SENDING) != 0 {
            return false;
        }
        // SAFETY: the slot is ours (status checked with Acquire above) until we publish it
        // below; the data fits (`frame.len() <= tx_max_len <= frame_size - TX_DATA_OFF`), and
        // the header fields written are inside the slot; `frame` cannot overlap the mapping's
        // slot because the slot is not reachable through any reference.
        unsafe {
            std::ptr::copy_nonoverlapping(frame.as_ptr(), slot.add(TX_DATA_OFF), frame.len());
            let h = slot.cast::<libc::tpacket3_hdr>();
            std::ptr::addr_of_mut!((*h).tp_next_offset).write(0);
            std::ptr::addr_of_mut!((*h).tp_len).write(frame.len() as u32);
            std::ptr::addr_of_mut!((*h).tp_snaplen).write(frame.len() as u32);
        }
        status.store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx_head = (self.tx_head + 1) % self.layout.tx_frame_count();
        self.tx_pending = true;
        true
    }

    /// Asks the kernel to send every slot marked by [`tx_send`](Self::tx_send): one
    /// `sendto(fd, NULL, 0, MSG_DONTWAIT)` if anything is pending, none otherwise.
    ///
    /// `EAGAIN`/`ENOBUFS` (device queue or send buffer full) are not errors: the frames stay
    /// queued and the next flush retries them.
    ///
    /// # Errors
    /// Other OS errors (e.g. `ENETDOWN`, `ENXIO`), with context.
    pub fn tx_flush(&mut self) -> io::Result<()> {
        if !self.tx_pending {
            return Ok(());
        }
        // SAFETY: a NULL buffer of length 0 and no address are valid for an AF_PACKET socket
        // with a TX ring: the kernel reads the frames from the ring.
        let r =
            unsafe { libc::sendto(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT, std::ptr::null(), 0) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN | libc::ENOBUFS | libc::EINTR) => Ok(()),
                _ => Err(context(&self.ifname, "sendto (TX ring flush)", e)),
            };
        }
        // The kernel sends slots in ring order and stops at the first that is not
        // TP_STATUS_SEND_REQUEST; if the last slot we filled has been taken, all were.
        let count = self.layout.tx_frame_count();
        let last = self.tx_slot_ptr((self.tx_head + count - 1) % count);
        // SAFETY: as in `tx_send`: aligned, inside the live mapping, atomic-only access.
        let status = unsafe { shared_u32(last.add(TP_STATUS_OFF)) };
        self.tx_pending = status.load(Ordering::Acquire) == libc::TP_STATUS_SEND_REQUEST;
        Ok(())
    }

    /// Waits up to `timeout_ms` milliseconds (-1: forever, 0: just look) for a receive block
    /// to be ready, with `poll(2)`. For idle workers; returns whether one is ready (also true
    /// while a partly consumed block remains). `EINTR` counts as not ready.
    ///
    /// # Errors
    /// A pending socket error (`POLLERR`, e.g. `ENETDOWN` when the interface went down),
    /// which this call clears, or a `poll` failure.
    pub fn wait_readable(&self, timeout_ms: i32) -> io::Result<bool> {
        let mut pfd = libc::pollfd { fd: self.fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid `pollfd`, exclusively borrowed for the call.
        let r = unsafe { libc::poll(&mut pfd, 1, timeout_ms) };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Ok(false);
            }
            return Err(context(&self.ifname, "poll", e));
        }
        if pfd.revents & libc::POLLERR != 0 {
            let mut err: c_int = 0;
            let mut len = size_of::<c_int>() as socklen_t;
            // SAFETY: `err` and `len` are valid for writes of the sizes given.
            let r = unsafe {
                libc::getsockopt(
                    self.fd.as_raw_fd(),
                    libc::SOL_SOCKET,
                    libc::SO_ERROR,
                    (&mut err as *mut c_int).cast::<c_void>(),
                    &mut len,
                )
            };
            if r == 0 && err != 0 {
                return Err(context(&self.ifname, "socket error", io::Error::from_raw_os_error(err)));
            }
        }
        Ok(pfd.revents & libc::POLLIN != 0)
    }

    /// `PACKET_STATISTICS`: `(tp_packets, tp_drops)` since the previous call (the kernel
    /// resets the counters when read). `tp_packets` counts every frame the socket was given,
    /// including the `tp_drops` that found the receive ring full.
    ///
    /// # Errors
    /// The OS error of `getsockopt`, with context.
    pub fn stats(&mut self) -> io::Result<(u32, u32)> {
        packet_statistics(&self.fd, &self.ifname)
    }

    /// A handle on this socket's `PACKET_STATISTICS` for another thread (a duplicate of the
    /// descriptor): the gateway's main thread reads the workers' drops with it. Reading
    /// resets the counters, so one reader only — the socket's own
    /// [`stats`](Self::stats) or this handle.
    ///
    /// # Errors
    /// `dup` failed.
    pub fn statistics_handle(&self) -> io::Result<PacketStatistics> {
        Ok(PacketStatistics { fd: self.fd.try_clone()?, ifname: self.ifname.clone() })
    }
}

/// A handle on an [`AfPacketSocket`]'s counters, for a thread other than the worker's
/// ([`AfPacketSocket::statistics_handle`]).
#[derive(Debug)]
pub struct PacketStatistics {
    fd: OwnedFd,
    ifname: String,
}

impl PacketStatistics {
    /// `(tp_packets, tp_drops)` since the previous read, as [`AfPacketSocket::stats`].
    ///
    /// # Errors
    /// The OS error of `getsockopt`, with context.
    pub fn read(&self) -> io::Result<(u32, u32)> {
        packet_statistics(&self.fd, &self.ifname)
    }
}

/// `getsockopt(PACKET_STATISTICS)` on `fd`: `(tp_packets, tp_drops)` since the last read.
fn packet_statistics(fd: &OwnedFd, ifname: &str) -> io::Result<(u32, u32)> {
    let mut st = libc::tpacket_stats_v3 { tp_packets: 0, tp_drops: 0, tp_freeze_q_cnt: 0 };
    let mut len = size_of::<libc::tpacket_stats_v3>() as socklen_t;
    // SAFETY: `st` and `len` are valid for writes; the kernel writes at most `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats_v3).cast::<c_void>(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(context(ifname, "getsockopt(PACKET_STATISTICS)", io::Error::last_os_error()));
    }
    Ok((st.tp_packets, st.tp_drops))
}

impl Drop for AfPacketSocket {
    fn drop(&mut self) {
        // SAFETY: `ring`/`ring_len` are exactly the mapping created in `open`, unmapped only
        // here; no reference into it survives (slices given to `rx_burst` callbacks end with
        // the call). The fd is closed afterwards when `self.fd` drops.
        unsafe {
            libc::munmap(self.ring.as_ptr().cast::<c_void>(), self.ring_len);
        }
        // SAFETY: `spare` is the leaked box of `spare_count * spare_len` bytes made in
        // `open`, freed only here; no frame pointing into it outlives the socket
        // (`rx_frames`' contract).
        drop(unsafe {
            Box::from_raw(std::ptr::slice_from_raw_parts_mut(self.spare.as_ptr(), self.spare_count * self.spare_len))
        });
    }
}

/// Network-namespace fixtures shared by the driver tests (root only).
#[cfg(test)]
pub(crate) mod test_net {
    use super::AfPacketSocket;
    use std::process::Command;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::{Duration, Instant};

    /// Reports a skipped test loudly; with `TORII_REQUIRE_CAPABILITIES=1` (set by `.ci/run`)
    /// fails it instead, so a CI machine that lost root or namespaces does not stay green.
    pub(crate) fn skip(reason: &str) {
        assert!(
            std::env::var("TORII_REQUIRE_CAPABILITIES").as_deref() != Ok("1"),
            "{reason}; a skip is a failure with TORII_REQUIRE_CAPABILITIES=1 (set by .ci/run)"
        );
        eprintln!("SKIPPED: {reason}");
    }

    fn ip(args: &[&str]) -> Result<(), String> {
        let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run ip: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
        }
    }

    /// A uniquely named network namespace holding a veth pair `a` ↔ `b`, both up, IPv6 off.
    /// Deleted on drop.
    pub(crate) struct VethNs {
        name: String,
    }

    impl VethNs {
        /// Creates the namespace, or says why it cannot (not root, `ip netns add` failed: the
        /// caller skips the test). Later setup failures panic.
        pub(crate) fn create(tag: &str) -> Result<Self, String> {
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } != 0 {
                return Err("not root (network namespaces and AF_PACKET need it)".into());
            }
            static NEXT: AtomicUsize = AtomicUsize::new(0);
            let name = format!("torii-{tag}-{}-{}", std::process::id(), NEXT.fetch_add(1, Ordering::Relaxed));
            ip(&["netns", "add", &name]).map_err(|e| format!("cannot create a network namespace: {e}"))?;
            let ns = Self { name };
            ns.must(&["link", "add", "name", "a", "type", "veth", "peer", "name", "b"]);
            // Silence IPv6 (router solicitations, MLD, DAD) before the links come up.
            let _ = Command::new("ip")
                .args(["netns", "exec", &ns.name, "sysctl", "-qw"])
                .args([
                    "net.ipv6.conf.all.disable_ipv6=1",
                    "net.ipv6.conf.default.disable_ipv6=1",
                    "net.ipv6.conf.a.disable_ipv6=1",
                    "net.ipv6.conf.b.disable_ipv6=1",
                ])
                .output();
            ns.must(&["link", "set", "dev", "a", "up"]);
            ns.must(&["link", "set", "dev", "b", "up"]);
            Ok(ns)
        }

        /// The namespace's name.
        pub(crate) fn name(&self) -> &str {
            &self.name
        }

        /// Runs `ip -n <ns> args…`; panics (failing the test, deleting the namespace) on error.
        pub(crate) fn must(&self, args: &[&str]) {
            let mut all = vec!["-n", self.name.as_str()];
            all.extend_from_slice(args);
            if let Err(e) = ip(&all) {
                panic!("{e}");
            }
        }

        /// Runs `f` on a new thread that has entered the namespace (a thread's network
        /// namespace is its own), propagating its panic.
        pub(crate) fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
            let path = format!("/run/netns/{}", self.name);
            let result = std::thread::scope(|s| {
                s.spawn(|| {
                    let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
                    // SAFETY: `ns` is an open namespace file; setns only changes this thread's
                    // network namespace.
                    let r = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&ns), libc::CLONE_NEWNET) };
                    assert_eq!(r, 0, "setns({path}): {}", std::io::Error::last_os_error());
                    f()
                })
                .join()
            });
            match result {
                Ok(v) => v,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    }

    impl Drop for VethNs {
        fn drop(&mut self) {
            if let Err(e) = ip(&["netns", "del", &self.name]) {
                eprintln!("warning: {e}");
            }
        }
    }

    /// Test frames: a trailer (magic + index) makes ours recognisable among any noise.
    pub(crate) struct Frame;

    impl Frame {
        const MAGIC: [u8; 8] = *b"toriiAFP";

        fn finish(mut f: Vec<u8>, tag: u32) -> Vec<u8> {
            f.extend_from_slice(&Self::MAGIC);
            f.extend_from_slice(&tag.to_be_bytes());
            f
        }

        /// Ethernet + `l3` (an IPv4 packet whose header checksum is filled in) + trailer.
        pub(crate) fn ipv4(dst: [u8; 6], src: [u8; 6], l3: &[u8], tag: u32) -> Vec<u8> {
            let mut f = Vec::with_capacity(14 + l3.len() + 12);
            f.extend_from_slice(&dst);
            f.extend_from_slice(&src);
            f.extend_from_slice(&0x0800u16.to_be_bytes());
            f.extend_from_slice(l3);
            let ihl = usize::from(l3[0] & 0x0f) * 4;
            if l3.len() >= ihl && ihl >= 20 {
                let h = &mut f[14..14 + ihl];
                h[10] = 0;
                h[11] = 0;
                let mut sum: u32 = h.chunks(2).map(|c| u32::from(u16::from_be_bytes([c[0], c[1]]))).sum();
                while sum > 0xffff {
                    sum = (sum & 0xffff) + (sum >> 16);
                }
                h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
            }
            Self::finish(f, tag)
        }

        /// Ethernet + `l3` (an IPv6 packet) + trailer.
        pub(crate) fn ipv6(dst: [u8; 6], src: [u8; 6], l3: &[u8], tag: u32) -> Vec<u8> {
            let mut f = Vec::with_capacity(14 + l3.len() + 12);
            f.extend_from_slice(&dst);
            f.extend_from_slice(&src);
            f.extend_from_slice(&0x86ddu16.to_be_bytes());
            f.extend_from_slice(l3);
            Self::finish(f, tag)
        }

        /// A broadcast ARP request (who-has 10.70.0.1 tell 10.70.0.2) + trailer.
        pub(crate) fn arp(src: [u8; 6], tag: u32) -> Vec<u8> {
            let mut f = vec![0xff; 6];
            f.extend_from_slice(&src);
            f.extend_from_slice(&[0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1]);
            f.extend_from_slice(&src);
            f.extend_from_slice(&[10, 70, 0, 2, 0, 0, 0, 0, 0, 0, 10, 70, 0, 1]);
            Self::finish(f, tag)
        }

        /// A frame of `len` bytes in total with the IEEE local-experimental EtherType 0x88b5
        /// and a payload pattern derived from `tag`.
        pub(crate) fn raw(dst: [u8; 6], src: [u8; 6], len: usize, tag: u32) -> Vec<u8> {
            assert!(len >= 14 + 12);
            let mut f = Vec::with_capacity(len);
            f.extend_from_slice(&dst);
            f.extend_from_slice(&src);
            f.extend_from_slice(&0x88b5u16.to_be_bytes());
            f.extend((0..len - 14 - 12).map(|i| (i as u32).wrapping_mul(31).wrapping_add(tag) as u8));
            Self::finish(f, tag)
        }

        /// The index of one of our frames.
        pub(crate) fn tag_of(frame: &[u8]) -> Option<u32> {
            let t = frame.len().checked_sub(12)?;
            (frame[t..t + 8] == Self::MAGIC).then(|| u32::from_be_bytes(frame[t + 8..].try_into().unwrap()))
        }
    }

    /// Sends `frame` on `ifname` through an ordinary `AF_PACKET` socket, i.e. through the
    /// qdisc layer, where packet taps on the interface see it as outgoing. (Frames sent with
    /// `PACKET_QDISC_BYPASS`, as [`AfPacketSocket`] does, never reach the taps.)
    pub(crate) fn send_through_qdisc(ifname: &str, frame: &[u8]) {
        let name = std::ffi::CString::new(ifname).unwrap();
        // SAFETY: `name` is a valid NUL-terminated string.
        let ifindex = unsafe { libc::if_nametoindex(name.as_ptr()) };
        assert!(ifindex > 0, "no interface {ifname}");
        // SAFETY: plain system call; checked below and closed by `OwnedFd`.
        let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        assert!(raw >= 0, "socket: {}", std::io::Error::last_os_error());
        // SAFETY: `raw` is a fresh descriptor nothing else owns.
        let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(raw) };
        // SAFETY: all-zero is a valid `sockaddr_ll`.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_ifindex = ifindex as i32;
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&frame[..6]);
        // SAFETY: `frame` and `sll` are valid for reads of the lengths given.
        let r = unsafe {
            libc::sendto(
                std::os::fd::AsRawFd::as_raw_fd(&fd),
                frame.as_ptr().cast(),
                frame.len(),
                0,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        assert_eq!(r, frame.len() as isize, "sendto: {}", std::io::Error::last_os_error());
    }

    /// Queues and flushes every frame, retrying while the ring is full (bounded: 2 s).
    pub(crate) fn send_all(tx: &mut AfPacketSocket, frames: &[Vec<u8>]) {
        let deadline = Instant::now() + Duration::from_secs(2);
        for f in frames {
            while !tx.tx_send(f) {
                assert!(f.len() <= tx.max_tx_frame_len(), "test frame too long");
                assert!(Instant::now() < deadline, "TX ring stayed full for 2 s");
                tx.tx_flush().expect("tx_flush");
                std::thread::yield_now();
            }
        }
        tx.tx_flush().expect("tx_flush");
    }

    /// Receives our frames until `want` arrived or `timeout` passed, delivering at most
    /// `burst` per `rx_burst` call.
    pub(crate) fn recv_tagged(
        rx: &mut AfPacketSocket,
        want: usize,
        burst: usize,
        timeout: Duration,
    ) -> Vec<(Vec<u8>, super::RxFlags)> {
        let mut got = Vec::new();
        let deadline = Instant::now() + timeout;
        while got.len() < want {
            let n = rx.rx_burst(burst, |f, flags| {
                if Frame::tag_of(f).is_some() {
                    got.push((f.to_vec(), flags));
                }
            });
            if n == 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
                rx.wait_readable(left.as_millis().clamp(1, 10) as i32).expect("wait_readable");
            }
        }
        got
    }
}

#[cfg(test)]
mod tests {
    use super::test_net::{self, recv_tagged, send_all, Frame, VethNs};
    use super::*;
    use std::time::Duration;

    #[test]
    fn socket_can_move_to_a_worker_thread() {
        fn assert_send<T: Send>() {}
        assert_send::<AfPacketSocket>();
    }

    #[test]
    fn layout_follows_the_kernel_rules() {
        let page = 4096;
        let l = Layout::new(&RingConfig::default(), page).unwrap();
        assert_eq!((l.rx_len(), l.tx_frame_count()), (8 << 20, 1024));
        assert_eq!(l.tx_block_size % page, 0);
        assert!(l.tx_frames_per_block * l.tx_frame_size <= l.tx_block_size);
        let odd = RingConfig { frame_size: 3008, tx_frame_count: 5, ..RingConfig::default() };
        let l = Layout::new(&odd, page).unwrap();
        assert!(l.tx_frame_count() >= 5 && l.tx_block_size.is_multiple_of(page));
        for (bad, what) in [
            (RingConfig { block_size: 1000, ..RingConfig::default() }, "block_size"),
            (RingConfig { block_count: 0, ..RingConfig::default() }, "block_count"),
            (RingConfig { frame_size: 2050, ..RingConfig::default() }, "frame_size"),
            (RingConfig { frame_size: 48, ..RingConfig::default() }, "frame_size"),
            (RingConfig { block_size: 4096, frame_size: 8192, ..RingConfig::default() }, "frame_size"),
            (RingConfig { tx_frame_count: 0, ..RingConfig::default() }, "tx_frame_count"),
            (RingConfig { block_size: 1 << 30, block_count: 8, ..RingConfig::default() }, "4 GiB"),
        ] {
            let e = Layout::new(&bad, page).unwrap_err();
            assert!(e.contains(what), "{bad:?}: {e}");
        }
    }

    #[test]
    fn open_rejects_bad_input_before_any_system_call() {
        let bad = RingConfig { block_size: 1000, ..RingConfig::default() };
        let e = AfPacketSocket::open("eth0", &bad).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("\"eth0\"") && e.to_string().contains("block_size"), "{e}");
        for name in ["", "a-name-longer-than-15", "nul\0"] {
            let e = AfPacketSocket::open(name, &RingConfig::default()).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{name:?}");
        }
    }

    fn ns_or_skip(tag: &str) -> Option<VethNs> {
        match VethNs::create(tag) {
            Ok(ns) => Some(ns),
            Err(reason) => {
                test_net::skip(&reason);
                None
            }
        }
    }

    /// The MAC address `ip` reports for `dev` in the namespace.
    fn ip_mac(ns: &VethNs, dev: &str) -> [u8; 6] {
        let out = std::process::Command::new("ip").args(["-n", ns.name(), "-o", "link", "show", dev]).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let word = text.split_whitespace().skip_while(|w| *w != "link/ether").nth(1).expect("link/ether in ip output");
        let mut mac = [0u8; 6];
        for (m, p) in mac.iter_mut().zip(word.split(':')) {
            *m = u8::from_str_radix(p, 16).unwrap();
        }
        mac
    }

    #[test]
    fn round_trip_between_veth_peers() {
        let Some(ns) = ns_or_skip("afp-rt") else { return };
        let (mac_a, mac_b) = (ip_mac(&ns, "a"), ip_mac(&ns, "b"));
        ns.run(|| {
            let e = AfPacketSocket::open("nosuchif0", &RingConfig::default()).unwrap_err();
            assert!(e.to_string().contains("\"nosuchif0\"") && e.to_string().contains("SIOCGIFINDEX"), "{e}");

            let mut a = AfPacketSocket::open("a", &RingConfig::default()).expect("open a");
            let mut b = AfPacketSocket::open("b", &RingConfig::default()).expect("open b");
            assert_eq!((a.mac_addr(), b.mac_addr()), (mac_a, mac_b));
            assert_eq!(a.ifname(), "a");
            assert!(a.ifindex() > 0 && a.ifindex() != b.ifindex());
            assert_eq!(a.max_tx_frame_len(), 1500 + 14 + 4, "veth MTU 1500 caps the 2000-byte slot");
            assert!(format!("{a:?}").contains("\"a\""));

            for b_to_a in [true, false] {
                let (tx, rx, dst, src) =
                    if b_to_a { (&mut b, &mut a, mac_a, mac_b) } else { (&mut a, &mut b, mac_b, mac_a) };
                let frames: Vec<Vec<u8>> = [60usize, 64, 128, 1000, 1514]
                    .iter()
                    .enumerate()
                    .map(|(i, &len)| Frame::raw(dst, src, len, i as u32))
                    .collect();
                send_all(tx, &frames);
                let got = recv_tagged(rx, frames.len(), 64, Duration::from_secs(2));
                assert_eq!(got.len(), frames.len(), "received {} of {}", got.len(), frames.len());
                for ((bytes, flags), sent) in got.iter().zip(&frames) {
                    assert_eq!(bytes, sent, "frame {:?} altered", Frame::tag_of(sent));
                    assert_eq!(*flags, RxFlags::default());
                }
                // The sender does not read its own transmissions.
                let own = recv_tagged(tx, 1, 64, Duration::from_millis(100));
                assert!(own.is_empty(), "socket read back {} of its own frames", own.len());
                let (packets, drops) = rx.stats().expect("stats");
                assert!(packets >= frames.len() as u32 && drops == 0, "stats ({packets}, {drops})");
            }

            // PACKET_IGNORE_OUTGOING: frames others send on `a` through the qdisc (which taps
            // see as outgoing) are not read back either.
            let other = Frame::raw(mac_b, mac_a, 80, 77);
            test_net::send_through_qdisc("a", &other);
            assert_eq!(recv_tagged(&mut b, 1, 64, Duration::from_secs(2)).len(), 1);
            assert!(recv_tagged(&mut a, 1, 64, Duration::from_millis(100)).is_empty(), "outgoing frame read back");

            // Refused frames leave the ring untouched.
            assert!(!a.tx_send(&vec![0u8; a.max_tx_frame_len() + 1]));
            assert!(!a.tx_send(&[0u8; 13]));
            a.tx_flush().expect("flush with nothing pending");
            assert!(!a.wait_readable(0).expect("poll"));
        });
    }

    /// A tagged frame crosses the veth pair; the receiving kernel takes the tag out of the
    /// bytes into the packet's auxdata (`skb_vlan_untag`), which `rx_burst` reports, and
    /// [`crate::wire::vlan::copy_tagged`] restores the frame as it was sent (802.1Q and
    /// 802.1ad TPIDs).
    #[test]
    fn stripped_vlan_tags_are_reported() {
        let Some(ns) = ns_or_skip("afp-vlan") else { return };
        ns.run(|| {
            let mut a = AfPacketSocket::open("a", &RingConfig::default()).expect("open a");
            let mut b = AfPacketSocket::open("b", &RingConfig::default()).expect("open b");
            let (dst, src) = (a.mac_addr(), b.mac_addr());
            for (i, (tpid, tci)) in [(0x8100u16, 100u16), (0x8100, (5 << 13) | 42), (0x88a8, 7)].into_iter().enumerate()
            {
                let plain = Frame::raw(dst, src, 200, 500 + i as u32);
                let sent = crate::frames::tagged(&plain, tpid, tci);
                send_all(&mut b, std::slice::from_ref(&sent));
                let got = recv_tagged(&mut a, 1, 64, Duration::from_secs(2));
                assert_eq!(got.len(), 1, "tagged frame {tpid:#x}/{tci} not received");
                let (bytes, flags) = &got[0];
                assert_eq!((flags.vlan_tci, flags.vlan_tpid), (Some(tci), tpid));
                assert_eq!(bytes, &plain, "the kernel removed the tag from the bytes");
                let mut restored = [0u8; 2048];
                let n = crate::wire::vlan::copy_tagged(&mut restored, bytes, flags.vlan_tpid, tci).unwrap();
                assert_eq!(&restored[..n], &sent[..]);
            }
        });
    }

    /// Frames handed out in the ring ([`AfPacketSocket::rx_frames`]): each with its stripped
    /// tag back, at least `MIN_BUFFER` bytes and 4 more than its length of room, and
    /// writing all of that room — in arrival order, as the pipeline would — never touches
    /// the frames after it. Small blocks make many frames the last of their block, whose
    /// room ends with the block: those go to spare buffers when it is too small.
    #[test]
    fn frames_are_rewritten_in_place_in_the_ring() {
        let Some(ns) = ns_or_skip("afp-inplace") else { return };
        ns.run(|| {
            let cfg = RingConfig { block_size: 8192, block_count: 4, ..RingConfig::default() };
            let mut a = AfPacketSocket::open("a", &cfg).expect("open a");
            let mut b = AfPacketSocket::open("b", &cfg).expect("open b");
            let (dst, src) = (a.mac_addr(), b.mac_addr());
            let ring = a.ring.as_ptr() as usize..a.ring.as_ptr() as usize + a.layout.rx_len();
            let sizes = [60usize, 64, 42, 200, 1000, 1514, 128, 700];
            let sent: Vec<Vec<u8>> = (0..120u32)
                .map(|i| {
                    let f = Frame::raw(dst, src, sizes[i as usize % sizes.len()].max(26), i);
                    if i % 3 == 0 {
                        crate::frames::tagged(&f, 0x8100, 100 + i as u16)
                    } else {
                        f
                    }
                })
                .collect();
            let (mut got, mut in_ring) = (0usize, 0usize);
            for chunk in sent.chunks(10) {
                send_all(&mut b, chunk);
                let deadline = std::time::Instant::now() + Duration::from_secs(2);
                let (mut frames, mut ours) = (Vec::new(), 0);
                while ours < chunk.len() && std::time::Instant::now() < deadline {
                    // SAFETY: the frames are dropped (`frames.clear()`) before `release_rx`.
                    let (_, skipped) = unsafe {
                        a.rx_frames(3, |f, len, flags| {
                            assert_eq!(flags.vlan_tci, None, "the tag is back in the frame");
                            ours += usize::from(Frame::tag_of(&f.as_ref()[..len]).is_some());
                            frames.push((f, len));
                        })
                    };
                    assert_eq!(skipped, 0);
                    let _ = a.wait_readable(1);
                }
                for (f, len) in &mut frames {
                    let addr = f.as_ref().as_ptr() as usize;
                    in_ring += usize::from(ring.contains(&addr));
                    let room = f.as_mut();
                    let Some(tag) = Frame::tag_of(&room[..*len]) else { continue };
                    assert_eq!(&room[..*len], &sent[tag as usize][..], "frame {tag} intact");
                    assert!(room.len() >= MIN_BUFFER.max(*len + VLAN_HLEN), "frame {tag}: room {}", room.len());
                    // The pipeline may write all of it.
                    room[*len..].fill(0xa5);
                    got += 1;
                }
                frames.clear();
                a.release_rx();
            }
            assert_eq!(got, sent.len());
            assert!(in_ring > sent.len() * 3 / 4, "{in_ring} of {} frames processed in the ring", sent.len());
        });
    }

    /// More frames than one receive block and than the transmit ring hold, in rounds, with
    /// partial bursts: exercises block hand-back, the saved position inside a block, and
    /// transmit slot reuse.
    #[test]
    fn rings_wrap() {
        let Some(ns) = ns_or_skip("afp-wrap") else { return };
        ns.run(|| {
            let cfg = RingConfig {
                block_size: 4096,
                block_count: 4,
                frame_size: 2048,
                retire_timeout_ms: 1,
                tx_frame_count: 8,
            };
            let mut a = AfPacketSocket::open("a", &cfg).expect("open a");
            let mut b = AfPacketSocket::open("b", &cfg).expect("open b");
            let (dst, src) = (a.mac_addr(), b.mac_addr());
            let tx_slots = b.layout.tx_frame_count();
            assert_eq!(tx_slots, 8);

            // Without a flush, the ring holds exactly `tx_slots` frames.
            let probe: Vec<Vec<u8>> = (0..20).map(|i| Frame::raw(dst, src, 100, 100_000 + i)).collect();
            let accepted = probe.iter().take_while(|f| b.tx_send(f)).count();
            assert_eq!(accepted, tx_slots);
            b.tx_flush().expect("flush");
            let got = recv_tagged(&mut a, tx_slots, 3, Duration::from_secs(2));
            assert_eq!(got.len(), tx_slots);

            let sizes = [60usize, 300, 1000, 150, 700];
            let mut next = 0u32;
            for _round in 0..10 {
                let frames: Vec<Vec<u8>> = (0..40)
                    .map(|_| {
                        next += 1;
                        Frame::raw(dst, src, sizes[next as usize % sizes.len()], next)
                    })
                    .collect();
                // Chunks small enough for the 4-block receive ring.
                for chunk in frames.chunks(8) {
                    send_all(&mut b, chunk);
                    let got = recv_tagged(&mut a, chunk.len(), 3, Duration::from_secs(2));
                    assert_eq!(got.len(), chunk.len(), "lost frames around tag {}", next);
                    for ((bytes, flags), sent) in got.iter().zip(chunk) {
                        assert_eq!(bytes, sent);
                        assert!(!flags.truncated);
                    }
                }
            }
            let (packets, drops) = a.stats().expect("stats");
            assert_eq!(drops, 0);
            assert!(packets >= 400, "tp_packets {packets}");
            assert_eq!(b.stats().expect("stats").1, 0);
        });
    }
}
