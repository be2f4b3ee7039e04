//! Toeplitz (RSS) hashing and RSS-predictable tuples (`rte_thash`): choosing the SNAT
//! port of a full-NAT flow so that the **reply** lands on the RX queue of the worker that
//! owns the flow (DESIGN.md, "keeping both directions of a flow on one worker").
//!
//! The NIC hashes a received IPv4 or IPv6 TCP/UDP packet over (src addr, dst addr, src
//! port, dst port) with the Toeplitz function and a key, and delivers it to RX queue
//! `reta[hash % reta.len()]`. A reply of a NATed flow is (endpoint → SNAT address), so
//! its hash input is (endpoint addr, SNAT addr, endpoint port, **SNAT port**) and we pick
//! the last field. `rte_thash` makes that cheap: a *helper* over the 16 bits of the
//! destination port (one per family: bits 80–95 of IPv4's 12-byte input, 272–287 of IPv6's
//! 36-byte one) rewrites a few bits of the key so that the low `log2(reta.len())`
//! bits of the hash can be set to any value by flipping the low bits of that port
//! (`rte_thash_adjust_tuple`). The key the NIC uses must therefore be the context's key
//! ([`Thash::key`]), pushed with `Port::rss_hash_update`, with the RETA the picker was
//! built for pushed with `Port::rss_reta_update`.
//!
//! Port ranges ([`ReplyPortPicker`]): with a RETA of 2^r entries, adjust_tuple forces
//! the low r bits of the port and keeps its upper 16 − r bits (a "block" of 2^r ports);
//! when the check callback rejects a candidate it adds one to the upper bits (mod
//! 2^(16−r)) and tries again. A configured range `[min, max]` is a run of blocks whose
//! first and last may be partial; a candidate in a partial block can fall outside the
//! range, so the callback rejects out-of-range ports, and the picker walks only the
//! blocks the range touches (from the start port's block to the last, then from the
//! first block back to the start), so every block is tried once per RETA index.
//! Each RETA index pointing at the worker's queue gives one port per block, so a worker
//! can use every port of the range whose reply hashes to its queue.

use std::any::Any;
use std::ffi::{c_int, c_void, CString};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::RangeInclusive;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::eal::Eal;
use crate::error::{self, Error, Result};
use crate::ffi;

/// The longest hash input adjust_tuple accepts: an IPv6 TCP/UDP tuple (`RTE_THASH_V6_L4_LEN`
/// words), the longest a NIC hashes. Newer DPDK releases copy the tuple into a fixed stack
/// array of about this size.
const MAX_TUPLE_LEN: usize = 36;

/// Distinguishes contexts, so a [`Helper`] is only used with the context that made it.
static NEXT_CONTEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Software Toeplitz hash of `tuple` (32-bit words in host byte order, as
/// [`Ipv4Tuple::words`] makes them) with `key` (bytes as given to the NIC):
/// `rte_softrss`, which matches the NIC's RSS hash.
///
/// # Panics
/// When `key` is shorter than `4 * (tuple.len() + 1)` bytes (the hash of word `j` reads
/// key words `j` and `j + 1`).
#[inline]
pub fn softrss(tuple: &[u32], key: &[u8]) -> u32 {
    assert!(
        key.len() >= 4 * (tuple.len() + 1),
        "softrss: a {}-byte key is too short for {} tuple words",
        key.len(),
        tuple.len()
    );
    // rte_softrss takes a non-const pointer but only reads the tuple.
    let mut words = [0u32; 16];
    let n = tuple.len();
    if n <= words.len() {
        words[..n].copy_from_slice(tuple);
        // SAFETY: words holds n valid u32s; key holds at least 4 * (n + 1) bytes (checked),
        // all rte_softrss reads; it does not write.
        unsafe { ffi::rte_softrss(words.as_mut_ptr(), n as u32, key.as_ptr()) }
    } else {
        let mut owned = tuple.to_vec();
        // SAFETY: as above, with the tuple copied to the heap.
        unsafe { ffi::rte_softrss(owned.as_mut_ptr(), n as u32, key.as_ptr()) }
    }
}

/// The RX queue the NIC delivers a packet with RSS hash `hash` to: `reta[hash % len]`
/// (the low bits of the hash for a power-of-two RETA, as NICs do).
///
/// # Panics
/// When `reta` is empty.
#[inline]
pub fn reta_queue(hash: u32, reta: &[u16]) -> u16 {
    reta[hash as usize % reta.len()]
}

/// A RETA spreading `queues` queues round-robin over `size` entries (`i % queues`).
///
/// # Panics
/// When `queues` is 0.
pub fn spread_reta(size: usize, queues: u16) -> Vec<u16> {
    assert!(queues > 0, "spread_reta: no queue");
    (0..size).map(|i| (i % usize::from(queues)) as u16).collect()
}

/// An IPv4 TCP/UDP 4-tuple as the NIC hashes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Tuple {
    /// Source address.
    pub src_addr: Ipv4Addr,
    /// Destination address.
    pub dst_addr: Ipv4Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl Ipv4Tuple {
    /// Length of the hash input in bytes.
    pub const LEN: usize = 12;
    /// Bit offset of the source port in the hash input.
    pub const SRC_PORT_OFFSET_BITS: u32 = 64;
    /// Bit offset of the destination port in the hash input.
    pub const DST_PORT_OFFSET_BITS: u32 = 80;
    /// Width of a port in bits.
    pub const PORT_BITS: u32 = 16;

    /// The hash input as [`softrss`] takes it: host-order words (src addr, dst addr,
    /// src port << 16 | dst port) — `struct rte_ipv4_tuple`.
    pub fn words(&self) -> [u32; 3] {
        [u32::from(self.src_addr), u32::from(self.dst_addr), u32::from(self.src_port) << 16 | u32::from(self.dst_port)]
    }

    /// The hash input in network byte order, as on the wire (what
    /// [`Thash::adjust_tuple`] rewrites).
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..4].copy_from_slice(&self.src_addr.octets());
        b[4..8].copy_from_slice(&self.dst_addr.octets());
        b[8..10].copy_from_slice(&self.src_port.to_be_bytes());
        b[10..12].copy_from_slice(&self.dst_port.to_be_bytes());
        b
    }

    /// The inverse of [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Self {
        Self {
            src_addr: Ipv4Addr::new(b[0], b[1], b[2], b[3]),
            dst_addr: Ipv4Addr::new(b[4], b[5], b[6], b[7]),
            src_port: u16::from_be_bytes([b[8], b[9]]),
            dst_port: u16::from_be_bytes([b[10], b[11]]),
        }
    }

    /// The tuple of the other direction.
    pub fn reversed(&self) -> Self {
        Self { src_addr: self.dst_addr, dst_addr: self.src_addr, src_port: self.dst_port, dst_port: self.src_port }
    }
}

