//! The state the pipeline works on: [`WorkerState`], private to one worker (conntrack, SNAT
//! ports, counters, fragment table, pending ARP resolutions), and [`Shared`], the state all workers share
//! (neighbours, session affinity, the schedulers' connection counts and turns). Everything is allocated here, before the packet path
//! runs. The entries of the worker's own tables are defined here too — [`FragmentTarget`]
//! (what [`super::fragment`] records) and [`Pending`] (what [`super::resolve`] queues) — so
//! that the state depends on no step of the path, only the steps on it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use super::hint::HintRing;
use crate::affinity::Affinity;
use crate::conntrack::persist::{self, Opened, Owner};
use crate::conntrack::synproxy::SynProxy;
use crate::conntrack::{Conntrack, FlowState};
use crate::counters::{Counters, FrontendCounters};
use crate::fragments::{self, FragmentAddr, FragmentTable};
use crate::host::Host;
use crate::l2::Owners;
use crate::limiter::SourceLimiter;
use crate::neighbour::Neighbours;
use crate::scheduler::Schedulers;
use crate::snat::SnatPorts;
use crate::table::Table;
use crate::wire::MacAddr;

/// Capacity of each of a worker's two fragment tables (IPv4, IPv6): datagrams in flight at
/// once per family.
pub(super) const FRAGMENT_SLOTS: usize = 1024;

/// What the first fragment of a datagram became ([`super::fragment`]): the IP-layer half of its translation and
/// its next hop. Generic over the address family: IPv6 fragments (RFC 8200 § 4.5) use the
/// same type in their own table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FragmentTarget<A = Ipv4Addr> {
    /// New source address.
    pub src: A,
    /// New destination address.
    pub dst: A,
    /// Egress interface.
    pub iface: u8,
    /// Next hop's MAC address.
    pub mac: MacAddr,
    /// Whether the datagram travels in its flow's original direction (client → endpoint).
    pub original: bool,
    /// The flow's front-door index and the (low 32 bits of the) table generation it belongs
    /// to, for the per-front-door counts of the later fragments.
    pub frontend: Option<(u32, u32)>,
}

impl<A: FragmentAddr> Default for FragmentTarget<A> {
    fn default() -> Self {
        Self {
            src: A::UNSPECIFIED,
            dst: A::UNSPECIFIED,
            iface: 0,
            mac: MacAddr::UNSPECIFIED,
            original: false,
            frontend: None,
        }
    }
}

/// One queued resolution ([`super::resolve`]): `ip` on interface `iface`, next attempt at
/// `next_ns`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Pending {
    /// The next hop to resolve.
    pub ip: IpAddr,
    /// The interface to ask on.
    pub iface: u8,
    /// When the next request goes out, ns.
    pub next_ns: u64,
    /// Requests sent so far.
    pub tries: u8,
}

/// Resolutions a worker keeps queued at once.
pub(super) const PENDING_SLOTS: usize = 64;

/// A worker's queued resolutions ([`super::resolve`]): [`PENDING_SLOTS`] slots and a mask of
/// the occupied ones, so that a poll pass with nothing queued — the common case — tests one
/// word (the 2 KiB of slots read on every pass took 4.7 % of a loaded worker's time end to
/// end: docs/optimisation-log.md, "Per poll pass").
#[derive(Clone, Debug)]
pub(super) struct PendingQueue {
    slots: [Pending; PENDING_SLOTS],
    /// Bit `i`: slot `i` holds a resolution.
    used: u64,
}

const _: () = assert!(PENDING_SLOTS <= 64, "PendingQueue keeps its occupied slots in a 64-bit mask");

impl Default for PendingQueue {
    fn default() -> Self {
        let free = Pending { ip: IpAddr::V4(Ipv4Addr::UNSPECIFIED), iface: 0, next_ns: 0, tries: 0 };
        Self { slots: [free; PENDING_SLOTS], used: 0 }
    }
}

impl PendingQueue {
    /// The occupied slots' indices, lowest first, as they were at the call.
    pub fn occupied(&self) -> impl Iterator<Item = usize> {
        super::bits::ones(self.used)
    }

    /// Slot `i` (occupied or not; `i < PENDING_SLOTS`).
    pub fn slot(&mut self, i: usize) -> &mut Pending {
        &mut self.slots[i]
    }

