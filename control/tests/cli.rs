//! The `torii-control` binary as operators and scripts use it: the JSON contract of
//! `compile`, its exit codes and stderr, and `run` publishing, republishing on change and
//! stopping on SIGTERM.

use std::io::{BufRead, BufReader};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde_json::Value;

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_torii-control"));
    c.env("RUST_LOG", "info");
    c
}

fn demo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/demo")
}

fn compile(args: &[&str]) -> (Output, Option<Value>) {
    let out = bin().arg("compile").args(args).output().unwrap();
    let json = serde_json::from_slice(&out.stdout).ok();
    (out, json)
}

#[test]
fn compile_prints_the_json_contract() {
    let dir = demo_dir();
    let (out, json) = compile(&["--manifests", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let json = json.expect("stdout is JSON");
    assert!(json["errors"].as_array().unwrap().is_empty());
    assert!(json["warnings"].as_array().unwrap().is_empty());
    let frontends = json["frontends"].as_array().unwrap();
    assert_eq!(frontends.len(), 11, "five IPv4 front doors, five IPv6 ones of dual-stack Services, NodePort");
    let mut keys = Vec::new();
    for f in frontends {
        let ip: IpAddr = f["ip"].as_str().unwrap().parse().unwrap();
        let protocol = f["protocol"].as_str().unwrap();
        assert!(["TCP", "UDP", "SCTP"].contains(&protocol), "{f}");
        assert!(["ClusterIP", "ExternalIP", "LoadBalancer", "NodePort"].contains(&f["kind"].as_str().unwrap()));
        let port = f["port"].as_u64().unwrap();
        let service = f["service"].as_str().unwrap();
        assert!(service.contains('/'), "namespace/name: {service}");
        assert!(f["port_name"].is_string());
        assert!(f["session_affinity_timeout_s"].is_null() || f["session_affinity_timeout_s"].is_u64());
        let mut backends = Vec::new();
        for b in f["backends"].as_array().unwrap() {
            let bip: IpAddr = b["ip"].as_str().unwrap().parse().unwrap();
            backends.push((bip, b["port"].as_u64().unwrap()));
        }
        assert!(backends.windows(2).all(|w| w[0] < w[1]), "backends sorted and unique: {f}");
        let proto_rank = ["TCP", "UDP", "SCTP"].iter().position(|p| *p == protocol).unwrap();
        keys.push((ip, proto_rank, port, service.to_owned()));
    }
    assert!(keys.windows(2).all(|w| w[0] < w[1]), "frontends sorted by ip, protocol, port, service");

    // What the README demo and the integration tests rely on.
    let find = |ip: &str, proto: &str, port: u64| {
        frontends
            .iter()
            .find(|f| f["ip"] == ip && f["protocol"] == proto && f["port"] == port)
            .unwrap_or_else(|| panic!("no front door {ip}:{port}/{proto}"))
    };
    let web = find("203.0.113.10", "TCP", 80);
    assert_eq!(web["service"], "demo/web");
    assert_eq!(web["kind"], "ExternalIP");
    assert_eq!(web["port_name"], "http");
    assert_eq!(
        web["backends"],
        serde_json::json!([
            {"ip": "10.70.0.11", "port": 8080}, {"ip": "10.70.0.12", "port": 8080}, {"ip": "10.70.0.13", "port": 8080}
        ])
    );
    let echo = find("203.0.113.10", "UDP", 7);
    assert_eq!(echo["service"], "demo/echo");
    assert_eq!(echo["backends"], serde_json::json!([{"ip": "10.70.0.21", "port": 7007}]));
    assert_eq!(find("203.0.113.11", "TCP", 80)["backends"], serde_json::json!([]));
    assert_eq!(find("203.0.113.11", "UDP", 9)["backends"], serde_json::json!([]));
    let np = find("198.51.100.1", "TCP", 30080);
    assert_eq!((np["kind"].as_str(), np["service"].as_str()), (Some("NodePort"), Some("demo/web-np")));
    assert_eq!(np["backends"].as_array().unwrap().len(), 3);
}

#[test]
fn compile_node_name_and_cluster_ips_flags() {
    let dir = demo_dir();
    let dir = dir.to_str().unwrap();
    let (out, json) = compile(&["--manifests", dir, "--node-name", "elsewhere", "--cluster-ips"]);
    assert!(out.status.success());
    let json = json.unwrap();
    let kinds: Vec<&str> = json["frontends"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap()).collect();
    assert!(!kinds.contains(&"NodePort"), "{kinds:?}");
    assert_eq!(kinds.iter().filter(|k| **k == "ClusterIP").count(), 11);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("warning: no Node object named \"elsewhere\""), "{stderr}");
}

#[test]
fn compile_reports_skipped_objects_on_stderr_and_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("svc.yaml"),
        "apiVersion: v1\nkind: Service\nmetadata: {name: ok, namespace: t}\nspec: {externalIPs: [192.0.2.1], ports: [{port: 80}]}\n\
         ---\napiVersion: v1\nkind: Service\nmetadata: {name: bad, namespace: t}\nspec: {ports: [{port: 70000}]}\n",
    )
    .unwrap();
    let (out, json) = compile(&["--manifests", dir.path().to_str().unwrap()]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("svc.yaml:6: document 2: Service t/bad: spec.ports[0].port: 70000 is out of range 1..=65535"),
        "{stderr}"
    );
    let json = json.unwrap();
    assert_eq!(json["frontends"].as_array().unwrap().len(), 1);
    assert_eq!(json["errors"].as_array().unwrap().len(), 1);
}

