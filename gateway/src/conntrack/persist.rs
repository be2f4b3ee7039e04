//! Conntrack storage that outlives the process: the records (with their TCP windows) and occupancy
//! bitmap of a [`Conntrack`](super::Conntrack) on the heap or in a file mapping (a file in
//! the gateway's `shm_dir`, tmpfs `/dev/shm` by default), so that a gateway restarted after
//! a crash or for an upgrade adopts its predecessor's flows and keeps serving them.
//!
//! # Contract
//!
//! - `Slots<T>` (`crate::memory`'s `HugeSlice`) is a fixed-length array that dereferences
//!   to `[T]`, on the heap (`crate::memory::filled`, in transparent huge pages) or in a
//!   shared file mapping. The table code does not know which.
//! - A region file is `[header: 4 KiB][records][live bitmap]`, each array starting
//!   on a 64-byte boundary. The header (`Header`, little-endian fields) holds a magic, the
//!   layout fingerprint (`layout`: a version constant bumped by hand whenever the meaning of
//!   a stored field changes, mixed with the sizes, alignments and field offsets of the stored
//!   types, so that any change of the record types changes it), the capacity and family, the
//!   [`Owner`] (worker, worker count, SNAT port range, SNAT addresses, interfaces), the boot
//!   it was written in (`/proc/sys/kernel/random/boot_id`), the writer's clock origin
//!   (`CLOCK_MONOTONIC` ns) and a state word.
//! - `open` adopts a file whose header matches in every field and whose state is
//!   `READY`; anything else (no file, another layout, another owner, another boot, an
//!   adoption that was itself interrupted) is replaced by an empty table, and the reason is
//!   returned ([`Opened::Created`]). Adoption validates every byte that is not free-form
//!   (the TCP state, an enum) before the records are read as typed values; a record that
//!   fails is reported as a corrupt file and the table starts empty.
//! - The index is **not** stored: it is rebuilt from the live records at adoption (so a
//!   `kill -9` in the middle of an insert or a removal, which leaves the index and the
//!   records out of step, costs at most that one flow); the hash seed therefore need not be
//!   kept either.
//! - Deadlines are milliseconds of the writer's clock (ns since its origin); adoption moves
//!   them to the adopter's origin (both origins are `CLOCK_MONOTONIC`, the same clock for
//!   every process of one boot), while the state word says `ADOPTING`, so that an adoption
//!   cut short is never adopted twice.
//! - Only the worker that owns a region writes it; the gateway's single-writer lock on
//!   `shm_dir` keeps a second gateway away.

use std::fs::{File, OpenOptions};
use std::io;
use std::mem::{align_of, offset_of, size_of};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use memmap2::MmapMut;

use super::{Address, FlowState, Record, WindowBounds};
use crate::memory::HugeSlice;

/// Bump when the meaning of a stored field changes without its size or offset changing.
pub const LAYOUT_VERSION: u64 = 2;

const MAGIC: [u8; 8] = *b"toriiCT\0";
const HEADER_BYTES: usize = 4096;
const STATE_BUILDING: u32 = 0;
const STATE_READY: u32 = 1;
const STATE_ADOPTING: u32 = 2;

/// A fixed-length array on the heap or in a shared file mapping: [`HugeSlice`].
pub(crate) type Slots<T> = HugeSlice<T>;

/// What a region was built for, besides its capacity and family: flows of another owner
/// would be found by the wrong worker, translated to ports it does not own, or sent out of
/// the wrong interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// The worker's index.
    pub worker: u32,
    /// The gateway's worker count (SNAT port ownership and reply steering depend on it).
    pub workers: u32,
    /// The SNAT port range, inclusive.
    pub snat_ports: (u16, u16),
    /// [`fingerprint`] of the host's interfaces (name, port, VLAN), in order: flows keep
    /// interface indices.
    pub interfaces: u64,
}

