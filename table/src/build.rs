//! [`TableSpec`] → snapshot bytes. Runs in torii-control, never on the packet path.
//!
//! [`build`] lays out one snapshot from scratch, compactly: rings, services, front doors,
//! source ranges, backends and names, each service's parts in service order.
//! [`TableBuilder`] produces snapshots that serve exactly the same ([`crate::Content`]:
//! every lookup answers alike) but keeps what it built last time — every service's sorted
//! backends, encoded Maglev ring and place, and the snapshot buffer itself — so that a
//! change costs about the same at 10 services as at 10 000 (issue 17):
//!
//! - each service of the new spec is matched with the previous build's service of its
//!   name (looked for where the previous match suggests, so one insertion or deletion
//!   costs no search, else by name); an equal one keeps everything, a changed one finds
//!   its ring by its sorted backend list (a ring is a pure function of that list, see
//!   [`maglev::build`]) or has it computed;
//! - rings, backend records and names are placed in their sections like allocations:
//!   a part that keeps its size stays where it was, a new or resized part goes into the
//!   first free hole that fits or into the section's room to grow, and the parts of
//!   removed services become holes. The first layout leaves about an eighth of every
//!   section free; a build that does not fit lays everything out again, with new room;
//! - so the snapshot keeps its length, and only the parts that changed are written into
//!   the previous buffer: the changed services' rings, backends and names, their service
//!   records (every service record when a service was inserted or removed: indices
//!   moved), the front door and source range sections when front doors changed (they
//!   are sorted and name services by index), and the header;
//! - the checksum is updated from the old and new bytes of the ranges written (CRC-32 is
//!   affine: zlib's `crc32_combine`), not computed again over the whole snapshot, and the
//!   ranges are reported ([`TableBuilder::changed_ranges`]) so that the publisher writes
//!   only those into a file holding an older snapshot.
//!
//! Readers go by the offsets in the records, never by the order (`layout`): a snapshot
//! with holes and parts out of service order is an ordinary snapshot of the same ABI.
//!
//! A front door's source ranges (`loadBalancerSourceRanges`) are laid out as sorted,
//! disjoint address ranges: CIDRs are turned into ranges, overlapping and adjacent ones
//! merged, so that the data plane decides with one binary search; front doors with the
//! same merged list share its records.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Arc;

use zerocopy::byteorder::little_endian::U32;
use zerocopy::IntoBytes;

// aHash: the ring cache hashes whole backend lists on every build.
use ahash::AHashMap as HashMap;

use super::layout::{self, section, Backend, Frontend, Header, Section, Service, SourceRange};
use super::spec::{BackendSpec, FrontendSpec, IpCidr, ServiceSpec, TableSpec};
use crate::maglev;
use crate::storage::Storage;
use crate::view::Table;

/// A caller's promise to [`TableBuilder::build_versioned`]: accepts the name of every
/// service that may have changed since the spec of the builder's last build.
pub type Touched<'a> = &'a dyn Fn(&str) -> bool;

/// Why a [`TableSpec`] could not be laid out.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BuildError {
    /// Two front doors share address, protocol and port.
    #[error("front door {addr} {protocol}/{port} is listed twice")]
    DuplicateFrontend {
        /// The address.
        addr: std::net::IpAddr,
        /// The protocol, as Kubernetes spells it.
        protocol: &'static str,
        /// The port.
        port: u16,
    },
    /// A front door points past the services list.
    #[error("front door {index} refers to service {service}, but there are only {services}")]
    BadServiceIndex {
        /// Index of the front door in the spec.
        index: usize,
        /// The service index it names.
        service: usize,
        /// Number of services.
        services: usize,
    },
    /// The snapshot would exceed the 32-bit offsets of the layout.
    #[error("the table is too large for ABI version {} (over 4 GiB)", layout::ABI_VERSION)]
    TooLarge,
}

/// Lays out `spec` as snapshot bytes with the given generation: rings first, then services,
/// front doors sorted by (address, protocol, port), their source ranges, backends sorted
/// per service (ring backends, then draining endpoints), names;
/// one Maglev ring per service (size [`maglev::ring_size_for`], entries
/// [`layout::ring_entry_len_for`] bytes wide); header and CRC-32.
///
/// # Errors
/// [`BuildError`] for duplicate front doors, dangling service indices or a table over 4 GiB.
pub fn build(spec: &TableSpec, generation: u64) -> Result<Vec<u8>, BuildError> {
    let mut builder = TableBuilder { slack: false, ..TableBuilder::new() };
    builder.build(spec, generation)?;
    Ok(std::mem::take(&mut builder.out))
}

/// `draining` sorted, deduplicated and without the endpoints of `backends` (sorted).
fn normal_draining(draining: &[BackendSpec], backends: &[BackendSpec]) -> Vec<BackendSpec> {
    let mut list = draining.to_vec();
    list.sort_unstable();
    list.dedup();
    list.retain(|d| backends.binary_search(d).is_err());
    list
}

/// One encoded Maglev ring: `len` entries of `entry_len` bytes.
#[derive(Debug)]
struct Ring {
    entry_len: u8,
    len: u32,
    bytes: Box<[u8]>,
}

/// A service of the previous build: its name and affinity, its backends sorted and
/// deduplicated, its ring, and its draining endpoints sorted, deduplicated and without its
/// backends (what the snapshot holds of it; the spec's own lists are not kept, to hold
/// each list once).
#[derive(Clone, Debug)]
struct Built {
    name: String,
    affinity_timeout_s: Option<u32>,
    backends: Arc<[BackendSpec]>,
    ring: Arc<Ring>,
    draining: Vec<BackendSpec>,
}

/// Whether `list` is sorted without duplicates (as the compiler writes its lists).
fn is_normal(list: &[BackendSpec]) -> bool {
    list.windows(2).all(|w| w[0] < w[1])
}

impl Built {
    /// Whether `s` builds to exactly this service: the same name and affinity, the same
    /// set of backends and the same set of draining endpoints not among them (the order
    /// and repeats of the spec's lists do not matter to the snapshot).
    fn serves(&self, s: &ServiceSpec) -> bool {
        if self.name != s.name || self.affinity_timeout_s != s.affinity_timeout_s {
            return false;
        }
        let same_backends = if is_normal(&s.backends) {
            *self.backends == *s.backends
        } else {
            let mut list = s.backends.clone();
            list.sort_unstable();
            list.dedup();
            *self.backends == *list
        };
        same_backends
            && if is_normal(&s.draining) && s.draining.iter().all(|d| self.backends.binary_search(d).is_err()) {
                self.draining == s.draining
            } else {
                self.draining == normal_draining(&s.draining, &self.backends)
            }
    }

    /// The backend records of this service: ring backends, then draining endpoints.
    fn backend_records(&self) -> Vec<Backend> {
        self.backends.iter().chain(&self.draining).map(backend_record).collect()
    }

    /// Its ring's size in bytes.
    fn ring_bytes(&self) -> usize {
        self.ring.bytes.len()
    }
}

/// Where one service's parts lie in the snapshot: its first backend record (index in the
/// backends section), its ring (byte offset in the ring section) and its name (byte
/// offset in the names section), with their sizes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Place {
    backends_at: usize,
    backends: usize,
    draining: usize,
    ring_at: usize,
    ring_len: u32,
    entry_len: u8,
    name_at: usize,
    name_len: usize,
}

impl Place {
    fn ring_bytes(&self) -> usize {
        self.ring_len as usize * usize::from(self.entry_len)
    }

    fn records(&self) -> usize {
        self.backends + self.draining
    }
}

/// The free space of one section of a [`TableBuilder`]'s snapshot, in that section's
/// units (bytes for rings and names, records for backends): parts are placed below `cap`
/// (the section's size), `end` is the high-water mark and `holes` the freed parts below
/// it (start → length; disjoint, never touching each other or `end`).
#[derive(Clone, Debug, Default)]
struct Space {
    end: usize,
    cap: usize,
    holes: BTreeMap<usize, usize>,
}

