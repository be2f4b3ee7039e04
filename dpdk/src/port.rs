//! Ethernet ports (`rte_ethdev`): configuration, queues, RSS, link, statistics, and the
//! burst receive/transmit of [`RxQueue`] / [`TxQueue`].
//!
//! Ownership model, which is what makes the API sound with DPDK's threading rules
//! (control functions are not thread-safe; a queue is polled by one thread at a time):
//!
//! - One [`Port`] per ethdev port in the process ([`Port::by_name`] / [`Port::by_id`]
//!   refuse a port already owned). `Port` is `Send` but not `Sync`: one control thread.
//! - Reconfiguration (`configure`, queue setup, `start`, `stop`, MTU, RSS key and RETA
//!   updates, promiscuous mode) takes `&mut self` and fails with [`Error::Busy`] while any
//!   queue handle is alive, so it never races with `rx_burst`/`tx_burst`.
//! - Read-only queries (`info`, `link`, `stats`, `mac_addr`, RETA and key queries) take
//!   `&self` and may run while workers poll.
//! - [`Port::rx_queue`] / [`Port::tx_queue`] hand out each queue once (a second request
//!   fails until the handle drops). Handles are `Send`, not `Sync`: move one to each
//!   worker thread.
//! - The device is stopped and closed when the `Port` and all its queue handles are gone;
//!   the RX queues' mempools are kept alive until then.
//!
//! Bursts work on caller-owned `Vec<Mbuf>` batches: [`RxQueue::rx_burst`] appends what
//! the driver received; [`TxQueue::tx_burst`] removes what the driver took from the
//! front of the batch and leaves the rest with the caller, who may retry or drop (free)
//! them.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::ffi::{c_int, CStr, CString};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crate::eal::Eal;
use crate::error::{check, Error, Result};
use crate::ffi;
use crate::flags::{RssHf, RxOffloads, TxOffloads};
use crate::mbuf::Mbuf;
use crate::mempool::Mempool;

/// Ports owned by a `Port` in this process.
static OWNED: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Longest RSS key any driver may write (its length is a `u8`).
const MAX_RSS_KEY: usize = 255;
/// The Toeplitz key length of most NICs (and of drivers that do not report one).
pub const DEFAULT_RSS_KEY_LEN: usize = 40;

/// What a port's driver can do (`rte_eth_dev_info`, the parts torii uses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DevInfo {
    /// The driver, e.g. `net_null`, `net_ice`.
    pub driver_name: String,
    /// Most RX queues.
    pub max_rx_queues: u16,
    /// Most TX queues.
    pub max_tx_queues: u16,
    /// Receive offloads the port supports.
    pub rx_offload_capa: RxOffloads,
    /// Transmit offloads the port supports.
    pub tx_offload_capa: TxOffloads,
    /// RSS hash types the port supports.
    pub flow_type_rss_offloads: RssHf,
    /// Entries of the RSS redirection table (0: no RETA).
    pub reta_size: u16,
    /// Length of the RSS key in bytes (0: not reported).
    pub hash_key_size: u8,
    /// Smallest MTU.
    pub min_mtu: u16,
    /// Largest MTU.
    pub max_mtu: u16,
    /// Largest RX descriptor ring (0: not reported).
    pub rx_desc_max: u16,
    /// Largest TX descriptor ring (0: not reported).
    pub tx_desc_max: u16,
}

/// What [`Port::configure`] is asked for. Capabilities the port lacks are dropped, and
/// [`AppliedConfig`] says what was kept.
#[derive(Debug, Clone, Default)]
pub struct PortConfig {
    /// RSS hash types; empty: no RSS (every packet to queue 0 unless the driver says
    /// otherwise). RSS is enabled when any requested type is supported.
    pub rss_hf: RssHf,
    /// The RSS key (`None`: the driver's default). Must be [`DevInfo::hash_key_size`]
    /// bytes (40 when the driver does not report a size).
    pub rss_key: Option<Vec<u8>>,
    /// Receive offloads.
    pub rx_offloads: RxOffloads,
    /// Transmit offloads.
    pub tx_offloads: TxOffloads,
    /// The MTU in bytes (`None`: the driver's default, normally 1500).
    pub mtu: Option<u16>,
}

/// What [`Port::configure`] applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedConfig {
    /// RX queues configured.
    pub rx_queues: u16,
    /// TX queues configured.
    pub tx_queues: u16,
    /// RSS hash types enabled (requested ∩ supported).
    pub rss_hf: RssHf,
    /// Receive offloads enabled (requested ∩ supported; `RSS_HASH` only with RSS).
    pub rx_offloads: RxOffloads,
    /// Transmit offloads enabled (requested ∩ supported).
    pub tx_offloads: TxOffloads,
    /// The port's MTU after configuration.
    pub mtu: u16,
}

/// Link state (`rte_eth_link`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Whether the link is up.
    pub up: bool,
    /// Speed in Mb/s (0: unknown).
    pub speed_mbps: u32,
    /// Full duplex.
    pub full_duplex: bool,
    /// Auto-negotiated.
    pub autoneg: bool,
}

/// Port counters (`rte_eth_stats`). Per-queue counters cover the first 16 queues
/// (`RTE_ETHDEV_QUEUE_STAT_CNTRS`) and the configured queues only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets transmitted.
    pub opackets: u64,
    /// Bytes received.
    pub ibytes: u64,
    /// Bytes transmitted.
    pub obytes: u64,
    /// Packets dropped by the NIC because no RX descriptor was free.
    pub imissed: u64,
    /// Receive errors.
    pub ierrors: u64,
    /// Transmit errors.
    pub oerrors: u64,
    /// RX mbuf allocation failures.
    pub rx_nombuf: u64,
    /// Packets received per RX queue.
    pub q_ipackets: Vec<u64>,
    /// Packets transmitted per TX queue.
    pub q_opackets: Vec<u64>,
    /// Errors per queue (driver-specific; `net_ring` and `net_null` count TX failures).
    pub q_errors: Vec<u64>,
}

/// The RSS hash configuration (`rte_eth_rss_conf`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssConf {
    /// Enabled hash types.
    pub rss_hf: RssHf,
    /// The Toeplitz key.
    pub key: Vec<u8>,
}

