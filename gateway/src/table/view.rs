//! A validated, read-only snapshot and the lookups the data plane makes on it.
//!
//! [`Table::new`] checks everything once — magic, ABI version, lengths, CRC-32, every
//! section in bounds, front doors strictly sorted, every id and range in bounds, every
//! ring entry naming a backend of its own service, names UTF-8 — so that afterwards no
//! lookup can panic or read out of bounds, whatever bytes were published.

use std::net::IpAddr;

use zerocopy::FromBytes;

use super::layout::{self, section, Backend, Frontend, Header, Service};
use super::spec::{FrontendKind, Protocol};

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

/// CRC-32 (IEEE) of a snapshot with its checksum field taken as zero.
pub(crate) fn checksum(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    let at = layout::CHECKSUM_OFFSET;
    h.update(&bytes[..at]);
    h.update(&[0; 4]);
    h.update(&bytes[at + 4..]);
    h.finalize()
}

/// Where a snapshot's bytes live.
pub enum Storage {
    /// In process memory (tests, benchmarks, the empty table).
    Owned(Vec<u8>),
    /// A read-only mapping of a published snapshot file.
    Mapped(memmap2::Mmap),
}

impl AsRef<[u8]> for Storage {
    fn as_ref(&self) -> &[u8] {
        match self {
            Self::Owned(v) => v,
            Self::Mapped(m) => m,
        }
    }
}

/// A validated snapshot over any byte storage (`Vec<u8>`, an mmap).
pub struct Table<B: AsRef<[u8]> = Storage> {
    bytes: B,
    generation: u64,
    // (byte offset, count) of each section, checked in bounds by `new`.
    sections: [(usize, usize); section::COUNT],
}

impl<B: AsRef<[u8]>> std::fmt::Debug for Table<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Table")
            .field("generation", &self.generation)
            .field("frontends", &self.frontends().len())
            .field("services", &self.services().len())
            .finish()
    }
}

/// A front door found by [`Table::frontend`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrontendRef {
    /// 0-based position of the front door in [`Table::frontends`] (sorted by address,
    /// protocol, port): an id valid for this table generation only (per-front-door counters;
    /// conntrack's `FlowState::frontend`).
    pub index: u32,
    /// 0-based index of its service (see [`Table::service`]).
    pub service: u32,
    /// Which Service field it comes from.
    pub kind: FrontendKind,
}

/// A service's backends and ring, borrowed from the table.
#[derive(Clone, Copy, Debug)]
pub struct ServiceRef<'t> {
    /// `namespace/name:port`.
    pub name: &'t str,
    /// Backends in table order (sorted by address, port).
    pub backends: &'t [Backend],
    /// Maglev ring: 1-based indices into `backends`; empty when there are none.
    pub ring: Ring<'t>,
    /// `sessionAffinity: ClientIP` timeout in seconds, 0 without affinity.
    pub affinity_timeout_s: u32,
}

impl ServiceRef<'_> {
    /// The backend that ring slot `hash % M` names; `None` when the service has no
    /// backends (its front doors reject).
    #[inline]
    pub fn pick(&self, hash: u64) -> Option<&Backend> {
        let len = self.ring.len();
        if len == 0 {
            return None;
        }
        let id = self.ring.get((hash % len as u64) as usize)? as usize;
        self.backends.get(id.wrapping_sub(1))
    }
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
        self.bytes.len() / usize::from(self.entry_len)
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

impl Table<Storage> {
    /// An empty table (generation 0): no front doors. What a gateway serves before the
    /// first publication.
    pub fn empty() -> Self {
        let bytes = super::build(&super::TableSpec::default(), 0).expect("empty spec builds");
        Self::new(Storage::Owned(bytes)).expect("empty table validates")
    }
}