impl Space {
    /// A place for `len` units at a multiple of `align`: the first hole it fits in, else
    /// past `end`; `None` when the section is full.
    fn alloc(&mut self, len: usize, align: usize) -> Option<usize> {
        if len == 0 {
            return Some(0);
        }
        let fit = self
            .holes
            .iter()
            .map(|(&at, &n)| (at, n, at.next_multiple_of(align)))
            .find(|&(at, n, start)| start + len <= at + n);
        if let Some((at, n, start)) = fit {
            self.holes.remove(&at);
            if start > at {
                self.holes.insert(at, start - at);
            }
            if start + len < at + n {
                self.holes.insert(start + len, at + n - start - len);
            }
            return Some(start);
        }
        let start = self.end.next_multiple_of(align);
        if start + len > self.cap {
            return None;
        }
        if start > self.end {
            self.holes.insert(self.end, start - self.end);
            self.coalesce(self.end);
        }
        self.end = start + len;
        Some(start)
    }

    /// Frees `len` units at `at`.
    fn free(&mut self, at: usize, len: usize) {
        if len > 0 {
            self.holes.insert(at, len);
            self.coalesce(at);
        }
    }

    /// Merges the hole at `at` with its neighbours, and into `end` when it reaches it.
    fn coalesce(&mut self, mut at: usize) {
        let Some(mut len) = self.holes.remove(&at) else { return };
        if let Some(next) = self.holes.remove(&(at + len)) {
            len += next;
        }
        if let Some((&p, &n)) = self.holes.range(..at).next_back() {
            if p + n == at {
                self.holes.remove(&p);
                at = p;
                len += n;
            }
        }
        if at + len == self.end {
            self.end = at;
        } else {
            self.holes.insert(at, len);
        }
    }
}

/// How a service of the new spec relates to the previous build.
#[derive(Clone, Copy, Debug)]
enum Match {
    /// Equal to old service `j`: everything kept.
    Same(usize),
    /// Old service `j` of the same name, changed.
    Changed(usize),
    /// No old service of its name.
    New,
}

/// Builds snapshots that serve exactly what [`build`] would make of the same spec (the
/// same [`Table::content`]), reusing the rings and the buffer of the previous call (see
/// the module documentation). Its first build, and any build whose services no longer
/// fit the free space of their sections, lays the snapshot out like [`build`] but with
/// room to grow in every section (about an eighth); any other build keeps every unchanged
/// service's ring, backends and name where they are, so its snapshot differs from the
/// previous one only where services and front doors changed. Holds about one snapshot's
/// worth of memory plus the rings.
#[derive(Debug)]
pub struct TableBuilder {
    /// The last snapshot; describes `built`, `frontends`, `places` and `sections` while
    /// `valid`.
    out: Vec<u8>,
    valid: bool,
    /// Leave room to grow in every section (a builder that publishes); [`build`] does not.
    slack: bool,
    /// The services of the last successful build, by index.
    built: Vec<Built>,
    /// The front doors of the last successful build, as given.
    frontends: Vec<FrontendSpec>,
    /// Where each service of the last build lies.
    places: Vec<Place>,
    /// The sections of the last build.
    sections: [Section; section::COUNT],
    /// Records the service, front door and source range sections have room for.
    room: [usize; section::COUNT],
    /// Free space in the ring (bytes), backends (records) and names (bytes) sections.
    rings_space: Space,
    backends_space: Space,
    names_space: Space,
    /// Every ring of the last successful build, by sorted backend list.
    rings: HashMap<Arc<[BackendSpec]>, Arc<Ring>>,
    /// The byte ranges of `out` the last build may have changed relative to the build
    /// before it; `None`: any byte.
    changed: Option<Vec<Range<usize>>>,
    /// The caller's version of the last build's spec ([`TableBuilder::build_versioned`]).
    version: Option<u64>,
    stats: BuildStats,
}

impl Default for TableBuilder {
    fn default() -> Self {
        Self::new()
    }
}

/// Work counters of a [`TableBuilder`], for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BuildStats {
    /// Successful builds.
    pub builds: u64,
    /// Maglev rings computed (the others were reused).
    pub rings_computed: u64,
    /// Builds that laid the whole snapshot out again; the others only wrote the parts of
    /// the services and the front doors that changed.
    pub layouts: u64,
    /// Services given a new place (new ones, or ones whose parts changed size).
    pub placed: u64,
}

/// Room to grow left in a section of `used` units by a builder with slack: an eighth,
/// and at least `min`.
fn with_room(used: usize, min: usize, slack: bool) -> usize {
    if slack {
        used + (used / 8).max(min)
    } else {
        used
    }
}

impl TableBuilder {
    /// A builder with empty caches: its first build does all the work.
    pub fn new() -> Self {
        Self {
            out: Vec::new(),
            valid: false,
            slack: true,
            built: Vec::new(),
            frontends: Vec::new(),
            places: Vec::new(),
            sections: [Section::default(); section::COUNT],
            room: [0; section::COUNT],
            rings_space: Space::default(),
            backends_space: Space::default(),
            names_space: Space::default(),
            rings: HashMap::new(),
            changed: None,
            version: None,
            stats: BuildStats::default(),
        }
    }

    /// Work done so far.
    pub fn stats(&self) -> BuildStats {
        self.stats
    }

    /// The snapshot of the last successful build (empty before the first).
    pub fn bytes(&self) -> &[u8] {
        if self.valid {
            &self.out
        } else {
            &[]
        }
    }

    /// The byte ranges in which the snapshot of the last successful build may differ from
    /// the snapshot of the successful build before it (sorted, disjoint, within its
    /// length; the length itself may differ too). `None` when any byte may differ (a
    /// build that laid the whole snapshot out). A publisher that holds a copy of the
    /// previous snapshot only has to write these ranges.
    pub fn changed_ranges(&self) -> Option<&[Range<usize>]> {
        self.changed.as_deref()
    }

    /// Lays out `spec` with `generation` (a snapshot with the [`Table::content`] of
    /// [`build`]'s) and returns the snapshot bytes (borrowed from the builder until the
    /// next call). Work in proportion to what changed since the last build, plus one
    /// comparison per service and front door.
    ///
    /// # Errors
    /// As [`build`]. The builder stays usable; its next build lays everything out again.
    pub fn build(&mut self, spec: &TableSpec, generation: u64) -> Result<&[u8], BuildError> {
        self.build_versioned(spec, generation, None)
    }

    /// The caller's version of the spec of the last successful build, as given to
    /// [`TableBuilder::build_versioned`] (`None` after [`TableBuilder::build`] or a failure).
    pub fn spec_version(&self) -> Option<u64> {
        self.version.filter(|_| self.valid)
    }

