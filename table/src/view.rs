//! A validated, read-only snapshot and the lookups the data plane makes on it.
//!
//! [`Table::new`] checks everything once — magic, ABI version, lengths, CRC-32, every
//! section in bounds, front doors strictly sorted, every id and range in bounds, every
//! front door's source ranges sorted and disjoint, every service's backends and draining
//! endpoints sorted, every ring entry naming a backend of its own service, names UTF-8 —
//! so that afterwards no lookup can panic or read out of bounds, and every binary search
//! is over sorted records, whatever bytes were published. It then builds, in process
//! memory, the hashed index of the front doors ([`super::index`]) that [`Table::frontend`]
//! searches: a new flow's lookups are O(1) — one index line and one front-door record, then
//! the service record, one ring entry and one backend record — and each of these reads has
//! a prefetch hint ([`Table::prefetch_frontend`], [`Table::prefetch_frontend_record`],
//! [`Table::prefetch_service`], [`ServiceRing::prefetch_slot`], [`ServiceRing::prefetch_backend`])
//! that a burst issues for all its packets before it reads any, so the cache misses overlap.

use std::net::IpAddr;

use zerocopy::FromBytes;

use super::index::{FrontendHash, FrontendIndex};
use super::layout::{self, section, Backend, Frontend, Header, Service, SourceRange};
use super::spec::{FrontendKind, Protocol};
use crate::prefetch::{prefetch, prefetch_lines};
use crate::storage::Storage;

/// Why a snapshot was rejected. The gateway logs it, counts it and keeps its last good table.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TableError {
    /// Shorter than a header, or shorter than the header says.
    #[error("truncated: {len} bytes, need {need}")]
    Truncated {
        /// Bytes present.
        len: usize,
        /// Bytes required.
        need: usize,
    },
    /// Not a torii table.
    #[error("bad magic {0:02x?}, expected \"TORIITBL\"")]
    BadMagic([u8; 8]),
    /// Another ABI version; publisher and gateway must be upgraded together.
    #[error("ABI version {found}, this gateway reads version {expected}")]
    UnsupportedVersion {
        /// Version in the snapshot.
        found: u32,
        /// Version this gateway reads.
        expected: u32,
    },
    /// `header_len` or `total_len` disagree with the buffer.
    #[error("length mismatch: {0}")]
    Length(String),
    /// The CRC-32 does not match: the snapshot was corrupted or partly written.
    #[error("checksum mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    Checksum {
        /// Stored value.
        stored: u32,
        /// Value computed over the bytes.
        computed: u32,
    },
    /// A section lies outside the snapshot.
    #[error("section {0} is out of bounds")]
    SectionBounds(usize),
    /// A record refers to something that does not exist or is out of order.
    #[error("{what} {index}: {problem}")]
    Record {
        /// Kind of record (`front door`, `service`, `ring entry`).
        what: &'static str,
        /// Its index.
        index: usize,
        /// What is wrong.
        problem: String,
    },
}

fn record(what: &'static str, index: usize, problem: impl Into<String>) -> TableError {
    TableError::Record { what, index, problem: problem.into() }
}

/// A validated snapshot over any byte storage (`Vec<u8>`, an mmap), with its hashed
/// front-door index (in process memory: about 16 bytes per front door).
pub struct Table<B: AsRef<[u8]> = Storage> {
    bytes: B,
    generation: u64,
    // (byte offset, count) of each section, checked in bounds by `new`.
    sections: [(usize, usize); section::COUNT],
    // Position in the front-door section of each front door, by key.
    frontend_index: FrontendIndex,
}

impl<B: AsRef<[u8]>> std::fmt::Debug for Table<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("generation", &self.generation)
            .field("frontends", &self.frontends().len())
            .field("services", &self.services().len())
            .field("frontend_index_bytes", &self.frontend_index.size_bytes())
            .finish()
    }
}

/// A front door found by [`Table::frontend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrontendRef<'t> {
    /// 0-based position of the front door in [`Table::frontends`] (sorted by address,
    /// protocol, port): an id valid for this table generation only (per-front-door counters;
    /// conntrack's `FlowState::frontend`).
    pub index: u32,
    /// 0-based index of its service (see [`Table::service`]).
    pub service: u32,
    /// Which Service field it comes from.
    pub kind: FrontendKind,
    /// The client addresses it admits for new flows.
    pub source_ranges: SourceRanges<'t>,
}

/// The client address ranges a front door admits for new flows (its Service's
/// `loadBalancerSourceRanges`): sorted, disjoint [`SourceRange`]s; none admits everyone.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SourceRanges<'t> {
    ranges: &'t [SourceRange],
}

impl<'t> SourceRanges<'t> {
    /// Ranges as stored (sorted by first address and disjoint, as [`Table::new`] checked).
    pub fn as_slice(&self) -> &'t [SourceRange] {
        self.ranges
    }

    /// Whether the front door restricts nothing (no ranges).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Whether a new flow from `client` may enter: always when there are no ranges
    /// (kube-proxy: an empty `loadBalancerSourceRanges` allows all sources), else when a
    /// range contains it. One binary search: O(log n) in the number of merged ranges (a
    /// handful of comparisons for the usual list of a few CIDRs; 12 for 4096 disjoint
    /// ones), no allocation.
    #[inline]
    pub fn admits(&self, client: IpAddr) -> bool {
        if self.ranges.is_empty() {
            return true;
        }
        let a = u128::from_be_bytes(layout::addr16(client));
        let i = self.ranges.partition_point(|r| u128::from_be_bytes(r.first) <= a);
        i > 0 && a <= u128::from_be_bytes(self.ranges[i - 1].last)
    }
}

/// A service's backends and ring, borrowed from the table: its name and draining endpoints
/// here, and through [`Deref`](std::ops::Deref) its [`ServiceRing`] (backends, Maglev ring,
/// affinity timeout), the part a new flow's endpoint choice reads.
#[derive(Clone, Copy, Debug)]
pub struct ServiceRef<'t> {
    /// `namespace/name:port`, UTF-8 ([`Table::new`] checked it); read through
    /// [`ServiceRef::name`] or [`ServiceRef::name_bytes`], so that looking a service up does
    /// not validate it again.
    name: &'t [u8],
    /// Draining endpoints (sorted by address, port): not on the ring, chosen for no new
    /// flow, but still endpoints for the flows already steered to them.
    pub draining: &'t [Backend],
    /// Backends, ring and affinity timeout.
    choice: ServiceRing<'t>,
}

impl<'t> std::ops::Deref for ServiceRef<'t> {
    type Target = ServiceRing<'t>;

    #[inline]
    fn deref(&self) -> &ServiceRing<'t> {
        &self.choice
    }
}

