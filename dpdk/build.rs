//! Builds torii-dpdk's binding to the system's DPDK 22.11.
//!
//! 1. `pkg-config libdpdk` finds DPDK and emits the link flags: DPDK's shared libraries,
//!    linked dynamically, so that EAL can load the drivers (PMDs, buses, mempool handlers)
//!    from its plugin directory at run time. Statically linked, every driver would have to
//!    be wrapped in `--whole-archive` or ports and pools silently vanish.
//! 2. bindgen reads `csrc/torii_dpdk.h` with exactly `pkg-config --cflags libdpdk` and
//!    generates Rust declarations for an allowlist of what `src/` uses. DPDK's fast path is
//!    `static inline` (`rte_eth_rx_burst`, `rte_pktmbuf_alloc`, …), which no library
//!    exports: `wrap_static_fns` writes a C file with one exported wrapper per such
//!    function.
//! 3. The `cc` crate compiles those wrappers and `csrc/torii_dpdk_shim.c` (getters for the
//!    thread-local `per_lcore_*` variables, which Rust cannot name) with the same cflags.
//!
//! Without DPDK's development files the build stops with a message saying what to
//! install.

use std::env;
use std::path::PathBuf;
use std::process::Command;

/// The DPDK release this binding is written and tested against.
const DPDK_TESTED: &str = "22.11";

/// Defined for both bindgen and the C wrappers: rte_thash's context API is marked
/// experimental in 22.11 (`__rte_experimental`), and DPDK requires users to opt in.
const EXTRA_DEFINES: &[&str] = &["-DALLOW_EXPERIMENTAL_API"];

const FUNCTIONS: &[&str] = &[
    // EAL
    "rte_eal_init",
    "rte_eal_cleanup",
    "rte_eal_get_runtime_dir",
    "rte_strerror",
    "rte_lcore_id",
    "rte_socket_id",
    "rte_thread_register",
    "rte_thread_unregister",
    "rte_version",
    // mempool
    "rte_pktmbuf_pool_create",
    "rte_mempool_free",
    "rte_mempool_avail_count",
    "rte_mempool_in_use_count",
    // mbuf (mostly static inline: wrapped)
    "rte_pktmbuf_alloc",
    "rte_pktmbuf_alloc_bulk",
    "rte_pktmbuf_free",
    "rte_pktmbuf_free_bulk",
    "rte_pktmbuf_append",
    "rte_pktmbuf_prepend",
    "rte_pktmbuf_adj",
    "rte_pktmbuf_trim",
    "rte_pktmbuf_reset",
    "rte_pktmbuf_headroom",
    "rte_pktmbuf_tailroom",
    // ethdev
    "rte_eth_dev_get_port_by_name",
    "rte_eth_dev_get_name_by_port",
    "rte_eth_dev_is_valid_port",
    "rte_eth_dev_count_avail",
    "rte_eth_dev_info_get",
    "rte_eth_dev_configure",
    "rte_eth_rx_queue_setup",
    "rte_eth_tx_queue_setup",
    "rte_eth_dev_start",
    "rte_eth_dev_stop",
    "rte_eth_dev_close",
    "rte_eth_dev_socket_id",
    "rte_eth_macaddr_get",
    "rte_eth_link_get_nowait",
    "rte_eth_stats_get",
    "rte_eth_stats_reset",
    "rte_eth_dev_rss_reta_query",
    "rte_eth_dev_rss_reta_update",
    "rte_eth_dev_rss_hash_conf_get",
    "rte_eth_dev_rss_hash_update",
    "rte_eth_promiscuous_enable",
    "rte_eth_promiscuous_disable",
    "rte_eth_promiscuous_get",
    "rte_eth_allmulticast_enable",
    "rte_eth_allmulticast_disable",
    "rte_eth_allmulticast_get",
    "rte_eth_dev_set_mtu",
    "rte_eth_dev_get_mtu",
    "rte_eth_rx_burst",
    "rte_eth_tx_burst",
    // rte_thash
    "rte_thash_init_ctx",
    "rte_thash_free_ctx",
    "rte_thash_add_helper",
    "rte_thash_get_helper",
    "rte_thash_get_key",
    "rte_thash_get_complement",
    "rte_thash_adjust_tuple",
    "rte_softrss",
    // the shim
    "torii_rte_errno",
    "torii_set_rte_errno",
];