/// An ethdev port, owned by this process's one `Port` for it.
pub struct Port {
    inner: Arc<PortInner>,
    /// Control functions are not thread-safe: `&Port` stays on one thread.
    _not_sync: PhantomData<Cell<()>>,
}

struct PortInner {
    id: u16,
    name: String,
    info: DevInfo,
    configured: Option<AppliedConfig>,
    /// The mempool of each set-up RX queue (kept alive while the driver holds its mbufs).
    rx_pools: Vec<Option<Mempool>>,
    /// Pools of queues replaced by a reconfiguration: the driver may still hold their
    /// mbufs (or pointers to them) until the queues are set up again or the port closes.
    retired_pools: Vec<Mempool>,
    tx_ready: Vec<bool>,
    rx_taken: Box<[AtomicBool]>,
    tx_taken: Box<[AtomicBool]>,
    started: bool,
    /// Dropped last (after stop/close): EAL outlives the port.
    _eal: Eal,
}

impl Drop for PortInner {
    fn drop(&mut self) {
        // SAFETY: no queue handle and no Port is left (this is the last Arc), so nothing
        // polls or reconfigures the port concurrently; the port id is valid (owned).
        unsafe {
            if self.started {
                ffi::rte_eth_dev_stop(self.id);
            }
            ffi::rte_eth_dev_close(self.id);
        }
        if let Ok(mut owned) = OWNED.lock() {
            owned.remove(&self.id);
        }
        // The pools drop after this body: the driver has released their mbufs on close.
    }
}

impl std::fmt::Debug for Port {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Port")
            .field("id", &self.inner.id)
            .field("name", &self.inner.name)
            .field("driver", &self.inner.info.driver_name)
            .field("started", &self.inner.started)
            .finish()
    }
}

/// Reads `rte_eth_dev_info` of `id`.
fn dev_info(id: u16) -> Result<DevInfo> {
    let mut raw = ffi::rte_eth_dev_info::default();
    // SAFETY: raw is a writable rte_eth_dev_info; the port id is checked by DPDK.
    check(unsafe { ffi::rte_eth_dev_info_get(id, &raw mut raw) }, || format!("rte_eth_dev_info_get(port {id})"))?;
    let driver_name = if raw.driver_name.is_null() {
        String::new()
    } else {
        // SAFETY: a non-null driver_name points to the driver's static NUL-terminated name.
        unsafe { CStr::from_ptr(raw.driver_name) }.to_string_lossy().into_owned()
    };
    Ok(DevInfo {
        driver_name,
        max_rx_queues: raw.max_rx_queues,
        max_tx_queues: raw.max_tx_queues,
        rx_offload_capa: RxOffloads(raw.rx_offload_capa),
        tx_offload_capa: TxOffloads(raw.tx_offload_capa),
        flow_type_rss_offloads: RssHf(raw.flow_type_rss_offloads),
        reta_size: raw.reta_size,
        hash_key_size: raw.hash_key_size,
        min_mtu: raw.min_mtu,
        max_mtu: raw.max_mtu,
        rx_desc_max: raw.rx_desc_lim.nb_max,
        tx_desc_max: raw.tx_desc_lim.nb_max,
    })
}

impl Port {
    /// The port named `name` (a vdev name such as `net_null0`, or a PCI address).
    ///
    /// # Errors
    /// [`Error::NoSuchPort`]; [`Error::Busy`] when another `Port` owns it.
    pub fn by_name(eal: &Eal, name: &str) -> Result<Self> {
        let cname =
            CString::new(name).map_err(|_| Error::InvalidArgument(format!("port name {name:?} contains NUL")))?;
        let mut id = 0u16;
        // SAFETY: cname is NUL-terminated and id writable for the call.
        let ret = unsafe { ffi::rte_eth_dev_get_port_by_name(cname.as_ptr(), &raw mut id) };
        if ret != 0 {
            return Err(Error::NoSuchPort(format!("{name:?}")));
        }
        Self::by_id(eal, id)
    }

    /// The port with id `id`.
    ///
    /// # Errors
    /// [`Error::NoSuchPort`]; [`Error::Busy`] when another `Port` owns it.
    pub fn by_id(eal: &Eal, id: u16) -> Result<Self> {
        // SAFETY: plain query; any id is accepted.
        if unsafe { ffi::rte_eth_dev_is_valid_port(id) } == 0 {
            return Err(Error::NoSuchPort(format!("id {id}")));
        }
        let mut name_buf = [0u8; ffi::RTE_ETH_NAME_MAX_LEN as usize];
        // SAFETY: the buffer has RTE_ETH_NAME_MAX_LEN bytes, as the function requires.
        check(unsafe { ffi::rte_eth_dev_get_name_by_port(id, name_buf.as_mut_ptr().cast()) }, || {
            format!("rte_eth_dev_get_name_by_port({id})")
        })?;
        let name = CStr::from_bytes_until_nul(&name_buf).map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
        let info = dev_info(id)?;
        {
            let mut owned = OWNED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if !owned.insert(id) {
                return Err(Error::Busy(format!("port {id} ({name}) is already owned by another Port")));
            }
        }
        Ok(Self {
            inner: Arc::new(PortInner {
                id,
                name,
                info,
                configured: None,
                rx_pools: Vec::new(),
                retired_pools: Vec::new(),
                tx_ready: Vec::new(),
                rx_taken: Box::new([]),
                tx_taken: Box::new([]),
                started: false,
                _eal: eal.clone(),
            }),
            _not_sync: PhantomData,
        })
    }

    /// The port id.
    pub fn id(&self) -> u16 {
        self.inner.id
    }

    /// The device name (e.g. `net_null0`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The driver's capabilities, read when the `Port` was opened.
    pub fn info(&self) -> &DevInfo {
        &self.inner.info
    }

    /// The NUMA socket of the device (`None`: unknown or any).
    pub fn socket_id(&self) -> Option<u32> {
        // SAFETY: plain query of an owned port.
        let s = unsafe { ffi::rte_eth_dev_socket_id(self.inner.id) };
        u32::try_from(s).ok()
    }

    /// What the last [`configure`](Self::configure) applied.
    pub fn applied(&self) -> Option<&AppliedConfig> {
        self.inner.configured.as_ref()
    }

    /// Whether the port is started.
    pub fn is_started(&self) -> bool {
        self.inner.started
    }