    /// [`TableBuilder::build`] of `spec`, which the caller numbers `version`, with the
    /// caller's promise `touched`, when given: every service of `spec` whose name
    /// `touched` does not accept is unchanged since the spec of version
    /// [`TableBuilder::spec_version`] (same services of that name, same order), so the
    /// builder takes them as they are instead of comparing their backend lists (the
    /// compiler knows which services it inserted and removed; at 10 000 services the
    /// comparison is most of a build). Without a promise, or when the builder's last
    /// build is not of a numbered spec, every service is compared.
    ///
    /// # Errors
    /// As [`build`].
    pub fn build_versioned(
        &mut self,
        spec: &TableSpec,
        generation: u64,
        numbered: Option<(u64, Option<Touched<'_>>)>,
    ) -> Result<&[u8], BuildError> {
        let touched = match numbered {
            Some((_, Some(t))) if self.spec_version().is_some() => Some(t),
            _ => None,
        };
        self.version = None;
        self.build_with(spec, generation, touched)?;
        self.version = numbered.map(|(v, _)| v);
        Ok(&self.out)
    }

    /// [`TableBuilder::build`], with services whose name `touched` does not accept taken
    /// as unchanged (see [`TableBuilder::build_versioned`]).
    fn build_with(
        &mut self,
        spec: &TableSpec,
        generation: u64,
        touched: Option<&dyn Fn(&str) -> bool>,
    ) -> Result<&[u8], BuildError> {
        for (index, f) in spec.frontends.iter().enumerate() {
            if f.service >= spec.services.len() {
                return Err(BuildError::BadServiceIndex { index, service: f.service, services: spec.services.len() });
            }
        }
        let frontends_changed = !self.valid || self.frontends != spec.frontends;
        let mut records = if frontends_changed { Some(frontend_records(&spec.frontends)?) } else { None };

        // Each service's old counterpart: the one of its name, looked for where the last
        // match suggests (one insertion or deletion shifts the rest by one), else by name:
        // by binary search when the old services are sorted by name (as torii-control's
        // compiler gives them: an insertion then costs no pass over every name), else in
        // a map of every name.
        let old = if self.valid { self.built.len() } else { 0 };
        let mut taken = vec![false; old];
        let mut matches = Vec::with_capacity(spec.services.len());
        {
            let built = &self.built[..old];
            let mut sorted: Option<bool> = None;
            let mut by_name: Option<HashMap<&str, Vec<usize>>> = None;
            let mut delta = 0isize;
            for (i, s) in spec.services.iter().enumerate() {
                let guess = i as isize + delta;
                // A promised-unchanged name: its old services in order, so the first
                // one not taken yet (they are sorted by name when the promise is made).
                let unchanged = touched.is_some_and(|t| !t(&s.name));
                let near = [guess, guess + 1, guess - 1]
                    .into_iter()
                    .filter_map(|g| usize::try_from(g).ok())
                    .find(|&g| g < old && !taken[g] && built[g].name == s.name)
                    .map(|mut g| {
                        while unchanged && g > 0 && !taken[g - 1] && built[g - 1].name == s.name {
                            g -= 1;
                        }
                        g
                    });
                let found = near.or_else(|| {
                    let sorted = *sorted.get_or_insert_with(|| built.windows(2).all(|w| w[0].name <= w[1].name));
                    let candidates: Vec<usize> = if sorted {
                        let first = built.partition_point(|b| b.name < s.name);
                        (first..old).take_while(|&j| built[j].name == s.name).collect()
                    } else {
                        let map = by_name.get_or_insert_with(|| {
                            let mut m: HashMap<&str, Vec<usize>> = HashMap::new();
                            for (j, b) in built.iter().enumerate() {
                                m.entry(b.name.as_str()).or_default().push(j);
                            }
                            m
                        });
                        map.get(s.name.as_str())?.clone()
                    };
                    let free = || candidates.iter().copied().filter(|&j| !taken[j]);
                    if unchanged {
                        return free().next();
                    }
                    free().find(|&j| built[j].serves(s)).or_else(|| free().next())
                });
                matches.push(match found {
                    Some(j) => {
                        taken[j] = true;
                        delta = j as isize - i as isize;
                        debug_assert!(!unchanged || self.built[j].serves(s), "a broken promise: {}", s.name);
                        if unchanged || self.built[j].serves(s) {
                            Match::Same(j)
                        } else {
                            Match::Changed(j)
                        }
                    }
                    None => Match::New,
                });
            }
        }

        // The changed and new services: rings found by sorted backend list or computed.
        let mut fresh: Vec<Option<Built>> = Vec::with_capacity(spec.services.len());
        for (s, m) in spec.services.iter().zip(&matches) {
            fresh.push(match m {
                Match::Same(_) => None,
                Match::Changed(_) | Match::New => Some(self.built_of(s)),
            });
        }

        // Nothing fails after this point but a layout past 4 GiB.
        let placed = if self.valid { self.place(&matches, &fresh, &taken, spec, records.as_ref()) } else { None };
        // Of each changed service: whether it kept its old ring and name.
        let kept: Vec<(bool, bool)> = matches
            .iter()
            .zip(&fresh)
            .map(|(m, f)| match (m, f) {
                (Match::Changed(j), Some(b)) => {
                    let o = &self.built[*j];
                    (Arc::ptr_eq(&o.ring, &b.ring), o.name == b.name)
                }
                _ => (false, false),
            })
            .collect();
        // The services of this build: the unchanged ones moved over from the last.
        let mut previous: Vec<Option<Built>> = std::mem::take(&mut self.built).into_iter().map(Some).collect();
        let built: Vec<Built> = matches
            .iter()
            .zip(fresh)
            .filter_map(|(m, f)| match (m, f) {
                (_, Some(b)) => Some(b),
                (Match::Same(j), None) => previous.get_mut(*j).and_then(Option::take),
                (_, None) => None,
            })
            .collect();
        debug_assert_eq!(built.len(), spec.services.len());
        // The backend lists of the services that went or changed: their rings may be unused now.
        let gone: Vec<Arc<[BackendSpec]>> = previous.into_iter().flatten().map(|b| b.backends).collect();
        match placed {
            Some(places) => self.write_in_place(&matches, &kept, built, places, records.as_ref(), generation),
            None => {
                if records.is_none() {
                    records = Some(frontend_records(&spec.frontends)?);
                }
                let records = records.unwrap_or_default();
                if let Err(e) = self.lay_out(&records, &built, generation) {
                    self.valid = false;
                    self.changed = None;
                    drop(built);
                    self.rings.retain(|_, r| Arc::strong_count(r) > 1);
                    return Err(e);
                }
                self.built = built;
            }
        }
        if frontends_changed {
            self.frontends.clone_from(&spec.frontends);
        }
        // Keep only the rings this build uses: of the rings the services that went or
        // changed had, those no service holds any more (only the cache does).
        for key in gone {
            if self.rings.get(&key).is_some_and(|r| Arc::strong_count(r) == 1) {
                self.rings.remove(&key);
            }
        }
        self.valid = true;
        self.stats.builds += 1;
        Ok(&self.out)
    }

    /// The [`Built`] of `s`: its ring from the cache or computed.
    fn built_of(&mut self, s: &ServiceSpec) -> Built {
        let mut list = s.backends.clone();
        list.sort_unstable();
        list.dedup();
        let (backends, ring) = match self.rings.get_key_value(list.as_slice()) {
            Some((b, r)) => (b.clone(), r.clone()),
            None => {
                self.stats.rings_computed += 1;
                let backends: Arc<[BackendSpec]> = list.into();
                let ring = Arc::new(encode_ring(&backends));
                self.rings.insert(backends.clone(), ring.clone());
                (backends, ring)
            }
        };
        let draining = normal_draining(&s.draining, &backends);
        Built { name: s.name.clone(), affinity_timeout_s: s.affinity_timeout_s, backends, ring, draining }
    }

    /// The places of the new spec's services in the previous snapshot's sections, with
    /// the unchanged services and the parts that kept their size where they were; `None`
    /// when something does not fit (the snapshot is laid out again). Updates the free
    /// spaces only when it succeeds.
    fn place(
        &mut self,
        matches: &[Match],
        fresh: &[Option<Built>],
        taken: &[bool],
        spec: &TableSpec,
        records: Option<&FrontendRecords>,
    ) -> Option<Vec<Place>> {
        if spec.services.len() > self.room[section::SERVICES]
            || spec.frontends.len() > self.room[section::FRONTENDS]
            || records.is_some_and(|r| r.ranges.len() > self.room[section::SOURCE_RANGES])
        {
            return None;
        }
        let (mut rings, mut backends, mut names) =
            (self.rings_space.clone(), self.backends_space.clone(), self.names_space.clone());
        // Free what goes: services no longer present, and changed parts of another size.
        for (j, p) in self.places.iter().enumerate() {
            if !taken[j] {
                rings.free(p.ring_at, p.ring_bytes());
                backends.free(p.backends_at, p.records());
                names.free(p.name_at, p.name_len);
            }
        }
        for (m, f) in matches.iter().zip(fresh) {
            if let (Match::Changed(j), Some(b)) = (m, f) {
                let p = self.places[*j];
                if (p.ring_len, p.entry_len) != (b.ring.len, b.ring.entry_len) {
                    rings.free(p.ring_at, p.ring_bytes());
                }
                if p.records() != b.backends.len() + b.draining.len() {
                    backends.free(p.backends_at, p.records());
                }
                if p.name_len != b.name.len() {
                    names.free(p.name_at, p.name_len);
                }
            }
        }
        let mut places = Vec::with_capacity(matches.len());
        for (m, f) in matches.iter().zip(fresh) {
            let old = match m {
                Match::Same(j) | Match::Changed(j) => Some(self.places[*j]),
                Match::New => None,
            };
            let Some(b) = f else {
                places.push(old?);
                continue;
            };
            let records = b.backends.len() + b.draining.len();
            let keep = |same: bool| old.filter(|_| same);
            let ring_at = match keep(old.is_some_and(|p| (p.ring_len, p.entry_len) == (b.ring.len, b.ring.entry_len))) {
                Some(p) => p.ring_at,
                None => rings.alloc(b.ring_bytes(), usize::from(b.ring.entry_len))?,
            };
            let backends_at = match keep(old.is_some_and(|p| p.records() == records)) {
                Some(p) => p.backends_at,
                None => backends.alloc(records, 1)?,
            };
            let name_at = match keep(old.is_some_and(|p| p.name_len == b.name.len())) {
                Some(p) => p.name_at,
                None => names.alloc(b.name.len(), 1)?,
            };
            places.push(Place {
                backends_at,
                backends: b.backends.len(),
                draining: b.draining.len(),
                ring_at,
                ring_len: b.ring.len,
                entry_len: b.ring.entry_len,
                name_at,
                name_len: b.name.len(),
            });
        }
        self.rings_space = rings;
        self.backends_space = backends;
        self.names_space = names;
        Some(places)
    }

    /// Writes, into the previous snapshot, the parts of the services that changed or
    /// moved (`built` at `places`; `kept`: whether a changed service kept its ring and
    /// name), the service records (all of them when any service moved in the order), the
    /// front door and source range sections when `records` are given, and the header;
    /// updates the checksum from the changed ranges.
    fn write_in_place(
        &mut self,
        matches: &[Match],
        kept: &[(bool, bool)],
        built: Vec<Built>,
        places: Vec<Place>,
        records: Option<&FrontendRecords>,
        generation: u64,
    ) {
        let at = |s: &Section| s.offset.get() as usize;
        let (ring, svcs, bk, names) = (
            at(&self.sections[section::RING]),
            at(&self.sections[section::SERVICES]),
            at(&self.sections[section::BACKENDS]),
            at(&self.sections[section::NAMES]),
        );
        let old_count = self.places.len();
        let reordered = old_count != built.len()
            || matches.iter().enumerate().any(|(i, m)| match m {
                Match::Same(j) | Match::Changed(j) => *j != i,
                Match::New => true,
            });
        let mut writes: Vec<(usize, Vec<u8>)> = Vec::new();
        for (i, (m, (b, p))) in matches.iter().zip(built.iter().zip(&places)).enumerate() {
            let old = match m {
                Match::Same(_) => continue,
                Match::Changed(j) => Some(self.places[*j]),
                Match::New => None,
            };
            self.stats.placed += u64::from(old.is_none());
            let (same_ring, same_name) = kept[i];
            if !(same_ring && old.is_some_and(|q| q.ring_at == p.ring_at)) {
                writes.push((ring + p.ring_at, b.ring.bytes.to_vec()));
            }
            writes.push((bk + p.backends_at * size_of::<Backend>(), b.backend_records().as_bytes().to_vec()));
            if !(same_name && old.is_some_and(|q| q.name_at == p.name_at)) {
                writes.push((names + p.name_at, b.name.as_bytes().to_vec()));
            }
            if !reordered {
                writes.push((svcs + i * size_of::<Service>(), service_record(b, p).as_bytes().to_vec()));
            }
        }
        if reordered {
            // Every record, and zeros over the records past the new end.
            let len = built.len().max(old_count) * size_of::<Service>();
            let mut records: Vec<u8> = Vec::with_capacity(len);
            for (b, p) in built.iter().zip(&places) {
                records.extend_from_slice(service_record(b, p).as_bytes());
            }
            records.resize(len, 0);
            // Only the records that differ: an insertion or removal moves those after it.
            if let Some(span) = differing_span(&self.out[svcs..svcs + len], &records) {
                writes.push((svcs + span.start, records[span].to_vec()));
            }
            self.sections[section::SERVICES].count = (built.len() as u32).into();
        }
        if let Some(r) = records {
            for (idx, bytes, n) in [
                (section::FRONTENDS, r.frontends.as_bytes(), r.frontends.len()),
                (section::SOURCE_RANGES, r.ranges.as_bytes(), r.ranges.len()),
            ] {
                let old_len = self.sections[idx].count.get() as usize * record_len(idx);
                let mut records = bytes.to_vec();
                records.resize(bytes.len().max(old_len), 0);
                let start = at(&self.sections[idx]);
                if let Some(span) = differing_span(&self.out[start..start + records.len()], &records) {
                    writes.push((start + span.start, records[span].to_vec()));
                }
                self.sections[idx].count = (n as u32).into();
            }
        }
        self.built = built;
        self.places = places;
        self.apply_writes(writes, generation);
    }

    /// Writes `writes` (offset, bytes) and the header with `generation` into the
    /// snapshot (same length), and updates the checksum from the old and new bytes of the
    /// ranges they touch; records those ranges as [`TableBuilder::changed_ranges`].
    fn apply_writes(&mut self, writes: Vec<(usize, Vec<u8>)>, generation: u64) {
        let mut ranges = Vec::with_capacity(writes.len() + 1);
        ranges.push(0..size_of::<Header>());
        ranges.extend(writes.iter().map(|(dst, bytes)| *dst..dst + bytes.len()));
        merge_byte_ranges(&mut ranges);
        // CRC-32 is affine in the message: for messages of one length, crc(new) =
        // crc(old) ^ the CRC register of (old ^ new) with the init and final XOR left out,
        // and a range's share of it is the register of (crc(old range) ^ crc(new range))
        // carried through the bytes after the range (zlib's crc32_combine).
        let len = self.out.len();
        let stored = layout::CHECKSUM_OFFSET..layout::CHECKSUM_OFFSET + 4;
        let mut crc = u32::from_le_bytes(self.out[stored.clone()].try_into().unwrap_or_default());
        let parts: Vec<u32> = ranges.iter().map(|r| checksum_part(&self.out, r.clone())).collect();
        for (dst, bytes) in &writes {
            self.out[*dst..dst + bytes.len()].copy_from_slice(bytes);
        }
        self.write_header(generation);
        for (r, old) in ranges.iter().zip(parts) {
            let delta = old ^ checksum_part(&self.out, r.clone());
            crc ^= crc32_shift(delta, len - r.end);
        }
        self.out[stored].copy_from_slice(&crc.to_le_bytes());
        self.changed = Some(ranges);
    }

    /// Writes the whole snapshot of `frontends` (sorted records) and `built` into
    /// `self.out`, each service's parts after the previous one's, every section followed
    /// by its room to grow (none without slack).
    fn lay_out(&mut self, records: &FrontendRecords, built: &[Built], generation: u64) -> Result<(), BuildError> {
        self.stats.layouts += 1;
        self.stats.placed += built.len() as u64;
        let hlen = size_of::<Header>();

        // Places: rings at multiples of their entry width, backends and names in order.
        let mut places = Vec::with_capacity(built.len());
        let (mut ring_bytes, mut backends_n, mut names_n) = (0usize, 0usize, 0usize);
        for b in built {
            let ring_at = ring_bytes.next_multiple_of(usize::from(b.ring.entry_len));
            places.push(Place {
                backends_at: backends_n,
                backends: b.backends.len(),
                draining: b.draining.len(),
                ring_at,
                ring_len: b.ring.len,
                entry_len: b.ring.entry_len,
                name_at: names_n,
                name_len: b.name.len(),
            });
            ring_bytes = ring_at + b.ring.bytes.len();
            backends_n += b.backends.len() + b.draining.len();
            names_n += b.name.len();
        }
        let slack = self.slack;
        let ring_cap = with_room(ring_bytes, 64 << 10, slack);
        let backends_cap = with_room(backends_n, 1024, slack);
        let names_cap = with_room(names_n, 4 << 10, slack);

        let mut services = Vec::with_capacity(built.len());
        let mut backends = Vec::with_capacity(backends_cap);
        let mut names = Vec::with_capacity(names_cap);
        for (b, p) in built.iter().zip(&places) {
            services.push(service_record(b, p));
            backends.extend(b.backend_records());
            names.extend_from_slice(b.name.as_bytes());
        }
        backends.resize(backends_cap, Backend { addr: [0; 16], port: 0.into(), reserved: [0; 2] });
        names.resize(names_cap, 0);

        let mut sections = [Section::default(); section::COUNT];
        let mut room = [0; section::COUNT];
        let ring_start = hlen.next_multiple_of(8);
        let ring_end = ring_start + ring_cap;
        sections[section::RING] = Section { offset: u32_of(ring_start)?.into(), count: u32_of(ring_cap)?.into() };
        let mut end = ring_end;
        let mut tail: Vec<(usize, &[u8], usize)> = Vec::with_capacity(5);
        for (idx, bytes, count, cap) in [
            (section::SERVICES, services.as_bytes(), services.len(), with_room(services.len(), 256, slack)),
            (
                section::FRONTENDS,
                records.frontends.as_bytes(),
                records.frontends.len(),
                with_room(records.frontends.len(), 256, slack),
            ),
            (
                section::SOURCE_RANGES,
                records.ranges.as_bytes(),
                records.ranges.len(),
                with_room(records.ranges.len(), 64, slack),
            ),
            (section::BACKENDS, backends.as_bytes(), backends_cap, backends_cap),
            (section::NAMES, names.as_slice(), names_cap, names_cap),
        ] {
            let at = end.next_multiple_of(8);
            sections[idx] = Section { offset: u32_of(at)?.into(), count: u32_of(count)?.into() };
            room[idx] = cap;
            let size = cap * record_len(idx);
            tail.push((at, bytes, size));
            end = at + size;
        }
        u32_of(end)?;

        // The rings, each at its place (padding and room zeroed), then the other sections.
        self.out.clear();
        // Exactly the snapshot's size: doubling growth would hold up to twice the table.
        self.out.reserve_exact(end);
        self.out.resize(ring_end, 0);
        for (b, p) in built.iter().zip(&places) {
            let dst = ring_start + p.ring_at;
            self.out[dst..dst + b.ring.bytes.len()].copy_from_slice(&b.ring.bytes);
        }
        for (at, bytes, size) in tail {
            self.out.resize(at, 0);
            self.out.extend_from_slice(bytes);
            self.out.resize(at + size, 0);
        }
        self.changed = None;
        self.places = places;
        self.sections = sections;
        self.room = room;
        self.rings_space = Space { end: ring_bytes, cap: ring_cap, holes: BTreeMap::new() };
        self.backends_space = Space { end: backends_n, cap: backends_cap, holes: BTreeMap::new() };
        self.names_space = Space { end: names_n, cap: names_cap, holes: BTreeMap::new() };
        self.seal(generation);
        Ok(())
    }

    /// Writes the header (with `generation`) and the checksum.
    fn seal(&mut self, generation: u64) {
        self.write_header(generation);
        let crc = layout::checksum(&self.out);
        self.out[layout::CHECKSUM_OFFSET..layout::CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    }

    /// Writes the header with `generation` and a zero checksum.
    fn write_header(&mut self, generation: u64) {
        let hlen = size_of::<Header>();
        let header = Header {
            magic: layout::MAGIC,
            abi_version: layout::ABI_VERSION.into(),
            header_len: (hlen as u32).into(),
            generation: generation.into(),
            total_len: (self.out.len() as u64).into(),
            checksum: 0.into(),
            flags: 0.into(),
            sections: self.sections,
        };
        self.out[..hlen].copy_from_slice(header.as_bytes());
    }
}

/// The range from the first to the last byte in which `old` and `new` (of one length)
/// differ; `None` when they are equal.
fn differing_span(old: &[u8], new: &[u8]) -> Option<Range<usize>> {
    // Block by block (memcmp), then byte by byte within the block.
    const BLOCK: usize = 256;
    let blocks = || old.chunks(BLOCK).zip(new.chunks(BLOCK)).enumerate();
    let (i, (a, b)) = blocks().find(|(_, (a, b))| a != b)?;
    let first = i * BLOCK + a.iter().zip(b.iter()).position(|(x, y)| x != y)?;
    let (i, (a, b)) = blocks().rev().find(|(_, (a, b))| a != b)?;
    let last = i * BLOCK + a.iter().zip(b.iter()).rposition(|(x, y)| x != y)?;
    Some(first..last + 1)
}

/// Sorts `ranges` and merges the touching or overlapping ones (as
/// [`TableBuilder::changed_ranges`] gives them).
pub fn merge_byte_ranges(ranges: &mut Vec<Range<usize>>) {
    ranges.sort_unstable_by_key(|r| r.start);
    ranges.dedup_by(|later, earlier| {
        if later.start <= earlier.end {
            earlier.end = earlier.end.max(later.end);
            true
        } else {
            false
        }
    });
}

/// CRC-32 (IEEE) of `snapshot[range]`, with the bytes of the checksum field taken as zero.
fn checksum_part(snapshot: &[u8], range: Range<usize>) -> u32 {
    let mut h = crc32fast::Hasher::new();
    let field = layout::CHECKSUM_OFFSET..layout::CHECKSUM_OFFSET + 4;
    let mut at = range.start;
    if at < field.end && field.start < range.end {
        h.update(&snapshot[at..field.start.max(at)]);
        h.update(&[0; 4][..field.end.min(range.end) - field.start.max(at)]);
        at = field.end.min(range.end);
    }
    h.update(&snapshot[at..range.end]);
    h.finalize()
}

/// The reflected CRC-32 polynomial (IEEE 802.3).
const CRC32_POLY: u32 = 0xedb8_8320;

/// `a * b` modulo the CRC-32 polynomial, in the reflected bit order (zlib's `multmodp`).
fn crc32_multmodp(a: u32, mut b: u32) -> u32 {
    let mut m = 1u32 << 31;
    let mut p = 0;
    loop {
        if a & m != 0 {
            p ^= b;
            if a & (m - 1) == 0 {
                return p;
            }
        }
        m >>= 1;
        b = if b & 1 != 0 { (b >> 1) ^ CRC32_POLY } else { b >> 1 };
    }
}

/// The CRC-32 register `register` (no initial or final XOR) carried through `zeros` zero
/// bytes: `register * x^(8 * zeros)` modulo the polynomial (zlib's `x2nmodp`).
fn crc32_shift(register: u32, zeros: usize) -> u32 {
    // x^(2^k) for k = 3.. (x^8 is one zero byte), squared step by step.
    let mut power = 1u32 << (31 - 8); // x^8
    let mut p = 1u32 << 31; // x^0
    let mut n = zeros;
    while n != 0 {
        if n & 1 != 0 {
            p = crc32_multmodp(power, p);
        }
        power = crc32_multmodp(power, power);
        n >>= 1;
    }
    crc32_multmodp(p, register)
}

/// The front door section and the source range section of a snapshot.
#[derive(Debug, Default)]
struct FrontendRecords {
    /// Sorted by (address, protocol, port).
    frontends: Vec<Frontend>,
    /// Each front door's merged ranges; front doors with equal lists share one copy, in
    /// the order of their first front door.
    ranges: Vec<SourceRange>,
}

/// The front door records of `frontends`, sorted by (address, protocol, port), and their
/// source ranges ([`merge_ranges`]).
///
/// # Errors
/// [`BuildError::DuplicateFrontend`] for the smallest key listed twice;
/// [`BuildError::TooLarge`] past 32-bit counts.
fn frontend_records(frontends: &[FrontendSpec]) -> Result<FrontendRecords, BuildError> {
    let key = |f: &FrontendSpec| layout::frontend_key(layout::addr16(f.addr), f.protocol as u8, f.port);
    let mut order: Vec<&FrontendSpec> = frontends.iter().collect();
    if !order.is_sorted_by_key(|f| key(f)) {
        order.sort_unstable_by_key(|f| key(f));
    }
    if let Some(w) = order.windows(2).find(|w| key(w[0]) == key(w[1])) {
        let f = w[0];
        return Err(BuildError::DuplicateFrontend { addr: f.addr, protocol: f.protocol.as_str(), port: f.port });
    }
    let mut out = FrontendRecords { frontends: Vec::with_capacity(order.len()), ranges: Vec::new() };
    let mut shared: HashMap<Vec<SourceRange>, usize> = HashMap::new();
    for f in order {
        let ranges = merge_ranges(&f.source_ranges);
        let offset = match shared.get(&ranges) {
            Some(&at) => at,
            None if ranges.is_empty() => 0,
            None => {
                let at = out.ranges.len();
                out.ranges.extend_from_slice(&ranges);
                shared.insert(ranges.clone(), at);
                at
            }
        };
        out.frontends.push(Frontend {
            addr: layout::addr16(f.addr),
            port: f.port.into(),
            protocol: f.protocol as u8,
            kind: f.kind as u8,
            source_ranges_offset: u32_of(offset)?.into(),
            source_ranges_count: u32_of(ranges.len())?.into(),
            service: u32_of(f.service + 1)?.into(),
        });
    }
    u32_of(out.ranges.len())?;
    Ok(out)
}

/// `cidrs` as address ranges in 16-byte form, sorted, with overlapping and adjacent ranges
/// merged (so the result is strictly increasing with gaps between ranges).
fn merge_ranges(cidrs: &[IpCidr]) -> Vec<SourceRange> {
    let mut spans: Vec<(u128, u128)> = cidrs
        .iter()
        .map(|c| {
            let bits = u32::from(c.prefix_len) + if c.addr.is_ipv4() { 96 } else { 0 };
            let host = u128::MAX.checked_shr(bits.min(128)).unwrap_or(0);
            let first = u128::from_be_bytes(layout::addr16(c.addr)) & !host;
            (first, first | host)
        })
        .collect();
    spans.sort_unstable();
    let mut merged: Vec<(u128, u128)> = Vec::with_capacity(spans.len());
    for (first, last) in spans {
        match merged.last_mut() {
            Some(prev) if first <= prev.1.saturating_add(1) => prev.1 = prev.1.max(last),
            _ => merged.push((first, last)),
        }
    }
    merged
        .into_iter()
        .map(|(first, last)| SourceRange { first: first.to_be_bytes(), last: last.to_be_bytes() })
        .collect()
}

/// The service record of `b` placed at `p`.
fn service_record(b: &Built, p: &Place) -> Service {
    Service {
        backends_offset: (p.backends_at as u32).into(),
        backends_count: (p.backends as u32).into(),
        draining_count: (p.draining as u32).into(),
        ring_offset: (p.ring_at as u32).into(),
        ring_len: p.ring_len.into(),
        affinity_timeout_s: b.affinity_timeout_s.unwrap_or(0).into(),
        ring_entry_len: p.entry_len,
        reserved: [0; 7],
        name_offset: (p.name_at as u32).into(),
        name_len: (p.name_len as u32).into(),
    }
}

/// The record of one backend.
fn backend_record(b: &BackendSpec) -> Backend {
    Backend { addr: layout::addr16(b.addr), port: b.port.into(), reserved: [0; 2] }
}

/// The Maglev ring of `backends` (sorted, distinct), encoded as 1-based indices in the
/// narrowest entry width that holds them.
fn encode_ring(backends: &[BackendSpec]) -> Ring {
    let entry_len = layout::ring_entry_len_for(backends.len());
    if backends.is_empty() {
        return Ring { entry_len, len: 0, bytes: Box::new([]) };
    }
    let ids: Vec<_> = backends.iter().map(|b| (b.addr, b.port)).collect();
    let m = maglev::ring_size_for(ids.len());
    let ring = maglev::build(&ids, m);
    let bytes: Box<[u8]> = match entry_len {
        1 => ring.iter().map(|&i| (i + 1) as u8).collect(),
        2 => ring.iter().flat_map(|&i| ((i + 1) as u16).to_le_bytes()).collect(),
        _ => ring.iter().map(|&i| U32::new(i + 1)).collect::<Vec<_>>().as_bytes().into(),
    };
    Ring { entry_len, len: m, bytes }
}

/// Bytes per unit of section `idx` (a record; a byte for rings and names).
fn record_len(idx: usize) -> usize {
    match idx {
        section::FRONTENDS => size_of::<Frontend>(),
        section::SERVICES => size_of::<Service>(),
        section::BACKENDS => size_of::<Backend>(),
        section::SOURCE_RANGES => size_of::<SourceRange>(),
        _ => 1,
    }
}

fn u32_of(n: usize) -> Result<u32, BuildError> {
    u32::try_from(n).map_err(|_| BuildError::TooLarge)
}

impl Table<Storage> {
    /// An empty table (generation 0): no front doors. What a gateway serves before the
    /// first publication.
    pub fn empty() -> Self {
        let bytes = build(&TableSpec::default(), 0).expect("empty spec builds");
        Self::new(Storage::Owned(bytes)).expect("empty table validates")
    }
}

#[cfg(test)]
mod tests {
    use std::net::{IpAddr, Ipv4Addr};

    use proptest::prelude::*;

    use super::*;
    use crate::{FrontendKind, FrontendSpec, Protocol, Table};

    fn backend(n: u32) -> BackendSpec {
        BackendSpec { addr: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + n)), port: 8080 }
    }