impl<B: AsRef<[u8]>> Table<B> {
    /// Validates `bytes` as a snapshot.
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
        let computed = checksum(b);
        if computed != header.checksum.get() {
            return Err(TableError::Checksum { stored: header.checksum.get(), computed });
        }
        let sizes = [size_of::<Frontend>(), size_of::<Service>(), size_of::<Backend>(), 1, 1];
        let mut sections = [(0, 0); section::COUNT];
        for (i, s) in header.sections.iter().enumerate() {
            let (off, n) = (s.offset.get() as usize, s.count.get() as usize);
            let end = n.checked_mul(sizes[i]).and_then(|len| off.checked_add(len));
            match end {
                Some(end) if off >= hlen && end <= b.len() => sections[i] = (off, n),
                _ => return Err(TableError::SectionBounds(i)),
            }
        }
        let t = Self { bytes, generation: header.generation.get(), sections };
        t.check_records()?;
        Ok(t)
    }

    fn check_records(&self) -> Result<(), TableError> {
        let (fronts, services, backends, ring) = (self.frontends(), self.services(), self.backends(), self.ring());
        let names = self.names();
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
        }
        for (i, s) in services.iter().enumerate() {
            let (bo, bn) = (s.backends_offset.get() as usize, s.backends_count.get() as usize);
            if bo.checked_add(bn).is_none_or(|e| e > backends.len()) {
                return Err(record("service", i, "backend range out of bounds"));
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

    fn slice<T: FromBytes + zerocopy::Immutable>(&self, idx: usize) -> &[T] {
        let (off, n) = self.sections[idx];
        let bytes = &self.bytes.as_ref()[off..off + n * size_of::<T>()];
        <[T]>::ref_from_bytes(bytes).unwrap_or(&[])
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
        self.slice(section::BACKENDS)
    }

    fn ring(&self) -> &[u8] {
        let (off, n) = self.sections[section::RING];
        &self.bytes.as_ref()[off..off + n]
    }

    fn names(&self) -> &[u8] {
        let (off, n) = self.sections[section::NAMES];
        &self.bytes.as_ref()[off..off + n]
    }

    /// Number of services (backend sets).
    pub fn service_count(&self) -> usize {
        self.services().len()
    }

    /// The front door for (destination address, IANA protocol, destination port), by
    /// binary search: O(log n).
    #[inline]
    pub fn frontend(&self, addr: IpAddr, protocol: u8, port: u16) -> Option<FrontendRef> {
        let key = layout::frontend_key(layout::addr16(addr), protocol, port);
        let fronts = self.frontends();
        let i = fronts.binary_search_by_key(&key, |f| layout::frontend_key(f.addr, f.protocol, f.port.get())).ok()?;
        let f = &fronts[i];
        Some(FrontendRef {
            // The section header counts front doors in 32 bits (`layout::Section::count`).
            index: i as u32,
            service: f.service.get() - 1,
            kind: FrontendKind::from_number(f.kind).unwrap_or(FrontendKind::ExternalIp),
        })
    }

    /// Whether any front door uses `addr` (the gateway answers ARP and ICMP echo for it).
    #[inline]
    pub fn is_vip(&self, addr: IpAddr) -> bool {
        let a = u128::from_be_bytes(layout::addr16(addr));
        let fronts = self.frontends();
        let i = fronts.partition_point(|f| u128::from_be_bytes(f.addr) < a);
        fronts.get(i).is_some_and(|f| u128::from_be_bytes(f.addr) == a)
    }

    /// Service `id` (0-based, as in [`FrontendRef::service`]); `None` when out of range.
    #[inline]
    pub fn service(&self, id: u32) -> Option<ServiceRef<'_>> {
        let s = self.services().get(id as usize)?;
        let (bo, bn) = (s.backends_offset.get() as usize, s.backends_count.get() as usize);
        let (ro, rn, w) = (s.ring_offset.get() as usize, s.ring_len.get() as usize, s.ring_entry_len);
        let (no, nl) = (s.name_offset.get() as usize, s.name_len.get() as usize);
        Some(ServiceRef {
            name: self.names().get(no..no + nl).and_then(|n| std::str::from_utf8(n).ok()).unwrap_or(""),
            backends: self.backends().get(bo..bo + bn).unwrap_or(&[]),
            ring: Ring::new(
                self.ring().get(ro..ro.saturating_add(rn.saturating_mul(usize::from(w)))).unwrap_or(&[]),
                w,
            ),
            affinity_timeout_s: s.affinity_timeout_s.get(),
        })
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
        };
        let empty = ServiceSpec { name: "demo/empty:".into(), backends: vec![], affinity_timeout_s: Some(10800) };
        let fe = |a: &str, protocol, port, service| FrontendSpec {
            addr: ip(a),
            port,
            protocol,
            kind: FrontendKind::ExternalIp,
            service,
        };
        TableSpec {
            frontends: vec![
                fe("203.0.113.11", Protocol::Tcp, 80, 1),
                fe("203.0.113.10", Protocol::Tcp, 80, 0),
                fe("203.0.113.10", Protocol::Udp, 80, 1),
                fe("2001:db8::10", Protocol::Tcp, 80, 0),
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
        assert_eq!(s.name, "demo/web:http");
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
        assert!(matches!(build(&s, 1), Err(crate::table::BuildError::DuplicateFrontend { .. })));
        let mut s = spec();
        s.frontends[0].service = 5;
        assert!(matches!(build(&s, 1), Err(crate::table::BuildError::BadServiceIndex { .. })));
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
        let crc = checksum(&bytes);
        bytes[layout::CHECKSUM_OFFSET..layout::CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        let e = Table::new(bytes).unwrap_err();
        assert!(matches!(e, TableError::Record { what: "ring entry", .. }), "{e}");
    }

    /// `bytes` with service 0's record patched by `f`, checksum re-sealed.
    fn with_service_record(mut bytes: Vec<u8>, f: impl FnOnce(&mut Service)) -> Vec<u8> {
        let t = Table::new(bytes.clone()).unwrap();
        let at = t.sections[section::SERVICES].0;
        let mut rec = Service::read_from_bytes(&bytes[at..at + size_of::<Service>()]).unwrap();
        f(&mut rec);
        bytes[at..at + size_of::<Service>()].copy_from_slice(zerocopy::IntoBytes::as_bytes(&rec));
        let crc = checksum(&bytes);
        bytes[layout::CHECKSUM_OFFSET..layout::CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
        bytes
    }

    #[test]
    fn ring_widths_and_ranges_are_validated() {
        let good = build(&spec(), 3).unwrap();
        let reject = |bytes: Vec<u8>, needle: &str| {
            let e = Table::new(bytes).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
        };
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
    fn empty_table() {
        let t = Table::empty();
        assert_eq!(t.generation(), 0);
        assert!(t.frontends().is_empty());
        assert!(t.frontend(ip("203.0.113.10"), 6, 80).is_none());
    }
}