    /// Exclusive access to the state, for reconfiguration: fails while queue handles live.
    fn exclusive(&mut self, what: &str) -> Result<&mut PortInner> {
        let id = self.inner.id;
        Arc::get_mut(&mut self.inner)
            .ok_or_else(|| Error::Busy(format!("port {id}: cannot {what} while RX/TX queue handles are alive")))
    }

    /// Configures `rx_queues` RX and `tx_queues` TX queues (`rte_eth_dev_configure`),
    /// enabling the requested RSS types, offloads and MTU that the port supports, and
    /// returns what was applied. The port must be stopped; queues must be set up again
    /// afterwards.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for queue counts beyond the driver's maximum, an MTU
    /// outside its range or a key of the wrong length; [`Error::Busy`] when started or
    /// while queue handles live; [`Error::Dpdk`] when the driver refuses.
    pub fn configure(&mut self, rx_queues: u16, tx_queues: u16, conf: &PortConfig) -> Result<AppliedConfig> {
        let p = self.exclusive("configure")?;
        let id = p.id;
        if p.started {
            return Err(Error::Busy(format!("port {id}: stop it before configure")));
        }
        let info = &p.info;
        if rx_queues == 0 && tx_queues == 0 {
            return Err(Error::InvalidArgument(format!("port {id}: configure needs at least one queue")));
        }
        if rx_queues > info.max_rx_queues || tx_queues > info.max_tx_queues {
            return Err(Error::InvalidArgument(format!(
                "port {id} ({}): {rx_queues} RX / {tx_queues} TX queues requested, the driver allows {} / {}",
                info.driver_name, info.max_rx_queues, info.max_tx_queues
            )));
        }
        let rss_hf = conf.rss_hf.intersection(info.flow_type_rss_offloads);
        let mut rx_offloads = conf.rx_offloads.intersection(info.rx_offload_capa);
        if rss_hf.is_empty() {
            rx_offloads = rx_offloads.difference(RxOffloads::RSS_HASH);
        }
        let tx_offloads = conf.tx_offloads.intersection(info.tx_offload_capa);

        let mut raw = ffi::rte_eth_conf::default();
        raw.rxmode.mq_mode = if rss_hf.is_empty() { ffi::RTE_ETH_MQ_RX_NONE } else { ffi::RTE_ETH_MQ_RX_RSS };
        raw.rxmode.offloads = rx_offloads.bits();
        raw.txmode.offloads = tx_offloads.bits();
        if let Some(mtu) = conf.mtu {
            if info.max_mtu != 0 && !(info.min_mtu..=info.max_mtu).contains(&mtu) {
                return Err(Error::InvalidArgument(format!(
                    "port {id}: MTU {mtu} outside the driver's {}..={}",
                    info.min_mtu, info.max_mtu
                )));
            }
            raw.rxmode.mtu = u32::from(mtu);
        }
        let mut key = conf.rss_key.clone();
        if let Some(k) = &mut key {
            check_key_len(info, k)?;
        }
        raw.rx_adv_conf.rss_conf.rss_hf = rss_hf.bits();
        if let Some(k) = &mut key {
            raw.rx_adv_conf.rss_conf.rss_key = k.as_mut_ptr();
            raw.rx_adv_conf.rss_conf.rss_key_len = k.len() as u8; // checked <= 255 above
        }
        // SAFETY: raw is a fully initialised rte_eth_conf; the key buffer (if any) lives
        // until the call returns (drivers copy it). No queue handle exists (exclusive),
        // and the port is stopped.
        let ret = unsafe { ffi::rte_eth_dev_configure(id, rx_queues, tx_queues, &raw const raw) };
        check(ret, || format!("rte_eth_dev_configure(port {id}, {rx_queues} rx, {tx_queues} tx)"))?;
        let mut mtu = 0u16;
        // SAFETY: mtu is writable; the port is configured.
        check(unsafe { ffi::rte_eth_dev_get_mtu(id, &raw mut mtu) }, || format!("rte_eth_dev_get_mtu(port {id})"))?;
        let applied = AppliedConfig { rx_queues, tx_queues, rss_hf, rx_offloads, tx_offloads, mtu };
        let old = std::mem::replace(&mut p.rx_pools, vec![None; usize::from(rx_queues)]);
        p.retired_pools.extend(old.into_iter().flatten());
        p.tx_ready = vec![false; usize::from(tx_queues)];
        p.rx_taken = (0..rx_queues).map(|_| AtomicBool::new(false)).collect();
        p.tx_taken = (0..tx_queues).map(|_| AtomicBool::new(false)).collect();
        p.configured = Some(applied.clone());
        Ok(applied)
    }

    /// Sets up RX queue `queue` with `descriptors` ring entries, filled from `pool` (kept
    /// alive by the port). Uses the driver's default queue configuration.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a queue not configured; [`Error::Busy`] when started
    /// or while queue handles live; [`Error::Dpdk`] when the driver refuses (e.g. a
    /// descriptor count outside its limits, or buffers too small for the MTU).
    pub fn setup_rx_queue(&mut self, queue: u16, descriptors: u16, pool: &Mempool) -> Result<()> {
        let socket = self.socket_id();
        let p = self.exclusive("set up an RX queue")?;
        let id = p.id;
        if p.started {
            return Err(Error::Busy(format!("port {id}: stop it before setting up queues")));
        }
        let slot = p
            .rx_pools
            .get_mut(usize::from(queue))
            .ok_or_else(|| Error::InvalidArgument(format!("port {id}: RX queue {queue} is not configured")))?;
        let socket = socket.unwrap_or(ffi::SOCKET_ID_ANY as u32);
        // SAFETY: the port is configured with this queue and stopped, no handle polls it;
        // NULL selects the driver's default rxconf; the pool is valid and kept alive in
        // rx_pools for as long as the driver may hold its mbufs (until close).
        let ret =
            unsafe { ffi::rte_eth_rx_queue_setup(id, queue, descriptors, socket, std::ptr::null(), pool.as_ptr()) };
        check(ret, || format!("rte_eth_rx_queue_setup(port {id}, queue {queue}, {descriptors} descriptors)"))?;
        *slot = Some(pool.clone());
        Ok(())
    }