/// An IPv6 TCP/UDP 4-tuple as the NIC hashes it (`RTE_ETH_RSS_NONFRAG_IPV6_TCP` / `_UDP`:
/// no extension header is hashed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Tuple {
    /// Source address.
    pub src_addr: Ipv6Addr,
    /// Destination address.
    pub dst_addr: Ipv6Addr,
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

impl Ipv6Tuple {
    /// Length of the hash input in bytes (`RTE_THASH_V6_L4_LEN` words).
    pub const LEN: usize = 36;
    /// Bit offset of the source port in the hash input.
    pub const SRC_PORT_OFFSET_BITS: u32 = 256;
    /// Bit offset of the destination port in the hash input.
    pub const DST_PORT_OFFSET_BITS: u32 = 272;

    /// The hash input as [`softrss`] takes it: host-order words (the source address's
    /// four, the destination's four, src port << 16 | dst port) — `struct rte_ipv6_tuple`
    /// after `rte_thash_load_v6_addrs`.
    pub fn words(&self) -> [u32; 9] {
        let mut w = [0u32; 9];
        let (s, d) = (self.src_addr.octets(), self.dst_addr.octets());
        for i in 0..4 {
            w[i] = u32::from_be_bytes([s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]]);
            w[4 + i] = u32::from_be_bytes([d[4 * i], d[4 * i + 1], d[4 * i + 2], d[4 * i + 3]]);
        }
        w[8] = u32::from(self.src_port) << 16 | u32::from(self.dst_port);
        w
    }

    /// The hash input in network byte order, as on the wire (what
    /// [`Thash::adjust_tuple`] rewrites).
    pub fn to_bytes(&self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0..16].copy_from_slice(&self.src_addr.octets());
        b[16..32].copy_from_slice(&self.dst_addr.octets());
        b[32..34].copy_from_slice(&self.src_port.to_be_bytes());
        b[34..36].copy_from_slice(&self.dst_port.to_be_bytes());
        b
    }

    /// The inverse of [`to_bytes`](Self::to_bytes).
    pub fn from_bytes(b: &[u8; Self::LEN]) -> Self {
        let addr = |at: usize| Ipv6Addr::from(<[u8; 16]>::try_from(&b[at..at + 16]).expect("16 bytes"));
        Self {
            src_addr: addr(0),
            dst_addr: addr(16),
            src_port: u16::from_be_bytes([b[32], b[33]]),
            dst_port: u16::from_be_bytes([b[34], b[35]]),
        }
    }
}

/// Options of [`Thash::new`] (`RTE_THASH_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ThashFlags {
    /// Rewrite only the `2·log2(reta) − 1` key bits a helper needs (`RTE_THASH_MINIMAL_SEQ`)
    /// instead of `len + 31`: more of the base key survives.
    pub minimal_seq: bool,
    /// Allow helpers whose bit sequence exceeds the LFSR period
    /// (`RTE_THASH_IGNORE_PERIOD_OVERFLOW`).
    pub ignore_period_overflow: bool,
}

/// An `rte_thash` context: a Toeplitz key being shaped by helpers, one per subtuple whose
/// bits will be adjusted. Adjusting is thread-safe (`&self`); adding helpers is not
/// (`&mut self`).
pub struct Thash {
    ctx: NonNull<ffi::rte_thash_ctx>,
    id: u64,
    key_len: usize,
    reta_log2: u32,
    _eal: Eal,
}

// SAFETY: the context is heap memory of DPDK's, used through the thread-safe
// rte_thash_adjust_tuple / get_key from &self, and mutated (add_helper) only through
// &mut self.
unsafe impl Send for Thash {}
// SAFETY: as above.
unsafe impl Sync for Thash {}

impl Drop for Thash {
    fn drop(&mut self) {
        // SAFETY: the context is valid and no helper can be used after this (helpers are
        // only used through &self of this context).
        unsafe { ffi::rte_thash_free_ctx(self.ctx.as_ptr()) }
    }
}

impl std::fmt::Debug for Thash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Thash").field("key_len", &self.key_len).field("reta_log2", &self.reta_log2).finish()
    }
}

/// A subtuple helper of a [`Thash`] context (a token: valid with the context that made it).
#[derive(Debug, Clone, Copy)]
pub struct Helper {
    ptr: NonNull<ffi::rte_thash_subtuple_helper>,
    ctx_id: u64,
    offset_bits: u32,
    len_bits: u32,
}

// SAFETY: a Helper is an opaque token; it is dereferenced only by DPDK inside
// rte_thash_adjust_tuple, through &Thash of the context owning it (checked by ctx_id).
unsafe impl Send for Helper {}
// SAFETY: as above.
unsafe impl Sync for Helper {}

impl Helper {
    /// Bit offset of the subtuple in the hash input.
    pub fn offset_bits(&self) -> u32 {
        self.offset_bits
    }

    /// Length of the subtuple in bits.
    pub fn len_bits(&self) -> u32 {
        self.len_bits
    }
}