    fn service(name: &str, backends: impl IntoIterator<Item = u32>) -> ServiceSpec {
        ServiceSpec {
            name: name.into(),
            backends: backends.into_iter().map(backend).collect(),
            affinity_timeout_s: None,
            draining: Vec::new(),
        }
    }

    fn frontend(n: u32, service: usize) -> FrontendSpec {
        FrontendSpec {
            addr: IpAddr::V4(Ipv4Addr::from(0xcb00_7100 + n)),
            port: 80,
            protocol: Protocol::Tcp,
            kind: FrontendKind::ExternalIp,
            service,
            source_ranges: Vec::new(),
        }
    }

    fn spec(services: Vec<ServiceSpec>) -> TableSpec {
        let frontends = (0..services.len()).map(|i| frontend(i as u32, i)).collect();
        TableSpec { frontends, services }
    }

    #[test]
    fn ring_entry_width_follows_the_backend_count() {
        let t = spec(vec![service("a:", 1..=3), service("b:", 1..=300), service("c:", [])]);
        let table = Table::new(build(&t, 1).unwrap()).unwrap();
        let a = table.service(0).unwrap();
        assert_eq!((a.ring.entry_len(), a.ring.len()), (1, maglev::ring_size_for(3) as usize));
        let b = table.service(1).unwrap();
        assert_eq!((b.ring.entry_len(), b.ring.len()), (2, maglev::ring_size_for(300) as usize));
        assert!(b.ring.iter().all(|id| (1..=300).contains(&id)));
        let seen: std::collections::HashSet<u32> = b.ring.iter().collect();
        assert_eq!(seen.len(), 300, "every backend owns slots");
        let c = table.service(2).unwrap();
        assert!(c.ring.is_empty() && c.pick(7).is_none());
        assert_eq!(layout::ring_entry_len_for(255), 1);
        assert_eq!(layout::ring_entry_len_for(256), 2);
        assert_eq!(layout::ring_entry_len_for(65_535), 2);
        assert_eq!(layout::ring_entry_len_for(65_536), 4);
    }

