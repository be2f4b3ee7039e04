//! The gateway's per-front-door counters in shared memory, for `torii-control status`.
//!
//! ```text
//! <dir>/frontend-stats     header (48 bytes) | FrontendStat records (64 bytes each)
//! ```
//!
//! The gateway writes the file about once a second (its workers copy their counters out
//! that often): the counts of every front door it holds or has counted, summed over its
//! workers, keyed by (address, protocol, port) and sorted by that key as the table sorts
//! front doors. It writes `frontend-stats.tmp` and renames it over `frontend-stats`, so
//! a reader that opens the file gets one complete version (it reads the file whole; a
//! rename never changes bytes under an open file). Counters are since the gateway
//! started; a front door that left the table keeps its counts until the workers switch
//! tables again (as the Prometheus series do, `torii_gateway_frontend_*`).
//!
//! Records are `#[repr(C)]` with alignment 1 and little-endian counters, as in
//! [`crate::layout`]; addresses are 16 bytes (IPv4 mapped, RFC 4291 § 2.5.5.2).

use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use zerocopy::byteorder::little_endian::{U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

/// File name of the counters in the shared-memory directory.
pub const STATS_FILE_NAME: &str = "frontend-stats";

/// `b"TORIISTS"`: the first eight bytes of the file.
pub const STATS_MAGIC: [u8; 8] = *b"TORIISTS";

/// Version of the file's layout; a reader refuses any other.
pub const STATS_VERSION: u32 = 1;

/// The file's header.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
#[repr(C)]
pub struct StatsHeader {
    /// [`STATS_MAGIC`].
    pub magic: [u8; 8],
    /// [`STATS_VERSION`].
    pub version: U32,
    /// Bytes per record (64).
    pub record_len: U32,
    /// Number of records that follow.
    pub count: U64,
    /// When the gateway wrote it: ns since the Unix epoch (wall clock).
    pub written_unix_ns: U64,
    /// The writing gateway's pid.
    pub pid: U32,
    /// Zero.
    pub reserved: [u8; 4],
    /// The table generation the gateway held.
    pub table_generation: U64,
}

/// One front door's counts, summed over the gateway's workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout, Unaligned)]
#[repr(C)]
pub struct FrontendStat {
    /// The front door's address (16-byte form).
    pub addr: [u8; 16],
    /// IP protocol number (6, 17, 132).
    pub protocol: u8,
    /// Zero.
    pub reserved: u8,
    /// The front door's port, host order (little-endian).
    pub port: zerocopy::byteorder::little_endian::U16,
    /// Zero.
    pub reserved2: [u8; 4],
    /// Packets from clients (the flow's original direction).
    pub packets_original: U64,
    /// IP bytes from clients (as the gateway counts them: `frontend_bytes_total`).
    pub bytes_original: U64,
    /// Packets from endpoints (replies).
    pub packets_reply: U64,
    /// IP bytes from endpoints (as the gateway counts them).
    pub bytes_reply: U64,
    /// Flows created through the front door.
    pub new_flows: U64,
}

/// The counters as read by [`read_stats`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stats {
    /// When the gateway wrote them: ns since the Unix epoch.
    pub written_unix_ns: u64,
    /// The writing gateway's pid.
    pub pid: u32,
    /// The table generation it held.
    pub table_generation: u64,
    /// Per front door, sorted by (address, protocol, port).
    pub frontends: Vec<FrontendStat>,
}

impl Stats {
    /// The counts of front door (`addr` in 16-byte form, `protocol`, `port`), if listed.
    pub fn get(&self, addr: [u8; 16], protocol: u8, port: u16) -> Option<&FrontendStat> {
        let key = |s: &FrontendStat| (s.addr, s.protocol, s.port.get());
        self.frontends.binary_search_by(|s| key(s).cmp(&(addr, protocol, port))).ok().map(|i| &self.frontends[i])
    }
}