    /// Sets up TX queue `queue` with `descriptors` ring entries (driver defaults
    /// otherwise).
    ///
    /// # Errors
    /// As [`setup_rx_queue`](Self::setup_rx_queue).
    pub fn setup_tx_queue(&mut self, queue: u16, descriptors: u16) -> Result<()> {
        let socket = self.socket_id();
        let p = self.exclusive("set up a TX queue")?;
        let id = p.id;
        if p.started {
            return Err(Error::Busy(format!("port {id}: stop it before setting up queues")));
        }
        let slot = p
            .tx_ready
            .get_mut(usize::from(queue))
            .ok_or_else(|| Error::InvalidArgument(format!("port {id}: TX queue {queue} is not configured")))?;
        let socket = socket.unwrap_or(ffi::SOCKET_ID_ANY as u32);
        // SAFETY: the port is configured with this queue and stopped; NULL selects the
        // driver's default txconf.
        let ret = unsafe { ffi::rte_eth_tx_queue_setup(id, queue, descriptors, socket, std::ptr::null()) };
        check(ret, || format!("rte_eth_tx_queue_setup(port {id}, queue {queue}, {descriptors} descriptors)"))?;
        *slot = true;
        Ok(())
    }

    /// Starts the port (`rte_eth_dev_start`). Every configured queue must be set up.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when not configured or a queue is not set up;
    /// [`Error::Busy`] while queue handles live; [`Error::Dpdk`] when the driver refuses.
    pub fn start(&mut self) -> Result<()> {
        let p = self.exclusive("start")?;
        let id = p.id;
        if p.started {
            return Ok(());
        }
        if p.configured.is_none() {
            return Err(Error::InvalidArgument(format!("port {id}: configure it before start")));
        }
        if let Some(q) = p.rx_pools.iter().position(Option::is_none) {
            return Err(Error::InvalidArgument(format!("port {id}: RX queue {q} is not set up")));
        }
        if let Some(q) = p.tx_ready.iter().position(|r| !r) {
            return Err(Error::InvalidArgument(format!("port {id}: TX queue {q} is not set up")));
        }
        // SAFETY: configured, all queues set up, no handle alive.
        check(unsafe { ffi::rte_eth_dev_start(id) }, || format!("rte_eth_dev_start(port {id})"))?;
        p.started = true;
        Ok(())
    }

    /// Stops the port (`rte_eth_dev_stop`); queue handles must have been dropped.
    ///
    /// # Errors
    /// [`Error::Busy`] while queue handles live; [`Error::Dpdk`] when the driver refuses.
    pub fn stop(&mut self) -> Result<()> {
        let p = self.exclusive("stop")?;
        let id = p.id;
        if !p.started {
            return Ok(());
        }
        // SAFETY: started, and no handle polls the port (exclusive).
        check(unsafe { ffi::rte_eth_dev_stop(id) }, || format!("rte_eth_dev_stop(port {id})"))?;
        p.started = false;
        Ok(())
    }

    /// The handle for RX queue `queue` of the started port; at most one per queue.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when the port is not started or the queue does not exist;
    /// [`Error::Busy`] when the queue's handle is already out.
    pub fn rx_queue(&self, queue: u16) -> Result<RxQueue> {
        let p = &self.inner;
        if !p.started {
            return Err(Error::InvalidArgument(format!("port {}: start it before taking queues", p.id)));
        }
        let taken = p
            .rx_taken
            .get(usize::from(queue))
            .ok_or_else(|| Error::InvalidArgument(format!("port {}: no RX queue {queue}", p.id)))?;
        if taken.swap(true, Ordering::AcqRel) {
            return Err(Error::Busy(format!("port {}: RX queue {queue} is already taken", p.id)));
        }
        Ok(RxQueue { port: Arc::clone(p), id: p.id, queue, _not_sync: PhantomData })
    }

    /// The handle for TX queue `queue` of the started port; at most one per queue.
    ///
    /// # Errors
    /// As [`rx_queue`](Self::rx_queue).
    pub fn tx_queue(&self, queue: u16) -> Result<TxQueue> {
        let p = &self.inner;
        if !p.started {
            return Err(Error::InvalidArgument(format!("port {}: start it before taking queues", p.id)));
        }
        let taken = p
            .tx_taken
            .get(usize::from(queue))
            .ok_or_else(|| Error::InvalidArgument(format!("port {}: no TX queue {queue}", p.id)))?;
        if taken.swap(true, Ordering::AcqRel) {
            return Err(Error::Busy(format!("port {}: TX queue {queue} is already taken", p.id)));
        }
        Ok(TxQueue { port: Arc::clone(p), id: p.id, queue, _not_sync: PhantomData })
    }

    /// The port's MAC address.
    ///
    /// # Errors
    /// [`Error::Dpdk`].
    pub fn mac_addr(&self) -> Result<[u8; 6]> {
        let mut mac = ffi::rte_ether_addr::default();
        let id = self.inner.id;
        // SAFETY: mac is writable; owned port.
        check(unsafe { ffi::rte_eth_macaddr_get(id, &raw mut mac) }, || format!("rte_eth_macaddr_get(port {id})"))?;
        Ok(mac.addr_bytes)
    }

    /// The link state, without waiting (`rte_eth_link_get_nowait`).
    ///
    /// # Errors
    /// [`Error::Dpdk`].
    pub fn link(&self) -> Result<Link> {
        let mut link = ffi::rte_eth_link::default();
        let id = self.inner.id;
        // SAFETY: link is writable; owned port.
        check(unsafe { ffi::rte_eth_link_get_nowait(id, &raw mut link) }, || {
            format!("rte_eth_link_get_nowait(port {id})")
        })?;
        Ok(Link {
            up: u32::from(link.link_status()) == ffi::RTE_ETH_LINK_UP,
            speed_mbps: link.link_speed,
            full_duplex: u32::from(link.link_duplex()) == ffi::RTE_ETH_LINK_FULL_DUPLEX,
            autoneg: u32::from(link.link_autoneg()) == ffi::RTE_ETH_LINK_AUTONEG,
        })
    }

