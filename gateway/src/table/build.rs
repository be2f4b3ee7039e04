//! [`TableSpec`] → snapshot bytes. Runs in torii-control, never on the packet path.

use std::collections::HashSet;

use zerocopy::IntoBytes;

use super::layout::{self, section, Backend, Frontend, Header, Section, Service};
use super::spec::TableSpec;
use crate::maglev;

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

/// Lays out `spec` as snapshot bytes with the given generation: sorted front doors, one
/// Maglev ring per service (size [`maglev::ring_size_for`]), header and CRC-32.
///
/// # Errors
/// [`BuildError`] for duplicate front doors, dangling service indices or a table over 4 GiB.
pub fn build(spec: &TableSpec, generation: u64) -> Result<Vec<u8>, BuildError> {
    let mut frontends = Vec::with_capacity(spec.frontends.len());
    let mut seen = HashSet::with_capacity(spec.frontends.len());
    for (index, f) in spec.frontends.iter().enumerate() {
        if f.service >= spec.services.len() {
            return Err(BuildError::BadServiceIndex { index, service: f.service, services: spec.services.len() });
        }
        let addr = layout::addr16(f.addr);
        if !seen.insert(layout::frontend_key(addr, f.protocol as u8, f.port)) {
            return Err(BuildError::DuplicateFrontend { addr: f.addr, protocol: f.protocol.as_str(), port: f.port });
        }
        frontends.push(Frontend {
            addr,
            port: f.port.into(),
            protocol: f.protocol as u8,
            kind: f.kind as u8,
            reserved: [0; 8],
            service: u32_of(f.service + 1)?.into(),
        });
    }
    frontends.sort_unstable_by_key(|f| layout::frontend_key(f.addr, f.protocol, f.port.get()));

    let mut services = Vec::with_capacity(spec.services.len());
    let mut backends = Vec::new();
    let mut ring: Vec<u32> = Vec::new();
    let mut names = Vec::new();
    for s in &spec.services {
        let mut list: Vec<_> = s.backends.clone();
        list.sort_unstable();
        list.dedup();
        let ids: Vec<_> = list.iter().map(|b| (b.addr, b.port)).collect();
        let (ring_offset, ring_len) = if ids.is_empty() {
            (ring.len(), 0)
        } else {
            let m = maglev::ring_size_for(ids.len());
            let offset = ring.len();
            ring.extend(maglev::build(&ids, m).into_iter().map(|i| i + 1));
            (offset, m as usize)
        };
        services.push(Service {
            backends_offset: u32_of(backends.len())?.into(),
            backends_count: u32_of(list.len())?.into(),
            ring_offset: u32_of(ring_offset)?.into(),
            ring_len: u32_of(ring_len)?.into(),
            affinity_timeout_s: s.affinity_timeout_s.unwrap_or(0).into(),
            flags: 0.into(),
            name_offset: u32_of(names.len())?.into(),
            name_len: u32_of(s.name.len())?.into(),
        });
        names.extend_from_slice(s.name.as_bytes());
        backends.extend(list.iter().map(|b| Backend {
            addr: layout::addr16(b.addr),
            port: b.port.into(),
            reserved: [0; 2],
        }));
    }

    let mut out = vec![0u8; size_of::<Header>()];
    let mut sections = [Section::default(); section::COUNT];
    let mut put = |out: &mut Vec<u8>, idx: usize, bytes: &[u8], count: usize| -> Result<(), BuildError> {
        // Align each section to 8 bytes: not needed by the reader, kind to hexdumps.
        out.resize(out.len().next_multiple_of(8), 0);
        sections[idx] = Section { offset: u32_of(out.len())?.into(), count: u32_of(count)?.into() };
        out.extend_from_slice(bytes);
        Ok(())
    };
    put(&mut out, section::FRONTENDS, frontends.as_bytes(), frontends.len())?;
    put(&mut out, section::SERVICES, services.as_bytes(), services.len())?;
    put(&mut out, section::BACKENDS, backends.as_bytes(), backends.len())?;
    let ring_le: Vec<zerocopy::little_endian::U32> = ring.iter().map(|&r| r.into()).collect();
    put(&mut out, section::RING, ring_le.as_bytes(), ring.len())?;
    put(&mut out, section::NAMES, &names, names.len())?;
    u32_of(out.len())?;

    let header = Header {
        magic: layout::MAGIC,
        abi_version: layout::ABI_VERSION.into(),
        header_len: (size_of::<Header>() as u32).into(),
        generation: generation.into(),
        total_len: (out.len() as u64).into(),
        checksum: 0.into(),
        flags: 0.into(),
        sections,
    };
    out[..size_of::<Header>()].copy_from_slice(header.as_bytes());
    let crc = super::view::checksum(&out);
    out[layout::CHECKSUM_OFFSET..layout::CHECKSUM_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

fn u32_of(n: usize) -> Result<u32, BuildError> {
    u32::try_from(n).map_err(|_| BuildError::TooLarge)
}