/// What choosing a new flow's endpoint reads of a service ([`ServiceRef`] derefs to it):
/// small enough for a burst to carry from one look-ahead stage to the next
/// (`pipeline::process_burst`), where the whole view would be copied for fields no stage
/// reads.
#[derive(Clone, Copy, Debug)]
pub struct ServiceRing<'t> {
    /// Backends in table order (sorted by address, port).
    pub backends: &'t [Backend],
    /// Maglev ring: 1-based indices into `backends`; empty when there are none.
    pub ring: Ring<'t>,
    /// `sessionAffinity: ClientIP` timeout in seconds, 0 without affinity.
    pub affinity_timeout_s: u32,
}

impl<'t> ServiceRef<'t> {
    /// `namespace/name:port` (the Service's namespace and name and the port's name), for
    /// labels and logs. Checks the bytes are UTF-8 again (O(length): [`Table::new`] did,
    /// but a `&str` cannot be kept across calls without `unsafe`); "" cannot happen for a
    /// validated table. The packet path uses [`ServiceRef::name_bytes`].
    pub fn name(&self) -> &'t str {
        std::str::from_utf8(self.name).unwrap_or("")
    }

    /// The name's UTF-8 bytes, without a check: O(1) (the `sessionAffinity` key hashes them,
    /// torii-gateway's `affinity::service_key`).
    #[inline]
    pub fn name_bytes(&self) -> &'t [u8] {
        self.name
    }

    /// Whether `addr:port` is still an endpoint for established flows: a ring backend or a
    /// draining endpoint. Two binary searches.
    #[inline]
    pub fn serves(&self, addr: [u8; 16], port: u16) -> bool {
        self.backend(addr, port).is_some() || find_backend(self.draining, addr, port).is_some()
    }
}

impl<'t> ServiceRing<'t> {
    /// The ring slot `hash % M` (Maglev §3.4), `None` without backends.
    #[inline]
    pub fn slot(&self, hash: u64) -> Option<usize> {
        let len = self.ring.len();
        (len != 0).then(|| (hash % len as u64) as usize)
    }

    /// The position in [`ServiceRing::backends`] of the backend ring slot `slot` names;
    /// `None` past the end of the ring (or for an entry naming no backend, which a validated
    /// table does not have).
    #[inline]
    pub fn ring_backend(&self, slot: usize) -> Option<u32> {
        let id = self.ring.get(slot)?;
        (id != 0 && (id as usize) <= self.backends.len()).then(|| id - 1)
    }

    /// The backend that ring slot `hash % M` names; `None` when the service has no
    /// backends (its front doors reject).
    #[inline]
    pub fn pick(&self, hash: u64) -> Option<&'t Backend> {
        self.backends.get(self.ring_backend(self.slot(hash)?)? as usize)
    }

    /// Starts loading ring slot `slot` ([`ServiceRing::slot`]), which
    /// [`ServiceRing::ring_backend`] reads: stage 4 of a new flow's lookups (the service
    /// record is cached). Nothing past the end; no effect on results.
    #[inline]
    pub fn prefetch_slot(&self, slot: usize) {
        self.ring.prefetch(slot);
    }

    /// Starts loading the record of backend `position` ([`ServiceRing::ring_backend`]):
    /// stage 5. Nothing past the end; no effect on results.
    #[inline]
    pub fn prefetch_backend(&self, position: u32) {
        if let Some(b) = self.backends.get(position as usize) {
            prefetch_lines(b);
        }
    }

    /// The ring backend `addr:port` (16-byte address form), by binary search; `None` when
    /// it is not one (a draining endpoint is not).
    #[inline]
    pub fn backend(&self, addr: [u8; 16], port: u16) -> Option<&'t Backend> {
        find_backend(self.backends, addr, port)
    }
}

/// Sort key of a backend record: (address, port), the order of each group of a service's
/// records.
#[inline]
fn backend_key(b: &Backend) -> (u128, u16) {
    (u128::from_be_bytes(b.addr), b.port.get())
}

/// The endpoint `addr:port` among `backends` (sorted by [`backend_key`]).
#[inline]
fn find_backend(backends: &[Backend], addr: [u8; 16], port: u16) -> Option<&Backend> {
    let key = (u128::from_be_bytes(addr), port);
    backends.binary_search_by_key(&key, backend_key).ok().map(|i| &backends[i])
}

/// One service's Maglev ring as stored: little-endian entries of 1, 2 or 4 bytes
/// ([`layout::ring_entry_len_for`]), each a 1-based index into the service's backends.
#[derive(Clone, Copy, Debug)]
pub struct Ring<'t> {
    bytes: &'t [u8],
    entry_len: u8,
}

impl<'t> Ring<'t> {
    /// A ring over `bytes` with entries `entry_len` bytes wide (1, 2 or 4; any other
    /// width reads as an empty ring). Trailing bytes that do not make an entry are ignored.
    pub fn new(bytes: &'t [u8], entry_len: u8) -> Self {
        match entry_len {
            1 | 2 | 4 => Self { bytes, entry_len },
            _ => Self { bytes: &[], entry_len: 1 },
        }
    }

    /// Number of entries (the ring size M).
    #[inline]
    pub fn len(&self) -> usize {
        // `entry_len` is 1, 2 or 4 (`Ring::new`): a shift, not a division.
        self.bytes.len() >> (self.entry_len >> 1)
    }

    /// Whether the ring has no entries.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes per entry: 1, 2 or 4.
    #[inline]
    pub fn entry_len(&self) -> u8 {
        self.entry_len
    }

    /// Entry `slot` (a 1-based backend index), `None` past the end.
    #[inline]
    pub fn get(&self, slot: usize) -> Option<u32> {
        let b = self.bytes;
        match self.entry_len {
            1 => b.get(slot).map(|&v| u32::from(v)),
            2 => b.get(slot * 2..slot * 2 + 2).map(|v| u32::from(u16::from_le_bytes([v[0], v[1]]))),
            _ => b.get(slot * 4..slot * 4 + 4).map(|v| u32::from_le_bytes([v[0], v[1], v[2], v[3]])),
        }
    }

    /// Starts loading entry `slot` (nothing past the end).
    #[inline]
    fn prefetch(&self, slot: usize) {
        if let Some(entry) = self.bytes.get(slot.saturating_mul(usize::from(self.entry_len))) {
            prefetch(entry);
        }
    }

