//! `torii-control status`: what the gateway serves right now, read from the shared-memory
//! directory — the published generation, which gateway workers acknowledged it, and per
//! backend set (a Service port with its chosen endpoints) its front doors, endpoints and
//! draining endpoints. kube-proxy has no such view; Cilium's `cilium service list` is the
//! model.
//!
//! It reads what the data plane reads: the state region and the published snapshot (mapped
//! briefly, as any tool may; see `torii_table::shm::load_table`), not the
//! control process, so it works with no torii-control running and shows what the gateway
//! has, not what the control plane meant. Per front door it adds the gateway's counters
//! (packets and bytes each way, new flows, summed over its workers, since it started),
//! which the gateway writes about once a second into the same directory
//! (`torii_table::stats`); they are as old as the file says.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Serialize;
use torii_table::layout::{addr_from16, Backend};
use torii_table::shm::{self, StateRegion};
use torii_table::{stats, Protocol};

/// Why the status cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The directory has no state file: nothing was ever published there.
    #[error("{}: no state file; no torii-control has published there (check shm_dir of the configuration, or --shm-dir)", dir.display())]
    NoState {
        /// The shared-memory directory.
        dir: PathBuf,
    },
    /// The state region cannot be opened.
    #[error("{}: cannot open the state region: {source}", dir.display())]
    State {
        /// The shared-memory directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The published snapshot cannot be read (it changed twice while being read, or is
    /// invalid).
    #[error("published generation {generation}: {source}")]
    Table {
        /// Its generation.
        generation: u64,
        /// Why.
        #[source]
        source: shm::LoadError,
    },
}

/// The gateway's live table and who adopted it (`torii-control status --json` prints this).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Status {
    /// The shared-memory directory.
    pub shm_dir: PathBuf,
    /// The published generation (0: nothing published yet).
    pub generation: u64,
    /// The registered gateway's pid; `None` when no gateway is registered.
    pub gateway_pid: Option<u32>,
    /// Each worker of the registered gateway and the generation it acknowledged.
    pub workers: Vec<WorkerAck>,
    /// The newest generation the gateway rejected as invalid, if any.
    pub rejected_generation: Option<u64>,
    /// When the gateway last wrote its per-front-door counters: ms since the Unix epoch;
    /// `None` when no counters file exists.
    pub counters_written_unix_ms: Option<u64>,
    /// How old those counters are, ms (when the clock allows).
    pub counters_age_ms: Option<u64>,
    /// The counters were written by another process than the registered gateway (an
    /// earlier gateway's; they are not moving).
    pub counters_stale: bool,
    /// Backend sets, in table order (by name).
    pub services: Vec<ServiceStatus>,
}

/// One gateway worker's acknowledgement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct WorkerAck {
    /// Worker number.
    pub worker: usize,
    /// The generation it last acknowledged (0: none yet).
    pub acknowledged: u64,
    /// It acknowledged the published generation.
    pub current: bool,
}

/// One backend set of the table.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServiceStatus {
    /// `namespace/name:port-name`.
    pub name: String,
    /// Its front doors, in table order (by address, protocol, port).
    pub front_doors: Vec<FrontDoor>,
    /// Endpoints new flows are spread over (`ip:port`, `[ip]:port` for IPv6).
    pub endpoints: Vec<String>,
    /// Endpoints that keep their established flows but take no new ones.
    pub draining: Vec<String>,
    /// `sessionAffinity: ClientIP` timeout, `None` without affinity.
    pub affinity_timeout_s: Option<u32>,
}

/// One front door.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FrontDoor {
    /// `ip:port/PROTOCOL`.
    pub address: String,
    /// `ClusterIP`, `ExternalIP`, `LoadBalancer` or `NodePort`.
    pub kind: &'static str,
    /// The client ranges admitted for new flows (`first-last` or a CIDR); empty: everyone.
    pub source_ranges: Vec<String>,
    /// The gateway's counters for it; `None` when it has none (no counters file, or the
    /// gateway has not held this front door yet).
    pub counters: Option<Counters>,
}

/// One front door's counters, summed over the gateway's workers, since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counters {
    /// Flows created through it.
    pub new_flows: u64,
    /// Packets from clients (the flows' original direction).
    pub packets_original: u64,
    /// Packets from endpoints (replies).
    pub packets_reply: u64,
    /// IP bytes from clients (as the gateway counts them: `frontend_bytes_total`).
    pub bytes_original: u64,
    /// IP bytes from endpoints (as the gateway counts them).
    pub bytes_reply: u64,
}

