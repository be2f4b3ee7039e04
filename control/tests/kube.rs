//! The Kubernetes API source against the test double of the API server
//! (`torii-kube-double`): real HTTP on 127.0.0.1, a kubeconfig pointing at it, kube-rs
//! talking to it as to a cluster. Checked through `torii-control compile --kubeconfig`
//! (the JSON contract) and through the table `torii-control run --kubeconfig` publishes
//! (read back with `load_table` and its lookups): the initial sync, adds, modifications
//! and deletions of Services and EndpointSlices, a dropped watch connection, a 410 Gone
//! relist, bookmarks, malformed objects, and the publication timing log line.

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use tempfile::TempDir;
use torii_kube_double::{stamp_trigger_time, FakeApiServer, Objects, Options, Resource};
use torii_table::shm::{self, StateRegion};

/// Longest a change may take to reach the published table.
const CONVERGE: Duration = Duration::from_secs(15);

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_torii-control"));
    c.env("RUST_LOG", "info,torii_control=debug").env("NO_COLOR", "1");
    c
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A double serving `objects`, and a directory with its kubeconfig.
struct Cluster {
    api: FakeApiServer,
    dir: TempDir,
}

impl Cluster {
    fn start(objects: &Objects) -> Self {
        let api = FakeApiServer::start(objects).expect("double starts");
        let dir = tempfile::tempdir().unwrap();
        api.write_kubeconfig(&dir.path().join("kubeconfig")).unwrap();
        Self { api, dir }
    }

    fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    fn compile(&self, args: &[&str]) -> (Output, Option<Value>) {
        let out = bin().arg("compile").arg("--kubeconfig").arg(self.kubeconfig()).args(args).output().unwrap();
        let json = serde_json::from_slice(&out.stdout).ok();
        (out, json)
    }

    fn services_lists(&self) -> usize {
        self.api.requests().iter().filter(|r| r.starts_with("GET /api/v1/services?") && !r.contains("watch=")).count()
    }
}

fn demo() -> Objects {
    let mut o = Objects::new();
    o.add_manifests_dir(&repo().join("configs/demo")).unwrap();
    o
}

fn compile_manifests(dir: &Path, args: &[&str]) -> Output {
    bin().arg("compile").arg("--manifests").arg(dir).args(args).output().unwrap()
}

#[test]
fn compile_kubeconfig_prints_what_manifests_print_for_the_recorded_cluster() {
    let cluster = Cluster::start(&Objects::recorded());
    let args = ["--node-name", "gw-1", "--cluster-ips"];
    let (out, json) = cluster.compile(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json = json.expect("stdout is JSON");
    assert!(json["frontends"].as_array().unwrap().len() > 20, "{json:#}");

    let files = compile_manifests(&repo().join("control/tests/fixtures/compile/kube-api-1.28"), &args);
    assert!(files.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&files.stdout),
        "compile --kubeconfig and compile --manifests differ for the same objects"
    );

    // What kube-rs asked: one list per resource, kube-proxy's slice selector, the own Node.
    let requests = cluster.api.requests();
    assert!(requests.iter().any(|r| r.starts_with("GET /api/v1/services?")), "{requests:#?}");
    assert!(
        requests.iter().any(|r| r.starts_with("GET /apis/discovery.k8s.io/v1/endpointslices?")
            && r.contains("labelSelector=kubernetes.io%2Fservice-name%2C%21service.kubernetes.io%2Fheadless")),
        "{requests:#?}"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.starts_with("GET /api/v1/nodes?") && r.contains("fieldSelector=metadata.name%3Dgw-1")),
        "{requests:#?}"
    );
    assert!(requests.iter().all(|r| !r.contains("watch")), "compile lists once: {requests:#?}");
}

#[test]
fn compile_kubeconfig_prints_what_manifests_print_for_the_demo() {
    let cluster = Cluster::start(&demo());
    let (out, json) = cluster.compile(&["--node-name", "gateway-1"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let files = compile_manifests(&repo().join("configs/demo"), &["--node-name", "gateway-1"]);
    assert_eq!(out.stdout, files.stdout);
    let json = json.unwrap();
    let web =
        json["frontends"].as_array().unwrap().iter().find(|f| f["ip"] == "203.0.113.10" && f["port"] == 80).unwrap();
    assert_eq!(web["backends"].as_array().unwrap().len(), 3);
}

fn bad_service() -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "bad-type", "namespace": "demo"},
           "spec": {"externalIPs": ["203.0.113.99"], "ports": [{"name": "http", "port": "eighty"}]}})
}