/// How [`Conntrack::persistent`](super::Conntrack::persistent) came by its table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opened {
    /// The file was adopted; the table's flows are the predecessor's.
    Adopted,
    /// A new, empty table; `Some(reason)` when a file was there and could not be adopted.
    Created(Option<String>),
}

/// The header fields, as stored (little-endian at fixed offsets).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    layout: u64,
    family: u32,
    capacity: u64,
    owner: Owner,
    snat: u64,
    boot: u64,
    origin_ns: u64,
}

impl Header {
    fn encode(&self, out: &mut [u8]) {
        let mut w = Writer { out, at: 0 };
        w.bytes(&MAGIC);
        w.u64(self.layout);
        w.u32(self.family);
        w.u64(self.capacity);
        w.u32(self.owner.worker);
        w.u32(self.owner.workers);
        w.u32(u32::from(self.owner.snat_ports.0) << 16 | u32::from(self.owner.snat_ports.1));
        w.u64(self.owner.interfaces);
        w.u64(self.snat);
        w.u64(self.boot);
        w.u64(self.origin_ns);
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.get(..8)? != MAGIC {
            return None;
        }
        let mut r = Reader { b, at: 8 };
        let layout = r.u64()?;
        let family = r.u32()?;
        let capacity = r.u64()?;
        let (worker, workers, ports, interfaces) = (r.u32()?, r.u32()?, r.u32()?, r.u64()?);
        let owner = Owner { worker, workers, snat_ports: ((ports >> 16) as u16, ports as u16), interfaces };
        Some(Header { layout, family, capacity, owner, snat: r.u64()?, boot: r.u64()?, origin_ns: r.u64()? })
    }

    /// Why a region with this header cannot serve as `want`, or `None` when it can.
    fn mismatch(&self, want: &Header) -> Option<String> {
        let what = if self.layout != want.layout {
            "record layout (another torii version)"
        } else if self.family != want.family {
            "address family"
        } else if self.capacity != want.capacity {
            "capacity"
        } else if self.owner.workers != want.owner.workers || self.owner.worker != want.owner.worker {
            "worker count"
        } else if self.owner.snat_ports != want.owner.snat_ports {
            "SNAT port range"
        } else if self.snat != want.snat {
            "SNAT addresses"
        } else if self.owner.interfaces != want.owner.interfaces {
            "interfaces"
        } else if self.boot != want.boot {
            "boot (written before the last reboot)"
        } else {
            return None;
        };
        Some(format!("incompatible {what}: starting empty"))
    }
}

/// Offset of the state word in the header.
const STATE_AT: usize = 96;

struct Writer<'a> {
    out: &'a mut [u8],
    at: usize,
}
impl Writer<'_> {
    fn bytes(&mut self, b: &[u8]) {
        self.out[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
    }
    fn u32(&mut self, v: u32) {
        self.bytes(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
    }
}
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}
impl Reader<'_> {
    fn u32(&mut self) -> Option<u32> {
        let v = u32::from_le_bytes(self.b.get(self.at..self.at + 4)?.try_into().ok()?);
        self.at += 4;
        Some(v)
    }
    fn u64(&mut self) -> Option<u64> {
        let v = u64::from_le_bytes(self.b.get(self.at..self.at + 8)?.try_into().ok()?);
        self.at += 8;
        Some(v)
    }
}

/// FNV-1a over `bytes`, continuing from `h` (start with [`FNV_OFFSET`]): a hash that is the
/// same in every process, for header fingerprints.
#[must_use]
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// FNV-1a's offset basis.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;

/// A fingerprint of the host's interfaces as `(name, port, VLAN)` in index order, for
/// [`Owner::interfaces`].
#[must_use]
pub fn fingerprint<'a>(interfaces: impl IntoIterator<Item = (&'a str, u8, Option<u16>)>) -> u64 {
    interfaces.into_iter().fold(FNV_OFFSET, |h, (name, port, vlan)| {
        let h = fnv1a(h, name.as_bytes());
        fnv1a(h, &[0, port, vlan.is_some() as u8, (vlan.unwrap_or(0) >> 8) as u8, vlan.unwrap_or(0) as u8])
    })
}