    #[test]
    fn a_ring_of_wide_entries_reads_back() {
        let bytes: Vec<u8> = [7u32, 70_000, 1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let r = crate::Ring::new(&bytes, 4);
        assert_eq!(r.iter().collect::<Vec<_>>(), [7, 70_000, 1]);
        assert!(r.all_in(70_000) && !r.all_in(69_999));
        assert!(crate::Ring::new(&bytes, 3).is_empty(), "an invalid width reads as empty");
    }

    #[test]
    fn a_promise_takes_untouched_services_in_order_without_comparing_them() {
        // Two services of one name (a Local policy's narrower list) after a new one:
        // the search by position first lands on the second of them.
        let before = spec(vec![service("b:", 1..=3), service("b:", 1..=2), service("c:", 5..=6)]);
        let after = spec(vec![service("a:", 7..=8), service("b:", 1..=3), service("b:", 1..=2), service("c:", 5..=9)]);
        let mut builder = TableBuilder::new();
        builder.build_versioned(&before, 1, Some((1, None))).unwrap();
        assert_eq!(builder.spec_version(), Some(1));
        let touched = |n: &str| n == "a:" || n == "c:";
        let bytes = builder.build_versioned(&after, 2, Some((2, Some(&touched)))).unwrap().to_vec();
        assert_eq!(content(&bytes), content(&build(&after, 2).unwrap()));
        assert_eq!(builder.stats().layouts, 1, "patched in place");
        // A plain build forgets the version: the next promise is not taken.
        builder.build(&before, 3).unwrap();
        assert_eq!(builder.spec_version(), None);
    }

    #[test]
    fn a_service_listed_in_another_order_is_the_same_service() {
        let mut a = service("a:", 1..=4);
        a.draining = vec![backend(9), backend(3), backend(8)];
        let before = spec(vec![a.clone(), service("b:", 5..=6)]);
        // Backends reversed and repeated, draining reordered and repeated, one of them a
        // backend (ignored): the same sets, so the same snapshot and nothing rebuilt.
        a.backends = vec![backend(4), backend(3), backend(2), backend(1), backend(2)];
        a.draining = vec![backend(8), backend(9), backend(8)];
        let after = spec(vec![a.clone(), service("b:", 5..=6)]);
        let mut b = TableBuilder::new();
        let first = b.build(&before, 1).unwrap().to_vec();
        let second = b.build(&after, 2).unwrap().to_vec();
        assert_eq!(content(&second), content(&first));
        assert_eq!(content(&second), content(&build(&after, 2).unwrap()));
        assert_eq!(b.stats(), BuildStats { builds: 2, rings_computed: 2, layouts: 1, placed: 2 });
        // A different set is a change.
        a.draining = vec![backend(8)];
        let third = b.build(&spec(vec![a, service("b:", 5..=6)]), 3).unwrap().to_vec();
        assert_ne!(content(&third), content(&second));
    }

    /// What `bytes` serve.
    fn content(bytes: &[u8]) -> crate::Content {
        Table::new(bytes.to_vec()).expect("a valid snapshot").content()
    }

    #[test]
    fn the_builder_writes_only_what_changed() {
        let mut services: Vec<ServiceSpec> =
            (0..20).map(|i| service(&format!("s{i:02}:"), i * 10..i * 10 + 5)).collect();
        let mut b = TableBuilder::new();
        let first = b.build(&spec(services.clone()), 1).unwrap().to_vec();
        assert_eq!(b.stats(), BuildStats { builds: 1, rings_computed: 20, layouts: 1, placed: 20 });
        assert!(b.changed_ranges().is_none(), "a first build changes everything");
        assert!(first.len() > build(&spec(services.clone()), 1).unwrap().len(), "room to grow");
        let changed = |b: &TableBuilder| b.changed_ranges().unwrap().iter().map(|r| r.len()).sum::<usize>();
        let ring = maglev::ring_size_for(5) as usize;
        // Replace one endpoint: same counts and sizes, so its parts are written in place.
        services[7].backends[2] = backend(999);
        let bytes = b.build(&spec(services.clone()), 2).unwrap().to_vec();
        assert_eq!(content(&bytes), content(&build(&spec(services.clone()), 2).unwrap()));
        let records = size_of::<Header>() + size_of::<Service>() + 5 * size_of::<Backend>();
        assert!(changed(&b) <= records + ring + 4, "{} bytes changed", changed(&b));
        assert_eq!(b.stats(), BuildStats { builds: 2, rings_computed: 21, layouts: 1, placed: 20 });
        // Rename a service (same length) and change an affinity: in place too.
        services[8].name = "s88:".into();
        services[9].affinity_timeout_s = Some(30);
        let bytes = b.build(&spec(services.clone()), 3).unwrap().to_vec();
        assert_eq!(content(&bytes), content(&build(&spec(services.clone()), 3).unwrap()));
        // Move a front door: only the front door section is rewritten.
        let mut moved = spec(services.clone());
        moved.frontends[0].port = 8080;
        let bytes = b.build(&moved, 4).unwrap().to_vec();
        assert_eq!(content(&bytes), content(&build(&moved, 4).unwrap()));
        assert!(changed(&b) <= size_of::<Header>() + 20 * size_of::<Frontend>());
        // Remove an endpoint elsewhere (and move the front door back): its ring and
        // backends are written again, nothing else.
        services[3].backends.pop();
        let bytes = b.build(&spec(services.clone()), 5).unwrap().to_vec();
        assert_eq!(content(&bytes), content(&build(&spec(services.clone()), 5).unwrap()));
        assert!(
            changed(&b)
                <= size_of::<Header>()
                    + size_of::<Service>()
                    + 4 * size_of::<Backend>()
                    + ring
                    + 20 * size_of::<Frontend>()
        );
        // Insert a service at the front: every service record and front door is written
        // again (their indices moved), one ring computed and placed, no other part moves.
        services.insert(0, service("a-first:", [5000, 5001]));
        let bytes = b.build(&spec(services.clone()), 6).unwrap().to_vec();
        assert_eq!(content(&bytes), content(&build(&spec(services.clone()), 6).unwrap()));
        assert_eq!(b.stats().rings_computed, 23);
        assert_eq!((b.stats().layouts, b.stats().placed), (1, 22), "the renamed service and the new one");
        let records = 21 * (size_of::<Service>() + size_of::<Frontend>()) + 2 * size_of::<Backend>() + 16;
        assert!(changed(&b) <= size_of::<Header>() + records + maglev::ring_size_for(2) as usize);
        assert_eq!(bytes.len(), first.len(), "the snapshot keeps its length");
        // Delete it again and fill the sections past their room: laid out again.
        services.remove(0);
        b.build(&spec(services.clone()), 7).unwrap();
        assert_eq!(b.stats().layouts, 1);
        services.extend((0..300).map(|i| service(&format!("t{i:03}:"), [i, i + 1])));
        let bytes = b.build(&spec(services.clone()), 8).unwrap().to_vec();
        assert_eq!(content(&bytes), content(&build(&spec(services.clone()), 8).unwrap()));
        assert_eq!(b.stats().layouts, 2);
        assert!(b.changed_ranges().is_none());
    }

    fn cidr(s: &str) -> IpCidr {
        IpCidr::parse(s).unwrap()
    }

    #[test]
    fn source_ranges_are_merged_sorted_and_shared() {
        let ranges = |list: &[&str]| -> Vec<(IpAddr, IpAddr)> {
            merge_ranges(&list.iter().map(|s| cidr(s)).collect::<Vec<_>>())
                .iter()
                .map(|r| (layout::addr_from16(r.first), layout::addr_from16(r.last)))
                .collect()
        };
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            ranges(&["10.1.0.0/16", "10.0.0.0/16", "192.0.2.7/32", "10.0.128.0/17"]),
            [(ip("10.0.0.0"), ip("10.1.255.255")), (ip("192.0.2.7"), ip("192.0.2.7"))],
            "overlapping and adjacent prefixes merge"
        );
        assert_eq!(ranges(&["0.0.0.0/0"]), [(ip("0.0.0.0"), ip("255.255.255.255"))]);
        assert_eq!(ranges(&["::/0"]), [(ip("::"), ip("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"))]);
        assert_eq!(
            ranges(&["2001:db8::/127", "198.51.100.0/31"]),
            [(ip("198.51.100.0"), ip("198.51.100.1")), (ip("2001:db8::"), ip("2001:db8::1"))],
            "IPv4 (mapped) sorts before IPv6 and the two never merge"
        );
        assert!(ranges(&[]).is_empty());

        // Two front doors with the same list share its records; one without has none.
        let mut t = spec(vec![service("a:", 1..=2), service("b:", 3..=4), service("c:", 5..=6)]);
        t.frontends[0].source_ranges = vec![cidr("198.51.100.0/24"), cidr("203.0.113.0/25")];
        t.frontends[2].source_ranges = vec![cidr("203.0.113.0/25"), cidr("198.51.100.0/24")];
        let table = Table::new(build(&t, 1).unwrap()).unwrap();
        let fe = |i: usize| table.frontend(t.frontends[i].addr, 6, 80).unwrap();
        assert_eq!(fe(0).source_ranges.as_slice().len(), 2);
        assert_eq!(fe(0).source_ranges.as_slice().as_ptr(), fe(2).source_ranges.as_slice().as_ptr());
        assert!(fe(1).source_ranges.is_empty());
        assert_eq!(table.frontends().iter().map(|f| f.source_ranges_count.get()).sum::<u32>(), 4);
    }