/// The state the adjust callback trampoline works on.
struct CheckState<'a, F> {
    check: &'a mut F,
    tuple_len: usize,
    panic: Option<Box<dyn Any + Send>>,
}

/// `rte_thash_check_tuple_t` calling a Rust closure.
///
/// # Safety
/// `userdata` points to a live `CheckState<F>` not otherwise borrowed during the call,
/// and `tuple` to `tuple_len` readable bytes.
unsafe extern "C" fn check_trampoline<F: FnMut(&[u8]) -> bool>(userdata: *mut c_void, tuple: *mut u8) -> c_int {
    // SAFETY: per this function's contract (adjust_tuple passes a pointer to its own
    // CheckState and the tuple buffer it lent to DPDK, which DPDK does not write during
    // the callback).
    let (state, tuple) = unsafe {
        let state = &mut *userdata.cast::<CheckState<'_, F>>();
        let tuple = std::slice::from_raw_parts(tuple.cast_const(), state.tuple_len);
        (state, tuple)
    };
    if state.panic.is_some() {
        return 0;
    }
    match catch_unwind(AssertUnwindSafe(|| (state.check)(tuple))) {
        Ok(ok) => c_int::from(ok),
        Err(p) => {
            state.panic = Some(p);
            0
        }
    }
}

impl Thash {
    /// Creates a context named `name` (unique in the process) starting from `key` (the
    /// NIC's key length, usually 40 bytes), for a RETA of `reta_size` entries (a power of
    /// two from 4 to 65536).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`]; [`Error::Dpdk`] (`EEXIST` for a taken name, `ENOMEM`).
    pub fn new(eal: &Eal, name: &str, key: &[u8], reta_size: u32, flags: ThashFlags) -> Result<Self> {
        if !reta_size.is_power_of_two() || !(4..=65536).contains(&reta_size) {
            return Err(Error::InvalidArgument(format!(
                "thash {name}: RETA size {reta_size} is not a power of two in 4..=65536"
            )));
        }
        if key.is_empty() || key.len() > 255 {
            return Err(Error::InvalidArgument(format!("thash {name}: key of {} bytes", key.len())));
        }
        let cname =
            CString::new(name).map_err(|_| Error::InvalidArgument(format!("thash name {name:?} contains NUL")))?;
        let reta_log2 = reta_size.trailing_zeros();
        let mut raw_flags = 0;
        if flags.minimal_seq {
            raw_flags |= ffi::RTE_THASH_MINIMAL_SEQ;
        }
        if flags.ignore_period_overflow {
            raw_flags |= ffi::RTE_THASH_IGNORE_PERIOD_OVERFLOW;
        }
        let mut key_copy = key.to_vec();
        // SAFETY: cname is NUL-terminated; key_copy holds key_len bytes, which DPDK copies
        // into the context; EAL is initialised (we hold a handle).
        let ctx = unsafe {
            ffi::rte_thash_init_ctx(cname.as_ptr(), key.len() as u32, reta_log2, key_copy.as_mut_ptr(), raw_flags)
        };
        let ctx = NonNull::new(ctx).ok_or_else(|| error::last(format!("rte_thash_init_ctx({name:?})")))?;
        Ok(Self {
            ctx,
            id: NEXT_CONTEXT_ID.fetch_add(1, Ordering::Relaxed),
            key_len: key.len(),
            reta_log2,
            _eal: eal.clone(),
        })
    }

    /// log2 of the RETA size the context was made for.
    pub fn reta_log2(&self) -> u32 {
        self.reta_log2
    }

    /// The context's key: the one to give the NIC. Changes with every helper added.
    pub fn key(&self) -> &[u8] {
        // SAFETY: rte_thash_get_key returns the context's key_len-byte key, which lives as
        // long as the context and changes only in add_helper (&mut self).
        unsafe { std::slice::from_raw_parts(ffi::rte_thash_get_key(self.ctx.as_ptr()), self.key_len) }
    }