    /// Puts `p` in the lowest free slot; false (nothing changed) when every slot is taken.
    pub fn insert(&mut self, p: Pending) -> bool {
        let i = (!self.used).trailing_zeros() as usize;
        if i >= PENDING_SLOTS {
            return false;
        }
        self.slots[i] = p;
        self.used |= 1 << i;
        true
    }

    /// Frees slot `i`.
    pub fn remove(&mut self, i: usize) {
        self.used &= !(1u64 << i);
    }
}

/// The state all workers share: written rarely (ARP traffic, new flows of Services with
/// session affinity), read without locks where it is on every packet's path.
#[derive(Debug)]
pub struct Shared {
    /// IPv4 address → MAC.
    pub neighbours: Arc<Neighbours>,
    /// `sessionAffinity: ClientIP` choices.
    pub affinity: Arc<Affinity>,
    /// The schedulers' connection counts and round-robin turns.
    pub schedulers: Arc<Schedulers>,
    /// The VIPs answered for in L2 mode (everything when it is off).
    pub l2: Arc<Owners>,
}

impl Shared {
    /// Shared state sized for `neighbours` next hops and `affinity` (client, Service) pairs.
    pub fn new(neighbours: usize, affinity: usize) -> Self {
        Self {
            neighbours: Arc::new(Neighbours::new(neighbours)),
            affinity: Arc::new(Affinity::new(affinity)),
            schedulers: Arc::default(),
            l2: Arc::default(),
        }
    }
}

/// A worker's private state: its conntrack, SNAT ports, counters, pending ARP resolutions,
/// and shared read-only views of the host and the neighbour table.
pub struct WorkerState {
    /// This worker's index.
    pub worker: usize,
    /// The host (interfaces, addresses, routes, timeouts).
    pub host: Arc<Host>,
    /// The neighbour table shared by all workers.
    pub neighbours: Arc<Neighbours>,
    /// `sessionAffinity: ClientIP` choices, shared by all workers.
    pub affinity: Arc<Affinity>,
    /// The schedulers' connection counts and round-robin turns, shared by all workers.
    pub schedulers: Arc<Schedulers>,
    /// The `random` scheduler's generator (wyrand), seeded per worker.
    pub(super) random: fastrand::Rng,
    /// This worker's IPv4 flows.
    pub conntrack: Conntrack,
    /// This worker's IPv6 flows.
    pub conntrack6: Conntrack<Ipv6Addr>,
    /// This worker's SNAT ports.
    pub snat: SnatPorts,
    /// The per-source new-flow rate limit (off unless configured).
    pub sources: SourceLimiter,
    /// The SYN proxy: cookies under a SYN flood, and the proxied flows' translations.
    pub synproxy: SynProxy,
    /// This worker's counters.
    pub counters: Counters,
    /// Where the later fragments of datagrams whose first fragment this worker forwarded go
    /// (see [`super::fragment`]).
    pub(super) fragments: FragmentTable<Ipv4Addr, FragmentTarget>,
    /// The same for IPv6 datagrams (32-bit Identification, RFC 8200 § 4.5).
    pub(super) fragments6: FragmentTable<Ipv6Addr, FragmentTarget<Ipv6Addr>>,
    /// This worker's per-front-door counts, indexed like the front doors of the table it
    /// uses (sized by [`WorkerState::adopt_table`]).
    pub frontends: FrontendCounters,
    /// Next hops waiting for an ARP answer (see [`super::resolve`]).
    pub(super) pending: PendingQueue,
    /// What [`super::process_burst`] found ahead for the frames in flight
    /// ([`HintRing`]), and which of them is the frame being processed: its
    /// flow key and hash (taken by the flow lookup, and the rest used only when the full
    /// parse finds the same key), the flow it almost certainly belongs to, its route, a new
    /// flow's front door and endpoint.
    pub(super) hints: HintRing,
    /// The generation of the last table the worker processed a frame against (`u64::MAX`
    /// before the first) and the worker's epoch for it ([`WorkerState::table_epoch`]).
    table_epoch: (u64, u16),
    /// The VIPs answered for in L2 mode, shared by all workers ([`Shared::l2`]).
    pub l2: Arc<Owners>,
    /// Worker 0's progress through the announcements of VIPs it took over
    /// (see [`super::gratuitous`]).
    pub(super) gratuitous: Gratuitous,
    /// The last new flow's client and its route ([`LastClient`]).
    pub(super) last_client: LastClient,
}