    #[test]
    fn draining_endpoints_follow_the_ring_backends() {
        let mut s = service("a:", [3, 1, 2]);
        s.draining = vec![backend(9), backend(2), backend(7), backend(9)];
        let table = Table::new(build(&spec(vec![s.clone()]), 1).unwrap()).unwrap();
        let svc = table.service(0).unwrap();
        let addrs = |b: &[Backend]| b.iter().map(|b| layout::addr_from16(b.addr)).collect::<Vec<_>>();
        assert_eq!(addrs(svc.backends), [1, 2, 3].map(|n| backend(n).addr));
        assert_eq!(addrs(svc.draining), [7, 9].map(|n| backend(n).addr), "sorted, deduplicated, not a backend");
        assert!(svc.ring.all_in(3), "the ring names ring backends only");
        let key = |n: u32| (layout::addr16(backend(n).addr), 8080);
        assert!(svc.serves(key(7).0, key(7).1) && svc.backend(key(7).0, key(7).1).is_none());
        assert!(svc.serves(key(2).0, key(2).1) && svc.backend(key(2).0, key(2).1).is_some());
        assert!(!svc.serves(key(8).0, key(8).1));
        // The ring is the same with or without draining endpoints.
        let plain = Table::new(build(&spec(vec![service("a:", [1, 2, 3])]), 1).unwrap()).unwrap();
        assert!(plain.service(0).unwrap().ring.iter().eq(svc.ring.iter()));
    }

