//! Golden tests of the compiler: every case compiles a manifests directory and compares
//! the JSON that `torii-control compile` would print with `tests/golden/<case>.json`.
//!
//! After an intended change, regenerate with `UPDATE_GOLDEN=1 cargo test -p torii-control
//! --test golden` and review the diff.

use std::path::{Path, PathBuf};

use torii_control::compile::{CompileOptions, Compiler, NodePortAddresses};
use torii_table::IpCidr;

fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Compiles `dir` and renders it as `torii-control compile` does, with `dir/` stripped
/// from error messages so that the golden files do not depend on the checkout's path.
fn render(dir: &Path, node_name: &str, cluster_ips: bool) -> String {
    render_with(dir, &CompileOptions { node_name: node_name.to_owned(), cluster_ips, ..Default::default() })
}

/// [`render`] with any options. Also checks that the incremental [`Compiler`] gives the
/// same result for the same snapshot.
fn render_with(dir: &Path, options: &CompileOptions) -> String {
    let compiled = torii_control::compile_dir(dir, options).expect("fixture directory is readable");
    let loaded = torii_control::source::files::load_dir(dir).unwrap();
    let mut compiler = Compiler::new(options.clone());
    assert_eq!(compiler.update(&loaded), &compiled, "{}: the incremental compiler differs", dir.display());
    assert_eq!(compiler.table_spec(), &compiled.to_table_spec());
    let json = serde_json::to_string_pretty(&compiled).unwrap() + "\n";
    json.replace(&format!("{}/", dir.display()), "")
}