/// What the host said of the client of the last new flow (`super::flow`'s
/// `client_facts`), with the client and the [`Host`] that said it (`None` before any): a
/// run of new flows from one client asks the host once. A [`Host`]'s addresses and routes
/// never change; the one asked is held, so another is never taken for it.
#[derive(Clone, Debug, Default)]
pub(super) struct LastClient {
    /// The client.
    pub client: Option<IpAddr>,
    /// The host asked.
    pub host: Option<Arc<Host>>,
    /// Whether it is one of the gateway's own addresses ([`Host::is_own`]).
    pub own: bool,
    /// Where the host routes it ([`Host::route`]): the egress interface, and whether the
    /// next hop is the client itself (on-link); `None` when no route reaches it.
    pub route: Option<(u8, bool)>,
}

/// Where worker 0 is in announcing the VIPs of [`Owners`]' set number `seq`: `round`
/// (0-based) of the repeated announcements, the next (VIP, interface) pair `index`, and
/// when the round may start.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Gratuitous {
    pub(super) seq: u64,
    pub(super) round: u8,
    pub(super) index: usize,
    pub(super) next_ns: u64,
}

impl std::fmt::Debug for WorkerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerState").field("worker", &self.worker).field("flows", &self.conntrack.len()).finish()
    }
}

/// The SYN proxy of a worker whose conntrack holds `capacity` flows: up to a quarter of
/// them (at least 1 024) proxied at once per family.
fn syn_proxy(host: &Host, capacity: usize, seed: u64) -> SynProxy {
    SynProxy::new(host.syn_cookies.0, host.syn_cookies.1, (capacity / 4).max(1024), seed ^ 0x5c00_c1e5)
}

impl WorkerState {
    /// State for worker `worker` of `workers`, with a conntrack of `capacity` flows.
    /// Allocates everything the packet path will use.
    pub fn new(worker: usize, workers: usize, host: Arc<Host>, shared: &Shared, capacity: usize, seed: u64) -> Self {
        let (min, max) = host.snat_ports;
        let snat = SnatPorts::new(worker, workers, min, max);
        Self {
            worker,
            conntrack: Conntrack::new(capacity, seed, &host.snat_addresses),
            conntrack6: Conntrack::new(capacity, seed, &host.snat_addresses6),
            snat,
            sources: SourceLimiter::new(host.new_flows_per_source.0, host.new_flows_per_source.1, seed ^ 0x50_f7ce),
            synproxy: syn_proxy(&host, capacity, seed),
            host,
            neighbours: Arc::clone(&shared.neighbours),
            affinity: Arc::clone(&shared.affinity),
            schedulers: Arc::clone(&shared.schedulers),
            random: fastrand::Rng::with_seed(seed ^ 0x5c4e_d000_0000_0001),
            counters: Counters::default(),
            fragments: FragmentTable::new(FRAGMENT_SLOTS, fragments::DEFAULT_TIMEOUT_NS, seed ^ 0xf4a6_0000_f4a6),
            fragments6: FragmentTable::new(FRAGMENT_SLOTS, fragments::DEFAULT_TIMEOUT_NS, seed ^ 0xf6a6_0000_f6a6),
            frontends: FrontendCounters::default(),
            pending: PendingQueue::default(),
            hints: HintRing::default(),
            table_epoch: (u64::MAX, FlowState::NEVER_VALIDATED),
            l2: Arc::clone(&shared.l2),
            gratuitous: Gratuitous::default(),
            last_client: LastClient::default(),
        }
    }