/// Writes `frontends` (sorted by address, protocol, port) as `dir/frontend-stats`, through
/// `frontend-stats.tmp` (mode 0600) and a rename.
///
/// # Errors
/// Any I/O error creating, writing or renaming the file.
pub fn write_stats(dir: &Path, pid: u32, table_generation: u64, frontends: &[FrontendStat]) -> io::Result<()> {
    let written_unix_ns = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    let header = StatsHeader {
        magic: STATS_MAGIC,
        version: STATS_VERSION.into(),
        record_len: (size_of::<FrontendStat>() as u32).into(),
        count: (frontends.len() as u64).into(),
        written_unix_ns: written_unix_ns.into(),
        pid: pid.into(),
        reserved: [0; 4],
        table_generation: table_generation.into(),
    };
    let tmp = dir.join(format!("{STATS_FILE_NAME}.tmp"));
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&tmp)?;
    let mut bytes = Vec::with_capacity(size_of::<StatsHeader>() + std::mem::size_of_val(frontends));
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend_from_slice(frontends.as_bytes());
    f.write_all(&bytes)?;
    drop(f);
    std::fs::rename(&tmp, dir.join(STATS_FILE_NAME))
}

/// Removes `dir/frontend-stats` if process `pid` wrote it (a gateway that stops cleanly),
/// so that no reader takes its last counters for live ones; another process's file, or
/// none, is left alone.
///
/// # Errors
/// I/O errors other than the file being absent.
pub fn remove_stats(dir: &Path, pid: u32) -> io::Result<()> {
    match read_stats(dir) {
        Ok(Some(s)) if s.pid == pid => match std::fs::remove_file(dir.join(STATS_FILE_NAME)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        },
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Reads `dir/frontend-stats`; `Ok(None)` when there is none (no gateway has written it).
///
/// # Errors
/// [`io::ErrorKind::InvalidData`] when the file is not a counters file of
/// [`STATS_VERSION`] or is truncated; other I/O errors as they come.
pub fn read_stats(dir: &Path) -> io::Result<Option<Stats>> {
    let bytes = match std::fs::read(dir.join(STATS_FILE_NAME)) {
        Ok(b) => b,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("{STATS_FILE_NAME}: {what}"));
    let (header, rest) = StatsHeader::read_from_prefix(&bytes).map_err(|_| invalid("shorter than its header"))?;
    if header.magic != STATS_MAGIC || header.version.get() != STATS_VERSION {
        return Err(invalid("not a counters file of this version"));
    }
    if header.record_len.get() as usize != size_of::<FrontendStat>() {
        return Err(invalid("unexpected record length"));
    }
    let count = usize::try_from(header.count.get()).map_err(|_| invalid("count out of range"))?;
    let records = <[FrontendStat]>::ref_from_prefix_with_elems(rest, count).map_err(|_| invalid("truncated"))?.0;
    Ok(Some(Stats {
        written_unix_ns: header.written_unix_ns.get(),
        pid: header.pid.get(),
        table_generation: header.table_generation.get(),
        frontends: records.to_vec(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_counters_read_back_and_bad_files_are_refused() {
        let dir = std::env::temp_dir().join(format!("torii-stats-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(read_stats(&dir).unwrap(), None);
        let door = |last: u8, port: u16, n: u64| FrontendStat {
            addr: crate::layout::addr16([203, 0, 113, last].into()),
            protocol: 6,
            port: port.into(),
            packets_original: n.into(),
            new_flows: 1.into(),
            ..FrontendStat::default()
        };
        let doors = [door(10, 80, 5), door(10, 443, 7), door(11, 80, 9)];
        write_stats(&dir, 42, 3, &doors).unwrap();
        let s = read_stats(&dir).unwrap().unwrap();
        assert_eq!((s.pid, s.table_generation, s.frontends.as_slice()), (42, 3, &doors[..]));
        assert!(s.written_unix_ns > 0);
        let addr = crate::layout::addr16([203, 0, 113, 10].into());
        assert_eq!(s.get(addr, 6, 443).map(|d| d.packets_original.get()), Some(7));
        assert_eq!(s.get(addr, 17, 443), None);
        let path = dir.join(STATS_FILE_NAME);
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert_eq!(read_stats(&dir).unwrap_err().kind(), io::ErrorKind::InvalidData);
        std::fs::write(&path, b"TORIITBL").unwrap();
        assert_eq!(read_stats(&dir).unwrap_err().kind(), io::ErrorKind::InvalidData);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