    /// The port's counters.
    ///
    /// # Errors
    /// [`Error::Dpdk`].
    pub fn stats(&self) -> Result<Stats> {
        let mut s = ffi::rte_eth_stats::default();
        let id = self.inner.id;
        // SAFETY: s is writable; owned port.
        check(unsafe { ffi::rte_eth_stats_get(id, &raw mut s) }, || format!("rte_eth_stats_get(port {id})"))?;
        let (rxq, txq) = self.inner.configured.as_ref().map_or((0, 0), |c| (c.rx_queues, c.tx_queues));
        let rxq = usize::from(rxq).min(s.q_ipackets.len());
        let txq = usize::from(txq).min(s.q_opackets.len());
        Ok(Stats {
            ipackets: s.ipackets,
            opackets: s.opackets,
            ibytes: s.ibytes,
            obytes: s.obytes,
            imissed: s.imissed,
            ierrors: s.ierrors,
            oerrors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
            q_ipackets: s.q_ipackets[..rxq].to_vec(),
            q_opackets: s.q_opackets[..txq].to_vec(),
            q_errors: s.q_errors[..rxq.max(txq)].to_vec(),
        })
    }

    /// Resets the counters.
    ///
    /// # Errors
    /// [`Error::Dpdk`].
    pub fn reset_stats(&mut self) -> Result<()> {
        let id = self.inner.id;
        // SAFETY: owned port; &mut self: no concurrent control call.
        check(unsafe { ffi::rte_eth_stats_reset(id) }, || format!("rte_eth_stats_reset(port {id})"))?;
        Ok(())
    }

    /// The RSS redirection table: entry `i` is the RX queue of packets whose hash has
    /// `hash % reta.len() == i` (see [`crate::thash::reta_queue`]).
    ///
    /// # Errors
    /// [`Error::Dpdk`] when the driver has no RETA or refuses.
    pub fn rss_reta_query(&self) -> Result<Vec<u16>> {
        let id = self.inner.id;
        let size = self.inner.info.reta_size;
        let mut groups = reta_groups(size);
        // SAFETY: groups holds ceil(size / 64) entries of 64, as DPDK requires for `size`.
        let ret = unsafe { ffi::rte_eth_dev_rss_reta_query(id, groups.as_mut_ptr(), size) };
        check(ret, || format!("rte_eth_dev_rss_reta_query(port {id}, {size} entries)"))?;
        Ok(groups.iter().flat_map(|g| g.reta).take(usize::from(size)).collect())
    }

    /// Replaces the RSS redirection table. `reta` must have [`DevInfo::reta_size`] entries,
    /// each a configured RX queue.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a wrong length or queue; [`Error::Busy`] while queue
    /// handles live; [`Error::Dpdk`] when the driver refuses.
    pub fn rss_reta_update(&mut self, reta: &[u16]) -> Result<()> {
        let p = self.exclusive("update the RETA")?;
        let id = p.id;
        let size = p.info.reta_size;
        if reta.len() != usize::from(size) {
            return Err(Error::InvalidArgument(format!(
                "port {id}: RETA has {} entries, the port's has {size}",
                reta.len()
            )));
        }
        let queues = p.rx_pools.len();
        if let Some(q) = reta.iter().find(|&&q| usize::from(q) >= queues) {
            return Err(Error::InvalidArgument(format!("port {id}: RETA names RX queue {q}, {queues} configured")));
        }
        let mut groups = reta_groups(size);
        for (g, chunk) in groups.iter_mut().zip(reta.chunks(ffi::RTE_ETH_RETA_GROUP_SIZE as usize)) {
            g.reta[..chunk.len()].copy_from_slice(chunk);
        }
        // SAFETY: groups holds ceil(size / 64) entries with masks covering `size` entries.
        let ret = unsafe { ffi::rte_eth_dev_rss_reta_update(id, groups.as_mut_ptr(), size) };
        check(ret, || format!("rte_eth_dev_rss_reta_update(port {id}, {size} entries)"))?;
        Ok(())
    }

    /// The RSS hash types and key in use.
    ///
    /// # Errors
    /// [`Error::Dpdk`] when the driver refuses.
    pub fn rss_hash_conf_get(&self) -> Result<RssConf> {
        let id = self.inner.id;
        let key_len = match self.inner.info.hash_key_size {
            0 => DEFAULT_RSS_KEY_LEN,
            n => usize::from(n),
        };
        // Some drivers write their full key whatever rss_key_len says: room for the
        // largest possible key.
        let mut key = vec![0u8; MAX_RSS_KEY];
        let mut conf = ffi::rte_eth_rss_conf { rss_key: key.as_mut_ptr(), rss_key_len: key_len as u8, rss_hf: 0 };
        // SAFETY: conf points to a 255-byte buffer, the most any driver can write.
        let ret = unsafe { ffi::rte_eth_dev_rss_hash_conf_get(id, &raw mut conf) };
        check(ret, || format!("rte_eth_dev_rss_hash_conf_get(port {id})"))?;
        key.truncate(key_len);
        Ok(RssConf { rss_hf: RssHf(conf.rss_hf), key })
    }

    /// Sets the RSS hash types (clamped to the supported ones) and, when given, the key
    /// ([`DevInfo::hash_key_size`] bytes, 40 when unreported). Returns the hash types
    /// applied. RSS must have been enabled by [`configure`](Self::configure).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a key of the wrong length; [`Error::Busy`] while
    /// queue handles live; [`Error::Dpdk`] when the driver refuses.
    pub fn rss_hash_update(&mut self, rss_hf: RssHf, key: Option<&[u8]>) -> Result<RssHf> {
        let p = self.exclusive("update the RSS hash")?;
        let id = p.id;
        let rss_hf = rss_hf.intersection(p.info.flow_type_rss_offloads);
        let mut key = key.map(<[u8]>::to_vec);
        if let Some(k) = &mut key {
            check_key_len(&p.info, k)?;
        }
        let mut conf = ffi::rte_eth_rss_conf {
            rss_key: key.as_mut().map_or(std::ptr::null_mut(), |k| k.as_mut_ptr()),
            rss_key_len: key.as_ref().map_or(0, |k| k.len() as u8),
            rss_hf: rss_hf.bits(),
        };
        // SAFETY: conf is initialised; its key (if any) has the port's key length and
        // lives until the call returns (drivers copy it).
        let ret = unsafe { ffi::rte_eth_dev_rss_hash_update(id, &raw mut conf) };
        check(ret, || format!("rte_eth_dev_rss_hash_update(port {id})"))?;
        Ok(rss_hf)
    }

    /// Turns promiscuous mode on or off.
    ///
    /// # Errors
    /// [`Error::Dpdk`] (`ENOTSUP` for drivers without it, e.g. `net_null`).
    pub fn set_promiscuous(&mut self, on: bool) -> Result<()> {
        self.switch(on, "promiscuous", ffi::rte_eth_promiscuous_enable, ffi::rte_eth_promiscuous_disable)
    }