    /// Adds a helper for the `len_bits`-bit subtuple at bit `offset_bits` of the hash
    /// input (e.g. [`Ipv4Tuple::DST_PORT_OFFSET_BITS`], [`Ipv4Tuple::PORT_BITS`]),
    /// rewriting part of the key.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `len_bits` is shorter than log2 of the RETA size,
    /// or the key is too short (`offset + len + 31` bits needed); [`Error::Dpdk`] for a
    /// taken name or a clash with another helper's key bits.
    pub fn add_helper(&mut self, name: &str, len_bits: u32, offset_bits: u32) -> Result<Helper> {
        if len_bits < self.reta_log2 || len_bits > 32 {
            return Err(Error::InvalidArgument(format!(
                "thash helper {name}: {len_bits} bits; needs {}..=32",
                self.reta_log2
            )));
        }
        if u64::from(offset_bits) + u64::from(len_bits) + 31 > self.key_len as u64 * 8 {
            return Err(Error::InvalidArgument(format!(
                "thash helper {name}: a {}-byte key is too short for {len_bits} bits at {offset_bits}",
                self.key_len
            )));
        }
        let cname =
            CString::new(name).map_err(|_| Error::InvalidArgument(format!("helper name {name:?} contains NUL")))?;
        // SAFETY: valid context, exclusively borrowed (add_helper is not thread-safe);
        // cname is NUL-terminated.
        let ret = unsafe { ffi::rte_thash_add_helper(self.ctx.as_ptr(), cname.as_ptr(), len_bits, offset_bits) };
        error::check(ret, || format!("rte_thash_add_helper({name:?}, {len_bits} bits at {offset_bits})"))?;
        // SAFETY: valid context; cname is NUL-terminated.
        let ptr = unsafe { ffi::rte_thash_get_helper(self.ctx.as_ptr(), cname.as_ptr()) };
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| Error::InvalidArgument(format!("thash helper {name:?} not found after adding it")))?;
        Ok(Helper { ptr, ctx_id: self.id, offset_bits, len_bits })
    }

    /// Rewrites the low log2(RETA size) bits of `helper`'s subtuple in `tuple` (the hash
    /// input in network byte order, a multiple of 4 bytes) so that the low bits of its
    /// Toeplitz hash under [`key`](Self::key) equal `desired`. When `check` rejects the
    /// result, adds one to the subtuple's remaining upper bits and tries again, up to
    /// `attempts` candidates (at most 2^(len − log2 RETA)). Returns whether a candidate
    /// was accepted; `tuple` then holds it (otherwise the last one rejected).
    ///
    /// A panic in `check` stops the search and is resumed after DPDK returns.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a helper of another context, a tuple of the wrong
    /// shape (not a multiple of 4 bytes, not covering the helper's bits, longer than 36
    /// bytes or too long for the key), or zero attempts; [`Error::Dpdk`] when DPDK refuses.
    pub fn adjust_tuple<F: FnMut(&[u8]) -> bool>(
        &self,
        helper: &Helper,
        tuple: &mut [u8],
        desired: u32,
        attempts: u32,
        mut check: F,
    ) -> Result<bool> {
        if helper.ctx_id != self.id {
            return Err(Error::InvalidArgument("thash helper belongs to another context".into()));
        }
        let max = MAX_TUPLE_LEN.min(self.key_len.saturating_sub(4));
        if tuple.is_empty() || !tuple.len().is_multiple_of(4) || tuple.len() > max {
            return Err(Error::InvalidArgument(format!(
                "thash tuple of {} bytes: needs a multiple of 4, at most {max} (with a {}-byte key)",
                tuple.len(),
                self.key_len
            )));
        }
        if (helper.offset_bits + helper.len_bits) as usize > tuple.len() * 8 {
            return Err(Error::InvalidArgument(format!(
                "thash tuple of {} bytes does not cover the helper's bits {}..{}",
                tuple.len(),
                helper.offset_bits,
                helper.offset_bits + helper.len_bits
            )));
        }
        if attempts == 0 {
            return Err(Error::InvalidArgument("thash adjust_tuple: zero attempts".into()));
        }
        let mut state = CheckState { check: &mut check, tuple_len: tuple.len(), panic: None };
        // SAFETY: context and helper are valid (helper made by this context, checked);
        // the tuple buffer is writable for tuple.len() bytes, covers the helper's bits and
        // is short enough for the key (checked); the callback gets `state`, which lives on
        // this stack frame for the whole call and is not touched here meanwhile.
        let ret = unsafe {
            ffi::rte_thash_adjust_tuple(
                self.ctx.as_ptr(),
                helper.ptr.as_ptr(),
                tuple.as_mut_ptr(),
                tuple.len() as u32,
                desired,
                attempts,
                Some(check_trampoline::<F>),
                (&raw mut state).cast::<c_void>(),
            )
        };
        if let Some(p) = state.panic {
            resume_unwind(p);
        }
        match ret {
            0 => Ok(true),
            r if r == -(ffi::EEXIST as c_int) => Ok(false),
            r => Err(error::dpdk("rte_thash_adjust_tuple", r)),
        }
    }
}

/// Picks SNAT ports so that replies land on a chosen RX queue: a [`Thash`] context with a
/// helper over the reply's destination port per family (see the module documentation), the
/// RETA it was built for, and the configured port range.
#[derive(Debug)]
pub struct ReplyPortPicker {
    thash: Thash,
    /// Over an IPv4 reply's destination port.
    helper: Helper,
    /// Over an IPv6 reply's destination port; `None` with a key too short for its bits
    /// (under 40 bytes): IPv6 replies are not steered then.
    helper6: Option<Helper>,
    reta: Vec<u16>,
    ports: RangeInclusive<u16>,
    /// RETA indices per queue.
    indices: Vec<Vec<u32>>,
}

impl ReplyPortPicker {
    /// A picker named `name` (unique in the process) shaping `base_key` (e.g. the port's
    /// current key, `Port::rss_hash_conf_get`) for `reta` (a power-of-two number of
    /// entries, 4..=65536, e.g. [`spread_reta`]) and SNAT ports in `ports`; for IPv6
    /// replies too when the key has 40 bytes or more ([`steers_ipv6`](Self::steers_ipv6)).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an empty range, a RETA of the wrong size or a key
    /// too short; [`Error::Dpdk`] when DPDK refuses.
    pub fn new(eal: &Eal, name: &str, base_key: &[u8], reta: Vec<u16>, ports: RangeInclusive<u16>) -> Result<Self> {
        if ports.is_empty() {
            return Err(Error::InvalidArgument(format!("reply port picker {name}: empty port range")));
        }
        let reta_size = u32::try_from(reta.len()).unwrap_or(0);
        let flags = ThashFlags { minimal_seq: true, ignore_period_overflow: false };
        let mut thash = Thash::new(eal, name, base_key, reta_size, flags)?;
        let helper = thash.add_helper("reply_dst_port", Ipv4Tuple::PORT_BITS, Ipv4Tuple::DST_PORT_OFFSET_BITS)?;
        // The IPv6 helper's key bits (272 to 318) lie beyond the IPv4 one's: the two shape
        // different parts of the one key.
        let bits6 = Ipv6Tuple::DST_PORT_OFFSET_BITS + Ipv4Tuple::PORT_BITS + 31;
        let helper6 = if base_key.len() * 8 >= bits6 as usize {
            Some(thash.add_helper("reply_dst_port6", Ipv4Tuple::PORT_BITS, Ipv6Tuple::DST_PORT_OFFSET_BITS)?)
        } else {
            None
        };
        let queues = reta.iter().copied().max().map_or(0, |m| usize::from(m) + 1);
        let mut indices = vec![Vec::new(); queues];
        for (i, &q) in reta.iter().enumerate() {
            indices[usize::from(q)].push(i as u32);
        }
        Ok(Self { thash, helper, helper6, reta, ports, indices })
    }