    /// Every entry in slot order.
    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// Whether every entry is in `1..=max`, without decoding entry by entry where the
    /// width allows (validation runs over every ring of a snapshot).
    pub(crate) fn all_in(&self, max: u32) -> bool {
        match self.entry_len {
            1 => {
                let max = max.min(u32::from(u8::MAX)) as u8;
                self.bytes.iter().all(|&v| v != 0 && v <= max)
            }
            2 => {
                let max = max.min(u32::from(u16::MAX)) as u16;
                self.bytes.chunks_exact(2).all(|v| {
                    let v = u16::from_le_bytes([v[0], v[1]]);
                    v != 0 && v <= max
                })
            }
            _ => self.bytes.chunks_exact(4).all(|v| {
                let v = u32::from_le_bytes([v[0], v[1], v[2], v[3]]);
                v != 0 && v <= max
            }),
        }
    }
}

/// What a snapshot serves, read back independently of where its records lie in their
/// sections ([`Table::content`]): two snapshots with equal contents make every lookup
/// return the same answers. A [`crate::TableBuilder`] may place records differently from
/// [`crate::build`] (it reuses the places of unchanged services); their contents agree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Content {
    /// Per front door, in table order.
    pub frontends: Vec<FrontendContent>,
    /// Per service, in table order.
    pub services: Vec<ServiceContent>,
}

/// One front door of a [`Content`]: address (16-byte form), IANA protocol, port, kind
/// number, 0-based service index, and its source ranges (first, last).
pub type FrontendContent = ([u8; 16], u8, u16, u8, u32, Vec<([u8; 16], [u8; 16])>);

/// One service of a [`Content`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceContent {
    /// Its name.
    pub name: String,
    /// Ring backends (address, port), in table order.
    pub backends: Vec<([u8; 16], u16)>,
    /// Draining endpoints (address, port), in table order.
    pub draining: Vec<([u8; 16], u16)>,
    /// Ring entry width in bytes and the ring's 1-based backend indices.
    pub ring: (u8, Vec<u32>),
    /// `sessionAffinity: ClientIP` timeout in seconds, 0 without.
    pub affinity_timeout_s: u32,
}

impl<B: AsRef<[u8]>> Table<B> {
    /// What this snapshot serves ([`Content`]), O(size). For tests and tools.
    pub fn content(&self) -> Content {
        let pair = |b: &Backend| (b.addr, b.port.get());
        let frontends = (0..self.frontends().len())
            .filter_map(|i| {
                let f = self.frontends().get(i)?;
                let r = self.frontend_at(i)?;
                let ranges = r.source_ranges.as_slice().iter().map(|r| (r.first, r.last)).collect();
                Some((f.addr, f.protocol, f.port.get(), f.kind, r.service, ranges))
            })
            .collect();
        let services = (0..self.service_count() as u32)
            .filter_map(|id| {
                let s = self.service(id)?;
                Some(ServiceContent {
                    name: s.name().to_owned(),
                    backends: s.backends.iter().map(pair).collect(),
                    draining: s.draining.iter().map(pair).collect(),
                    ring: (s.ring.entry_len(), s.ring.iter().collect()),
                    affinity_timeout_s: s.affinity_timeout_s,
                })
            })
            .collect();
        Content { frontends, services }
    }
}

impl<B: AsRef<[u8]>> Table<B> {
    /// Validates `bytes` as a snapshot (O(size)) and builds its front-door index (O(n): one
    /// hash and one store per front door): at most 16 bytes of process memory per front
    /// door (156 KiB for 10 000), allocated and written here, never on the packet path.
    ///
    /// # Errors
    /// [`TableError`] saying what is wrong; nothing is adopted then.
    pub fn new(bytes: B) -> Result<Self, TableError> {
        let b = bytes.as_ref();
        let hlen = size_of::<Header>();
        let (header, _) =
            Header::read_from_prefix(b).map_err(|_| TableError::Truncated { len: b.len(), need: hlen })?;
        if header.magic != layout::MAGIC {
            return Err(TableError::BadMagic(header.magic));
        }
        if header.abi_version.get() != layout::ABI_VERSION {
            return Err(TableError::UnsupportedVersion {
                found: header.abi_version.get(),
                expected: layout::ABI_VERSION,
            });
        }
        if header.header_len.get() as usize != hlen {
            return Err(TableError::Length(format!("header_len {} != {hlen}", header.header_len.get())));
        }
        if header.total_len.get() != b.len() as u64 {
            return Err(TableError::Length(format!(
                "total_len {} but {} bytes present",
                header.total_len.get(),
                b.len()
            )));
        }
        let computed = layout::checksum(b);
        if computed != header.checksum.get() {
            return Err(TableError::Checksum { stored: header.checksum.get(), computed });
        }
        let sizes = [size_of::<Frontend>(), size_of::<Service>(), size_of::<Backend>(), 1, 1, size_of::<SourceRange>()];
        let mut sections = [(0, 0); section::COUNT];
        for (i, s) in header.sections.iter().enumerate() {
            let (off, n) = (s.offset.get() as usize, s.count.get() as usize);
            let end = n.checked_mul(sizes[i]).and_then(|len| off.checked_add(len));
            match end {
                Some(end) if off >= hlen && end <= b.len() => sections[i] = (off, n),
                _ => return Err(TableError::SectionBounds(i)),
            }
        }
        let mut t =
            Self { bytes, generation: header.generation.get(), sections, frontend_index: FrontendIndex::empty() };
        t.check_records()?;
        let keys = t.frontends().iter().map(|f| (f.addr, f.protocol, f.port.get()));
        t.frontend_index = FrontendIndex::new(keys);
        Ok(t)
    }