/// The layout fingerprint of `Record<A>` and [`WindowBounds`]: [`LAYOUT_VERSION`] mixed with
/// the sizes, alignments and field offsets of the stored types.
fn layout<A: Address>() -> u64 {
    let facts = [
        LAYOUT_VERSION as usize,
        A::LEN,
        size_of::<Record<A>>(),
        align_of::<Record<A>>(),
        size_of::<FlowState>(),
        size_of::<WindowBounds>(),
        align_of::<WindowBounds>(),
        offset_of!(Record<A>, state),
        offset_of!(Record<A>, original_src),
        offset_of!(Record<A>, original_dst),
        offset_of!(Record<A>, reply_src),
        offset_of!(Record<A>, original_src_port),
        offset_of!(Record<A>, reply_dst_port),
        offset_of!(Record<A>, protocol),
        offset_of!(Record<A>, snat),
        offset_of!(Record<A>, window_flags),
        offset_of!(Record<A>, bounds),
        offset_of!(FlowState, deadline),
        offset_of!(FlowState, frontend),
        offset_of!(FlowState, table_epoch),
        offset_of!(FlowState, tcp_state),
        offset_of!(FlowState, bits),
        offset_of!(FlowState, links),
        offset_of!(FlowState, egress_out),
    ];
    facts.iter().fold(FNV_OFFSET, |h, f| fnv1a(h, &(*f as u64).to_le_bytes()))
}

/// `CLOCK_MONOTONIC` now, ns: the clock every process of one boot shares (`clock_gettime(2)`),
/// kept in the table crate since L2 mode's files between torii-gateway and torii-control use
/// it too.
pub use crate::table::l2::monotonic_ns;

/// A fingerprint of this boot (`/proc/sys/kernel/random/boot_id`; 0 where unreadable).
fn boot_id() -> u64 {
    std::fs::read("/proc/sys/kernel/random/boot_id").map_or(0, |b| fnv1a(FNV_OFFSET, &b))
}

/// A region's two arrays and the mapping's header, as [`open`] returns them.
pub(crate) struct Region<A: Address> {
    pub(super) records: Slots<Record<A>>,
    pub(super) live: Slots<u64>,
    /// Where to say the region is consistent again.
    pub(super) mark: Mark,
    /// Add to an adopted deadline (ms, wrapping) to move it to the adopter's clock origin.
    pub(super) deadline_shift_ms: u32,
}

/// The header of a region's mapping, to write its state word.
pub(crate) struct Mark {
    header: NonNull<u8>,
    _map: Arc<MmapMut>,
}

impl Mark {
    /// Marks the region adopted-and-consistent again (after the caller moved the deadlines and
    /// rebuilt its index).
    pub(super) fn ready(&self) {
        set_state(self.header.as_ptr(), STATE_READY);
    }
}

/// Writes the state word of the header at `header` (a mapping's first byte).
fn set_state(header: *mut u8, state: u32) {
    // SAFETY: `header` is the start of a live mapping of at least a header page, which no
    // `Slots` covers; the word is 4-byte aligned (offset 96 of a page).
    #[allow(unsafe_code)]
    unsafe {
        std::ptr::write_volatile(header.add(STATE_AT).cast::<u32>(), state.to_le());
    }
}

// SAFETY: a pointer into the mapping it keeps alive, written only by its owner.
#[allow(unsafe_code)]
unsafe impl Send for Mark {}

fn region_bytes<A: Address>(capacity: usize) -> (usize, usize, usize) {
    let records = HEADER_BYTES;
    let live = (records + capacity * size_of::<Record<A>>()).next_multiple_of(64);
    let end = live + capacity.div_ceil(64) * 8;
    (records, live, end)
}

/// A held lock on a directory of region files other than `shm_dir` ([`lock_region_dir`]):
/// released when dropped or when the process exits.
#[derive(Debug)]
pub struct RegionDirLock {
    _dir: File,
}

