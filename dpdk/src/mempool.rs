//! Packet-buffer pools (`rte_pktmbuf_pool_create`).
//!
//! A [`Mempool`] is a cheap, clonable handle. The pool is freed when the last handle
//! drops **and** every buffer is back in it; if buffers are still out (held as [`Mbuf`]s,
//! sitting in a port's RX ring or in a `net_ring`), the pool and EAL are deliberately
//! leaked instead, so an outstanding `Mbuf` never points into freed memory.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::eal::Eal;
use crate::error::{self, Error, Result};
use crate::ffi;
use crate::mbuf::Mbuf;

/// The default data room of a packet buffer: 2048 bytes of data after
/// [`HEADROOM`] bytes of headroom (`RTE_MBUF_DEFAULT_BUF_SIZE`).
pub const DEFAULT_DATA_ROOM: u16 = ffi::RTE_MBUF_DEFAULT_BUF_SIZE as u16;
/// Headroom reserved at the front of every packet buffer (`RTE_PKTMBUF_HEADROOM`).
pub const HEADROOM: u16 = ffi::RTE_PKTMBUF_HEADROOM as u16;
/// Longest pool name DPDK accepts, in bytes.
pub const MAX_NAME_LEN: usize = ffi::TORII_MEMPOOL_NAMESIZE as usize - 1;

/// A pool of packet buffers. Clone to share; thread-safe (DPDK's default ring-based
/// mempool handler is multi-producer, multi-consumer).
#[derive(Clone)]
pub struct Mempool {
    inner: Arc<PoolInner>,
}

struct PoolInner {
    ptr: NonNull<ffi::rte_mempool>,
    name: String,
    eal: Eal,
}

// SAFETY: an rte_mempool is designed for concurrent use from many threads (the default
// "ring_mp_mc" handler; per-lcore caches are indexed by the calling thread's lcore id).
// The pointer is only freed in Drop, when no handle is left.
unsafe impl Send for PoolInner {}
// SAFETY: as above; &PoolInner only allows thread-safe mempool operations.
unsafe impl Sync for PoolInner {}

impl Drop for PoolInner {
    fn drop(&mut self) {
        // SAFETY: the pool is valid until freed below.
        let in_use = unsafe { ffi::rte_mempool_in_use_count(self.ptr.as_ptr()) };
        if in_use == 0 {
            // SAFETY: no handle is left (this is the last one) and no buffer is out, so
            // nothing can refer to the pool any more.
            unsafe { ffi::rte_mempool_free(self.ptr.as_ptr()) }
        } else {
            // Buffers are still out: keep the pool's memory, and EAL's, mapped for the
            // rest of the process so they stay valid.
            std::mem::forget(self.eal.clone());
        }
    }
}

impl std::fmt::Debug for Mempool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mempool")
            .field("name", &self.inner.name)
            .field("available", &self.available())
            .field("in_use", &self.in_use())
            .finish()
    }
}

impl Mempool {
    /// Creates a pool of `n` packet buffers named `name` (unique in the process, at most
    /// [`MAX_NAME_LEN`] bytes), with a per-lcore cache of `cache_size` buffers (0 for none;
    /// at most 512 and at most `n / 1.5`), each with `data_room` bytes of buffer including
    /// [`HEADROOM`] ([`DEFAULT_DATA_ROOM`] for 1500-byte frames), on NUMA socket `socket`
    /// (`None`: any). DPDK advises `n = 2^q - 1` for the ring-based handler.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a bad name; [`Error::Dpdk`] when DPDK refuses (name
    /// taken: `EEXIST`, no memory: `ENOMEM`, bad cache size: `EINVAL`).
    pub fn new(eal: &Eal, name: &str, n: u32, cache_size: u32, data_room: u16, socket: Option<u32>) -> Result<Self> {
        if name.is_empty() || name.len() > MAX_NAME_LEN {
            return Err(Error::InvalidArgument(format!("mempool name {name:?} must be 1..={MAX_NAME_LEN} bytes long")));
        }
        let cname =
            CString::new(name).map_err(|_| Error::InvalidArgument(format!("mempool name {name:?} contains NUL")))?;
        let socket_id = match socket {
            Some(s) => i32::try_from(s).map_err(|_| Error::InvalidArgument(format!("socket {s} out of range")))?,
            None => ffi::SOCKET_ID_ANY,
        };
        // SAFETY: cname is a valid NUL-terminated string for the call (DPDK copies it);
        // EAL is initialised (we hold a handle).
        let ptr = unsafe { ffi::rte_pktmbuf_pool_create(cname.as_ptr(), n, cache_size, 0, data_room, socket_id) };
        let ptr = NonNull::new(ptr).ok_or_else(|| error::last(format!("rte_pktmbuf_pool_create({name:?}, n={n})")))?;
        Ok(Self { inner: Arc::new(PoolInner { ptr, name: name.to_owned(), eal: eal.clone() }) })
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The raw pool, for calls this crate does not wrap. Valid while `self` lives.
    pub fn as_ptr(&self) -> *mut ffi::rte_mempool {
        self.inner.ptr.as_ptr()
    }

    /// Takes one buffer (reset: empty data at [`HEADROOM`], one segment); `None` when the
    /// pool is empty.
    #[inline]
    pub fn alloc(&self) -> Option<Mbuf> {
        // SAFETY: the pool is valid while self lives; rte_pktmbuf_alloc returns a fresh,
        // exclusively owned, direct mbuf (refcnt 1) or NULL.
        unsafe { Mbuf::from_raw(ffi::rte_pktmbuf_alloc(self.as_ptr())) }
    }

    /// Takes `count` buffers at once and appends them to `out`: all or none.
    ///
    /// # Errors
    /// [`Error::Dpdk`] (`ENOENT`) when fewer than `count` are available; `out` is unchanged.
    pub fn alloc_bulk(&self, out: &mut Vec<Mbuf>, count: usize) -> Result<()> {
        let n = u32::try_from(count).map_err(|_| Error::InvalidArgument(format!("alloc_bulk of {count} buffers")))?;
        out.reserve(count);
        let len = out.len();
        // SAFETY: out has room for `count` more elements after `len`; Mbuf is a
        // transparent wrapper of a non-null *mut rte_mbuf, so the spare capacity can be
        // written as an array of rte_mbuf pointers. On success all `count` are written
        // with fresh, exclusively owned mbufs; on failure none is, and len is unchanged.
        let ret = unsafe {
            ffi::rte_pktmbuf_alloc_bulk(self.as_ptr(), out.as_mut_ptr().add(len).cast::<*mut ffi::rte_mbuf>(), n)
        };
        if ret != 0 {
            return Err(error::dpdk(format!("rte_pktmbuf_alloc_bulk({}, {count})", self.name()), ret));
        }
        // SAFETY: the `count` elements after `len` were initialised by DPDK (see above).
        unsafe { out.set_len(len + count) };
        Ok(())
    }

    /// Buffers currently in the pool, per-lcore caches included.
    pub fn available(&self) -> u32 {
        // SAFETY: the pool is valid while self lives.
        unsafe { ffi::rte_mempool_avail_count(self.as_ptr()) }
    }

    /// Buffers currently out of the pool: held as `Mbuf`s, in RX rings, in flight.
    pub fn in_use(&self) -> u32 {
        // SAFETY: the pool is valid while self lives.
        unsafe { ffi::rte_mempool_in_use_count(self.as_ptr()) }
    }
}