    /// Turns a receive mode on (`enable`) or off (`disable`): `rte_eth_<mode>_enable` /
    /// `_disable`, named `mode` in the error.
    fn switch(
        &mut self,
        on: bool,
        mode: &str,
        enable: unsafe extern "C" fn(u16) -> c_int,
        disable: unsafe extern "C" fn(u16) -> c_int,
    ) -> Result<()> {
        let id = self.inner.id;
        // SAFETY: owned port; &mut self: no concurrent control call; `enable` and
        // `disable` are ethdev calls taking a port id.
        let ret = unsafe {
            if on {
                enable(id)
            } else {
                disable(id)
            }
        };
        check(ret, || format!("rte_eth_{mode}_{}(port {id})", if on { "enable" } else { "disable" }))?;
        Ok(())
    }

    /// Whether promiscuous mode is on (`None`: unknown).
    pub fn promiscuous(&self) -> Option<bool> {
        // SAFETY: plain query of an owned port.
        match unsafe { ffi::rte_eth_promiscuous_get(self.inner.id) } {
            1 => Some(true),
            0 => Some(false),
            _ => None,
        }
    }

    /// Turns all-multicast mode on or off: every multicast frame received, whatever the
    /// device's multicast filter holds (IPv6 Neighbor Solicitations go to solicited-node
    /// multicast groups, RFC 4861 § 7.2.2). `rte_eth_dev_start` replays the mode, so it
    /// may be set before or after the start.
    ///
    /// # Errors
    /// [`Error::Dpdk`] (`ENOTSUP` for drivers without it).
    pub fn set_allmulticast(&mut self, on: bool) -> Result<()> {
        self.switch(on, "allmulticast", ffi::rte_eth_allmulticast_enable, ffi::rte_eth_allmulticast_disable)
    }

    /// Whether all-multicast mode is on (`None`: unknown).
    pub fn allmulticast(&self) -> Option<bool> {
        // SAFETY: plain query of an owned port.
        match unsafe { ffi::rte_eth_allmulticast_get(self.inner.id) } {
            1 => Some(true),
            0 => Some(false),
            _ => None,
        }
    }
}

fn check_key_len(info: &DevInfo, key: &[u8]) -> Result<()> {
    let want = match info.hash_key_size {
        0 => DEFAULT_RSS_KEY_LEN,
        n => usize::from(n),
    };
    if key.len() != want {
        return Err(Error::InvalidArgument(format!(
            "RSS key of {} bytes; {} ({}) takes {want}",
            key.len(),
            info.driver_name,
            if info.hash_key_size == 0 { "unreported, assuming the usual" } else { "reported" }
        )));
    }
    Ok(())
}

/// RETA groups covering `size` entries, with every covered entry's mask bit set.
fn reta_groups(size: u16) -> Vec<ffi::rte_eth_rss_reta_entry64> {
    let per = ffi::RTE_ETH_RETA_GROUP_SIZE as usize;
    let size = usize::from(size);
    (0..size.div_ceil(per))
        .map(|g| {
            let n = (size - g * per).min(per);
            ffi::rte_eth_rss_reta_entry64 { mask: if n == 64 { u64::MAX } else { (1u64 << n) - 1 }, reta: [0; 64] }
        })
        .collect()
}

/// One RX queue of a started port, for one thread at a time. Returns the queue to the
/// port on drop.
pub struct RxQueue {
    port: Arc<PortInner>,
    id: u16,
    queue: u16,
    _not_sync: PhantomData<Cell<()>>,
}

/// One TX queue of a started port, for one thread at a time. Returns the queue to the
/// port on drop.
pub struct TxQueue {
    port: Arc<PortInner>,
    id: u16,
    queue: u16,
    _not_sync: PhantomData<Cell<()>>,
}

impl std::fmt::Debug for RxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RxQueue").field("port", &self.id).field("queue", &self.queue).finish()
    }
}

impl std::fmt::Debug for TxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TxQueue").field("port", &self.id).field("queue", &self.queue).finish()
    }
}

impl Drop for RxQueue {
    fn drop(&mut self) {
        self.port.rx_taken[usize::from(self.queue)].store(false, Ordering::Release);
    }
}

impl Drop for TxQueue {
    fn drop(&mut self) {
        self.port.tx_taken[usize::from(self.queue)].store(false, Ordering::Release);
    }
}

impl RxQueue {
    /// The port id.
    pub fn port_id(&self) -> u16 {
        self.id
    }

    /// The queue number.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Receives up to `max` packets (at most 65535) and appends them to `batch`; returns
    /// how many. Reserve `batch`'s capacity once (`Vec::with_capacity(32)`) so the poll
    /// loop never allocates. Never blocks.
    #[inline]
    pub fn rx_burst(&mut self, batch: &mut Vec<Mbuf>, max: usize) -> usize {
        let max = max.min(usize::from(u16::MAX));
        batch.reserve(max);
        let len = batch.len();
        // SAFETY: the port is started and stays so while this handle lives (reconfiguring
        // needs every handle dropped); this handle is the queue's only user (taken once,
        // &mut self, !Sync). batch has room for `max` more pointers after `len` (Mbuf is
        // a transparent non-null *mut rte_mbuf); the driver writes `n <= max` fresh,
        // exclusively owned mbufs there.
        let n = unsafe {
            ffi::rte_eth_rx_burst(
                self.id,
                self.queue,
                batch.as_mut_ptr().add(len).cast::<*mut ffi::rte_mbuf>(),
                max as u16,
            )
        };
        // SAFETY: the first n slots after len were initialised by the driver.
        unsafe { batch.set_len(len + usize::from(n)) };
        usize::from(n)
    }
}

impl TxQueue {
    /// The port id.
    pub fn port_id(&self) -> u16 {
        self.id
    }