/// Creates `dir` (mode 0700) if missing and takes an exclusive `flock(2)` on the directory
/// itself, without waiting: the lock file `shm_dir` has cannot be written on hugetlbfs,
/// which has no `write(2)`. Two gateways never share region files.
///
/// # Errors
/// When `dir` cannot be created or opened, or another process holds the lock
/// ([`io::ErrorKind::WouldBlock`]).
pub fn lock_region_dir(dir: &Path) -> io::Result<RegionDirLock> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    let file = File::open(dir)?;
    match file.try_lock() {
        Ok(()) => Ok(RegionDirLock { _dir: file }),
        Err(std::fs::TryLockError::WouldBlock) => Err(io::Error::new(
            io::ErrorKind::WouldBlock,
            format!("{} is locked by another process (another gateway's conntrack regions)", dir.display()),
        )),
        Err(std::fs::TryLockError::Error(e)) => Err(e),
    }
}

/// The length of a region file of `end` bytes of layout in `path`'s directory: `end`, or on
/// a file system of huge pages (hugetlbfs, whose block is the page: 2 MiB or 1 GiB) `end`
/// rounded up to whole pages, the only lengths such a file can be given (`ftruncate`
/// refuses others, Linux `Documentation/admin-guide/mm/hugetlbpage.rst`). A directory that
/// cannot be read is taken as one of small pages: creating the file there fails anyway.
fn file_bytes(path: &Path, end: usize) -> usize {
    use std::os::unix::fs::MetadataExt;
    let block = path.parent().and_then(|dir| std::fs::metadata(dir).ok()).map_or(0, |m| m.blksize() as usize);
    if block > 4096 && block.is_power_of_two() {
        end.next_multiple_of(block)
    } else {
        end
    }
}

/// Opens (adopting) or creates the region file `path` for a table of `capacity` flows of
/// family `A` with SNAT addresses `snat`, owned by `owner`, whose caller's clock started at
/// `origin_ns` (`CLOCK_MONOTONIC`). See the module documentation for when a file is adopted.
///
/// # Errors
/// When the file cannot be created, sized or mapped (a missing or read-only `shm_dir`, no
/// space on its file system).
pub(crate) fn open<A: Address>(
    path: &Path,
    capacity: usize,
    snat: &[A],
    owner: Owner,
    origin_ns: u64,
) -> io::Result<(Region<A>, Opened)> {
    let snat_hash = snat.iter().fold(FNV_OFFSET, |h, a| fnv1a(h, &a.to_u128().to_le_bytes()));
    let want = Header {
        layout: layout::<A>(),
        family: A::LEN as u32,
        capacity: capacity as u64,
        owner,
        snat: snat_hash,
        boot: boot_id(),
        origin_ns,
    };
    let (_, _, end) = region_bytes::<A>(capacity);
    let bytes = file_bytes(path, end);
    let reason = match OpenOptions::new().read(true).write(true).open(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => Some(format!("unreadable ({e}): starting empty")),
        Ok(file) => match try_adopt::<A>(&file, &want, bytes) {
            Ok(region) => return Ok((region, Opened::Adopted)),
            Err(reason) => Some(reason),
        },
    };
    let _ = std::fs::remove_file(path);
    let file = OpenOptions::new().read(true).write(true).create_new(true).open(path)?;
    file.set_len(bytes as u64)?;
    // SAFETY: the file was just created by this process, under the gateway's single-writer
    // lock on its directory; nothing else maps or truncates it.
    #[allow(unsafe_code)]
    let mut map = unsafe { MmapMut::map_mut(&file)? };
    want.encode(&mut map[..HEADER_BYTES]);
    set_state(map.as_mut_ptr(), STATE_BUILDING);
    let mut region = split::<A>(map, capacity, 0);
    // Every page is written now (no first-touch faults on the packet path).
    region.records.fill(Record::VACANT);
    region.live.fill(0);
    region.mark.ready();
    Ok((region, Opened::Created(reason)))
}