    /// As [`WorkerState::new`], with both conntrack tables in files of `dir` (`shm_dir`)
    /// named `conntrack-w<worker>-v4` and `-v6` ([`Conntrack::persistent`]): a restarted
    /// gateway adopts its predecessor's flows. `origin_ns` is the `CLOCK_MONOTONIC` time at
    /// which the worker's clock (the `now` it passes to the pipeline) reads 0. Returns the
    /// state and, per family, how its table was opened. The adopted flows hold their SNAT
    /// ports by being in the conntrack (a port is free for a reply tuple the conntrack
    /// does not hold: [`crate::snat`]).
    ///
    /// # Errors
    /// When a file cannot be created or mapped.
    #[allow(clippy::too_many_arguments)]
    pub fn persistent(
        worker: usize,
        workers: usize,
        host: Arc<Host>,
        shared: &Shared,
        capacity: usize,
        seed: u64,
        dir: &std::path::Path,
        origin_ns: u64,
    ) -> std::io::Result<(Self, [Opened; 2])> {
        let owner = Owner {
            worker: worker as u32,
            workers: workers as u32,
            snat_ports: host.snat_ports,
            interfaces: persist::fingerprint(host.interfaces.iter().map(|i| (i.name.as_str(), i.port, i.vlan))),
        };
        let path = |family: &str| dir.join(format!("conntrack-w{worker}-{family}"));
        let (v4, opened4) = Conntrack::persistent(&path("v4"), capacity, seed, &host.snat_addresses, owner, origin_ns)?;
        let (v6, opened6) =
            Conntrack::persistent(&path("v6"), capacity, seed, &host.snat_addresses6, owner, origin_ns)?;
        let proxy = syn_proxy(&host, capacity, seed);
        let mut state = Self::new(worker, workers, host, shared, 0, seed);
        state.conntrack = v4;
        state.conntrack6 = v6;
        // Sized for the conntrack's capacity, not the 0 flows `new` was given.
        state.synproxy = proxy;
        Ok((state, [opened4, opened6]))
    }

    /// Switches the worker's state from table `old` to table `new` (the same table at the
    /// first adoption): per-front-door counts are re-indexed (allocates) and the next hops
    /// of `new`'s endpoints are queued for resolution. Called at a burst boundary, never
    /// from [`super::process`].
    pub fn adopt_table(&mut self, old: &Table, new: &Table, now: u64) {
        self.frontends.adopt(old, new);
        self.resolve_table(new, now);
    }

    /// The worker's epoch for `table`: the 16-bit number its flows record as the table they
    /// were last validated against ([`FlowState::table_epoch`]; a 64-bit generation would
    /// cost each flow 6 bytes more). The epoch of the last table seen when `table` has its
    /// generation, else the next one: 1 for the first table, and 1 again after 65 535, when
    /// every flow's epoch is first reset to [`FlowState::NEVER_VALIDATED`]
    /// ([`Conntrack::forget_table_epochs`]), so that a flow validated against a table before
    /// the wrap is revalidated after it. O(1), but O(flows) at that wrap (one store per
    /// record), at most once per 65 535 tables.
    #[inline]
    pub fn table_epoch(&mut self, table: &Table) -> u16 {
        self.epoch_of(table.generation())
    }

    /// [`WorkerState::table_epoch`] of a table of generation `generation`.
    #[inline]
    pub(super) fn epoch_of(&mut self, generation: u64) -> u16 {
        if self.table_epoch.0 != generation {
            self.next_epoch(generation);
        }
        self.table_epoch.1
    }

    /// Numbers the table of generation `generation`: the epoch after the current one, after
    /// forgetting every flow's epoch when they wrap.
    #[cold]
    #[inline(never)]
    fn next_epoch(&mut self, generation: u64) {
        let mut epoch = self.table_epoch.1;
        if epoch == u16::MAX {
            self.conntrack.forget_table_epochs();
            self.conntrack6.forget_table_epochs();
            epoch = FlowState::NEVER_VALIDATED;
        }
        self.table_epoch = (generation, epoch + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(i: u32) -> Pending {
        Pending { ip: IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + i)), iface: 1, next_ns: u64::from(i), tries: 0 }
    }

    /// The mask follows the slots: inserts take the lowest free slot, a full queue refuses
    /// (and changes nothing), a removed slot is the next one taken, and `occupied` lists
    /// exactly the held slots in order.
    #[test]
    fn pending_queue_takes_the_lowest_free_slot_and_refuses_when_full() {
        let mut q = PendingQueue::default();
        assert_eq!(q.occupied().count(), 0);
        for i in 0..PENDING_SLOTS as u32 {
            assert!(q.insert(pending(i)));
        }
        assert!(!q.insert(pending(999)), "a full queue refuses");
        assert!(q.occupied().eq(0..PENDING_SLOTS));
        q.remove(5);
        q.remove(63);
        assert!(q.occupied().eq((0..PENDING_SLOTS).filter(|&i| i != 5 && i != 63)));
        assert!(q.insert(pending(1000)));
        assert_eq!(q.slot(5).ip, pending(1000).ip);
        assert!(q.insert(pending(1001)));
        assert_eq!(q.slot(63).ip, pending(1001).ip);
        assert!(!q.insert(pending(1002)));
        assert_eq!(q.slot(62).ip, pending(62).ip, "refused inserts overwrite nothing");
    }
}