    /// The queue number.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Offers `batch` (at most 65535 packets at a time) to the driver and returns how many
    /// it took. The packets taken are removed from the front of `batch` (the driver now
    /// owns and frees them); the rest stay in `batch`, in order, still owned by the
    /// caller — retry them, or drop them to free them. Never blocks.
    #[inline]
    pub fn tx_burst(&mut self, batch: &mut Vec<Mbuf>) -> usize {
        let offered = batch.len().min(usize::from(u16::MAX));
        if offered == 0 {
            return 0;
        }
        // SAFETY: started port, exclusive queue user (as in rx_burst). batch's first
        // `offered` elements are valid owned mbufs laid out as *mut rte_mbuf.
        let sent = unsafe {
            ffi::rte_eth_tx_burst(self.id, self.queue, batch.as_mut_ptr().cast::<*mut ffi::rte_mbuf>(), offered as u16)
        };
        let sent = usize::from(sent).min(offered);
        let len = batch.len();
        // SAFETY: the first `sent` mbufs now belong to the driver: forget them (no Drop)
        // by moving the remaining `len - sent` down over them and shortening the vector.
        // ptr::copy handles the overlap; every element stays owned exactly once.
        unsafe {
            let base = batch.as_mut_ptr();
            std::ptr::copy(base.add(sent), base, len - sent);
            batch.set_len(len - sent);
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mempool::DEFAULT_DATA_ROOM;
    use crate::testing;

    fn pool(name: &str, n: u32) -> Mempool {
        Mempool::new(testing::eal(), name, n, 0, DEFAULT_DATA_ROOM, None).expect("mempool")
    }

    /// A started port with `rxq`/`txq` queues of 256 descriptors.
    fn started(name: &str, rxq: u16, txq: u16, conf: &PortConfig, pool: &Mempool) -> Port {
        let mut port = Port::by_name(testing::eal(), name).expect("port");
        port.configure(rxq, txq, conf).expect("configure");
        for q in 0..rxq {
            port.setup_rx_queue(q, 256, pool).expect("rx queue");
        }
        for q in 0..txq {
            port.setup_tx_queue(q, 256).expect("tx queue");
        }
        port.start().expect("start");
        port
    }

    fn frame(p: &Mempool, seq: u32, len: usize) -> Mbuf {
        let mut m = p.alloc().expect("mbuf");
        let data = m.append(len).expect("room");
        for (i, b) in data.iter_mut().enumerate() {
            *b = (seq as usize).wrapping_mul(31).wrapping_add(i) as u8;
        }
        data[..4].copy_from_slice(&seq.to_be_bytes());
        m
    }

    fn seq(m: &Mbuf) -> u32 {
        u32::from_be_bytes(m.data()[..4].try_into().unwrap())
    }

    #[test]
    fn ring_loopback_round_trip() {
        let p = pool("t_ring_rt", 511);
        let mut port = started("net_ring0", 1, 1, &PortConfig::default(), &p);
        assert_eq!(port.info().driver_name, "net_ring");
        assert!(port.link().unwrap().up);
        // All-multicast on and off (what the gateway asks of every port, for IPv6's
        // solicited-node groups).
        port.set_allmulticast(true).expect("all-multicast on");
        assert_eq!(port.allmulticast(), Some(true));
        port.set_allmulticast(false).expect("all-multicast off");
        assert_eq!(port.allmulticast(), Some(false));
        let (mut rx, mut tx) = (port.rx_queue(0).unwrap(), port.tx_queue(0).unwrap());

        let sent: Vec<Mbuf> = (0..10).map(|i| frame(&p, i, 60 + i as usize * 7)).collect();
        let expected: Vec<Vec<u8>> = sent.iter().map(|m| m.data().to_vec()).collect();
        let mut batch = sent;
        assert_eq!(tx.tx_burst(&mut batch), 10);
        assert!(batch.is_empty());
        let mut got = Vec::with_capacity(32);
        assert_eq!(rx.rx_burst(&mut got, 32), 10);
        assert_eq!(got.iter().map(|m| m.data().to_vec()).collect::<Vec<_>>(), expected, "frames come back unchanged");
        assert_eq!(rx.rx_burst(&mut got, 32), 0, "nothing more");
        let stats = port.stats().unwrap();
        assert_eq!((stats.ipackets, stats.opackets), (10, 10));
        assert_eq!((stats.q_ipackets.clone(), stats.q_opackets.clone()), (vec![10], vec![10]));
        drop(got);
        assert_eq!(p.in_use(), 0);
    }

    #[test]
    fn tx_burst_leaves_unsent_with_caller() {
        // net_ring's queues are rings of 1024 slots, 1023 usable: offer more than that.
        let p = pool("t_ring_full", 2047);
        let port = started("net_ring1", 1, 1, &PortConfig::default(), &p);
        let (mut rx, mut tx) = (port.rx_queue(0).unwrap(), port.tx_queue(0).unwrap());
        let mut batch: Vec<Mbuf> = (0..1100).map(|i| frame(&p, i, 64)).collect();
        assert_eq!(tx.tx_burst(&mut batch), 1023);
        assert_eq!(batch.len(), 77, "what the driver did not take stays with the caller");
        assert_eq!(batch.iter().map(seq).collect::<Vec<_>>(), (1023..1100).collect::<Vec<_>>(), "in order");
        assert_eq!(p.in_use(), 1100, "nothing freed, nothing leaked");
        assert_eq!(tx.tx_burst(&mut batch), 0, "the ring is full");
        assert_eq!(batch.len(), 77);
        assert_eq!(port.stats().unwrap().opackets, 1023, "counted once, when taken");

        let mut got = Vec::with_capacity(32);
        assert_eq!(rx.rx_burst(&mut got, 32), 32);
        assert_eq!(got.iter().map(seq).collect::<Vec<_>>(), (0..32).collect::<Vec<_>>());
        assert_eq!(tx.tx_burst(&mut batch), 32, "room for 32 again");
        assert_eq!(batch.iter().map(seq).collect::<Vec<_>>(), (1055..1100).collect::<Vec<_>>());
        // Dropping the rest frees it; drain the ring too.
        drop(batch);
        drop(got);
        let mut drained = Vec::new();
        while rx.rx_burst(&mut drained, 512) > 0 {}
        assert_eq!(drained.len(), 1023);
        assert_eq!(drained.last().map(seq), Some(1054));
        drop(drained);
        assert_eq!(p.in_use(), 0);
    }

    #[test]
    fn null_port_counts_tx_and_generates_rx() {
        let p = pool("t_null_io", 511);
        let mut port = started("net_null0", 1, 1, &PortConfig::default(), &p);
        assert_eq!(port.info().driver_name, "net_null");
        assert!(port.link().unwrap().up);
        let _mac = port.mac_addr().unwrap();
        {
            let (mut rx, mut tx) = (port.rx_queue(0).unwrap(), port.tx_queue(0).unwrap());
            let mut batch: Vec<Mbuf> = (0..64).map(|i| frame(&p, i, 100)).collect();
            assert_eq!(tx.tx_burst(&mut batch), 64);
            assert_eq!(p.in_use(), 0, "net_null frees what it transmits");
            let mut got = Vec::with_capacity(32);
            assert_eq!(rx.rx_burst(&mut got, 32), 32, "net_null generates a full burst");
            assert!(got.iter().all(|m| m.len() == 64 && m.segments() == 1 && m.port() == port.id()));
            assert_eq!(p.in_use(), 32);
            let stats = port.stats().unwrap();
            assert_eq!((stats.opackets, stats.ipackets), (64, 32));
        }
        assert_eq!(p.in_use(), 0);
        port.reset_stats().unwrap();
        assert_eq!(port.stats().unwrap().opackets, 0);
        port.stop().unwrap();
        assert!(!port.link().unwrap().up);
    }

    #[test]
    fn reta_and_key_round_trip() {
        let p = pool("t_null_rss", 511);
        let conf = PortConfig { rss_hf: RssHf::NONFRAG_IPV4_TCP | RssHf::NONFRAG_IPV4_UDP, ..PortConfig::default() };
        let mut port = Port::by_name(testing::eal(), "net_null1").unwrap();
        let applied = port.configure(4, 4, &conf).unwrap();
        assert_eq!(applied.rss_hf, conf.rss_hf);
        for q in 0..4 {
            port.setup_rx_queue(q, 256, &p).unwrap();
            port.setup_tx_queue(q, 256).unwrap();
        }
        port.start().unwrap();
        let size = usize::from(port.info().reta_size);
        assert_eq!(size, 128, "net_null's RETA");
        let reta: Vec<u16> = (0..size).map(|i| ((i * 7) % 4) as u16).collect();
        port.rss_reta_update(&reta).unwrap();
        assert_eq!(port.rss_reta_query().unwrap(), reta);
        let key: Vec<u8> = (0..DEFAULT_RSS_KEY_LEN as u8).map(|b| b.wrapping_mul(37) ^ 0x5a).collect();
        port.rss_hash_update(conf.rss_hf, Some(&key)).unwrap();
        let got = port.rss_hash_conf_get().unwrap();
        assert_eq!(got.key, key);
        assert_eq!(got.rss_hf, conf.rss_hf);
        assert!(matches!(port.rss_reta_update(&reta[..64]), Err(Error::InvalidArgument(_))));
        assert!(matches!(port.rss_reta_update(&vec![4; size]), Err(Error::InvalidArgument(_))), "queue 4 of 4");
        assert!(matches!(port.rss_hash_update(conf.rss_hf, Some(&key[..39])), Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn configure_clamps_and_guards_reconfiguration() {
        let p = pool("t_null_conf", 511);
        let mut port = Port::by_name(testing::eal(), "net_null2").unwrap();
        let info = port.info().clone();
        let conf = PortConfig {
            rss_hf: RssHf::IP | RssHf::TCP | RssHf::UDP,
            rx_offloads: RxOffloads::CHECKSUM | RxOffloads::RSS_HASH,
            tx_offloads: TxOffloads::IPV4_CKSUM | TxOffloads::TCP_CKSUM | TxOffloads::UDP_CKSUM,
            ..PortConfig::default()
        };
        assert!(matches!(port.start(), Err(Error::InvalidArgument(_))), "start before configure");
        let applied = port.configure(2, 2, &conf).unwrap();
        assert_eq!(applied.rss_hf, conf.rss_hf.intersection(info.flow_type_rss_offloads));
        assert!(info.rx_offload_capa.contains(applied.rx_offloads));
        assert!(info.tx_offload_capa.contains(applied.tx_offloads));
        assert_eq!(port.applied(), Some(&applied));
        assert!(matches!(port.configure(u16::MAX, 1, &conf), Err(Error::InvalidArgument(_))));
        port.setup_rx_queue(0, 256, &p).unwrap();
        port.setup_tx_queue(0, 256).unwrap();
        assert!(matches!(port.start(), Err(Error::InvalidArgument(_))), "queue 1 not set up");
        assert!(matches!(port.rx_queue(0), Err(Error::InvalidArgument(_))), "not started");
        port.setup_rx_queue(1, 256, &p).unwrap();
        port.setup_tx_queue(1, 256).unwrap();
        port.start().unwrap();

        let rx0 = port.rx_queue(0).unwrap();
        assert!(matches!(port.rx_queue(0), Err(Error::Busy(_))), "one handle per queue");
        assert!(matches!(port.rx_queue(2), Err(Error::InvalidArgument(_))));
        assert!(matches!(port.stop(), Err(Error::Busy(_))), "stop while a handle lives");
        assert!(matches!(port.rss_reta_update(&[0; 128]), Err(Error::Busy(_))));
        let rx0 = std::thread::spawn(move || rx0).join().unwrap(); // handles are Send
        drop(rx0);
        drop(port.rx_queue(0).expect("the queue is free again"));
        port.stop().unwrap();
        let mtu = |m| PortConfig { mtu: Some(m), ..PortConfig::default() };
        assert!(matches!(port.configure(1, 1, &mtu(1)), Err(Error::InvalidArgument(_))), "below the minimum MTU");
        assert_eq!(port.configure(1, 1, &mtu(9000)).unwrap().mtu, 9000);
        let plain = port.configure(1, 1, &PortConfig::default()).unwrap();
        assert_eq!((plain.mtu, plain.rss_hf, plain.rx_offloads), (1500, RssHf::empty(), RxOffloads::empty()));
    }

    #[test]
    fn one_port_object_per_port() {
        let eal = testing::eal();
        let a = Port::by_name(eal, "net_null3").unwrap();
        assert!(matches!(Port::by_name(eal, "net_null3"), Err(Error::Busy(_))));
        assert!(matches!(Port::by_id(eal, a.id()), Err(Error::Busy(_))));
        assert!(matches!(Port::by_name(eal, "no_such_port9"), Err(Error::NoSuchPort(_))));
        assert!(matches!(Port::by_id(eal, u16::MAX), Err(Error::NoSuchPort(_))));
        assert_eq!(a.name(), "net_null3");
        assert!(format!("{a:?}").contains("net_null3"));
    }
}
