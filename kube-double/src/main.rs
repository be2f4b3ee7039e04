//! `torii-fake-apiserver`: the Kubernetes API test double as its own process.
//!
//! ```text
//! torii-fake-apiserver [--listen 127.0.0.1:0] [--recorded] [--manifests DIR]… [--list FILE]…
//!                      [--kubeconfig-out FILE] [--bookmark-interval-s N]
//! ```
//!
//! Serves the given objects (the recorded cluster state with `--recorded`, manifests
//! directories such as `configs/demo`, API list responses), writes a kubeconfig pointing
//! at itself (written last, atomically: once the file exists the server answers), prints
//! `listening on http://ADDR` and serves until SIGINT or SIGTERM. Tests drive it through
//! the admin API (`torii_kube_double::AdminClient`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use torii_kube_double::{FakeApiServer, Objects, Options};

struct Args {
    listen: SocketAddr,
    recorded: bool,
    manifests: Vec<PathBuf>,
    lists: Vec<PathBuf>,
    kubeconfig_out: Option<PathBuf>,
    bookmark_interval: Duration,
}

const USAGE: &str = "usage: torii-fake-apiserver [--listen ADDR] [--recorded] [--manifests DIR]... [--list FILE]... \
                     [--kubeconfig-out FILE] [--bookmark-interval-s N]";

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        recorded: false,
        manifests: Vec::new(),
        lists: Vec::new(),
        kubeconfig_out: None,
        bookmark_interval: Options::default().bookmark_interval,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value\n{USAGE}"));
        match a.as_str() {
            "--listen" => args.listen = value()?.parse().context("--listen")?,
            "--recorded" => args.recorded = true,
            "--manifests" => args.manifests.push(value()?.into()),
            "--list" => args.lists.push(value()?.into()),
            "--kubeconfig-out" => args.kubeconfig_out = Some(value()?.into()),
            "--bookmark-interval-s" => {
                args.bookmark_interval = Duration::from_secs(value()?.parse().context("--bookmark-interval-s")?);
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => anyhow::bail!("unknown argument {other:?}\n{USAGE}"),
        }
    }
    Ok(args)
}

fn run() -> anyhow::Result<()> {
    let args = parse_args()?;
    let mut objects = if args.recorded { Objects::recorded() } else { Objects::new() };
    for dir in &args.manifests {
        objects.add_manifests_dir(dir).map_err(anyhow::Error::msg)?;
    }
    for file in &args.lists {
        let text = std::fs::read_to_string(file).with_context(|| file.display().to_string())?;
        objects.add_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
    }
    let options = Options { listen: args.listen, bookmark_interval: args.bookmark_interval };
    let server = FakeApiServer::start_with(&objects, &options).context("starting the double")?;
    if let Some(path) = &args.kubeconfig_out {
        let tmp = path.with_extension("tmp");
        server.write_kubeconfig(&tmp).with_context(|| tmp.display().to_string())?;
        std::fs::rename(&tmp, path).with_context(|| path.display().to_string())?;
    }
    println!(
        "torii-fake-apiserver: listening on {} ({} objects, resourceVersion {})",
        server.url(),
        objects.objects().len(),
        server.resource_version()
    );
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r,
            _ = term.recv() => Ok(()),
        }
    })?;
    drop(server);
    Ok(())
}

fn main() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("torii-fake-apiserver: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