/// Maps `file` and checks it against `want`; on success the region is left in state
/// `ADOPTING` with the deadline shift computed, for the caller to finish.
fn try_adopt<A: Address>(file: &File, want: &Header, bytes: usize) -> Result<Region<A>, String> {
    let len = file.metadata().map_err(|e| format!("unreadable ({e}): starting empty"))?.len();
    if len != bytes as u64 {
        return Err(format!("incompatible size ({len} bytes, {bytes} expected): starting empty"));
    }
    // SAFETY: the file lies in the gateway's `shm_dir`, under its single-writer lock; its
    // previous writer is gone; nothing else truncates it while it is mapped.
    #[allow(unsafe_code)]
    let map = unsafe { MmapMut::map_mut(file) }.map_err(|e| format!("cannot map ({e}): starting empty"))?;
    let header = Header::decode(&map[..HEADER_BYTES]).ok_or("not a torii conntrack region: starting empty")?;
    if let Some(why) = header.mismatch(want) {
        return Err(why);
    }
    let state = u32::from_le_bytes(map[STATE_AT..STATE_AT + 4].try_into().expect("4 bytes"));
    if state != STATE_READY {
        return Err("left half-built or half-adopted by a previous start: starting empty".into());
    }
    let capacity = want.capacity as usize;
    let (records_at, _, _) = region_bytes::<A>(capacity);
    let size = size_of::<Record<A>>();
    // The one field with invalid byte values: the TCP state, an enum (the flags are bit
    // sets, the window flags' every value is one).
    let tcp_state = offset_of!(Record<A>, state) + offset_of!(FlowState, tcp_state);
    for r in 0..capacity {
        let base = records_at + r * size;
        if map[base + tcp_state] > super::TcpState::SynSent2 as u8 {
            return Err(format!("corrupt record {r}: starting empty"));
        }
    }
    let shift_ms = (i128::from(header.origin_ns) - i128::from(want.origin_ns)).div_euclid(1_000_000) as i64;
    let mut map = map;
    set_state(map.as_mut_ptr(), STATE_ADOPTING);
    want.encode(&mut map[..HEADER_BYTES]);
    Ok(split::<A>(map, capacity, shift_ms as u32))
}

/// Splits a mapping of `region_bytes::<A>(capacity)` bytes into its arrays.
fn split<A: Address>(mut map: MmapMut, capacity: usize, deadline_shift_ms: u32) -> Region<A> {
    let (records_at, live_at, end) = region_bytes::<A>(capacity);
    assert!(map.len() >= end, "mapping shorter than its layout");
    let base = map.as_mut_ptr();
    let map = Arc::new(map);
    // The two arrays lie at disjoint, suitably aligned offsets (64-byte
    // multiples from a page-aligned base) inside the mapping, which `Arc` keeps alive as long
    // as any of them; their bytes are valid values of their types (zero-filled or written by
    // this layout, checked by `try_adopt`); the header page before them is reached only
    // through `Mark`.
    let at = |offset: usize| -> NonNull<u8> {
        assert!(offset <= end, "an offset inside the mapping, or its end");
        // SAFETY: `offset` lies inside the mapping or at its end (checked), so the pointer is in bounds of
        // one allocation and, being derived from a non-null base, not null.
        #[allow(unsafe_code)]
        unsafe {
            NonNull::new_unchecked(base.add(offset))
        }
    };
    // SAFETY: as said above `at`: disjoint, aligned arrays inside the mapping, which each
    // keeps alive, holding valid values of their types.
    #[allow(unsafe_code)]
    let (records, live) = unsafe {
        (
            Slots::mapped(at(records_at).cast::<Record<A>>(), capacity, Arc::clone(&map)),
            Slots::mapped(at(live_at).cast::<u64>(), capacity.div_ceil(64), Arc::clone(&map)),
        )
    };
    let header = at(0);
    Region { records, live, mark: Mark { header, _map: map }, deadline_shift_ms }
}