#[test]
fn compile_fails_when_the_directory_cannot_be_read() {
    let (out, json) = compile(&["--manifests", "/nonexistent/torii-manifests"]);
    assert!(!out.status.success());
    assert!(json.is_none());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot read manifests directory /nonexistent/torii-manifests"), "{stderr}");
}

/// Waits for a stderr line containing `needle`.
fn wait_for(lines: &mpsc::Receiver<String>, needle: &str, seen: &mut Vec<String>) -> String {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) => {
                seen.push(line.clone());
                if line.contains(needle) {
                    return line;
                }
            }
            Err(_) => panic!("no {needle:?} on stderr within 10 s; saw:\n{}", seen.join("\n")),
        }
    }
}

#[test]
fn run_publishes_republishes_on_change_and_stops_on_sigterm() {
    let tmp = tempfile::tempdir().unwrap();
    let manifests = tmp.path().join("manifests");
    let shm = tmp.path().join("shm");
    std::fs::create_dir(&manifests).unwrap();
    for f in ["node.yaml", "web.yaml"] {
        std::fs::copy(demo_dir().join(f), manifests.join(f)).unwrap();
    }
    let config = torii_table::config::EMBEDDED_DEFAULT
        .replace("shm_dir = \"/dev/shm/torii\"", &format!("shm_dir = {:?}", shm.display().to_string()))
        .replace("manifests = \"configs/demo\"", &format!("manifests = {:?}", manifests.display().to_string()));
    assert_ne!(config, torii_table::config::EMBEDDED_DEFAULT);
    let config_path = tmp.path().join("gateway.toml");
    std::fs::write(&config_path, config).unwrap();

    let mut child = bin().args(["run", "--config"]).arg(&config_path).stderr(Stdio::piped()).spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut seen = Vec::new();
    let first = wait_for(&lines, "published table", &mut seen);
    assert!(first.contains("frontends=4"), "{first}"); // demo/web and demo/echo, each dual-stack

    std::fs::copy(demo_dir().join("empty.yaml"), manifests.join("empty.yaml")).unwrap();
    let second = wait_for(&lines, "published table", &mut seen);
    assert!(second.contains("frontends=8"), "{second}");
    let generation = |l: &str| -> u64 {
        let rest = &l[l.find("generation=").unwrap() + "generation=".len()..];
        rest.split(|c: char| !c.is_ascii_digit()).next().unwrap().parse().unwrap()
    };
    assert_eq!(generation(&second), generation(&first) + 1);

    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let exit = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "still running 10 s after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(exit.success(), "{exit:?}");
}