    fn check_records(&self) -> Result<(), TableError> {
        let (fronts, services, backends, ring) = (self.frontends(), self.services(), self.backends(), self.ring());
        let (names, source_ranges) = (self.names(), self.source_ranges());
        let mut prev = None;
        for (i, f) in fronts.iter().enumerate() {
            let key = layout::frontend_key(f.addr, f.protocol, f.port.get());
            if prev.is_some_and(|p| p >= key) {
                return Err(record("front door", i, "not strictly sorted by (address, protocol, port)"));
            }
            prev = Some(key);
            if Protocol::from_number(f.protocol).is_none() {
                return Err(record("front door", i, format!("protocol {} is not TCP, UDP or SCTP", f.protocol)));
            }
            if FrontendKind::from_number(f.kind).is_none() {
                return Err(record("front door", i, format!("kind {} is unknown", f.kind)));
            }
            let s = f.service.get() as usize;
            if s == 0 || s > services.len() {
                return Err(record("front door", i, format!("service id {s} is not in 1..={}", services.len())));
            }
            let (ro, rn) = (f.source_ranges_offset.get() as usize, f.source_ranges_count.get() as usize);
            let Some(ranges) = ro.checked_add(rn).and_then(|e| source_ranges.get(ro..e)) else {
                return Err(record("front door", i, "source range list out of bounds"));
            };
            let mut prev_last = None;
            for r in ranges {
                let (first, last) = (u128::from_be_bytes(r.first), u128::from_be_bytes(r.last));
                if first > last || prev_last.is_some_and(|p| p >= first) {
                    return Err(record("front door", i, "source ranges not sorted, disjoint and non-empty"));
                }
                prev_last = Some(last);
            }
        }
        for (i, s) in services.iter().enumerate() {
            let (bo, bn, dn) =
                (s.backends_offset.get() as usize, s.backends_count.get() as usize, s.draining_count.get() as usize);
            let Some(records) = bn.checked_add(dn).and_then(|n| bo.checked_add(n)).and_then(|e| backends.get(bo..e))
            else {
                return Err(record("service", i, "backend range out of bounds"));
            };
            let (ring_backends, draining) = records.split_at(bn);
            for group in [ring_backends, draining] {
                if !group.windows(2).all(|w| backend_key(&w[0]) < backend_key(&w[1])) {
                    return Err(record("service", i, "backends not strictly sorted by (address, port)"));
                }
            }
            let (ro, rn, w) = (s.ring_offset.get() as usize, s.ring_len.get() as usize, s.ring_entry_len);
            if !matches!(w, 1 | 2 | 4) {
                return Err(record("service", i, format!("ring entry width {w} is not 1, 2 or 4")));
            }
            if bn > layout::max_ring_id(w) as usize {
                return Err(record("service", i, format!("{bn} backends do not fit ring entries of {w} bytes")));
            }
            let Some(entries) =
                rn.checked_mul(usize::from(w)).and_then(|n| ro.checked_add(n)).and_then(|e| ring.get(ro..e))
            else {
                return Err(record("service", i, "ring range out of bounds"));
            };
            if (bn == 0) != (rn == 0) {
                return Err(record("service", i, format!("{bn} backends but a ring of {rn}")));
            }
            let entries = Ring::new(entries, w);
            if !entries.all_in(bn as u32) {
                let (j, id) = entries.iter().enumerate().find(|&(_, id)| id == 0 || id as usize > bn).unwrap_or((0, 0));
                return Err(record("ring entry", i, format!("slot {j}: backend id {id} is not in 1..={bn}")));
            }
            let (no, nl) = (s.name_offset.get() as usize, s.name_len.get() as usize);
            match no.checked_add(nl).and_then(|e| names.get(no..e)) {
                Some(n) if std::str::from_utf8(n).is_ok() => {}
                _ => return Err(record("service", i, "name out of bounds or not UTF-8")),
            }
        }
        Ok(())
    }

    /// Section `idx` as records of `T`. In bounds for a table [`Table::new`] accepted; read
    /// with `get`, not indexed, so that a lookup holds no panic path of its own: the
    /// section is then an empty slice in the impossible case, and the lookups' own bounds
    /// checks of a position in it are the only ones (an indexing panic is a side effect the
    /// compiler must keep in order, so it tested the hoisted range check again on every
    /// frame of a burst's new-flow visits).
    #[inline]
    fn slice<T: FromBytes + zerocopy::Immutable>(&self, idx: usize) -> &[T] {
        let (off, n) = self.sections[idx];
        let bytes = self.bytes.as_ref().get(off..off.wrapping_add(n.wrapping_mul(size_of::<T>()))).unwrap_or(&[]);
        <[T]>::ref_from_bytes(bytes).unwrap_or(&[])
    }

    /// [`Table::slice`] with the range's length computed by checked arithmetic, not
    /// wrapping: the compiler then knows the bytes found are exactly `n` records and folds
    /// `ref_from_bytes`'s division of their length by the record size (and its remainder's
    /// test) away. The same result as [`Table::slice`] for a table [`Table::new`] accepted
    /// (the range in bounds) and for any other (both slices then empty). For the endpoints'
    /// section alone (20-byte records, a division by a multiply and shifts, and its
    /// remainder's test): a reopened tuple's SYN reads it in `choose` (−8 instructions);
    /// the other sections keep [`Table::slice`]'s form, which the new-flow visits' layout
    /// prefers (every record section read this way cost an IPv6 SYN +27 to +32).
    #[inline]
    fn records<T: FromBytes + zerocopy::Immutable>(&self, idx: usize) -> &[T] {
        let (off, n) = self.sections[idx];
        let bytes = n.checked_mul(size_of::<T>()).and_then(|len| self.bytes.as_ref().get(off..off.checked_add(len)?));
        bytes.and_then(|b| <[T]>::ref_from_bytes(b).ok()).unwrap_or(&[])
    }

    /// Section `idx` as bytes (the ring and names sections), read as [`Table::slice`] reads.
    #[inline]
    fn bytes_of(&self, idx: usize) -> &[u8] {
        let (off, n) = self.sections[idx];
        self.bytes.as_ref().get(off..off.wrapping_add(n)).unwrap_or(&[])
    }

    /// The publication generation.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The raw snapshot bytes.
    pub fn bytes(&self) -> &[u8] {
        self.bytes.as_ref()
    }

    /// All front doors, sorted by (address, protocol, port).
    pub fn frontends(&self) -> &[Frontend] {
        self.slice(section::FRONTENDS)
    }

    fn services(&self) -> &[Service] {
        self.slice(section::SERVICES)
    }

    fn backends(&self) -> &[Backend] {
        self.records(section::BACKENDS)
    }

    fn ring(&self) -> &[u8] {
        self.bytes_of(section::RING)
    }

    fn names(&self) -> &[u8] {
        self.bytes_of(section::NAMES)
    }

    fn source_ranges(&self) -> &[SourceRange] {
        self.slice(section::SOURCE_RANGES)
    }

    /// Number of services (backend sets).
    pub fn service_count(&self) -> usize {
        self.services().len()
    }

