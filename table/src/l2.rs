//! L2 mode's two small files in `shm_dir`, the whole protocol between torii-gateway and
//! torii-control for choosing which gateway answers ARP / Neighbor Discovery for a VIP.
//!
//! - [`Candidacy`] (`l2-candidacy`), written by the gateway every few hundred
//!   milliseconds: whether it is healthy (its `/healthz` verdict), draining or unhealthy,
//!   and the VIPs it could serve (those with a usable endpoint). torii-control takes a
//!   VIP's Lease only while the file is fresh ([`Candidacy::fresh`]) and lists it, and
//!   releases the Lease at once when it disappears from the file or the file goes stale
//!   (the gateway died).
//! - [`Ownership`] (`l2-owners`), written by torii-control: which VIPs this gateway
//!   answers for, each valid until a `CLOCK_MONOTONIC` deadline (the Lease's last renewal
//!   plus the renew deadline: a gateway whose control stopped renewing falls silent before
//!   any peer may take the Lease over), or, with the manifests source, every candidate
//!   (`mode all`: no Lease, no failover).
//!
//! Both are small line-oriented text files (`key value…` per line, first line a magic with
//! a version), replaced atomically (written beside, renamed over), so an operator reads them
//! with `cat`. Times are `CLOCK_MONOTONIC` nanoseconds ([`monotonic_ns`]), the same clock
//! for both processes of one host, immune to wall-clock steps.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io;
use std::net::IpAddr;
use std::path::Path;

use crate::shm::write_atomically;

/// The gateway's file in `shm_dir`.
pub const CANDIDACY_FILE: &str = "l2-candidacy";
/// torii-control's file in `shm_dir`.
pub const OWNERSHIP_FILE: &str = "l2-owners";

const CANDIDACY_MAGIC: &str = "torii-l2-candidacy 1";
const OWNERSHIP_MAGIC: &str = "torii-l2-owners 1";

/// `CLOCK_MONOTONIC` now, nanoseconds: the clock every process of one boot shares
/// (`clock_gettime(2)`); `std::time::Instant` reads the same clock on Linux but does not show
/// its value. Also the clock of the gateway's persistent conntrack.
#[must_use]
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `clock_gettime` writes one `timespec` through a valid pointer.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    debug_assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What the gateway says about itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CandidateState {
    /// `/healthz` is ok: it may hold the VIPs it lists.
    Healthy,
    /// SIGTERM: it gives every VIP up (torii-control releases the Leases at once).
    Draining,
    /// `/healthz` fails: it holds nothing.
    Unhealthy,
}

impl CandidateState {
    fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Draining => "draining",
            Self::Unhealthy => "unhealthy",
        }
    }
}

/// The gateway's candidacy (`l2-candidacy`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidacy {
    /// When it was written ([`monotonic_ns`]).
    pub written_ns: u64,
    /// Healthy, draining or unhealthy.
    pub state: CandidateState,
    /// The VIPs it can serve (empty unless healthy).
    pub vips: BTreeSet<IpAddr>,
}

impl Candidacy {
    /// Whether it was written at most `max_age_ns` before `now_ns`: a gateway that stopped
    /// writing (killed, hung) is no candidate for anything.
    pub fn fresh(&self, now_ns: u64, max_age_ns: u64) -> bool {
        now_ns.saturating_sub(self.written_ns) <= max_age_ns
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut s = format!("{CANDIDACY_MAGIC}\nwritten_ns {}\nstate {}\n", self.written_ns, self.state.as_str());
        for v in &self.vips {
            let _ = writeln!(s, "vip {v}");
        }
        s
    }

    /// Parses the file's text.
    ///
    /// # Errors
    /// A message naming the line that is not understood.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut c = Self { written_ns: 0, state: CandidateState::Unhealthy, vips: BTreeSet::new() };
        for (n, fields) in lines(text, CANDIDACY_MAGIC)? {
            match fields.as_slice() {
                ["written_ns", t] => c.written_ns = t.parse().map_err(|_| bad(n))?,
                ["state", "healthy"] => c.state = CandidateState::Healthy,
                ["state", "draining"] => c.state = CandidateState::Draining,
                ["state", "unhealthy"] => c.state = CandidateState::Unhealthy,
                ["vip", a] => {
                    c.vips.insert(a.parse().map_err(|_| bad(n))?);
                }
                _ => return Err(bad(n)),
            }
        }
        Ok(c)
    }

    /// Writes `dir/l2-candidacy` atomically.
    ///
    /// # Errors
    /// I/O errors of the write or the rename.
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        write_atomically(&dir.join(CANDIDACY_FILE), &self.render())
    }

    /// Reads `dir/l2-candidacy`; `Ok(None)` when there is none.
    ///
    /// # Errors
    /// I/O errors other than a missing file; an unreadable file as `InvalidData`.
    pub fn read(dir: &Path) -> io::Result<Option<Self>> {
        read(&dir.join(CANDIDACY_FILE), Self::parse)
    }
}

/// How the gateway's VIPs are owned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OwnershipMode {
    /// One Lease per VIP: only the VIPs listed, each until its deadline.
    Lease,
    /// No Lease (the manifests source): every candidate VIP.
    All,
}

/// torii-control's word on what the gateway answers for (`l2-owners`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ownership {
    /// When it was written ([`monotonic_ns`]).
    pub written_ns: u64,
    /// Leases, or all.
    pub mode: OwnershipMode,
    /// The Leases' `holderIdentity`.
    pub holder: String,
    /// VIP → held until ([`monotonic_ns`]); empty in [`OwnershipMode::All`].
    pub vips: BTreeMap<IpAddr, u64>,
}

