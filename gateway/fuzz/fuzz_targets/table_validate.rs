//! Fuzzes the table validator: `Table::new` must reject or accept any bytes without
//! panicking, and an accepted table must answer every lookup without panicking.
//!
//! Input: `[mode: u8][bytes…]`. With `mode & 1`, the CRC-32 is recomputed over the mutated
//! bytes first, so the fuzzer reaches the record checks behind the checksum.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use torii_gateway::table::{layout, Table};

fuzz_target!(|data: &[u8]| {
    let Some((&mode, bytes)) = data.split_first() else { return };
    let mut bytes = bytes.to_vec();
    if mode & 1 == 1 && bytes.len() >= size_of::<layout::Header>() {
        let at = layout::CHECKSUM_OFFSET;
        bytes[at..at + 4].fill(0);
        let crc = crc32(&bytes);
        bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
    }
    let Ok(table) = Table::new(bytes) else { return };
    for f in table.frontends() {
        let addr = layout::addr_from16(f.addr);
        let found = table.frontend(addr, f.protocol, f.port.get()).expect("a listed front door is found");
        let service = table.service(found.service).expect("its service exists");
        let _ = service.pick(u64::from(f.port.get()) * 0x9e37_79b9_7f4a_7c15);
        for client in [IpAddr::from([198, 51, 100, 10]), IpAddr::from(f.addr), addr] {
            let _ = found.source_ranges.admits(client);
        }
        for b in service.backends.iter().chain(service.draining) {
            assert!(service.serves(b.addr, b.port.get()), "a listed endpoint serves");
        }
        let _ = service.name().len();
        assert!(table.is_vip(addr));
    }
    for id in 0..table.service_count() as u32 + 2 {
        if let Some(s) = table.service(id) {
            for h in [0, 1, u64::MAX] {
                let _ = s.pick(h);
            }
        }
    }
    let _ = table.frontend(IpAddr::from([203, 0, 113, 10]), 6, 80);
});

/// CRC-32 (IEEE), bitwise: the fuzz crate does not depend on crc32fast.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0xedb8_8320 } else { crc >> 1 };
        }
    }
    !crc
}
