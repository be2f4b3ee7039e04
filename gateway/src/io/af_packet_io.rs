//! [`PacketIo`] over AF_PACKET: one [`AfPacketSocket`] per interface for one worker.

use std::time::Duration;

use super::af_packet::AfPacketSocket;
use crate::worker::{PacketIo, RxInfo};

/// A worker's AF_PACKET sockets, indexed like the configured interfaces.
pub struct AfPacketIo {
    sockets: Vec<AfPacketSocket>,
}

impl AfPacketIo {
    /// Wraps one worker's sockets (`sockets[i]` on interface `i`).
    pub fn new(sockets: Vec<AfPacketSocket>) -> Self {
        Self { sockets }
    }
}

impl PacketIo for AfPacketIo {
    fn interfaces(&self) -> usize {
        self.sockets.len()
    }

    fn rx(&mut self, iface: usize, max: usize, f: &mut dyn FnMut(&[u8], RxInfo)) -> usize {
        match self.sockets.get_mut(iface) {
            Some(s) => s.rx_burst(max, |frame, flags| {
                if !flags.truncated {
                    let stripped_tag = flags.vlan_tci.map(|tci| (flags.vlan_tpid, tci));
                    f(frame, RxInfo { l4_csum_partial: flags.csum_not_ready, stripped_tag });
                }
            }),
            None => 0,
        }
    }

    fn tx(&mut self, iface: usize, frame: &[u8]) -> bool {
        self.sockets.get_mut(iface).is_some_and(|s| s.tx_send(frame))
    }

    fn flush(&mut self) {
        for s in &mut self.sockets {
            if let Err(e) = s.tx_flush() {
                tracing::warn!("AF_PACKET transmit failed: {e}");
            }
        }
    }

    fn wait(&mut self, timeout: Duration) {
        // Share the timeout between the interfaces: a frame on any of them is picked up
        // within timeout / n (plus the 1 ms block retire timeout of TPACKET_V3).
        let n = self.sockets.len().max(1) as u32;
        let ms = (timeout / n).as_millis().clamp(1, i32::MAX as u128) as i32;
        for s in &self.sockets {
            if matches!(s.wait_readable(ms), Ok(true)) {
                return;
            }
        }
    }
}
