//! `sessionAffinity: ClientIP`: which endpoint each client of a Service port was sent to,
//! shared by all workers.
//!
//! Kubernetes: "connections from a particular client are passed to the same Pod each
//! time", for `sessionAffinity.clientIP.timeoutSeconds` (default 10800) after the
//! client's last new connection — kube-proxy's iptables mode implements it with the
//! `recent` match (`--rcheck --seconds T --reap`, then `--set` on every new connection).
//! A client's second connection may arrive on another worker, so this table is shared;
//! it is consulted only when a flow is created (never per packet), which DESIGN.md allows.
//! It is sharded by key hash, each shard a mutex over a map pre-sized so that it never
//! allocates after construction: a full shard first drops expired entries, then refuses
//! (the flow still gets a consistent endpoint: the Maglev ring hashed by client address).
//!
//! An entry names the endpoint (address and port), not a table index, and is used only
//! while that endpoint is still among the Service port's endpoints: when it leaves, the
//! client is placed anew.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::Mutex;

const SHARDS: usize = 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Key {
    /// Hash of the Service port's name (stable across table generations).
    service: u64,
    /// Client address, 16-byte form.
    client: [u8; 16],
}

/// An endpoint remembered for a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sticky {
    /// Endpoint address, 16-byte form (as in the table).
    pub addr: [u8; 16],
    /// Endpoint port.
    pub port: u16,
    /// Monotonic ns after which the entry no longer applies.
    pub expires_ns: u64,
}

struct Shard {
    map: HashMap<Key, Sticky, std::collections::hash_map::RandomState>,
    capacity: usize,
}

/// The shared ClientIP affinity table.
pub struct Affinity {
    shards: Box<[Mutex<Shard>]>,
    hasher: std::collections::hash_map::RandomState,
}

impl std::fmt::Debug for Affinity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Affinity").field("shards", &self.shards.len()).finish()
    }
}

/// The key under which a Service port's affinity is kept: a hash of its
/// `namespace/name:port` name (a `&str`, or its UTF-8 bytes as the table holds them:
/// [`crate::table::ServiceRef::name_bytes`]), which, unlike table indices, survives table
/// changes.
pub fn service_key(name: impl AsRef<[u8]>) -> u64 {
    xxhash_rust::xxh3::xxh3_64(name.as_ref())
}

impl Affinity {
    /// A table for about `capacity` (client, Service port) pairs.
    pub fn new(capacity: usize) -> Self {
        let per_shard = capacity.div_ceil(SHARDS).max(4);
        let shards = (0..SHARDS)
            .map(|_| {
                // Twice the entries we ever hold: hashbrown then rehashes in place
                // instead of growing when deletions leave tombstones.
                Mutex::new(Shard {
                    map: HashMap::with_capacity_and_hasher(per_shard * 2, Default::default()),
                    capacity: per_shard,
                })
            })
            .collect();
        Self { shards, hasher: Default::default() }
    }

    fn shard(&self, key: &Key) -> &Mutex<Shard> {
        &self.shards[(self.hasher.hash_one(key) as usize) % SHARDS]
    }

    /// The endpoint `client` was last sent to for `service`, if that has not expired at `now`.
    pub fn lookup(&self, service: u64, client: [u8; 16], now: u64) -> Option<Sticky> {
        let key = Key { service, client };
        let shard = self.shard(&key).lock().unwrap_or_else(|e| e.into_inner());
        shard.map.get(&key).copied().filter(|s| s.expires_ns > now)
    }

    /// Remembers that `client` was sent to `sticky` for `service`. Returns false when the
    /// shard is full of live entries (the choice is then not remembered).
    pub fn record(&self, service: u64, client: [u8; 16], sticky: Sticky, now: u64) -> bool {
        let key = Key { service, client };
        let mut shard = self.shard(&key).lock().unwrap_or_else(|e| e.into_inner());
        if shard.map.len() >= shard.capacity && !shard.map.contains_key(&key) {
            shard.map.retain(|_, s| s.expires_ns > now);
            if shard.map.len() >= shard.capacity {
                return false;
            }
        }
        shard.map.insert(key, sticky);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sticky(last: u8, expires_ns: u64) -> Sticky {
        let mut addr = [0u8; 16];
        addr[15] = last;
        Sticky { addr, port: 8080, expires_ns }
    }

    #[test]
    fn remembers_until_the_timeout() {
        let a = Affinity::new(100);
        let svc = service_key("demo/web:http");
        let client = [7u8; 16];
        assert_eq!(a.lookup(svc, client, 0), None);
        assert!(a.record(svc, client, sticky(11, 100), 0));
        assert_eq!(a.lookup(svc, client, 99), Some(sticky(11, 100)));
        assert_eq!(a.lookup(svc, client, 100), None);
        assert_eq!(a.lookup(service_key("demo/other:http"), client, 0), None);
    }

    #[test]
    fn a_full_table_reaps_expired_entries_then_refuses() {
        let a = Affinity::new(1);
        let svc = service_key("s");
        let mut stored = 0;
        for i in 0..10_000u32 {
            let mut c = [0u8; 16];
            c[..4].copy_from_slice(&i.to_be_bytes());
            stored += usize::from(a.record(svc, c, sticky(1, 10), 0));
        }
        assert!((4 * SHARDS / 2..=4 * SHARDS).contains(&stored), "{stored}");
        // Once they expired, there is room again.
        assert!(a.record(svc, [0xff; 16], sticky(2, 100), 50));
    }
}