    #[test]
    fn a_failed_build_leaves_the_builder_usable() {
        let services: Vec<ServiceSpec> = (0..4).map(|i| service(&format!("s{i}:"), i * 10..i * 10 + 3)).collect();
        let mut b = TableBuilder::new();
        b.build(&spec(services.clone()), 1).unwrap();
        let mut bad = spec(services.clone());
        bad.frontends.push(bad.frontends[0].clone());
        assert!(matches!(b.build(&bad, 2), Err(BuildError::DuplicateFrontend { .. })));
        bad.frontends.pop();
        bad.frontends[0].service = 9;
        assert!(matches!(b.build(&bad, 2), Err(BuildError::BadServiceIndex { index: 0, service: 9, .. })));
        let bytes = b.build(&spec(services.clone()), 2).unwrap().to_vec();
        assert_eq!(content(&bytes), content(&build(&spec(services), 2).unwrap()));
    }

    /// One edit of a table spec, for the property test below.
    #[derive(Clone, Debug)]
    enum Edit {
        /// Replace backend `j` of service `i` by backend `n`.
        Replace(usize, usize, u32),
        /// Add backend `n` to service `i`.
        Add(usize, u32),
        /// Remove backend `j` of service `i`.
        Remove(usize, usize),
        /// Insert a service with backends `n..n + k` at `i`.
        Insert(usize, u32, u32),
        /// Delete service `i`.
        Delete(usize),
        /// Toggle the affinity of service `i`.
        Affinity(usize),
        /// Reverse the backend order of service `i` (the table must not change).
        Reverse(usize),
        /// Move the front door of service `i` to another port.
        Port(usize),
        /// Add draining endpoint `n` to service `i`.
        Drain(usize, u32),
        /// Remove the draining endpoints of service `i`.
        Undrain(usize),
        /// Give the front door of service `i` source range `n` (0: none).
        Ranges(usize, u8),
    }

