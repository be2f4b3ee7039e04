//! Per-worker SNAT port allocation.
//!
//! Worker `w` of `n` owns the SNAT ports `p` in the configured range with
//! `p % n == w` ([`crate::io::fanout::owner_of_port`]): the AF_PACKET fanout program
//! steers a reply addressed to SNAT port `p` to that worker, so both directions of a flow
//! meet the same conntrack table. Ports are tracked per (SNAT address, protocol) in a bit
//! set; allocation walks from a rotating cursor so a just-freed port is reused last
//! (a backend may still hold the old connection in TIME-WAIT).

use bitvec::prelude::*;

/// Protocols with their own port space.
const PROTOCOLS: [u8; 3] = [6, 17, 132];

/// The SNAT ports one worker owns, and which of them are in use.
#[derive(Debug)]
pub struct SnatPorts {
    first: u16,
    stride: u16,
    count: usize,
    /// `used[address_index * PROTOCOLS.len() + protocol_index]`.
    used: Vec<BitVec>,
    cursors: Vec<usize>,
}

fn protocol_index(protocol: u8) -> Option<usize> {
    PROTOCOLS.iter().position(|&p| p == protocol)
}

impl SnatPorts {
    /// The ports of `worker` (of `workers`) in `[port_min, port_max]`, for `addresses` SNAT
    /// addresses. A worker may own no port when the range is tiny (then every allocation fails).
    pub fn new(worker: usize, workers: usize, port_min: u16, port_max: u16, addresses: usize) -> Self {
        let n = workers.max(1) as u32;
        let w = worker as u32 % n;
        let min = u32::from(port_min);
        let first = min + (w + n - min % n) % n;
        let count = if first > u32::from(port_max) { 0 } else { ((u32::from(port_max) - first) / n + 1) as usize };
        let slots = addresses.max(1) * PROTOCOLS.len();
        Self {
            first: first.min(65535) as u16,
            stride: n as u16,
            count,
            used: (0..slots).map(|_| bitvec![0; count]).collect(),
            cursors: vec![0; slots],
        }
    }

    /// Number of ports this worker owns per (address, protocol).
    pub fn capacity(&self) -> usize {
        self.count
    }

    /// Allocates a free port for SNAT address `address` (index) and `protocol`.
    /// `None` when they are all in use (or the protocol has no ports).
    #[inline]
    pub fn alloc(&mut self, address: usize, protocol: u8) -> Option<u16> {
        let slot = address * PROTOCOLS.len() + protocol_index(protocol)?;
        let bits = self.used.get_mut(slot)?;
        let cursor = self.cursors[slot];
        let i = bits[cursor..].first_zero().map(|i| i + cursor).or_else(|| bits[..cursor].first_zero())?;
        bits.set(i, true);
        self.cursors[slot] = if i + 1 >= self.count { 0 } else { i + 1 };
        Some(self.first + (i as u16) * self.stride)
    }

    /// Returns `port` to the pool. Ports this worker does not own are ignored.
    #[inline]
    pub fn free(&mut self, address: usize, protocol: u8, port: u16) {
        let Some(p) = protocol_index(protocol) else { return };
        if port < self.first || (port - self.first) % self.stride != 0 {
            return;
        }
        let i = usize::from((port - self.first) / self.stride);
        if let Some(bits) = self.used.get_mut(address * PROTOCOLS.len() + p) {
            if i < bits.len() {
                bits.set(i, false);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_belong_to_their_worker_and_are_unique() {
        for workers in 1..5 {
            let mut all = std::collections::HashSet::new();
            for w in 0..workers {
                let mut s = SnatPorts::new(w, workers, 1000, 1099, 1);
                let mut n = 0;
                while let Some(p) = s.alloc(0, 6) {
                    assert!((1000..=1099).contains(&p));
                    assert_eq!(usize::from(p) % workers, w);
                    assert!(all.insert(p), "port {p} handed out twice");
                    n += 1;
                }
                assert_eq!(n, s.capacity());
            }
            assert_eq!(all.len(), 100);
        }
    }

    #[test]
    fn freed_ports_come_back_last() {
        let mut s = SnatPorts::new(0, 1, 5000, 5003, 1);
        let a = s.alloc(0, 17).unwrap();
        s.free(0, 17, a);
        let b = s.alloc(0, 17).unwrap();
        assert_ne!(a, b, "a just-freed port is not reused first");
        let _ = (s.alloc(0, 17), s.alloc(0, 17), s.alloc(0, 17));
        assert_eq!(s.alloc(0, 17), None);
        s.free(0, 17, b);
        assert_eq!(s.alloc(0, 17), Some(b));
        // TCP has its own port space.
        assert!(s.alloc(0, 6).is_some());
        assert_eq!(s.alloc(0, 1), None);
    }
}