impl From<&stats::FrontendStat> for Counters {
    fn from(s: &stats::FrontendStat) -> Self {
        Self {
            new_flows: s.new_flows.get(),
            packets_original: s.packets_original.get(),
            packets_reply: s.packets_reply.get(),
            bytes_original: s.bytes_original.get(),
            bytes_reply: s.bytes_reply.get(),
        }
    }
}

fn socket(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

fn endpoint(b: &Backend) -> String {
    socket(addr_from16(b.addr), b.port.get())
}

/// A range of 16-byte addresses as a CIDR when it is one, else `first-last`.
fn range(first: [u8; 16], last: [u8; 16]) -> String {
    let (f, l) = (u128::from_be_bytes(first), u128::from_be_bytes(last));
    let span = l.wrapping_sub(f).wrapping_add(1);
    let ip = addr_from16(first);
    if span.is_power_of_two() && f & (span - 1) == 0 {
        let host_bits = span.trailing_zeros();
        let bits = if ip.is_ipv4() { 32 } else { 128 };
        if host_bits <= bits {
            return format!("{ip}/{}", bits - host_bits);
        }
    }
    if span == 0 && f == 0 {
        return "::/0".to_owned();
    }
    format!("{ip}-{}", addr_from16(last))
}

/// Counters older than this (ms) are not live: the gateway rewrites them every second.
const STATS_STALE_MS: u64 = 10_000;

/// Reads the status of the gateway served from `dir`.
///
/// Opening the state region creates nothing when it exists (the directory must have one).
///
/// # Errors
/// [`StatusError`].
pub fn read(dir: &Path) -> Result<Status, StatusError> {
    if !dir.join("state").is_file() {
        return Err(StatusError::NoState { dir: dir.to_owned() });
    }
    let region = StateRegion::open(dir).map_err(|source| StatusError::State { dir: dir.to_owned(), source })?;
    let mut generation = region.published_generation();
    let mut status = Status {
        shm_dir: dir.to_owned(),
        generation,
        gateway_pid: None,
        workers: Vec::new(),
        rejected_generation: Some(region.rejected_generation()).filter(|&g| g != 0),
        counters_written_unix_ms: None,
        counters_age_ms: None,
        counters_stale: false,
        services: Vec::new(),
    };
    if generation == 0 {
        return Ok(status);
    }
    // A publication may retire the file between reading the generation and mapping it:
    // read the generation again and retry once.
    let table = match shm::load_table(dir, generation) {
        Ok(t) => t,
        Err(_) if region.published_generation() != generation => {
            generation = region.published_generation();
            shm::load_table(dir, generation).map_err(|source| StatusError::Table { generation, source })?
        }
        Err(source) => return Err(StatusError::Table { generation, source }),
    };
    status.generation = generation;
    let workers = region.workers();
    if workers > 0 {
        status.gateway_pid = Some(region.gateway_pid());
        status.workers = (0..workers)
            .map(|w| {
                let acknowledged = region.acked(w);
                WorkerAck { worker: w, acknowledged, current: acknowledged >= generation }
            })
            .collect();
    }
    // A counters file that cannot be read is shown as none: the table is still worth seeing.
    let counters = stats::read_stats(dir).ok().flatten();
    if let Some(c) = &counters {
        let ms = c.written_unix_ns / 1_000_000;
        status.counters_written_unix_ms = Some(ms);
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
        status.counters_age_ms = u64::try_from(now).ok().and_then(|now| now.checked_sub(ms));
        // Another process's file (a gateway that died without removing it; a clean exit
        // removes it), or one not rewritten for 10 s (the gateway writes it every second;
        // its pid may be in another pid namespace, so it is not looked up): not live.
        let old = status.counters_age_ms.is_none_or(|a| a > STATS_STALE_MS);
        status.counters_stale = status.gateway_pid != Some(c.pid) || old;
    }
    // Stale counters are not shown beside the front doors.
    let counters = counters.filter(|_| !status.counters_stale);
    let mut doors: BTreeMap<u32, Vec<FrontDoor>> = BTreeMap::new();
    for (i, f) in table.frontends().iter().enumerate() {
        let Some(r) = table.frontend_at(i) else { continue };
        let protocol = Protocol::from_number(f.protocol).map_or("?", Protocol::as_str);
        doors.entry(r.service).or_default().push(FrontDoor {
            address: format!("{}/{protocol}", socket(addr_from16(f.addr), f.port.get())),
            kind: r.kind.as_str(),
            source_ranges: r.source_ranges.as_slice().iter().map(|s| range(s.first, s.last)).collect(),
            counters: counters.as_ref().and_then(|c| c.get(f.addr, f.protocol, f.port.get())).map(Counters::from),
        });
    }
    for id in 0..u32::try_from(table.service_count()).unwrap_or(u32::MAX) {
        let Some(s) = table.service(id) else { break };
        status.services.push(ServiceStatus {
            name: s.name().to_owned(),
            front_doors: doors.remove(&id).unwrap_or_default(),
            endpoints: s.backends.iter().map(endpoint).collect(),
            draining: s.draining.iter().map(endpoint).collect(),
            affinity_timeout_s: Some(s.affinity_timeout_s).filter(|&t| t != 0),
        });
    }
    Ok(status)
}

impl Status {
    /// The human-readable form `torii-control status` prints.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "shm directory:        {}", self.shm_dir.display());
        if self.generation == 0 {
            let _ = writeln!(out, "published generation: none yet");
        } else {
            let _ = writeln!(out, "published generation: {}", self.generation);
        }
        match self.gateway_pid {
            None => {
                let _ = writeln!(out, "gateway:              none registered");
            }
            Some(pid) => {
                let current = self.workers.iter().filter(|w| w.current).count();
                let _ = writeln!(
                    out,
                    "gateway:              pid {pid}, {current} of {} workers on the published generation",
                    self.workers.len()
                );
                for w in &self.workers {
                    let _ = writeln!(
                        out,
                        "  worker {}: acknowledged {}{}",
                        w.worker,
                        w.acknowledged,
                        if w.current { "" } else { " (behind)" }
                    );
                }
            }
        }
        if let Some(g) = self.rejected_generation {
            let _ = writeln!(out, "rejected generation:  {g} (the gateway found it invalid; see its log)");
        }
        match (self.counters_age_ms, self.counters_written_unix_ms) {
            (_, None) => {
                let _ = writeln!(out, "counters:             none (no gateway has written them)");
            }
            (Some(age), Some(_)) => {
                let stale = if self.counters_stale {
                    "; no gateway running that writes them (left by an exited one), not shown"
                } else {
                    ""
                };
                let _ = writeln!(out, "counters:             {:.1} s old{stale}", age as f64 / 1e3);
            }
            (None, Some(_)) => {
                let _ = writeln!(out, "counters:             written in the future (clock change?)");
            }
        }
        let doors: usize = self.services.iter().map(|s| s.front_doors.len()).sum();
        let _ = writeln!(out, "\n{} backend sets, {doors} front doors", self.services.len());
        let list = |v: &[String]| if v.is_empty() { "-".to_owned() } else { v.join(" ") };
        for s in &self.services {
            let affinity = s.affinity_timeout_s.map(|t| format!("  (ClientIP affinity {t} s)")).unwrap_or_default();
            let _ = writeln!(out, "\n{}{affinity}", s.name);
            for d in &s.front_doors {
                let ranges = if d.source_ranges.is_empty() {
                    String::new()
                } else {
                    format!("  from {}", d.source_ranges.join(" "))
                };
                let _ = writeln!(out, "  front door  {} {}{ranges}", d.address, d.kind);
                if let Some(c) = &d.counters {
                    let _ = writeln!(
                        out,
                        "              {} new flows, in {} pkts {} B, out {} pkts {} B",
                        c.new_flows, c.packets_original, c.bytes_original, c.packets_reply, c.bytes_reply
                    );
                }
            }
            let _ = writeln!(out, "  endpoints   {}", list(&s.endpoints));
            if !s.draining.is_empty() {
                let _ = writeln!(out, "  draining    {}", list(&s.draining));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::CompileOptions;
    use crate::publish::Publisher;

    #[test]
    fn status_shows_the_published_table_and_the_acknowledgements() {
        let dir = tempfile::tempdir().unwrap();
        let shm = dir.path().join("shm");
        let manifests = Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/demo");
        let options = CompileOptions { node_name: "gateway-1".into(), ..Default::default() };
        let compiled = crate::compile_dir(&manifests, &options).unwrap();
        let mut publisher = Publisher::open(&shm).unwrap();
        let generation = publisher.publish(&compiled.to_table_spec()).unwrap();
        let region = StateRegion::open(&shm).unwrap();
        let pid = 4242;
        region.register_gateway(pid, 2);
        region.ack(0, generation);
        let status = read(&shm).unwrap();
        assert_eq!((status.counters_written_unix_ms, status.counters_stale), (None, false));
        assert!(status.services.iter().flat_map(|s| &s.front_doors).all(|d| d.counters.is_none()));
        assert!(status.render().contains("counters:             none (no gateway has written them)"));
        // The gateway's counters for demo/web's front door.
        let web_door = stats::FrontendStat {
            addr: torii_table::layout::addr16("203.0.113.10".parse().unwrap()),
            protocol: 6,
            port: 80.into(),
            packets_original: 50.into(),
            bytes_original: 4000.into(),
            packets_reply: 40.into(),
            bytes_reply: 9000.into(),
            new_flows: 10.into(),
            ..Default::default()
        };
        stats::write_stats(&shm, pid, generation, &[web_door]).unwrap();

        let status = read(&shm).unwrap();
        assert!(status.counters_age_ms.is_some_and(|a| a < 60_000) && !status.counters_stale, "{status:?}");
        assert_eq!(status.generation, generation);
        assert_eq!(status.gateway_pid, Some(pid));
        assert_eq!(
            status.workers,
            [
                WorkerAck { worker: 0, acknowledged: generation, current: true },
                WorkerAck { worker: 1, acknowledged: 0, current: false }
            ]
        );
        let doors: usize = status.services.iter().map(|s| s.front_doors.len()).sum();
        assert_eq!(doors, compiled.frontends.len());
        let web = status.services.iter().find(|s| s.front_doors.iter().any(|d| d.address == "203.0.113.10:80/TCP"));
        let web = web.expect("demo/web's front door");
        assert_eq!(web.endpoints.len(), 3, "{web:?}");
        let door = web.front_doors.iter().find(|d| d.address == "203.0.113.10:80/TCP").unwrap();
        let want = Counters {
            new_flows: 10,
            packets_original: 50,
            packets_reply: 40,
            bytes_original: 4000,
            bytes_reply: 9000,
        };
        assert_eq!(door.counters, Some(want));
        let text = status.render();
        assert!(text.contains("              10 new flows, in 50 pkts 4000 B, out 40 pkts 9000 B"), "{text}");
        assert!(text.contains("1 of 2 workers on the published generation"), "{text}");
        assert!(text.contains("front door  203.0.113.10:80/TCP ExternalIP"), "{text}");
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["generation"], generation);
        assert_eq!(
            json["services"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|s| s["front_doors"].as_array().unwrap())
                .filter_map(|d| d["counters"]["new_flows"].as_u64())
                .collect::<Vec<_>>(),
            [10]
        );

        // The gateway stops: it unregisters and removes its counters; a file another
        // process left is not shown as live.
        region.unregister_gateway(pid);
        stats::write_stats(&shm, 4_000_000, generation, &[web_door]).unwrap();
        stats::remove_stats(&shm, pid).unwrap();
        assert!(shm.join(stats::STATS_FILE_NAME).exists(), "not this process's file");
        let status = read(&shm).unwrap();
        assert!(status.counters_stale, "{status:?}");
        assert!(status.services.iter().flat_map(|s| &s.front_doors).all(|d| d.counters.is_none()));
        let text = status.render();
        assert!(text.contains("gateway:              none registered"), "{text}");
        assert!(text.contains("no gateway running that writes them"), "{text}");
        stats::write_stats(&shm, pid, generation, &[web_door]).unwrap();
        stats::remove_stats(&shm, pid).unwrap();
        assert!(!shm.join(stats::STATS_FILE_NAME).exists(), "this process's file is removed");

        let empty = tempfile::tempdir().unwrap();
        let e = read(empty.path()).unwrap_err().to_string();
        assert!(e.ends_with("no state file; no torii-control has published there (check shm_dir of the configuration, or --shm-dir)"), "{e}");
    }

    #[test]
    fn ranges_print_as_cidrs() {
        let v4 = |a: [u8; 4]| {
            let mut b = [0_u8; 16];
            b[10] = 0xff;
            b[11] = 0xff;
            b[12..].copy_from_slice(&a);
            b
        };
        assert_eq!(range(v4([198, 51, 100, 0]), v4([198, 51, 100, 255])), "198.51.100.0/24");
        assert_eq!(range(v4([10, 0, 0, 1]), v4([10, 0, 0, 1])), "10.0.0.1/32");
        assert_eq!(range(v4([10, 0, 0, 1]), v4([10, 0, 0, 2])), "10.0.0.1-10.0.0.2");
    }
}