#[test]
fn compile_kubeconfig_skips_malformed_objects_and_serves_the_rest() {
    let mut objects = demo();
    objects.push(bad_service());
    objects.push(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "port-zero", "namespace": "demo"},
                        "spec": {"externalIPs": ["203.0.113.98"], "ports": [{"port": 0}]}}));
    let cluster = Cluster::start(&objects);
    let (out, json) = cluster.compile(&["--node-name", "gateway-1"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("error: Service demo/bad-type: spec.ports[0].port: invalid type: string \"eighty\", expected i32; object skipped"),
        "{stderr}"
    );
    assert!(
        stderr
            .contains("error: Service demo/port-zero: spec.ports[0].port: 0 is out of range 1..=65535; object skipped"),
        "{stderr}"
    );
    let json = json.unwrap();
    assert_eq!(json["errors"].as_array().unwrap().len(), 2);
    let clean = compile_manifests(&repo().join("configs/demo"), &["--node-name", "gateway-1"]);
    let clean: Value = serde_json::from_slice(&clean.stdout).unwrap();
    assert_eq!(json["frontends"], clean["frontends"], "everything else is served");
}

/// Issue 17: the API's accepted-but-odd objects lose only their bad parts, exactly as the
/// same objects do from manifests (golden `smallest-unit.json`).
#[test]
fn compile_kubeconfig_serves_accepted_but_odd_objects_as_manifests_do() {
    let cluster = Cluster::start(&Objects::accepted_but_odd());
    let (out, json) = cluster.compile(&["--node-name", "gw"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json = json.unwrap();
    let files = compile_manifests(&repo().join("control/tests/fixtures/compile/smallest-unit"), &["--node-name", "gw"]);
    let files: Value = serde_json::from_slice(&files.stdout).unwrap();
    assert_eq!(json["frontends"], files["frontends"]);
    // The same errors, without the manifests' locations (the API lists by resource, so
    // the order differs).
    let strip = |v: &Value| -> Vec<String> {
        let mut errors: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                let e = e.as_str().unwrap();
                e.split_once(": document ").map_or(e, |(_, rest)| rest.split_once(": ").unwrap().1).to_owned()
            })
            .collect();
        errors.sort();
        errors
    };
    assert_eq!(strip(&json["errors"]), strip(&files["errors"]));
    assert!(stderr.contains("EndpointSlice odd/ports-1: ports[1].port: 0 is out of range 1..=65535; port skipped"));
    assert!(stderr.contains("Node gw: status.addresses[0].address: \"gw.internal\" is not an IPv4 or IPv6 address"));
    let lb = json["frontends"].as_array().unwrap().iter().find(|f| f["ip"] == "198.51.100.10").unwrap();
    assert_eq!(lb["source_ranges"], json!(["10.0.0.0/8", "198.51.100.0/24"]));
}