const CONSTANTS: &[&str] = &[
    "RTE_MBUF_F_.*",
    "RTE_ETH_RSS_.*",
    "RTE_ETH_RX_OFFLOAD_.*",
    "RTE_ETH_TX_OFFLOAD_.*",
    "RTE_ETH_RETA_GROUP_SIZE",
    "RTE_ETH_LINK_.*",
    "RTE_ETH_SPEED_NUM_.*",
    "RTE_ETH_NAME_MAX_LEN",
    "RTE_ETHER_ADDR_LEN",
    "RTE_MAX_ETHPORTS",
    "RTE_PKTMBUF_HEADROOM",
    "RTE_MBUF_DEFAULT_BUF_SIZE",
    "RTE_THASH_.*",
    "SOCKET_ID_ANY",
    "RTE_MAX_LCORE",
    "TORII_.*",
    "EEXIST",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=csrc/torii_dpdk.h");
    println!("cargo:rerun-if-changed=csrc/torii_dpdk_shim.c");
    println!("cargo:rerun-if-env-changed=PKG_CONFIG_PATH");

    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));

    // 1. Find DPDK; emit the (dynamic) link flags.
    let dpdk = match pkg_config::Config::new().atleast_version(DPDK_TESTED).probe("libdpdk") {
        Ok(lib) => lib,
        Err(e) => fail(&format!("pkg-config could not find DPDK >= {DPDK_TESTED} (libdpdk.pc): {e}")),
    };
    if !dpdk.version.starts_with(&format!("{DPDK_TESTED}.")) && dpdk.version != DPDK_TESTED {
        println!("cargo:warning=torii-dpdk is written and tested against DPDK {DPDK_TESTED}; found {}", dpdk.version);
    }
    let cflags = raw_cflags();

    // 2. Bindings.
    let header = manifest.join("csrc/torii_dpdk.h");
    let wrappers = out.join("static_fns");
    let mut builder = bindgen::Builder::default()
        .header(header.to_str().expect("the manifest path is UTF-8"))
        .clang_args(&cflags)
        .clang_args(EXTRA_DEFINES)
        .clang_arg(format!("-I{}", manifest.join("csrc").display()))
        .allowlist_recursively(true)
        // Thread-local in librte_eal: read through the shim's getters instead.
        .blocklist_item("per_lcore_.*")
        .wrap_static_fns(true)
        .wrap_static_fns_path(&wrappers)
        .derive_default(true)
        .derive_debug(false)
        .layout_tests(true)
        .generate_comments(false)
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .size_t_is_usize(true)
        .parse_callbacks(Box::new(bindgen::CargoCallbacks::new()));
    for f in FUNCTIONS {
        builder = builder.allowlist_function(f);
    }
    for c in CONSTANTS {
        builder = builder.allowlist_var(c);
    }
    builder = builder
        .allowlist_type("rte_eth_conf")
        .allowlist_type("rte_eth_dev_info")
        .allowlist_type("rte_eth_stats")
        .allowlist_type("rte_eth_link")
        .allowlist_type("rte_eth_rss_conf")
        .allowlist_type("rte_eth_rss_reta_entry64")
        .allowlist_type("rte_ether_addr")
        .allowlist_type("rte_mbuf")
        .allowlist_type("rte_thash_check_tuple_t")
        .allowlist_type("rte_proc_type_t");
    // bindgen panics when it cannot load libclang: turn that into the message below too.
    let bindings = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| builder.generate())) {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => fail(&format!("bindgen failed on {}: {e}", header.display())),
        Err(_) => fail("bindgen could not run: is libclang installed (libclang-dev)?"),
    };
    bindings.write_to_file(out.join("bindings.rs")).expect("writing bindings.rs to OUT_DIR");

    // 3. The static-inline wrappers and the shim, compiled with exactly DPDK's cflags.
    let mut build = cc::Build::new();
    build
        .file(wrappers.with_extension("c"))
        .file(manifest.join("csrc/torii_dpdk_shim.c"))
        .include(manifest.join("csrc"))
        .warnings(false)
        .opt_level(2);
    for flag in cflags.iter().map(String::as_str).chain(EXTRA_DEFINES.iter().copied()) {
        build.flag(flag);
    }
    build.compile("torii_dpdk_shim");
}

/// `pkg-config --cflags libdpdk`, split into arguments (it contains `-include rte_config.h`
/// and `-march=corei7`, which the pkg-config crate's `Library` does not carry).
fn raw_cflags() -> Vec<String> {
    let pkg_config = env::var("PKG_CONFIG").unwrap_or_else(|_| "pkg-config".to_owned());
    let output = Command::new(&pkg_config)
        .args(["--cflags", "libdpdk"])
        .output()
        .unwrap_or_else(|e| fail(&format!("running `{pkg_config} --cflags libdpdk`: {e}")));
    if !output.status.success() {
        fail(&format!("`{pkg_config} --cflags libdpdk` failed: {}", String::from_utf8_lossy(&output.stderr).trim()));
    }
    String::from_utf8_lossy(&output.stdout).split_whitespace().map(str::to_owned).collect()
}

fn fail(reason: &str) -> ! {
    panic!(
        "\n\ntorii-dpdk needs DPDK {DPDK_TESTED} with its development files, pkg-config and libclang.\n\
         {reason}\n\
         On Debian bookworm, as root: `scripts/setup`, or\n    \
         apt-get install -y --no-install-recommends dpdk dpdk-dev libdpdk-dev pkg-config clang libclang-dev\n\
         (Only this crate needs DPDK: `cargo build` of the default members, or\n    \
         `--workspace --exclude torii-dpdk`, builds the rest without it.)\n"
    );
}