    fn edit() -> impl Strategy<Value = Edit> {
        prop_oneof![
            4 => (0..64usize, 0..8usize, 0..400u32).prop_map(|(i, j, n)| Edit::Replace(i, j, n)),
            2 => (0..64usize, 0..400u32).prop_map(|(i, n)| Edit::Add(i, n)),
            2 => (0..64usize, 0..8usize).prop_map(|(i, j)| Edit::Remove(i, j)),
            1 => (0..64usize, 0..400u32, 0..12u32).prop_map(|(i, n, k)| Edit::Insert(i, n, k)),
            1 => (0..64usize).prop_map(Edit::Delete),
            1 => (0..64usize).prop_map(Edit::Affinity),
            1 => (0..64usize).prop_map(Edit::Reverse),
            1 => (0..64usize).prop_map(Edit::Port),
            2 => (0..64usize, 0..400u32).prop_map(|(i, n)| Edit::Drain(i, n)),
            1 => (0..64usize).prop_map(Edit::Undrain),
            2 => (0..64usize, 0..4u8).prop_map(|(i, n)| Edit::Ranges(i, n)),
        ]
    }

    /// Source range lists for [`Edit::Ranges`].
    fn ranges_of(n: u8) -> Vec<IpCidr> {
        match n {
            0 => vec![],
            1 => vec![cidr("198.51.100.0/24")],
            2 => vec![cidr("198.51.100.0/25"), cidr("2001:db8::/32")],
            _ => vec![cidr("10.0.0.0/8"), cidr("192.0.2.0/24"), cidr("192.0.2.128/25")],
        }
    }

    fn apply(services: &mut Vec<ServiceSpec>, doors: &mut Vec<(u16, u8)>, e: &Edit, serial: &mut u32) {
        let n = services.len();
        match *e {
            Edit::Port(i) if n > 0 => doors[i % n].0 ^= 1,
            Edit::Ranges(i, r) if n > 0 => doors[i % n].1 = r,
            Edit::Drain(i, b) if n > 0 => services[i % n].draining.push(backend(b)),
            Edit::Undrain(i) if n > 0 => services[i % n].draining.clear(),
            Edit::Replace(i, j, b) if n > 0 => {
                let s = &mut services[i % n];
                if !s.backends.is_empty() {
                    let j = j % s.backends.len();
                    s.backends[j] = backend(b);
                }
            }
            Edit::Add(i, b) if n > 0 => services[i % n].backends.push(backend(b)),
            Edit::Remove(i, j) if n > 0 => {
                let s = &mut services[i % n];
                if !s.backends.is_empty() {
                    let j = j % s.backends.len();
                    s.backends.remove(j);
                }
            }
            Edit::Insert(i, b, k) => {
                *serial += 1;
                services.insert(i % (n + 1), service(&format!("new{serial}:"), b..b + k));
                doors.insert(i % (n + 1), (80, 0));
            }
            Edit::Delete(i) if n > 0 => {
                services.remove(i % n);
                doors.remove(i % n);
            }
            Edit::Affinity(i) if n > 0 => {
                let s = &mut services[i % n];
                s.affinity_timeout_s = if s.affinity_timeout_s.is_some() { None } else { Some(60) };
            }
            Edit::Reverse(i) if n > 0 => services[i % n].backends.reverse(),
            _ => {}
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The builder's snapshot after any sequence of edits serves what a build from
        /// scratch serves, and differs from its previous one only in the changed ranges.
        #[test]
        fn incremental_builds_equal_builds_from_scratch(
            initial in prop::collection::vec((0..400u32, 0..10u32), 0..24),
            edits in prop::collection::vec(prop::collection::vec(edit(), 1..4), 1..12),
        ) {
            let mut services: Vec<ServiceSpec> =
                initial.iter().enumerate().map(|(i, &(b, k))| service(&format!("s{i}:"), b..b + k)).collect();
            let mut doors = vec![(80, 0); services.len()];
            let mut previous: Option<Vec<u8>> = None;
            let mut serial = 0;
            let mut builder = TableBuilder::new();
            for (g, batch) in edits.iter().enumerate() {
                for e in batch {
                    apply(&mut services, &mut doors, e, &mut serial);
                }
                let mut t = spec(services.clone());
                for (f, &(port, ranges)) in t.frontends.iter_mut().zip(&doors) {
                    f.port = port;
                    f.source_ranges = ranges_of(ranges);
                }
                let scratch = build(&t, g as u64).unwrap();
                let incremental = builder.build(&t, g as u64).unwrap().to_vec();
                let table = Table::new(incremental.clone());
                prop_assert!(table.is_ok(), "generation {}: {:?}", g, table.err());
                let scratch = Table::new(scratch).unwrap();
                prop_assert_eq!(table.unwrap().content(), scratch.content(), "generation {}", g);
                // The previous snapshot with the changed ranges written over it is this one.
                if let (Some(mut patched), Some(ranges)) = (previous.take(), builder.changed_ranges()) {
                    patched.resize(incremental.len(), 0);
                    for r in ranges {
                        patched[r.clone()].copy_from_slice(&incremental[r.clone()]);
                    }
                    prop_assert!(patched == incremental, "generation {}: changed ranges {:?}", g, ranges);
                }
                previous = Some(incremental);
            }
        }
    }
}