#[test]
fn compile_kubeconfig_fails_clearly_without_rbac_or_server() {
    let cluster = Cluster::start(&demo());
    cluster.api.set_failure(Resource::Nodes, Some(403));
    let (out, json) = cluster.compile(&[]);
    assert!(!out.status.success());
    assert!(json.is_none());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot list nodes from the Kubernetes API at http://127.0.0.1:"), "{stderr}");
    assert!(stderr.contains("forbidden"), "{stderr}");
    assert!(stderr.contains("configs/kubernetes/rbac.yaml"), "{stderr}");

    let kubeconfig = cluster.kubeconfig();
    drop(cluster.api);
    let out = bin().args(["compile", "--kubeconfig"]).arg(&kubeconfig).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot list services from the Kubernetes API"), "{stderr}");

    let out = bin().args(["compile", "--kubeconfig", "/nonexistent/kubeconfig"]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot use the kubeconfig /nonexistent/kubeconfig"), "{stderr}");
}

// ---------------------------------------------------------------------------------------
// The daemon

/// `torii-control run --kubeconfig` on a private shared-memory directory, its stderr
/// collected. Killed on drop.
struct Daemon {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    shm: PathBuf,
    _tmp: TempDir,
}

impl Daemon {
    fn start(cluster: &Cluster, node_name: &str) -> Self {
        Self::start_with(cluster, node_name, false)
    }

    fn start_with(cluster: &Cluster, node_name: &str, cluster_ips: bool) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let shm = tmp.path().join("shm");
        let mut config = torii_table::config::EMBEDDED_DEFAULT
            .replace("shm_dir = \"/dev/shm/torii\"", &format!("shm_dir = {:?}", shm.display().to_string()));
        assert_ne!(config, torii_table::config::EMBEDDED_DEFAULT);
        if cluster_ips {
            config = config.replace("cluster_ips = false", "cluster_ips = true");
            assert!(config.contains("cluster_ips = true"));
        }
        let config_path = tmp.path().join("gateway.toml");
        std::fs::write(&config_path, config).unwrap();
        let mut child = bin()
            .args(["run", "--config"])
            .arg(&config_path)
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig())
            .args(["--node-name", node_name, "--min-interval-ms", "20"])
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Self { child, lines, shm, _tmp: tmp }
    }

    fn log(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Waits for a log line containing every one of `needles`, after line `from`.
    fn wait_log(&self, from: usize, needles: &[&str]) -> String {
        let deadline = Instant::now() + CONVERGE;
        loop {
            if let Some(l) =
                self.lines.lock().unwrap().iter().skip(from).find(|l| needles.iter().all(|n| l.contains(n)))
            {
                return l.clone();
            }
            assert!(Instant::now() < deadline, "no log line with {needles:?} within {CONVERGE:?}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn line_count(&self) -> usize {
        self.lines.lock().unwrap().len()
    }

    /// Waits until the published table satisfies `check` (which says what is still
    /// wrong); returns its generation.
    fn wait_table(&self, what: &str, check: impl Fn(&Table) -> Result<(), String>) -> u64 {
        let deadline = Instant::now() + CONVERGE;
        let mut last = String::from("nothing published");
        loop {
            if let Ok(region) = StateRegion::open(&self.shm) {
                let g = region.published_generation();
                if g > 0 {
                    match shm::load_table(&self.shm, g) {
                        Ok(t) => match check(&Table(t)) {
                            Ok(()) => return g,
                            Err(e) => last = format!("generation {g}: {e}"),
                        },
                        Err(e) => last = e.to_string(),
                    }
                }
            }
            assert!(Instant::now() < deadline, "{what}: not reached within {CONVERGE:?}: {last}\nlog:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A published table and the lookups the gateway does.
struct Table(torii_table::Table);

impl Table {
    /// The backends of the front door (ip, TCP=6/UDP=17, port), sorted; `None` without one.
    fn backends(&self, ip: &str, protocol: u8, port: u16) -> Option<Vec<(IpAddr, u16)>> {
        let t = &self.0;
        let f = t.frontend(ip.parse().unwrap(), protocol, port)?;
        let s = t.service(f.service)?;
        let mut b: Vec<(IpAddr, u16)> =
            s.backends.iter().map(|b| (torii_table::layout::addr_from16(b.addr), b.port.get())).collect();
        b.sort();
        Some(b)
    }

    fn expect(&self, ip: &str, port: u16, want: &[&str]) -> Result<(), String> {
        let want: Vec<(IpAddr, u16)> = want
            .iter()
            .map(|b| {
                let (ip, port) = b.rsplit_once(':').unwrap();
                (ip.parse().unwrap(), port.parse().unwrap())
            })
            .collect();
        match self.backends(ip, 6, port) {
            Some(got) if got == want => Ok(()),
            got => Err(format!("{ip}:{port}/TCP has {got:?}, want {want:?}")),
        }
    }

    fn absent(&self, ip: &str, port: u16) -> Result<(), String> {
        match self.backends(ip, 6, port) {
            None => Ok(()),
            Some(b) => Err(format!("{ip}:{port}/TCP still served, by {b:?}")),
        }
    }
}

const WEB3: [&str; 3] = ["10.70.0.11:8080", "10.70.0.12:8080", "10.70.0.13:8080"];

fn slice(name: &str, service: &str, ips: &[&str], trigger: Option<SystemTime>) -> Value {
    let mut s = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": "demo", "labels": {"kubernetes.io/service-name": service}},
        "addressType": "IPv4",
        "ports": [{"name": "http", "protocol": "TCP", "port": 8080}],
        "endpoints": ips.iter().map(|ip| json!({"addresses": [ip], "conditions": {"ready": true}})).collect::<Vec<_>>(),
    });
    if let Some(t) = trigger {
        stamp_trigger_time(&mut s, t);
    }
    s
}

fn service(name: &str, external_ip: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": "demo"},
           "spec": {"externalIPs": [external_ip], "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}})
}

#[test]
fn run_follows_adds_modifications_and_deletions() {
    let cluster = Cluster::start(&demo());
    let d = Daemon::start(&cluster, "gateway-1");
    d.wait_table("initial sync", |t| {
        t.expect("203.0.113.10", 80, &WEB3)?;
        t.expect("198.51.100.1", 30080, &WEB3)?;
        t.expect("203.0.113.11", 80, &[])
    });
    // Each watch starts once its list is in, concurrently with the first publication.
    assert!(cluster.api.wait_for_watches(None, 3, CONVERGE));
    let requests = cluster.api.requests();
    for (path, extra) in [
        ("GET /api/v1/services?", ""),
        ("GET /apis/discovery.k8s.io/v1/endpointslices?", "labelSelector=kubernetes.io%2Fservice-name"),
        ("GET /api/v1/nodes?", "fieldSelector=metadata.name%3Dgateway-1"),
    ] {
        assert!(
            requests.iter().any(|r| r.starts_with(path) && r.contains("resourceVersion=0") && r.contains(extra)),
            "list from the watch cache: {path} {requests:#?}"
        );
        assert!(
            requests.iter().any(|r| r.starts_with(path)
                && r.contains("watch=true")
                && r.contains("allowWatchBookmarks=true")
                && r.contains(extra)),
            "watch with bookmarks: {path} {requests:#?}"
        );
    }

    // A new Service, then its endpoints.
    cluster.api.apply(service("shop", "203.0.113.20")).unwrap();
    d.wait_table("Service added", |t| t.expect("203.0.113.20", 80, &[]));
    cluster.api.apply(slice("shop-1", "shop", &["10.70.0.31", "10.70.0.32"], None)).unwrap();
    d.wait_table("EndpointSlice added", |t| t.expect("203.0.113.20", 80, &["10.70.0.31:8080", "10.70.0.32:8080"]));

    // An endpoint removed from demo/web's slice (MODIFIED).
    let mut web = cluster.api.get(Resource::EndpointSlices, "demo", "web-abc12").unwrap();
    web["endpoints"].as_array_mut().unwrap().retain(|e| e["addresses"][0] != "10.70.0.12");
    cluster.api.apply(web).unwrap();
    d.wait_table("endpoint removed", |t| t.expect("203.0.113.10", 80, &["10.70.0.11:8080", "10.70.0.13:8080"]));

    // A Service modified: another externalIP.
    cluster.api.apply(service("shop", "203.0.113.21")).unwrap();
    d.wait_table("Service modified", |t| {
        t.absent("203.0.113.20", 80)?;
        t.expect("203.0.113.21", 80, &["10.70.0.31:8080", "10.70.0.32:8080"])
    });

    // Deletions.
    cluster.api.delete(Resource::EndpointSlices, "demo", "shop-1").unwrap();
    d.wait_table("EndpointSlice deleted", |t| t.expect("203.0.113.21", 80, &[]));
    cluster.api.delete(Resource::Services, "demo", "shop").unwrap();
    d.wait_table("Service deleted", |t| {
        t.absent("203.0.113.21", 80)?;
        t.expect("203.0.113.10", 80, &["10.70.0.11:8080", "10.70.0.13:8080"])
    });
    assert_eq!(cluster.services_lists(), 1, "no relist was needed");
    assert!(!d.log().contains("watch failed"), "{}", d.log());
}

#[test]
fn run_replays_the_recorded_churn_sequence() {
    // The recorded cluster, then the recorded watch events (create demo/churn, change its
    // ports, endpoints becoming ready, not ready and terminating, delete): every step
    // lands in the daemon's table and in `compile --kubeconfig`.
    let cluster = Cluster::start(&Objects::recorded());
    let d = Daemon::start_with(&cluster, "gw-1", true);
    let web_lb = ["10.244.1.11:8080", "10.244.2.12:8080"];
    d.wait_table("initial sync", |t| t.expect("198.51.100.10", 80, &web_lb));
    let mut services = torii_kube_double::recorded_events(Resource::Services).into_iter();
    let mut slices = torii_kube_double::recorded_events(Resource::EndpointSlices).into_iter();
    let step = |events: &mut dyn Iterator<Item = (String, Value)>| {
        let (kind, object) = events.next().unwrap();
        if kind == "DELETED" {
            let meta = &object["metadata"];
            let (ns, name) = (meta["namespace"].as_str().unwrap(), meta["name"].as_str().unwrap());
            cluster.api.delete(Resource::of_object(&object).unwrap(), ns, name).unwrap();
        } else {
            cluster.api.apply(object).unwrap();
        }
    };
    let churn_ip = "10.105.98.251";
    let churn = |json: &Value| -> Vec<String> {
        json["frontends"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["service"] == "demo/churn")
            .map(|f| format!("{}:{} {} {}", f["ip"], f["port"], f["endpoints"], f["backends"]))
            .collect()
    };
    let compile = || cluster.compile(&["--node-name", "gw-1", "--cluster-ips"]).1.unwrap();

    step(&mut services); // ADDED churn (port 80)
    step(&mut slices); // ADDED its slice: both endpoints not ready
    d.wait_table("churn added, no endpoint ready", |t| t.expect(churn_ip, 80, &[]));
    assert_eq!(churn(&compile()), [r#""10.105.98.251":80 "none" []"#]);

    step(&mut services); // MODIFIED: ports http 8080, metrics 9090
    step(&mut slices); // MODIFIED: the slice's ports follow
    d.wait_table("churn ports changed", |t| {
        t.absent(churn_ip, 80)?;
        t.expect(churn_ip, 8080, &[])?;
        t.expect(churn_ip, 9090, &[])
    });
    step(&mut slices); // churn-1 ready
    d.wait_table("churn-1 ready", |t| t.expect(churn_ip, 8080, &["10.244.1.31:8080"]));
    assert_eq!(
        churn(&compile()),
        [
            r#""10.105.98.251":8080 "ready" [{"ip":"10.244.1.31","port":8080}]"#,
            r#""10.105.98.251":9090 "ready" [{"ip":"10.244.1.31","port":9090}]"#
        ]
    );
    step(&mut slices); // churn-2 ready too
    d.wait_table("both ready", |t| t.expect(churn_ip, 8080, &["10.244.1.31:8080", "10.244.2.32:8080"]));
    step(&mut slices); // churn-1 not ready
    d.wait_table("churn-1 not ready", |t| t.expect(churn_ip, 8080, &["10.244.2.32:8080"]));
    step(&mut slices); // churn-2 terminating (serving): the only candidate left
    d.wait_table("churn-2 serving-terminating", |t| t.expect(churn_ip, 8080, &["10.244.2.32:8080"]));
    step(&mut slices); // churn-2 gone
    d.wait_table("no endpoint", |t| t.expect(churn_ip, 8080, &[]));
    step(&mut services); // DELETED churn
    step(&mut slices); // DELETED its slice
    d.wait_table("churn deleted", |t| {
        t.absent(churn_ip, 8080)?;
        t.expect("198.51.100.10", 80, &web_lb)
    });
    assert!(churn(&compile()).is_empty());
}

#[test]
fn run_resumes_a_dropped_watch_from_its_resource_version() {
    let cluster = Cluster::start(&demo());
    let d = Daemon::start(&cluster, "gateway-1");
    d.wait_table("initial sync", |t| t.expect("203.0.113.10", 80, &WEB3));
    assert!(cluster.api.wait_for_watches(None, 3, CONVERGE));
    let rv = cluster.api.apply(service("shop", "203.0.113.20")).unwrap();
    d.wait_table("Service added", |t| t.expect("203.0.113.20", 80, &[]));

    // The connections are cut mid-stream (no terminating chunk).
    assert_eq!(cluster.api.drop_watches(None), 3);
    // A change while no watch is connected: replayed from the watch cache on reconnect.
    cluster.api.apply(slice("shop-1", "shop", &["10.70.0.31"], None)).unwrap();
    d.wait_table("change made during the disconnection", |t| t.expect("203.0.113.20", 80, &["10.70.0.31:8080"]));
    // kube-client ends a stream cut mid-chunk as if the server had closed it ("eof in
    // poll"), and the watcher re-watches at once (each resource's in its own task: the
    // table above shows only the slices' re-watch).
    assert!(cluster.api.wait_for_watches(None, 3, CONVERGE));
    let requests = cluster.api.requests();
    let watches =
        requests.iter().filter(|r| r.starts_with("GET /api/v1/services?") && r.contains("watch=true")).count();
    assert_eq!(watches, 2, "{requests:#?}");
    assert!(
        requests.iter().any(|r| r.starts_with("GET /api/v1/services?")
            && r.contains("watch=true")
            && r.contains(&format!("resourceVersion={rv}"))),
        "services re-watched from the last RV it saw ({rv}): {requests:#?}"
    );
    assert_eq!(cluster.services_lists(), 1, "resumed, not relisted: {requests:#?}");
}

#[test]
fn run_relists_after_410_gone() {
    let cluster = Cluster::start(&demo());
    let d = Daemon::start(&cluster, "gateway-1");
    d.wait_table("initial sync", |t| t.expect("203.0.113.10", 80, &WEB3));
    assert!(cluster.api.wait_for_watches(None, 3, CONVERGE));

    // Changes the open watches never hear of (lost events), then 410 Gone: only a
    // relist shows them, deletions included.
    let mut web = cluster.api.get(Resource::EndpointSlices, "demo", "web-abc12").unwrap();
    web["endpoints"].as_array_mut().unwrap().retain(|e| e["addresses"][0] != "10.70.0.13");
    cluster.api.apply_unannounced(web).unwrap();
    cluster.api.delete_unannounced(Resource::Services, "demo", "empty").unwrap();
    cluster.api.apply_unannounced(service("shop", "203.0.113.20")).unwrap();
    assert_eq!(cluster.api.expire(None), 3);
    d.wait_table("relisted state", |t| {
        t.expect("203.0.113.10", 80, &["10.70.0.11:8080", "10.70.0.12:8080"])?;
        t.absent("203.0.113.11", 80)?;
        t.expect("203.0.113.20", 80, &[])
    });
    d.wait_log(0, &["watch expired (410 Gone: too old resource version"]);
    d.wait_log(0, &["relisted"]);
    assert_eq!(cluster.services_lists(), 2, "{:#?}", cluster.api.requests());

    // And it keeps watching after the relist.
    cluster.api.apply(slice("shop-1", "shop", &["10.70.0.31"], None)).unwrap();
    d.wait_table("watching again", |t| t.expect("203.0.113.20", 80, &["10.70.0.31:8080"]));
}

#[test]
fn run_resumes_from_a_bookmark() {
    // Changes the slice watch's selector excludes (a headless Service's slice) move the
    // resource's RV; the bookmark carries it, and the watch resumes from there.
    let cluster = Cluster::start(&demo());
    let d = Daemon::start(&cluster, "gateway-1");
    d.wait_table("initial sync", |t| t.expect("203.0.113.10", 80, &WEB3));
    assert!(cluster.api.wait_for_watches(Some(Resource::EndpointSlices), 1, CONVERGE));
    let mut headless = slice("db-1", "db", &["10.70.0.41"], None);
    headless["metadata"]["labels"]["service.kubernetes.io/headless"] = json!("");
    let rv = cluster.api.apply(headless).unwrap();
    // Whether the daemon has read the bookmark before its watch is cut is not visible from
    // here: until it has, a cut watch resumes from an older RV, gets the bookmark again, and
    // the test cuts it again.
    let resumed = |requests: &[String]| {
        requests.iter().any(|r| {
            r.starts_with("GET /apis/discovery.k8s.io/v1/endpointslices?")
                && r.contains("watch=true")
                && r.contains(&format!("resourceVersion={rv}"))
        })
    };
    let deadline = std::time::Instant::now() + CONVERGE;
    loop {
        assert_eq!(cluster.api.bookmark(Some(Resource::EndpointSlices)), 1);
        std::thread::sleep(Duration::from_millis(200));
        cluster.api.drop_watches(Some(Resource::EndpointSlices));
        assert!(cluster.api.wait_for_watches(Some(Resource::EndpointSlices), 1, CONVERGE));
        let requests = cluster.api.requests();
        if resumed(&requests) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "re-watch from the bookmark's RV {rv}: {requests:#?}");
    }
    // The headless slice never reached the source.
    assert!(!d.log().contains("db-1"), "{}", d.log());
}

#[test]
fn run_skips_malformed_objects_and_serves_everything_else() {
    let cluster = Cluster::start(&demo());
    let d = Daemon::start(&cluster, "gateway-1");
    d.wait_table("initial sync", |t| t.expect("203.0.113.10", 80, &WEB3));
    assert!(cluster.api.wait_for_watches(None, 3, CONVERGE));

    // A Service that does not deserialize, next to a good change.
    cluster.api.apply(bad_service()).unwrap();
    cluster.api.apply(service("shop", "203.0.113.20")).unwrap();
    d.wait_table("good change served", |t| {
        t.expect("203.0.113.20", 80, &[])?;
        t.expect("203.0.113.10", 80, &WEB3)
    });
    d.wait_log(
        0,
        &[
            "ERROR",
            "Service demo/bad-type: spec.ports[0].port: invalid type: string \"eighty\", expected i32; object skipped",
        ],
    );
    // A line that is not an event at all: reported, the watch goes on.
    assert_eq!(cluster.api.push_raw(Some(Resource::Services), "{\"type\":\"ADDED\",\"object\":42}"), 1);
    assert_eq!(cluster.api.push_raw(Some(Resource::Services), "not json"), 1);
    // The broken Service fixed: served.
    let mut fixed = bad_service();
    fixed["spec"]["ports"][0]["port"] = json!(80);
    cluster.api.apply(fixed).unwrap();
    d.wait_table("fixed object served", |t| t.expect("203.0.113.99", 80, &[]));
    d.wait_log(0, &["WARN", "watch failed"]);
    assert_eq!(cluster.services_lists(), 1, "a bad line is skipped without a relist");
}

#[test]
fn run_logs_compile_publish_and_network_programming_latency() {
    let cluster = Cluster::start(&demo());
    let d = Daemon::start(&cluster, "gateway-1");
    d.wait_table("initial sync", |t| t.expect("203.0.113.10", 80, &WEB3));
    d.wait_log(0, &["no gateway is registered"]);

    // A gateway with two workers that adopt every published generation at once.
    let region = StateRegion::open(&d.shm).unwrap();
    region.register_gateway(std::process::id(), 2);
    let stop = Arc::new(AtomicBool::new(false));
    let acker = {
        let stop = stop.clone();
        let shm = d.shm.clone();
        std::thread::spawn(move || {
            let region = StateRegion::open(&shm).unwrap();
            while !stop.load(Ordering::Relaxed) {
                let g = region.published_generation();
                region.ack(0, g);
                region.ack(1, g);
                std::thread::sleep(Duration::from_micros(200));
            }
        })
    };

    // The EndpointSlice controller stamps the change's time on the slice.
    let from = d.line_count();
    let changed_at = SystemTime::now();
    let mut web = cluster.api.get(Resource::EndpointSlices, "demo", "web-abc12").unwrap();
    web["endpoints"].as_array_mut().unwrap().retain(|e| e["addresses"][0] != "10.70.0.12");
    stamp_trigger_time(&mut web, changed_at);
    cluster.api.apply(web).unwrap();
    let line = d.wait_log(from, &["table adopted by every gateway worker", "network_programming_latency_ms="]);
    let field = |name: &str| -> f64 {
        let rest =
            &line[line.find(&format!("{name}=")).unwrap_or_else(|| panic!("{name} in {line}")) + name.len() + 1..];
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    eprintln!("{line}");
    let latency = field("network_programming_latency_ms");
    let ceiling = changed_at.elapsed().unwrap().as_secs_f64() * 1e3;
    assert!(latency > 0.0 && latency <= ceiling, "latency {latency} ms, at most {ceiling} ms: {line}");
    assert!(field("compile_ms") >= 0.0 && field("publish_ms") > 0.0 && field("ack_ms") >= 0.0, "{line}");
    assert_eq!(field("workers"), 2.0, "{line}");
    assert_eq!(field("changes"), 1.0, "{line}");

    // A change without a trigger time (a Service) is timed, without a latency.
    let from = d.line_count();
    cluster.api.apply(service("shop", "203.0.113.20")).unwrap();
    let line = d.wait_log(from, &["table adopted by every gateway worker"]);
    assert!(line.contains("compile_ms=") && !line.contains("network_programming_latency_ms"), "{line}");

    stop.store(true, Ordering::Relaxed);
    acker.join().unwrap();
}

/// A Service with a selector and its EndpointSlice, written 20 ms apart as the
/// EndpointSlice controller writes them, are published once: one generation with the front
/// door and its endpoints, never the front door without them first. A Service whose slice
/// never comes is published after the wait (`new_service_wait`, 100 ms), rejecting. A
/// slice that comes before its Service is published with it, once.
#[test]
fn run_publishes_a_new_service_and_its_slice_once() {
    let cluster = Cluster::start(&demo());
    let d = Daemon::start(&cluster, "gateway-1");
    d.wait_table("initial sync", |t| t.expect("203.0.113.10", 80, &WEB3));
    assert!(cluster.api.wait_for_watches(None, 3, CONVERGE));
    let region = StateRegion::open(&d.shm).unwrap();
    let g0 = region.published_generation();
    let published =
        |from: usize| d.lines.lock().unwrap().iter().skip(from).filter(|l| l.contains("published table")).count();

    let with_selector = |name: &str, ip: &str| {
        let mut s = service(name, ip);
        s["spec"]["selector"] = json!({"app": name});
        s
    };
    let from = d.line_count();
    cluster.api.apply(with_selector("shop", "203.0.113.20")).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    cluster.api.apply(slice("shop-x7k2p", "shop", &["10.70.0.31", "10.70.0.32"], None)).unwrap();
    let g =
        d.wait_table("Service and slice", |t| t.expect("203.0.113.20", 80, &["10.70.0.31:8080", "10.70.0.32:8080"]));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        (g, published(from), region.published_generation()),
        (g0 + 1, 1, g0 + 1),
        "one publication:\n{}",
        d.log()
    );

    let from = d.line_count();
    let start = Instant::now();
    cluster.api.apply(with_selector("lone", "203.0.113.21")).unwrap();
    d.wait_table("Service without a slice", |t| t.expect("203.0.113.21", 80, &[]));
    let waited = start.elapsed();
    assert!(waited >= Duration::from_millis(100), "published after {waited:?}, before the wait ended");
    // The table is in shared memory before the daemon logs its publication: wait for the
    // line, then make sure no second publication follows.
    d.wait_log(from, &["published table"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(published(from), 1, "{}", d.log());

    // The slice first (the two watches are separate streams): it changes nothing to
    // publish alone, the Service then goes at once, with its endpoints, once.
    let from = d.line_count();
    cluster.api.apply(slice("late-x7k2p", "late", &["10.70.0.41"], None)).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    cluster.api.apply(with_selector("late", "203.0.113.22")).unwrap();
    d.wait_table("slice, then its Service", |t| t.expect("203.0.113.22", 80, &["10.70.0.41:8080"]));
    d.wait_log(from, &["published table"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(published(from), 1, "{}", d.log());
}

#[test]
fn run_waits_for_every_initial_list_before_publishing() {
    let cluster = Cluster::start(&demo());
    cluster.api.set_failure(Resource::EndpointSlices, Some(403));
    let d = Daemon::start(&cluster, "gateway-1");
    d.wait_log(0, &["WARN", "watch failed", "forbidden"]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(!d.log().contains("published table"), "published without endpoints:\n{}", d.log());
    cluster.api.set_failure(Resource::EndpointSlices, None);
    d.wait_table("published once the slices are listed", |t| t.expect("203.0.113.10", 80, &WEB3));
}

#[test]
fn kubernetes_manifests_are_consistent() {
    let dir = repo().join("configs/kubernetes");
    let rbac = std::fs::read_to_string(dir.join("rbac.yaml")).unwrap();
    let deploy = std::fs::read_to_string(dir.join("torii-control.yaml")).unwrap();
    let docs = |text: &str| -> Vec<Value> {
        use serde::Deserialize as _;
        serde_yaml_ng::Deserializer::from_str(text).map(|d| Value::deserialize(d).unwrap()).collect()
    };
    let rbac = docs(&rbac);
    let role = rbac.iter().find(|d| d["kind"] == "ClusterRole").expect("ClusterRole");
    let mut granted: Vec<String> = Vec::new();
    for rule in role["rules"].as_array().unwrap() {
        assert_eq!(rule["verbs"], json!(["get", "list", "watch"]), "read-only: {rule}");
        for r in rule["resources"].as_array().unwrap() {
            granted.push(format!("{}/{}", rule["apiGroups"][0].as_str().unwrap(), r.as_str().unwrap()));
        }
    }
    granted.sort();
    assert_eq!(granted, ["/nodes", "/services", "discovery.k8s.io/endpointslices"]);
    let sa = rbac.iter().find(|d| d["kind"] == "ServiceAccount").unwrap();
    let binding = rbac.iter().find(|d| d["kind"] == "ClusterRoleBinding").unwrap();
    assert_eq!(binding["subjects"][0]["name"], sa["metadata"]["name"]);
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);

    let deploy = docs(&deploy);
    let ds = deploy.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let pod = &ds["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], sa["metadata"]["name"]);
    assert_eq!(pod["hostNetwork"], true);
    let args: Vec<&str> =
        pod["containers"][0]["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(args.contains(&"--in-cluster") && args.contains(&"--node-name=$(NODE_NAME)"), "{args:?}");
    // The configuration it mounts is one torii reads.
    let cm = deploy.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("gateway.toml");
    std::fs::write(&path, cm["data"]["gateway.toml"].as_str().unwrap()).unwrap();
    torii_control::config::Config::load(Some(&path)).unwrap();
}

/// Issue 17: a list that keeps failing (403: no RBAC rule) is retried with client-go's
/// backoff — 0.8 s doubling, with jitter — not every second because each relist attempt
/// starts with an event; once the rule is there, the next attempt serves everything.
#[test]
fn run_retries_failed_lists_with_doubling_backoff() {
    let cluster = Cluster::start(&demo());
    cluster.api.set_failure(Resource::Services, Some(403));
    let d = Daemon::start(&cluster, "gateway-1");
    std::thread::sleep(Duration::from_secs(5));
    // Attempts at 0, 0.8–1.6 s, +1.6–3.2 s, +3.2–6.4 s: at most 3 within 5 s (a fixed
    // 0.8–1.6 s retry makes 4 to 6).
    let lists = cluster.services_lists();
    assert!((2..=3).contains(&lists), "{lists} lists of services in 5 s");
    cluster.api.set_failure(Resource::Services, None);
    d.wait_table("served once the list works", |t| t.expect("203.0.113.10", 80, &WEB3));
    d.wait_log(0, &["WARN", "watch failed", "retrying in"]);
}

/// Issue 17: after an API server outage long enough for client-go's backoff to reach
/// 6.4–12.8 s steps, the watches are back within seconds of the server answering again:
/// connection failures retry at most `RetryBackoff::RECONNECT_MAX` = 2 s apart, and the
/// 410 Gone the restarted server answers (its watch cache starts after the daemon's
/// resourceVersion, as a restarted kube-apiserver's does) is relisted after at most 2 s
/// too, not after a 30 s step. A Service created during the outage is served. Costs
/// about 16 s.
#[test]
fn run_reconnects_within_seconds_after_an_api_server_outage() {
    let objects = demo();
    let cluster = Cluster::start(&objects);
    let d = Daemon::start(&cluster, "gateway-1");
    d.wait_table("initial sync", |t| t.expect("203.0.113.10", 80, &WEB3));
    assert!(cluster.api.wait_for_watches(None, 3, CONVERGE));
    let Cluster { api, dir } = cluster;
    let addr = api.addr();
    drop(api);
    std::thread::sleep(Duration::from_secs(12));
    // Restarted with a Service created meanwhile: a newer resourceVersion, and a watch
    // cache that starts after it.
    let mut restarted = demo();
    restarted.push(service("shop", "203.0.113.20"));
    let options = Options { listen: addr, ..Options::default() };
    let _cluster = Cluster { api: FakeApiServer::start_with(&restarted, &options).expect("double restarts"), dir };
    let back = Instant::now();
    d.wait_table("Service created during the outage", |t| t.expect("203.0.113.20", 80, &[]));
    let took = back.elapsed();
    // At most 2 s to the next attempt, at most 2 s more to the relist after its 410,
    // then the list and a publication (a step of client-go's schedule would be due
    // 6.4–30 s later).
    assert!(took < Duration::from_secs(7), "served {took:?} after the server was back:\n{}", d.log());
    let log = d.log();
    assert!(log.contains("retrying in") && log.contains("410 Gone"), "{log}");
}

/// Issue 17: a warning about a Service is logged once while it lasts, not again with
/// every batch of unrelated changes.
#[test]
fn run_logs_each_warning_once_while_it_lasts() {
    let cluster = Cluster::start(&demo());
    let d = Daemon::start(&cluster, "gateway-1");
    d.wait_table("initial sync", |t| t.expect("203.0.113.10", 80, &WEB3));
    let mut lb = service("open-v4", "203.0.113.30");
    lb["spec"]["type"] = json!("LoadBalancer");
    lb["spec"]["loadBalancerSourceRanges"] = json!(["2001:db8::/32"]);
    lb["status"] = json!({"loadBalancer": {"ingress": [{"ip": "203.0.113.31"}]}});
    cluster.api.apply(lb).unwrap();
    let warning = "Service demo/open-v4: load balancer IP 203.0.113.31 admits every client";
    d.wait_log(0, &[warning]);
    for (i, ip) in ["203.0.113.40", "203.0.113.41", "203.0.113.42"].iter().enumerate() {
        cluster.api.apply(service(&format!("other-{i}"), ip)).unwrap();
        d.wait_table("unrelated change served", |t| t.expect(ip, 80, &[]));
    }
    assert_eq!(d.log().matches(warning).count(), 1, "{}", d.log());
}