impl Ownership {
    /// Whether `vip`, a candidate, is owned at `now_ns`.
    pub fn owns(&self, vip: IpAddr, now_ns: u64) -> bool {
        self.mode == OwnershipMode::All || now_ns < self.until(vip)
    }

    /// Until when (`CLOCK_MONOTONIC` ns) `vip` is owned: its deadline, `u64::MAX` in
    /// [`OwnershipMode::All`], 0 when not listed.
    pub fn until(&self, vip: IpAddr) -> u64 {
        match self.mode {
            OwnershipMode::All => u64::MAX,
            OwnershipMode::Lease => self.vips.get(&vip).copied().unwrap_or(0),
        }
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mode = match self.mode {
            OwnershipMode::Lease => "lease",
            OwnershipMode::All => "all",
        };
        let mut s = format!("{OWNERSHIP_MAGIC}\nwritten_ns {}\nmode {mode}\nholder {}\n", self.written_ns, self.holder);
        for (v, until) in &self.vips {
            let _ = writeln!(s, "vip {v} {until}");
        }
        s
    }

    /// Parses the file's text.
    ///
    /// # Errors
    /// A message naming the line that is not understood.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut o = Self { written_ns: 0, mode: OwnershipMode::Lease, holder: String::new(), vips: BTreeMap::new() };
        for (n, fields) in lines(text, OWNERSHIP_MAGIC)? {
            match fields.as_slice() {
                ["written_ns", t] => o.written_ns = t.parse().map_err(|_| bad(n))?,
                ["mode", "lease"] => o.mode = OwnershipMode::Lease,
                ["mode", "all"] => o.mode = OwnershipMode::All,
                ["holder", h] => o.holder = (*h).to_owned(),
                ["vip", a, until] => {
                    o.vips.insert(a.parse().map_err(|_| bad(n))?, until.parse().map_err(|_| bad(n))?);
                }
                _ => return Err(bad(n)),
            }
        }
        Ok(o)
    }

    /// Writes `dir/l2-owners` atomically.
    ///
    /// # Errors
    /// I/O errors of the write or the rename.
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        write_atomically(&dir.join(OWNERSHIP_FILE), &self.render())
    }

    /// Reads `dir/l2-owners`; `Ok(None)` when there is none.
    ///
    /// # Errors
    /// I/O errors other than a missing file; an unreadable file as `InvalidData`.
    pub fn read(dir: &Path) -> io::Result<Option<Self>> {
        read(&dir.join(OWNERSHIP_FILE), Self::parse)
    }
}

fn bad(line: usize) -> String {
    format!("line {line} is not understood")
}

/// The lines after the magic, numbered from 1, split into fields; blank lines skipped.
fn lines<'a>(text: &'a str, magic: &str) -> Result<Vec<(usize, Vec<&'a str>)>, String> {
    let mut it = text.lines();
    if it.next() != Some(magic) {
        return Err(format!("the first line is not {magic:?}"));
    }
    Ok(it
        .enumerate()
        .map(|(i, l)| (i + 2, l.split_whitespace().collect::<Vec<_>>()))
        .filter(|(_, f)| !f.is_empty())
        .collect())
}

fn read<T>(path: &Path, parse: fn(&str) -> Result<T, String>) -> io::Result<Option<T>> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text)
            .map(Some)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidacy_round_trips_and_ages() {
        let c = Candidacy {
            written_ns: 5_000,
            state: CandidateState::Healthy,
            vips: ["203.0.113.10", "2001:db8::10"].iter().map(|v| v.parse().unwrap()).collect(),
        };
        let text = c.render();
        assert_eq!(text, "torii-l2-candidacy 1\nwritten_ns 5000\nstate healthy\nvip 203.0.113.10\nvip 2001:db8::10\n");
        assert_eq!(Candidacy::parse(&text).unwrap(), c);
        assert!(c.fresh(6_000, 1_000) && !c.fresh(6_001, 1_000));
        assert!(Candidacy::parse("torii-l2-candidacy 2\n").is_err());
        assert_eq!(Candidacy::parse(&text.replace("vip 2001", "vip x2001")).unwrap_err(), "line 5 is not understood");
    }

    #[test]
    fn ownership_round_trips_and_expires() {
        let o = Ownership {
            written_ns: 1,
            mode: OwnershipMode::Lease,
            holder: "gw-a".into(),
            vips: [("203.0.113.10".parse().unwrap(), 100)].into_iter().collect(),
        };
        assert_eq!(Ownership::parse(&o.render()).unwrap(), o);
        let vip: IpAddr = "203.0.113.10".parse().unwrap();
        assert!(o.owns(vip, 99) && !o.owns(vip, 100), "owned until the deadline, not at it");
        assert!(!o.owns("203.0.113.11".parse().unwrap(), 0));
        assert_eq!((o.until(vip), o.until("203.0.113.11".parse().unwrap())), (100, 0));
        let all = Ownership { mode: OwnershipMode::All, vips: BTreeMap::new(), ..o };
        assert!(all.owns(vip, u64::MAX) && all.until(vip) == u64::MAX);
        let dir = std::env::temp_dir().join(format!("torii-l2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(Ownership::read(&dir).unwrap(), None);
        all.write(&dir).unwrap();
        assert_eq!(Ownership::read(&dir).unwrap(), Some(all));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