    /// The front door for (destination address, IANA protocol, destination port), through
    /// the hashed index: expected O(1) — a hash, one index cache line, the front-door
    /// record that confirms it (both prefetchable: [`Table::prefetch_frontend`],
    /// [`Table::prefetch_frontend_record`]).
    #[inline]
    pub fn frontend(&self, addr: IpAddr, protocol: u8, port: u16) -> Option<FrontendRef<'_>> {
        self.frontend_hashed(self.frontend_index.hash_ip(addr, protocol, port), None, addr, protocol, port)
    }

    /// The hash under which [`Table::frontend`] searches this table's index for
    /// (address, IANA protocol, port); the index is seeded per table, so a hash is for the
    /// table that computed it. O(1) (xxh3 of 19 bytes), reads no table memory.
    #[inline]
    pub fn frontend_hash(&self, addr: IpAddr, protocol: u8, port: u16) -> FrontendHash {
        self.frontend_index.hash_ip(addr, protocol, port)
    }

    /// [`Table::frontend`] with the key's hash computed ahead ([`Table::frontend_hash`] of
    /// the same key) and, optionally, a `candidate` position to try first (what
    /// [`Table::prefetch_frontend_record`] returned for `h`): when the front door there has
    /// the key it is the answer (front-door keys are unique: the section is strictly
    /// sorted) and the index is not searched again. A hash computed by another table is not
    /// used: the key is hashed anew; a wrong candidate costs one record comparison. Same
    /// result as [`Table::frontend`].
    #[inline(always)]
    pub fn frontend_hashed(
        &self,
        h: FrontendHash,
        candidate: Option<u32>,
        addr: IpAddr,
        protocol: u8,
        port: u16,
    ) -> Option<FrontendRef<'_>> {
        let (i, _) = self.frontend_record_hashed(h, candidate, addr, protocol, port)?;
        self.frontend_at(i)
    }

    /// [`Table::frontend_hashed`] as the front door's position in [`Table::frontends`] and
    /// its record, without the view (no source-range slice, no kind decoded): for a caller
    /// that needs its service ([`Frontend::service_position`]) and whether it has source
    /// ranges, as a new flow's visits ahead of the pipeline do.
    #[inline(always)]
    pub fn frontend_record_hashed(
        &self,
        h: FrontendHash,
        candidate: Option<u32>,
        addr: IpAddr,
        protocol: u8,
        port: u16,
    ) -> Option<(usize, &Frontend)> {
        let addr = layout::addr16(addr);
        let fronts = self.frontends();
        let holds =
            |i: usize| fronts.get(i).is_some_and(|f| f.addr == addr && f.protocol == protocol && f.port.get() == port);
        if let Some(i) = candidate.map(|c| c as usize).filter(|&i| holds(i)) {
            return Some((i, &fronts[i]));
        }
        let h = if self.frontend_index.owns(h) { h } else { self.frontend_index.hash(addr, protocol, port) };
        debug_assert_eq!(h, self.frontend_index.hash(addr, protocol, port), "a hash of another key");
        let i = self.frontend_index.find(h, holds)?;
        Some((i, fronts.get(i)?))
    }

    /// The front door at position `i` of [`Table::frontends`] (its [`FrontendRef::index`]);
    /// `None` past the end.
    #[inline]
    pub fn frontend_at(&self, i: usize) -> Option<FrontendRef<'_>> {
        let f = self.frontends().get(i)?;
        let (ro, rn) = (f.source_ranges_offset.get() as usize, f.source_ranges_count.get() as usize);
        // A front door without source ranges (most) reads no section for them: its list is
        // empty whatever the offset says, as `get(ro..ro)` below would find it.
        let ranges = if rn == 0 { &[][..] } else { self.source_ranges().get(ro..ro.saturating_add(rn)).unwrap_or(&[]) };
        Some(FrontendRef {
            // The section header counts front doors in 32 bits (`layout::Section::count`).
            index: i as u32,
            service: f.service_position(),
            kind: FrontendKind::from_number(f.kind).unwrap_or(FrontendKind::ExternalIp),
            source_ranges: SourceRanges { ranges },
        })
    }

    /// Starts loading the index line [`Table::frontend`] reads for key hash `h` (stage 1 of
    /// a new flow's lookups). O(1), no effect on results.
    #[inline]
    pub fn prefetch_frontend(&self, h: FrontendHash) {
        self.frontend_index.prefetch(h);
    }

    /// Starts loading the front-door record [`Table::frontend`] will likely confirm for
    /// `h` (stage 2: reads the index line, which [`Table::prefetch_frontend`] should have
    /// cached) and returns its position, the candidate for [`Table::frontend_hashed`];
    /// nothing when no fingerprint matches in the home bucket (no such front door, or one
    /// that overflowed into the next bucket). No effect on results.
    #[inline(always)]
    pub fn prefetch_frontend_record(&self, h: FrontendHash) -> Option<u32> {
        let i = self.frontend_index.candidate(h)?;
        prefetch_lines(self.frontends().get(i)?);
        Some(i as u32)
    }

    /// Starts loading the record of service `id` (0-based, [`FrontendRef::service`]) that
    /// [`Table::service`] reads (stage 3: after the front door is found). Nothing for an
    /// id out of range; no effect on results.
    #[inline]
    pub fn prefetch_service(&self, id: u32) {
        if let Some(s) = self.services().get(id as usize) {
            prefetch_lines(s);
        }
    }

    /// Whether any front door uses `addr` (the gateway answers ARP, Neighbor Solicitations
    /// and ICMP echo for it). A binary search over the front doors, O(log n): only those
    /// packets ask, never a flow's, so it does not earn a second index.
    #[inline]
    pub fn is_vip(&self, addr: IpAddr) -> bool {
        let a = u128::from_be_bytes(layout::addr16(addr));
        let fronts = self.frontends();
        let i = fronts.partition_point(|f| u128::from_be_bytes(f.addr) < a);
        fronts.get(i).is_some_and(|f| u128::from_be_bytes(f.addr) == a)
    }

    /// Service `id` (0-based, as in [`FrontendRef::service`]); `None` when out of range.
    /// O(1): reads the service record; its name is not looked at ([`ServiceRef::name`]).
    #[inline(always)]
    pub fn service(&self, id: u32) -> Option<ServiceRef<'_>> {
        let s = self.services().get(id as usize)?;
        let (bo, bn) = (s.backends_offset.get() as usize, s.backends_count.get() as usize);
        let (do_, dn) = (bo.saturating_add(bn), s.draining_count.get() as usize);
        let (ro, rn, w) = (s.ring_offset.get() as usize, s.ring_len.get() as usize, s.ring_entry_len);
        let (no, nl) = (s.name_offset.get() as usize, s.name_len.get() as usize);
        Some(ServiceRef {
            name: self.names().get(no..no.saturating_add(nl)).unwrap_or(&[]),
            draining: self.backends().get(do_..do_.saturating_add(dn)).unwrap_or(&[]),
            choice: self.ring_of(s, bo, bn, ro, rn, w),
        })
    }

    /// What choosing an endpoint reads of service `id` ([`Table::service`]'s
    /// [`ServiceRing`]), without the name and draining endpoints: a new flow's look-ahead
    /// (`pipeline::process_burst`). `None` when out of range. O(1).
    #[inline(always)]
    pub fn service_ring(&self, id: u32) -> Option<ServiceRing<'_>> {
        let s = self.services().get(id as usize)?;
        let (bo, bn) = (s.backends_offset.get() as usize, s.backends_count.get() as usize);
        let (ro, rn, w) = (s.ring_offset.get() as usize, s.ring_len.get() as usize, s.ring_entry_len);
        Some(self.ring_of(s, bo, bn, ro, rn, w))
    }

    /// The [`ServiceRing`] of service record `s`: `bn` backends from `bo`, `rn` ring entries
    /// of `w` bytes from `ro`.
    #[inline(always)]
    fn ring_of(&self, s: &Service, bo: usize, bn: usize, ro: usize, rn: usize, w: u8) -> ServiceRing<'_> {
        ServiceRing {
            backends: self.backends().get(bo..bo.saturating_add(bn)).unwrap_or(&[]),
            ring: Ring::new(
                self.ring().get(ro..ro.saturating_add(rn.saturating_mul(usize::from(w)))).unwrap_or(&[]),
                w,
            ),
            affinity_timeout_s: s.affinity_timeout_s.get(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use super::super::{build, BackendSpec, FrontendSpec, ServiceSpec, TableSpec};
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn spec() -> TableSpec {
        let web = ServiceSpec {
            name: "demo/web:http".into(),
            backends: ["10.70.0.13", "10.70.0.11", "10.70.0.12"]
                .iter()
                .map(|a| BackendSpec { addr: ip(a), port: 8080 })
                .collect(),
            affinity_timeout_s: None,
            draining: vec![BackendSpec { addr: ip("10.70.0.14"), port: 8080 }],
        };
        let empty = ServiceSpec {
            name: "demo/empty:".into(),
            backends: vec![],
            affinity_timeout_s: Some(10800),
            draining: vec![],
        };
        let fe = |a: &str, protocol, port, service| FrontendSpec {
            addr: ip(a),
            port,
            protocol,
            kind: FrontendKind::ExternalIp,
            service,
            source_ranges: vec![],
        };
        let lb = FrontendSpec {
            kind: FrontendKind::LoadBalancer,
            source_ranges: ["198.51.100.0/24", "192.0.2.128/25", "2001:db8:1::/48"]
                .iter()
                .map(|c| crate::IpCidr::parse(c).unwrap())
                .collect(),
            ..fe("203.0.113.20", Protocol::Tcp, 443, 0)
        };
        TableSpec {
            frontends: vec![
                fe("203.0.113.11", Protocol::Tcp, 80, 1),
                fe("203.0.113.10", Protocol::Tcp, 80, 0),
                fe("203.0.113.10", Protocol::Udp, 80, 1),
                fe("2001:db8::10", Protocol::Tcp, 80, 0),
                lb,
            ],
            services: vec![web, empty],
        }
    }

    fn table() -> Table<Vec<u8>> {
        Table::new(build(&spec(), 9).unwrap()).unwrap()
    }

    #[test]
    fn lookups() {
        let t = table();
        assert_eq!(t.generation(), 9);
        let f = t.frontend(ip("203.0.113.10"), 6, 80).unwrap();
        let door = &t.frontends()[f.index as usize];
        assert_eq!((door.protocol, door.port.get()), (6, 80), "the index names the front door found");
        let s = t.service(f.service).unwrap();
        assert_eq!(s.name(), "demo/web:http");
        assert_eq!(s.name_bytes(), b"demo/web:http");
        assert_eq!(s.backends.len(), 3);
        assert!(crate::maglev::ring_size_for(3) as usize == s.ring.len());
        let picked: std::collections::HashSet<_> =
            (0..1000u64).map(|h| s.pick(h.wrapping_mul(0x9e37_79b9_7f4a_7c15)).unwrap().addr).collect();
        assert_eq!(picked.len(), 3);
        assert!(t.frontend(ip("203.0.113.10"), 6, 81).is_none());
        assert!(t.frontend(ip("203.0.113.10"), 17, 443).is_none());
        let e = t.service(t.frontend(ip("203.0.113.11"), 6, 80).unwrap().service).unwrap();
        assert!(e.pick(1).is_none());
        assert_eq!(e.affinity_timeout_s, 10800);
        assert!(t.frontend(ip("2001:db8::10"), 6, 80).is_some());
        assert!(t.is_vip(ip("203.0.113.11")));
        assert!(t.is_vip(ip("2001:db8::10")));
        assert!(!t.is_vip(ip("203.0.113.12")));
        assert!(!t.is_vip(IpAddr::V4(Ipv4Addr::UNSPECIFIED)));
    }

    #[test]
    fn source_ranges_admit_only_their_clients() {
        let t = table();
        let lb = t.frontend(ip("203.0.113.20"), 6, 443).unwrap();
        assert_eq!(lb.kind, FrontendKind::LoadBalancer);
        assert_eq!(lb.source_ranges.as_slice().len(), 3);
        for yes in
            ["198.51.100.0", "198.51.100.255", "192.0.2.128", "192.0.2.255", "2001:db8:1::", "2001:db8:1:ffff::9"]
        {
            assert!(lb.source_ranges.admits(ip(yes)), "{yes}");
        }
        for no in ["198.51.101.0", "198.51.99.255", "192.0.2.127", "193.0.0.0", "0.0.0.0", "2001:db8:2::", "::ffff:0:0"]
        {
            assert!(!lb.source_ranges.admits(ip(no)), "{no}");
        }
        // An IPv4 range never admits the IPv6 address with the same bits, and vice versa.
        assert!(!lb.source_ranges.admits(ip("::c633:6401")));
        let open = t.frontend(ip("203.0.113.10"), 6, 80).unwrap();
        assert!(open.source_ranges.is_empty() && open.source_ranges.admits(ip("192.0.2.1")));
    }

    #[test]
    fn draining_endpoints_serve_established_flows_only() {
        let t = table();
        let s = t.service(t.frontend(ip("203.0.113.10"), 6, 80).unwrap().service).unwrap();
        let draining = layout::addr16(ip("10.70.0.14"));
        assert_eq!(s.draining.len(), 1);
        assert!(s.serves(draining, 8080));
        assert!(!s.serves(draining, 8081));
        assert!(s.backend(draining, 8080).is_none());
        assert!((0..1000u64).all(|h| s.pick(h.wrapping_mul(0x9e37_79b9_7f4a_7c15)).unwrap().addr != draining));
        assert!(s.serves(layout::addr16(ip("10.70.0.11")), 8080));
    }

    #[test]
    fn backend_order_does_not_change_the_ring() {
        let a = table();
        let mut s = spec();
        s.services[0].backends.reverse();
        let b = Table::new(build(&s, 9).unwrap()).unwrap();
        assert_eq!(a.bytes(), b.bytes());
    }

    #[test]
    fn duplicates_and_dangling_ids_are_build_errors() {
        let mut s = spec();
        s.frontends.push(s.frontends[0].clone());
        assert!(matches!(build(&s, 1), Err(crate::BuildError::DuplicateFrontend { .. })));
        let mut s = spec();
        s.frontends[0].service = 5;
        assert!(matches!(build(&s, 1), Err(crate::BuildError::BadServiceIndex { .. })));
    }

    #[test]
    fn every_truncation_and_byte_flip_is_rejected() {
        let good = build(&spec(), 3).unwrap();
        for len in 0..good.len() {
            assert!(Table::new(&good[..len]).is_err(), "truncated to {len} accepted");
        }
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x41;
            assert!(Table::new(bad).is_err(), "flip at {i} accepted");
        }
    }

    #[test]
    fn inconsistent_records_with_a_valid_checksum_are_rejected() {
        // Corrupt a ring entry to point past its backends, then re-seal the checksum:
        // validation must catch what the CRC cannot.
        let mut bytes = build(&spec(), 3).unwrap();
        let t = Table::new(bytes.clone()).unwrap();
        let ring_off = t.sections[section::RING].0;
        bytes[ring_off..ring_off + 4].copy_from_slice(&99u32.to_le_bytes());
        let crc = layout::checksum(&bytes);
        bytes[layout::CHECKSUM_OFFSET..layout::CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        let e = Table::new(bytes).unwrap_err();
        assert!(matches!(e, TableError::Record { what: "ring entry", .. }), "{e}");
    }

    /// `bytes` with its record of type `T` at byte `at` patched by `f`, checksum re-sealed.
    fn patched<T: FromBytes + zerocopy::IntoBytes + zerocopy::Immutable>(
        mut bytes: Vec<u8>,
        at: usize,
        f: impl FnOnce(&mut T),
    ) -> Vec<u8> {
        let mut rec = T::read_from_bytes(&bytes[at..at + size_of::<T>()]).unwrap();
        f(&mut rec);
        bytes[at..at + size_of::<T>()].copy_from_slice(rec.as_bytes());
        let crc = layout::checksum(&bytes);
        bytes[layout::CHECKSUM_OFFSET..layout::CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    /// `bytes` with service 0's record patched by `f`, checksum re-sealed.
    fn with_service_record(bytes: Vec<u8>, f: impl FnOnce(&mut Service)) -> Vec<u8> {
        let at = Table::new(bytes.clone()).unwrap().sections[section::SERVICES].0;
        patched(bytes, at, f)
    }

    /// Asserts that `bytes` are rejected with an error containing `needle`.
    fn reject(bytes: Vec<u8>, needle: &str) {
        let e = Table::new(bytes).unwrap_err().to_string();
        assert!(e.contains(needle), "{e}");
    }

    #[test]
    fn ring_widths_and_ranges_are_validated() {
        let good = build(&spec(), 3).unwrap();
        reject(with_service_record(good.clone(), |s| s.ring_entry_len = 3), "ring entry width 3");
        reject(with_service_record(good.clone(), |s| s.ring_entry_len = 0), "ring entry width 0");
        let mut wide = spec();
        wide.services[0].backends =
            (0..300u32).map(|n| BackendSpec { addr: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n)), port: 80 }).collect();
        let wide = build(&wide, 3).unwrap();
        reject(with_service_record(wide, |s| s.ring_entry_len = 1), "300 backends do not fit ring entries of 1 bytes");
        reject(with_service_record(good.clone(), |s| s.ring_len = u32::MAX.into()), "ring range out of bounds");
        reject(with_service_record(good.clone(), |s| s.ring_offset = u32::MAX.into()), "ring range out of bounds");
        // Two-byte entries over a ring written with one-byte entries: ids out of range.
        reject(
            with_service_record(good, |s| {
                s.ring_entry_len = 2;
                s.ring_len = (s.ring_len.get() / 2).into();
            }),
            "is not in 1..=3",
        );
    }

    #[test]
    fn source_ranges_and_draining_are_validated() {
        let good = build(&spec(), 3).unwrap();
        let t = Table::new(good.clone()).unwrap();
        let ranges = t.sections[section::SOURCE_RANGES].0;
        let lb = t.frontends().iter().position(|f| f.source_ranges_count.get() > 0).unwrap();
        let lb_at = t.sections[section::FRONTENDS].0 + lb * size_of::<Frontend>();
        reject(
            patched::<Frontend>(good.clone(), lb_at, |f| f.source_ranges_count = 4.into()),
            "source range list out of bounds",
        );
        reject(
            patched::<Frontend>(good.clone(), lb_at, |f| f.source_ranges_offset = u32::MAX.into()),
            "source range list out of bounds",
        );
        // The first range made to overlap the second; then made empty (first > last).
        let second = SourceRange::read_from_bytes(&good[ranges + 32..ranges + 64]).unwrap();
        reject(patched::<SourceRange>(good.clone(), ranges, |r| r.last = second.first), "not sorted, disjoint");
        reject(patched::<SourceRange>(good.clone(), ranges, |r| r.first = [0xff; 16]), "not sorted, disjoint");
        // Draining endpoints past the backends section, or unsorted ring backends.
        reject(with_service_record(good.clone(), |s| s.draining_count = 99.into()), "backend range out of bounds");
        let backends = t.sections[section::BACKENDS].0;
        reject(
            patched::<Backend>(good, backends, |b| b.addr = layout::addr16(ip("10.70.0.99"))),
            "backends not strictly sorted",
        );
    }

    #[test]
    fn empty_table() {
        let t = Table::empty();
        assert_eq!(t.generation(), 0);
        assert!(t.frontends().is_empty());
        assert!(t.frontend(ip("203.0.113.10"), 6, 80).is_none());
        assert!(t.frontend(ip("::"), 0, 0).is_none());
        let h = t.frontend_hash(ip("203.0.113.10"), 6, 80);
        t.prefetch_frontend(h);
        t.prefetch_frontend_record(h);
        t.prefetch_service(0);
        assert!(t.frontend_hashed(h, None, ip("203.0.113.10"), 6, 80).is_none());
        assert!(t.frontend_hashed(h, Some(0), ip("203.0.113.10"), 6, 80).is_none());
    }

    /// The front door for a key by binary search over the sorted section: what
    /// [`Table::frontend`] answered before the hashed index, the reference it must agree with.
    fn frontend_by_search<B: AsRef<[u8]>>(
        t: &Table<B>,
        addr: IpAddr,
        protocol: u8,
        port: u16,
    ) -> Option<FrontendRef<'_>> {
        let key = layout::frontend_key(layout::addr16(addr), protocol, port);
        let i = t
            .frontends()
            .binary_search_by_key(&key, |f| layout::frontend_key(f.addr, f.protocol, f.port.get()))
            .ok()?;
        t.frontend_at(i)
    }

    /// A table of front doors at `keys` (deduplicated: the builder rejects duplicates),
    /// spread over two services.
    fn table_of(keys: &[(IpAddr, Protocol, u16)]) -> Table<Vec<u8>> {
        let mut keys = keys.to_vec();
        keys.sort_unstable_by_key(|&(a, p, port)| (layout::addr16(a), p, port));
        keys.dedup_by_key(|&mut (a, p, port)| (layout::addr16(a), p, port));
        let frontends = keys
            .iter()
            .enumerate()
            .map(|(i, &(addr, protocol, port))| FrontendSpec {
                addr,
                port,
                protocol,
                kind: FrontendKind::ExternalIp,
                service: i % 2,
                source_ranges: vec![],
            })
            .collect();
        Table::new(build(&TableSpec { frontends, services: spec().services }, 1).unwrap()).unwrap()
    }

    /// Whether the hashed lookups agree with the binary search for `key`, through
    /// [`Table::frontend`] and [`Table::frontend_hashed`], with this table's hash and with
    /// another table's; and that the prefetches for it change nothing.
    fn agrees<B: AsRef<[u8]>>(t: &Table<B>, other: &Table<Vec<u8>>, (addr, protocol, port): (IpAddr, u8, u16)) -> bool {
        let want = frontend_by_search(t, addr, protocol, port);
        let h = t.frontend_hash(addr, protocol, port);
        t.prefetch_frontend(h);
        let candidate = t.prefetch_frontend_record(h);
        if let Some(f) = want {
            t.prefetch_service(f.service);
            let s = t.service(f.service).unwrap();
            if let Some(slot) = s.slot(u64::from(port)) {
                s.prefetch_slot(slot);
                s.prefetch_backend(s.ring_backend(slot).unwrap());
            }
        }
        t.frontend(addr, protocol, port) == want
            && t.frontend_hashed(h, None, addr, protocol, port) == want
            && t.frontend_hashed(h, candidate, addr, protocol, port) == want
            && (0..t.frontends().len() as u32 + 1).all(|c| t.frontend_hashed(h, Some(c), addr, protocol, port) == want)
            && t.frontend_hashed(other.frontend_hash(addr, protocol, port), None, addr, protocol, port) == want
    }

    fn arb_addr() -> impl proptest::strategy::Strategy<Value = IpAddr> {
        use proptest::prelude::*;
        // Few distinct addresses, so that front doors share them (as a VIP's ports do), and
        // IPv6 addresses whose low 32 bits equal an IPv4 one.
        prop_oneof![
            (0u32..8).prop_map(|n| IpAddr::from((0xcb00_7100 + n).to_be_bytes())),
            (0u32..8).prop_map(|n| IpAddr::from(
                (0x2001_0db8_0000_0000_0000_0000_cb00_7100u128 + u128::from(n)).to_be_bytes()
            )),
            any::<u128>().prop_map(|n| IpAddr::from(n.to_be_bytes())),
        ]
    }

    fn arb_key() -> impl proptest::strategy::Strategy<Value = (IpAddr, Protocol, u16)> {
        use proptest::prelude::*;
        (arb_addr(), prop_oneof![Just(Protocol::Tcp), Just(Protocol::Udp), Just(Protocol::Sctp)], 0u16..6)
            .prop_map(|(a, p, port)| (a, p, if port == 5 { u16::MAX } else { 80 + port }))
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(256))]
        #[test]
        fn hashed_lookup_agrees_with_binary_search(
            keys in proptest::collection::vec(arb_key(), 0..300),
            // Keys looked up whether or not they are front doors (most are not).
            probes in proptest::collection::vec((arb_addr(), proptest::prelude::any::<u8>(), 0u16..6), 0..100),
        ) {
            let t = table_of(&keys);
            let other = table();
            for f in t.frontends() {
                let key = (layout::addr_from16(f.addr), f.protocol, f.port.get());
                let found = t.frontend(key.0, key.1, key.2);
                let named = found.map(|found| &t.frontends()[found.index as usize]);
                proptest::prop_assert!(named.is_some_and(|named| std::ptr::eq(named, f)), "the index names the front door");
                proptest::prop_assert!(agrees(&t, &other, key));
            }
            for (addr, protocol, port) in probes {
                proptest::prop_assert!(agrees(&t, &other, (addr, protocol, 78 + port)));
            }
        }
    }

    #[test]
    fn hashed_lookup_with_no_and_one_front_door() {
        let other = table();
        let v4 = (ip("203.0.113.10"), Protocol::Tcp, 80);
        let v6 = (ip("2001:db8::10"), Protocol::Udp, 53);
        let near = [
            (ip("203.0.113.10"), 6, 81),
            (ip("203.0.113.10"), 17, 80),
            (ip("203.0.113.11"), 6, 80),
            (ip("::ffff:203.0.113.10"), 6, 80),
            (ip("::cb00:710a"), 6, 80),
            (ip("2001:db8::10"), 17, 80),
            (ip("2001:db8::11"), 17, 53),
        ];
        for keys in [vec![], vec![v4], vec![v6], vec![v4, v6]] {
            let t = table_of(&keys);
            assert_eq!(t.frontends().len(), keys.len());
            for &(addr, protocol, port) in &keys {
                let f = t.frontend(addr, protocol as u8, port).unwrap();
                assert_eq!(t.frontends()[f.index as usize].port.get(), port);
                assert!(agrees(&t, &other, (addr, protocol as u8, port)));
            }
            for (addr, protocol, port) in near {
                // `::ffff:203.0.113.10` is the IPv4 front door's own 16-byte form.
                let want = keys.contains(&v4) && (addr, protocol, port) == (ip("::ffff:203.0.113.10"), 6, 80);
                assert_eq!(t.frontend(addr, protocol, port).is_some(), want, "{addr} {protocol} {port}");
                assert!(agrees(&t, &other, (addr, protocol, port)));
            }
        }
    }

    #[test]
    fn service_prefetches_follow_pick() {
        let t = table();
        for id in 0..t.service_count() as u32 + 2 {
            t.prefetch_service(id);
            let Some(s) = t.service(id) else { continue };
            for h in [0, 1, 7, u64::MAX] {
                s.prefetch_slot(h as usize);
                s.prefetch_backend(h as u32);
                let position = s.slot(h).and_then(|slot| s.ring_backend(slot));
                assert_eq!(position.map(|p| s.backends[p as usize].addr), s.pick(h).map(|b| b.addr));
                assert_eq!(s.pick(h).is_some(), !s.ring.is_empty());
            }
        }
        assert_eq!(t.service(1).unwrap().name(), "demo/empty:");
    }
}