fn check(case: &str, actual: &str) {
    let path = manifest_dir().join("tests/golden").join(format!("{case}.json"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1 to create it", path.display()));
    if expected != actual {
        let line = expected.lines().zip(actual.lines()).position(|(a, b)| a != b).unwrap_or(0) + 1;
        panic!(
            "{case}: output differs from {} (first at line {line}); run with UPDATE_GOLDEN=1 and review the \
             diff if the change is intended\n--- actual ---\n{actual}",
            path.display()
        );
    }
}

fn fixture(case: &str) -> PathBuf {
    manifest_dir().join("tests/fixtures/compile").join(case)
}

#[test]
fn demo_manifests() {
    let dir = manifest_dir().join("../configs/demo");
    check("demo", &render(&dir, "gateway-1", false));
    check("demo-cluster-ips", &render(&dir, "gateway-1", true));
}

#[test]
fn demo_manifests_are_clean() {
    let dir = manifest_dir().join("../configs/demo");
    let options = CompileOptions { node_name: "gateway-1".into(), ..Default::default() };
    let c = torii_control::compile_dir(&dir, &options).unwrap();
    assert!(c.errors.is_empty(), "{:#?}", c.errors);
    assert!(c.warnings.is_empty(), "{:#?}", c.warnings);
    assert_eq!(c.frontends.len(), 11);
}

#[test]
fn kube_api_fixtures() {
    check("kube-api-1.28", &render(&fixture("kube-api-1.28"), "gw-1", true));
}

#[test]
fn named_target_port() {
    check("named-target-port", &render(&fixture("named-target-port"), "gw", false));
}

#[test]
fn load_balancer_source_ranges() {
    check("source-ranges", &render(&fixture("source-ranges"), "gw", false));
}

#[test]
fn serving_terminating_fallback() {
    check("serving-terminating", &render(&fixture("serving-terminating"), "gw", false));
}

#[test]
fn headless_external_name_and_proxy_ip_mode_skipped() {
    check("skipped", &render(&fixture("skipped"), "gw", false));
}

#[test]
fn node_ports_from_node_addresses() {
    check("node-port", &render(&fixture("node-port"), "gw", false));
    check("node-port-no-node", &render(&fixture("node-port-no-node"), "gw", false));
}

#[test]
fn cluster_ips_flag() {
    check("node-port-cluster-ips", &render(&fixture("node-port"), "gw", true));
}

#[test]
fn duplicate_front_doors() {
    check("duplicates", &render(&fixture("duplicates"), "gw", false));
}

#[test]
fn traffic_policy_local() {
    check("traffic-policy-local", &render(&fixture("traffic-policy-local"), "gw", true));
}

#[test]
fn session_affinity() {
    check("session-affinity", &render(&fixture("session-affinity"), "gw", false));
}

#[test]
fn invalid_objects_are_skipped_and_the_rest_served() {
    check("invalid-objects", &render(&fixture("invalid-objects"), "gw", false));
}

#[test]
fn compile_is_deterministic_whatever_the_input_order() {
    use torii_control::model::Objects;
    use torii_control::source::files::load_dir;
    let mut loaded = load_dir(&fixture("kube-api-1.28")).unwrap();
    let options = CompileOptions { node_name: "gw-1".into(), cluster_ips: true, ..Default::default() };
    let (objects, _) = Objects::from_kube(&loaded.objects);
    let forward = torii_control::compile::compile(&objects, &options);
    loaded.objects.reverse();
    let (objects, _) = Objects::from_kube(&loaded.objects);
    let reversed = torii_control::compile::compile(&objects, &options);
    assert_eq!(forward, reversed);
    assert_eq!(forward.to_table_spec(), reversed.to_table_spec());
}

fn gw(options: CompileOptions) -> CompileOptions {
    CompileOptions { node_name: "gw".into(), ..options }
}

#[test]
fn kube_api_fixtures_for_proxy_name_torii() {
    let options = CompileOptions {
        node_name: "gw-1".into(),
        cluster_ips: true,
        proxy_name: Some("torii".into()),
        ..Default::default()
    };
    check("kube-api-1.28-proxy-name-torii", &render_with(&fixture("kube-api-1.28"), &options));
}

#[test]
fn topology_hints() {
    let dir = fixture("topology-hints");
    check("topology-hints", &render_with(&dir, &gw(CompileOptions { cluster_ips: true, ..Default::default() })));
}

#[test]
fn service_proxy_name_and_load_balancer_class() {
    let dir = fixture("service-selection");
    check("service-selection", &render(&dir, "gw", false));
    check(
        "service-selection-proxy-name",
        &render_with(&dir, &gw(CompileOptions { proxy_name: Some("torii".into()), ..Default::default() })),
    );
    check(
        "service-selection-load-balancer-class",
        &render_with(
            &dir,
            &gw(CompileOptions { load_balancer_class: Some("example.com/torii".into()), ..Default::default() }),
        ),
    );
}

#[test]
fn dual_stack_and_node_port_addresses() {
    let dir = fixture("node-port-addresses");
    check("dual-stack", &render(&dir, "gw", true));
    check(
        "node-port-addresses-primary",
        &render_with(
            &dir,
            &gw(CompileOptions { node_port_addresses: NodePortAddresses::Primary, ..Default::default() }),
        ),
    );
    let cidrs = ["192.0.2.0/24", "2001:db8::/32"].iter().map(|c| IpCidr::parse(c).unwrap()).collect();
    check(
        "node-port-addresses-cidrs",
        &render_with(
            &dir,
            &gw(CompileOptions { node_port_addresses: NodePortAddresses::Cidrs(cidrs), ..Default::default() }),
        ),
    );
}

#[test]
fn forbidden_endpoint_addresses() {
    check("forbidden-endpoint-addresses", &render(&fixture("forbidden-endpoint-addresses"), "gw", false));
}

/// Issue 17: objects the API server accepts lose only their bad part (an EndpointSlice
/// port, an endpoint, a Node address, a front-door address); legacy leading-zero IPv4
/// values are read as decimal, as kube-proxy reads them; an unreadable source range
/// closes its load-balancer IP to everyone.
#[test]
fn smallest_unit_skipped_and_legacy_values() {
    check("smallest-unit", &render(&fixture("smallest-unit"), "gw", false));
}

/// VIPs and endpoints at the gateway's SNAT addresses are skipped with errors; an
/// externalIP equal to the gateway's node address is served.
#[test]
fn snat_collisions() {
    let snat_addresses = ["10.70.0.1", "fd00:70::1"].iter().map(|a| a.parse().unwrap()).collect();
    check(
        "snat-collisions",
        &render_with(
            &fixture("snat-collisions"),
            &gw(CompileOptions { snat_addresses, cluster_ips: true, ..Default::default() }),
        ),
    );
}
