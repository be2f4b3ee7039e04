//! The tests' EAL: one per process, shared by every test in it.
//!
//! cargo-nextest (what `scripts/test` runs) starts each test in its own process, so each
//! test initialises its own EAL; `cargo test` runs the tests as threads of one process,
//! where they share this one. Either way each test uses its own virtual devices (listed
//! here) and its own mempool names, so tests never see each other's packets.
//!
//! EAL runs without hugepages (`--no-huge -m 256 --no-shconf`, IOVA as VA; `--in-memory`
//! conflicts with `--no-huge`), without PCI scanning or telemetry, on lcore 0, with a
//! file prefix unique to the process (its empty runtime directory is removed after init).

use std::sync::OnceLock;

use crate::eal::Eal;

/// Virtual devices created for the tests, one (or more) per test.
pub(crate) const VDEVS: &[&str] = &[
    "net_ring0", // port::tests::ring_loopback_round_trip
    "net_ring1", // port::tests::tx_burst_leaves_unsent_with_caller
    "net_null0", // port::tests::null_port_counts_tx_and_generates_rx
    "net_null1", // port::tests::reta_and_key_round_trip
    "net_null2", // port::tests::configure_clamps_and_guards_reconfiguration
    "net_null3", // port::tests::one_port_object_per_port
    "net_null4", // thash::tests::snat_port_choice_steers_replies_to_the_owner
];

/// The process's EAL, initialised on first use.
pub(crate) fn eal() -> &'static Eal {
    static EAL: OnceLock<Eal> = OnceLock::new();
    EAL.get_or_init(|| {
        let prefix = format!("torii-dpdk-test-{}", std::process::id());
        let mut args: Vec<String> = [
            "--no-huge",
            "-m",
            "256",
            "--no-shconf",
            "--no-pci",
            "--no-telemetry",
            "-l",
            "0",
            "--log-level=*:warning",
            "--file-prefix",
            &prefix,
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for v in VDEVS {
            args.push("--vdev".into());
            args.push((*v).into());
        }
        let eal = Eal::builder().args(args).init().expect("EAL init for tests (see testing.rs for the arguments)");
        // With --no-shconf and --no-telemetry EAL leaves its runtime directory empty and
        // never uses it again: remove it, or every test process leaves one behind.
        let _ = std::fs::remove_dir(eal.runtime_dir());
        eal
    })
}

/// A deterministic pseudo-random sequence (xorshift64*), for test inputs.
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}