    /// Whether [`pick`](Self::pick) steers IPv6 replies (the key had room for the IPv6
    /// helper's bits).
    pub fn steers_ipv6(&self) -> bool {
        self.helper6.is_some()
    }

    /// The key to give the NIC (`Port::rss_hash_update`).
    pub fn key(&self) -> &[u8] {
        self.thash.key()
    }

    /// The RETA to give the NIC (`Port::rss_reta_update`).
    pub fn reta(&self) -> &[u16] {
        &self.reta
    }

    /// The SNAT port range.
    pub fn ports(&self) -> RangeInclusive<u16> {
        self.ports.clone()
    }

    /// The RX queue the NIC delivers `tuple` to under this picker's key and RETA.
    pub fn queue_of(&self, tuple: &Ipv4Tuple) -> u16 {
        reta_queue(softrss(&tuple.words(), self.key()), &self.reta)
    }

    /// [`queue_of`](Self::queue_of) for an IPv6 tuple.
    pub fn queue_of6(&self, tuple: &Ipv6Tuple) -> u16 {
        reta_queue(softrss(&tuple.words(), self.key()), &self.reta)
    }

    /// A SNAT port `p` in the range, with `usable(p)` true, such that the reply
    /// `endpoint → snat_addr:p` (both of one family) lands on RX queue `queue`. The search
    /// starts in the block of `start` (a port in the range; a rotating cursor spreads
    /// ports) and walks every block of the range once per RETA index of `queue`. `None`
    /// when no such port is usable, `queue` has no RETA entry, the two addresses' families
    /// differ, or the reply is IPv6 and the picker does not steer IPv6
    /// ([`steers_ipv6`](Self::steers_ipv6)).
    pub fn pick(
        &self,
        endpoint: SocketAddr,
        snat_addr: IpAddr,
        queue: u16,
        start: u16,
        mut usable: impl FnMut(u16) -> bool,
    ) -> Option<u16> {
        // The reply tuple's hash input (its destination port, the last two bytes, set per
        // run), its length, and the family's helper.
        let mut reply = [0u8; MAX_TUPLE_LEN];
        let (len, helper) = match (endpoint, snat_addr) {
            (SocketAddr::V4(e), IpAddr::V4(snat)) => {
                let t = Ipv4Tuple { src_addr: *e.ip(), dst_addr: snat, src_port: e.port(), dst_port: 0 };
                reply[..Ipv4Tuple::LEN].copy_from_slice(&t.to_bytes());
                (Ipv4Tuple::LEN, &self.helper)
            }
            (SocketAddr::V6(e), IpAddr::V6(snat)) => {
                let helper = self.helper6.as_ref()?;
                reply = Ipv6Tuple { src_addr: *e.ip(), dst_addr: snat, src_port: e.port(), dst_port: 0 }.to_bytes();
                (Ipv6Tuple::LEN, helper)
            }
            _ => return None,
        };
        let indices = self.indices.get(usize::from(queue)).filter(|i| !i.is_empty())?;
        let r = self.thash.reta_log2();
        let (min, max) = (*self.ports.start(), *self.ports.end());
        let start = if self.ports.contains(&start) { start } else { min };
        let (min_block, max_block, start_block) = (u32::from(min) >> r, u32::from(max) >> r, u32::from(start) >> r);
        let ports = &self.ports;
        let mut check = |t: &[u8]| {
            let port = u16::from_be_bytes([t[len - 2], t[len - 1]]);
            ports.contains(&port) && usable(port)
        };
        // Rotate the first RETA index with the start port's low bits (which adjust_tuple
        // overwrites anyway), so successive starts spread over the queue's indices.
        let low = usize::from(start) & ((1usize << r) - 1);
        for k in 0..indices.len() {
            let desired = indices[(low + k) % indices.len()];
            // From the start block to the last block of the range, then from the first
            // block up to the start block.
            let runs = [(start, max_block - start_block + 1), ((min_block << r) as u16, start_block - min_block)];
            for (from, attempts) in runs {
                if attempts == 0 {
                    continue;
                }
                let mut tuple = reply;
                let tuple = &mut tuple[..len];
                tuple[len - 2..].copy_from_slice(&from.to_be_bytes());
                match self.thash.adjust_tuple(helper, tuple, desired, attempts, &mut check) {
                    Ok(true) => return Some(u16::from_be_bytes([tuple[len - 2], tuple[len - 1]])),
                    Ok(false) => {}
                    // Arguments are validated at construction; an error here means none fits.
                    Err(_) => return None,
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};
    use std::net::SocketAddrV4;

    use super::*;
    use crate::flags::RssHf;
    use crate::mempool::{Mempool, DEFAULT_DATA_ROOM};
    use crate::port::{Port, PortConfig};
    use crate::testing::{self, Rng};

    /// The key of Microsoft's RSS specification ("Verifying the RSS hash calculation"),
    /// also many NICs' default.
    const MS_KEY: [u8; 40] = [
        0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3, 0x8f, 0xb0, 0xd0, 0xca,
        0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3, 0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b,
        0xbe, 0xac, 0x01, 0xfa,
    ];

    /// (destination, source, IPv4 hash, IPv4 with TCP hash) from that specification.
    const MS_VECTORS: [(&str, &str, u32, u32); 5] = [
        ("161.142.100.80:1766", "66.9.149.187:2794", 0x323e_8fc2, 0x51cc_c178),
        ("65.69.140.83:4739", "199.92.111.2:14230", 0xd718_262a, 0xc626_b0ea),
        ("12.22.207.184:38024", "24.19.198.95:12898", 0xd2d0_a5de, 0x5c2b_394a),
        ("209.142.163.6:2217", "38.27.205.30:48228", 0x8298_9176, 0xafc7_327f),
        ("202.188.127.2:1303", "153.39.163.191:44251", 0x5d18_09c5, 0x10e8_28a2),
    ];

    /// An independent Toeplitz hash over bytes in network order: for every set input bit
    /// `i` (most significant first), XOR in the 32 key bits starting at bit `i`.
    fn toeplitz(input: &[u8], key: &[u8]) -> u32 {
        let key_bit = |i: usize| u32::from(key[i / 8] >> (7 - i % 8) & 1);
        let mut h = 0;
        for i in 0..input.len() * 8 {
            if input[i / 8] >> (7 - i % 8) & 1 == 1 {
                h ^= (0..32).fold(0u32, |w, k| w << 1 | key_bit(i + k));
            }
        }
        h
    }

    fn tuple(src: &str, dst: &str) -> Ipv4Tuple {
        let (s, d): (SocketAddrV4, SocketAddrV4) = (src.parse().unwrap(), dst.parse().unwrap());
        Ipv4Tuple { src_addr: *s.ip(), dst_addr: *d.ip(), src_port: s.port(), dst_port: d.port() }
    }

    fn random_tuple(rng: &mut Rng) -> Ipv4Tuple {
        Ipv4Tuple {
            src_addr: Ipv4Addr::from(rng.next_u32()),
            dst_addr: Ipv4Addr::from(rng.next_u32()),
            src_port: rng.next_u32() as u16,
            dst_port: rng.next_u32() as u16,
        }
    }

    #[test]
    fn softrss_matches_the_rss_specification_vectors() {
        for (dst, src, l3, l3l4) in MS_VECTORS {
            let t = tuple(src, dst);
            assert_eq!(softrss(&t.words()[..2], &MS_KEY), l3, "{src} -> {dst} IPv4");
            assert_eq!(softrss(&t.words(), &MS_KEY), l3l4, "{src} -> {dst} IPv4/TCP");
            assert_eq!(toeplitz(&t.to_bytes(), &MS_KEY), l3l4, "the reference agrees");
        }
        let mut rng = Rng::new(7);
        for _ in 0..1000 {
            let t = random_tuple(&mut rng);
            assert_eq!(softrss(&t.words(), &MS_KEY), toeplitz(&t.to_bytes(), &MS_KEY), "{t:?}");
            assert_eq!(Ipv4Tuple::from_bytes(&t.to_bytes()), t);
        }
        assert_eq!(reta_queue(0x51cc_c178, &spread_reta(128, 4)), (0x78 % 4) as u16);
    }

    #[test]
    fn softrss_of_ipv6_tuples_is_the_toeplitz_hash_of_their_bytes() {
        let mut rng = Rng::new(17);
        let addr = |rng: &mut Rng| {
            Ipv6Addr::from(
                u128::from(rng.next_u32()) << 96 | u128::from(rng.next_u32()) << 64 | u128::from(rng.next_u32()),
            )
        };
        for _ in 0..1000 {
            let t = Ipv6Tuple {
                src_addr: addr(&mut rng),
                dst_addr: addr(&mut rng),
                src_port: rng.next_u32() as u16,
                dst_port: rng.next_u32() as u16,
            };
            assert_eq!(softrss(&t.words(), &MS_KEY), toeplitz(&t.to_bytes(), &MS_KEY), "{t:?}");
            assert_eq!(softrss(&t.words()[..8], &MS_KEY), toeplitz(&t.to_bytes()[..32], &MS_KEY), "addresses only");
            assert_eq!(Ipv6Tuple::from_bytes(&t.to_bytes()), t);
        }
    }

    #[test]
    fn adjust_tuple_sets_the_low_bits_of_the_hash() {
        let eal = testing::eal();
        let mut th =
            Thash::new(eal, "t_adjust", &MS_KEY, 128, ThashFlags { minimal_seq: true, ..Default::default() }).unwrap();
        let h = th.add_helper("dport", Ipv4Tuple::PORT_BITS, Ipv4Tuple::DST_PORT_OFFSET_BITS).unwrap();
        assert_eq!((h.offset_bits(), h.len_bits(), th.reta_log2()), (80, 16, 7));
        // With RTE_THASH_MINIMAL_SEQ only the 2*7-1 key bits ending at bit 80+16+31 change.
        for (i, (a, b)) in th.key().iter().zip(MS_KEY).enumerate() {
            if !(14..=15).contains(&i) {
                assert_eq!(*a, b, "key byte {i} outside the helper's bits changed");
            }
        }
        let key = th.key().to_vec();
        let mut rng = Rng::new(11);
        for _ in 0..2000 {
            let t = random_tuple(&mut rng);
            let desired = rng.next_u32() % 128;
            let mut bytes = t.to_bytes();
            assert!(th.adjust_tuple(&h, &mut bytes, desired, 1, |_| true).unwrap());
            let adjusted = Ipv4Tuple::from_bytes(&bytes);
            assert_eq!(softrss(&adjusted.words(), &key) % 128, desired, "{t:?} -> {adjusted:?}");
            assert_eq!(toeplitz(&bytes, &key) % 128, desired);
            assert_eq!(Ipv4Tuple { dst_port: t.dst_port, ..adjusted }, t, "only the destination port changes");
            assert_eq!(adjusted.dst_port >> 7, t.dst_port >> 7, "only its low 7 bits");
        }
        // Rejected candidates: each next one has the port's upper bits plus one.
        let t = Ipv4Tuple { dst_port: 0xfe80, ..random_tuple(&mut rng) };
        let mut seen = Vec::new();
        let mut bytes = t.to_bytes();
        let ok = th
            .adjust_tuple(&h, &mut bytes, 5, 8, |c| {
                seen.push(Ipv4Tuple::from_bytes(c.try_into().unwrap()).dst_port);
                seen.len() == 4
            })
            .unwrap();
        assert!(ok);
        assert_eq!(seen.iter().map(|p| p >> 7).collect::<Vec<_>>(), vec![0x1fd, 0x1fe, 0x1ff, 0x000], "wraps");
        assert!(seen.iter().all(|&p| softrss(&Ipv4Tuple { dst_port: p, ..t }.words(), &key) % 128 == 5));
        assert_eq!(Ipv4Tuple::from_bytes(&bytes).dst_port, seen[3]);
        let mut bytes = t.to_bytes();
        assert!(!th.adjust_tuple(&h, &mut bytes, 5, 3, |_| false).unwrap(), "every candidate rejected");
    }

    #[test]
    fn thash_arguments_are_checked() {
        let eal = testing::eal();
        assert!(matches!(
            Thash::new(eal, "t_bad_reta", &MS_KEY, 100, ThashFlags::default()),
            Err(Error::InvalidArgument(_))
        ));
        let mut a = Thash::new(eal, "t_args_a", &MS_KEY, 64, ThashFlags::default()).unwrap();
        assert!(Thash::new(eal, "t_args_a", &MS_KEY, 64, ThashFlags::default()).is_err(), "names are unique");
        let mut b = Thash::new(eal, "t_args_b", &MS_KEY, 64, ThashFlags::default()).unwrap();
        assert!(matches!(a.add_helper("short", 5, 80), Err(Error::InvalidArgument(_))), "shorter than log2(RETA)");
        assert!(matches!(a.add_helper("far", 16, 300), Err(Error::InvalidArgument(_))), "beyond the key");
        let ha = a.add_helper("dport", 16, 80).unwrap();
        let hb = b.add_helper("dport", 16, 80).unwrap();
        let mut t = [0u8; 12];
        assert!(
            matches!(a.adjust_tuple(&hb, &mut t, 1, 1, |_| true), Err(Error::InvalidArgument(_))),
            "foreign helper"
        );
        assert!(
            matches!(a.adjust_tuple(&ha, &mut t[..8], 1, 1, |_| true), Err(Error::InvalidArgument(_))),
            "short tuple"
        );
        assert!(matches!(a.adjust_tuple(&ha, &mut t[..10], 1, 1, |_| true), Err(Error::InvalidArgument(_))));
        assert!(matches!(a.adjust_tuple(&ha, &mut [0u8; 40], 1, 1, |_| true), Err(Error::InvalidArgument(_))), "long");
        assert!(matches!(a.adjust_tuple(&ha, &mut t, 1, 0, |_| true), Err(Error::InvalidArgument(_))));
        assert!(a.adjust_tuple(&ha, &mut t, 1, 1, |_| true).unwrap());
    }

    #[test]
    #[should_panic(expected = "boom")]
    fn a_panicking_check_resumes_after_dpdk_returns() {
        let mut th = Thash::new(testing::eal(), "t_panic", &MS_KEY, 128, ThashFlags::default()).unwrap();
        let h = th.add_helper("dport", 16, 80).unwrap();
        let _ = th.adjust_tuple(&h, &mut [0u8; 12], 3, 4, |_| panic!("boom"));
    }

    /// The queue `picker` says the reply `endpoint → snat:p` reaches (either family).
    fn reply_queue(picker: &ReplyPortPicker, endpoint: SocketAddr, snat: IpAddr, p: u16) -> u16 {
        match (endpoint, snat) {
            (SocketAddr::V4(e), IpAddr::V4(s)) => {
                picker.queue_of(&Ipv4Tuple { src_addr: *e.ip(), dst_addr: s, src_port: e.port(), dst_port: p })
            }
            (SocketAddr::V6(e), IpAddr::V6(s)) => {
                picker.queue_of6(&Ipv6Tuple { src_addr: *e.ip(), dst_addr: s, src_port: e.port(), dst_port: p })
            }
            _ => unreachable!("one family"),
        }
    }

    /// Every port of `ports` is found for exactly the queue its reply hashes to, and
    /// nothing outside `ports` is ever offered.
    fn exhaust(picker: &ReplyPortPicker, endpoint: SocketAddr, snat: IpAddr, queues: u16) -> HashMap<u16, u16> {
        let mut owner = HashMap::new();
        for q in 0..queues {
            let mut start = *picker.ports().start();
            while let Some(p) = picker.pick(endpoint, snat, q, start, |p| !owner.contains_key(&p)) {
                assert!(picker.ports().contains(&p), "port {p} outside {:?}", picker.ports());
                assert_eq!(reply_queue(picker, endpoint, snat, p), q);
                assert!(owner.insert(p, q).is_none());
                start = start.wrapping_add(97).max(*picker.ports().start());
            }
        }
        owner
    }

    #[test]
    fn picked_ports_cover_the_range_and_stay_in_it() {
        let eal = testing::eal();
        let block = ReplyPortPicker::new(eal, "t_pick_block", &MS_KEY, spread_reta(128, 4), 40064..=40191).unwrap();
        let partial = ReplyPortPicker::new(eal, "t_pick_partial", &MS_KEY, spread_reta(128, 3), 30000..=30999).unwrap();
        assert!(block.steers_ipv6() && partial.steers_ipv6(), "a 40-byte key has room for both helpers");
        let families: [(SocketAddr, IpAddr); 2] = [
            ("10.70.0.11:8080".parse().unwrap(), "10.70.0.1".parse().unwrap()),
            ("[fd00:70::11]:8080".parse().unwrap(), "fd00:70::1".parse().unwrap()),
        ];
        for (endpoint, snat) in families {
            // One whole block of 128 ports: 32 per queue of 4 (32 RETA entries each).
            let owner = exhaust(&block, endpoint, snat, 4);
            assert_eq!(owner.len(), 128, "{endpoint}: every port of the block is found");
            for q in 0..4 {
                assert_eq!(owner.values().filter(|&&o| o == q).count(), 32, "{endpoint}: queue {q}");
            }
            // A range with partial blocks at both ends (30000 = 234*128 + 48, 30999 = 242*128 + 23).
            let owner = exhaust(&partial, endpoint, snat, 3);
            assert_eq!(owner.len(), 1000, "{endpoint}: every port of the range is found, none outside");
            assert_eq!(partial.pick(endpoint, snat, 3, 30000, |_| true), None, "queue without RETA entries");
            // A start outside the range is moved into it.
            let p = partial.pick(endpoint, snat, 1, 1, |_| true).unwrap();
            assert!((30000..=30999).contains(&p));
        }
        let (v4, v6) = (families[0], families[1]);
        assert_eq!(block.pick(v4.0, v6.1, 0, 40064, |_| true), None, "families mixed");
        assert_eq!(block.pick(v6.0, v4.1, 0, 40064, |_| true), None, "families mixed");
        // A 36-byte key (shorter than most NICs') has no room for the IPv6 helper.
        let short =
            ReplyPortPicker::new(eal, "t_pick_short", &MS_KEY[..36], spread_reta(128, 4), 1024..=65535).unwrap();
        assert!(!short.steers_ipv6());
        assert_eq!(short.pick(v6.0, v6.1, 0, 1024, |_| true), None, "IPv6 not steered");
        assert!(short.pick(v4.0, v4.1, 0, 1024, |_| true).is_some());
    }

    /// The acceptance test: SNAT ports chosen with rte_thash against a port's own
    /// key and RETA; every reply tuple, IPv4 and IPv6, hashes (rte_softrss) to the owning
    /// worker's queue.
    #[test]
    fn snat_port_choice_steers_replies_to_the_owner() {
        const WORKERS: u16 = 4;
        let eal = testing::eal();
        let pool = Mempool::new(eal, "t_steer", 511, 0, DEFAULT_DATA_ROOM, None).unwrap();
        let rss_hf =
            RssHf::NONFRAG_IPV4_TCP | RssHf::NONFRAG_IPV4_UDP | RssHf::NONFRAG_IPV6_TCP | RssHf::NONFRAG_IPV6_UDP;
        let mut port = Port::by_name(eal, "net_null4").unwrap();
        port.configure(WORKERS, WORKERS, &PortConfig { rss_hf, ..PortConfig::default() }).unwrap();
        for q in 0..WORKERS {
            port.setup_rx_queue(q, 256, &pool).unwrap();
            port.setup_tx_queue(q, 256).unwrap();
        }
        port.start().unwrap();
        let base_key = port.rss_hash_conf_get().unwrap().key;
        let reta_size = usize::from(port.info().reta_size);
        assert_eq!((base_key.len(), reta_size), (40, 128));

        for (name, range) in [("t_steer_full", 1024..=65535), ("t_steer_part", 30000..=30999)] {
            let picker =
                ReplyPortPicker::new(eal, name, &base_key, spread_reta(reta_size, WORKERS), range.clone()).unwrap();
            port.rss_hash_update(rss_hf, Some(picker.key())).unwrap();
            port.rss_reta_update(picker.reta()).unwrap();
            // What the NIC now uses is what the picker shaped.
            let nic_key = port.rss_hash_conf_get().unwrap().key;
            let nic_reta = port.rss_reta_query().unwrap();
            assert_eq!(nic_key, picker.key());
            assert_eq!(nic_reta, picker.reta());

            let mut rng = Rng::new(2024);
            let snat_addrs: [IpAddr; 5] = [
                Ipv4Addr::new(10, 70, 0, 1).into(),
                Ipv4Addr::new(10, 70, 0, 2).into(),
                Ipv4Addr::new(192, 0, 2, 7).into(),
                "fd00:70::1".parse().unwrap(),
                "2001:db8::7".parse().unwrap(),
            ];
            // Each worker's ports in use, per SNAT address (what the gateway's allocator keeps).
            let mut used: Vec<HashSet<(IpAddr, u16)>> = vec![HashSet::new(); usize::from(WORKERS)];
            let mut cursor = vec![*range.start(); usize::from(WORKERS)];
            let mut picks = 0;
            for _ in 0..300 {
                let (host, port) = (rng.next_u32() & 0xffff, rng.next_u32() as u16);
                let v4 = SocketAddr::new(Ipv4Addr::from(0x0a46_0000 | host).into(), port);
                let v6 = SocketAddr::new(Ipv6Addr::from(0xfd00_0070_u128 << 96 | u128::from(host)).into(), port);
                for &snat in &snat_addrs {
                    let endpoint = if snat.is_ipv4() { v4 } else { v6 };
                    for w in 0..WORKERS {
                        let mine = &mut used[usize::from(w)];
                        let start = cursor[usize::from(w)];
                        let port_no = picker
                            .pick(endpoint, snat, w, start, |p| !mine.contains(&(snat, p)))
                            .unwrap_or_else(|| panic!("no port for worker {w}, {endpoint} -> {snat}"));
                        assert!(range.contains(&port_no));
                        assert!(mine.insert((snat, port_no)), "port {port_no} reused");
                        cursor[usize::from(w)] = port_no.wrapping_add(1).max(*range.start());
                        // The NIC's hash of the reply, computed from its own key and RETA.
                        let hash = match (endpoint, snat) {
                            (SocketAddr::V4(e), IpAddr::V4(s)) => {
                                let t =
                                    Ipv4Tuple { src_addr: *e.ip(), dst_addr: s, src_port: e.port(), dst_port: port_no };
                                softrss(&t.words(), &nic_key)
                            }
                            (SocketAddr::V6(e), IpAddr::V6(s)) => {
                                let t =
                                    Ipv6Tuple { src_addr: *e.ip(), dst_addr: s, src_port: e.port(), dst_port: port_no };
                                softrss(&t.words(), &nic_key)
                            }
                            _ => unreachable!("one family"),
                        };
                        assert_eq!(
                            reta_queue(hash, &nic_reta),
                            w,
                            "reply {endpoint} -> [{snat}]:{port_no} (hash {hash:#x}) misses worker {w}"
                        );
                        picks += 1;
                    }
                }
            }
            assert_eq!(picks, 300 * snat_addrs.len() * usize::from(WORKERS));
        }
    }
}
