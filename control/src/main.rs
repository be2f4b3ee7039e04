//! `torii-control`: compiles Kubernetes Services into torii's table and publishes it.
//!
//! - `torii-control compile [--manifests DIR] [--node-name NAME] [--cluster-ips] [--config FILE]`
//!   prints the compiled table as JSON on stdout (the contract is
//!   [`torii_control::compile::Compiled`]) and every skipped object on stderr. It exits 0
//!   even when objects were skipped; non-zero only when the directory (or the
//!   configuration) cannot be read.
//! - `torii-control run [--config FILE] [--manifests DIR]` (the default): compiles the
//!   manifests directory, publishes the table to the gateway through shared memory,
//!   watches the directory and republishes on every change until SIGINT or SIGTERM. A
//!   failed publication is logged and retried (on the next change, and with backoff);
//!   the gateway keeps the last table it adopted meanwhile.
//!
//! Logs go to stderr, filtered by `RUST_LOG` (default `info`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use tokio::time::Instant;
use torii_control::compile::{CompileOptions, Compiled};
use torii_control::publish::Publisher;
use torii_control::source::files::{DirWatch, DEFAULT_QUIET};
use torii_gateway::config::Config;
use torii_gateway::table::TableSpec;

/// torii's control plane: Kubernetes Services in, gateway tables out.
#[derive(Parser, Debug)]
#[command(name = "torii-control", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the table compiled from a manifests directory as JSON (stdout); skipped
    /// objects are reported on stderr.
    Compile(CompileArgs),
    /// Compile, publish to the gateway, watch the manifests and republish on changes
    /// (the default).
    Run(RunArgs),
}

#[derive(Args, Debug)]
struct CompileArgs {
    /// Directory of Service, EndpointSlice and Node manifests (YAML or JSON). Default:
    /// `[control] manifests` of the configuration.
    #[arg(long, value_name = "DIR")]
    manifests: Option<PathBuf>,
    /// The gateway's Kubernetes Node (NodePorts, traffic policies). Default: `node_name`
    /// of the configuration.
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
    /// Serve ClusterIPs as front doors too (also on when the configuration says so).
    #[arg(long)]
    cluster_ips: bool,
    /// Gateway configuration (TOML) to take the defaults from. Default: the embedded
    /// `configs/gateway.toml`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Args, Debug, Default)]
struct RunArgs {
    /// Gateway configuration (TOML). Default: the embedded `configs/gateway.toml`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Manifests directory, overriding `[control] manifests` of the configuration.
    #[arg(long, value_name = "DIR")]
    manifests: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(filter)
        .init();

    let result = match cli.command {
        Some(Command::Compile(args)) => compile(args),
        Some(Command::Run(args)) => run(args),
        None => run(RunArgs::default()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("torii-control: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(path: Option<&Path>) -> anyhow::Result<Config> {
    Config::load(path).with_context(|| match path {
        Some(p) => format!("configuration {}", p.display()),
        None => "embedded configuration".to_owned(),
    })
}

fn manifests_dir(flag: Option<PathBuf>, config: &Config) -> anyhow::Result<PathBuf> {
    flag.or_else(|| config.control.manifests.clone())
        .context("no manifests directory: pass --manifests DIR or set `manifests` under [control] in the configuration")
}

fn compile(args: CompileArgs) -> anyhow::Result<()> {
    let config = load_config(args.config.as_deref())?;
    let dir = manifests_dir(args.manifests, &config)?;
    let options = CompileOptions {
        node_name: args.node_name.unwrap_or(config.node_name),
        cluster_ips: args.cluster_ips || config.control.cluster_ips,
    };
    let compiled = torii_control::compile_dir(&dir, &options)?;
    for e in &compiled.errors {
        eprintln!("torii-control: error: {e}");
    }
    for w in &compiled.warnings {
        eprintln!("torii-control: warning: {w}");
    }
    let json = serde_json::to_string_pretty(&compiled).context("serialising the table")?;
    println!("{json}");
    Ok(())
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = load_config(args.config.as_deref())?;
    let dir = manifests_dir(args.manifests, &config)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(serve(config, dir))
}

/// How often snapshots that every gateway worker has moved past are released.
const GC_INTERVAL: Duration = Duration::from_secs(5);

/// Shortest and longest wait before retrying a failed publication.
const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The publication side of `run`: the table waiting to be published, the last one that
/// was, and the retry schedule.
struct Publishing {
    shm_dir: PathBuf,
    publisher: Option<Publisher>,
    /// A table not yet published, with its front door and backend counts.
    pending: Option<(TableSpec, usize, usize)>,
    /// The last table published (the one the gateway has or will adopt).
    published: Option<TableSpec>,
    retry_delay: Duration,
    retry_at: Option<Instant>,
}

impl Publishing {
    fn offer(&mut self, compiled: &Compiled) {
        let spec = compiled.to_table_spec();
        if self.published.as_ref() == Some(&spec) {
            tracing::debug!("table unchanged; not republished");
            self.pending = None;
            self.retry_at = None;
            return;
        }
        self.pending = Some((spec, compiled.frontends.len(), compiled.backend_count()));
        self.retry_delay = RETRY_MIN;
        self.try_publish();
    }

    fn try_publish(&mut self) {
        let Some((spec, frontends, backends)) = &self.pending else {
            self.retry_at = None;
            return;
        };
        let result = match &mut self.publisher {
            Some(p) => p.publish(spec).map_err(|e| format!("publishing the table failed: {e}")),
            None => match Publisher::open(&self.shm_dir) {
                Ok(mut p) => {
                    let r = p.publish(spec).map_err(|e| format!("publishing the table failed: {e}"));
                    self.publisher = Some(p);
                    r
                }
                Err(e) => Err(format!("cannot open the shared-memory directory {}: {e}", self.shm_dir.display())),
            },
        };
        match result {
            Ok(generation) => {
                tracing::info!(generation, frontends, backends, "published table");
                self.published = self.pending.take().map(|(s, ..)| s);
                self.retry_at = None;
                self.retry_delay = RETRY_MIN;
            }
            Err(message) => {
                tracing::error!(
                    retry_in_s = self.retry_delay.as_secs(),
                    "{message}; the gateway keeps the last table it adopted; retrying on the next change or after the delay"
                );
                self.retry_at = Some(Instant::now() + self.retry_delay);
                self.retry_delay = (self.retry_delay * 2).min(RETRY_MAX);
            }
        }
    }
}

async fn serve(config: Config, dir: PathBuf) -> anyhow::Result<()> {
    let options = CompileOptions { node_name: config.node_name.clone(), cluster_ips: config.control.cluster_ips };
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing the SIGTERM handler")?;
    let mut watch = DirWatch::start(&dir, DEFAULT_QUIET)?;
    tracing::info!(
        manifests = %dir.display(),
        node_name = %options.node_name,
        cluster_ips = options.cluster_ips,
        shm_dir = %config.shm_dir.display(),
        "torii-control running"
    );
    let mut publishing = Publishing {
        shm_dir: config.shm_dir.clone(),
        publisher: None,
        pending: None,
        published: None,
        retry_delay: RETRY_MIN,
        retry_at: None,
    };
    let mut gc = tokio::time::interval(GC_INTERVAL);
    gc.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let retry_at = publishing.retry_at;
        tokio::select! {
            next = watch.next() => match next {
                None => anyhow::bail!("the manifests watch stopped unexpectedly"),
                Some(Err(e)) => tracing::error!("{e}; the last table stays published"),
                Some(Ok(loaded)) => {
                    let compiled = torii_control::compile_loaded(&loaded, &options);
                    for e in &compiled.errors {
                        tracing::error!("{e}");
                    }
                    for w in &compiled.warnings {
                        tracing::warn!("{w}");
                    }
                    tracing::info!(
                        objects = loaded.objects.len(),
                        skipped = compiled.errors.len(),
                        frontends = compiled.frontends.len(),
                        backends = compiled.backend_count(),
                        "compiled manifests"
                    );
                    publishing.offer(&compiled);
                }
            },
            () = sleep_until_opt(retry_at), if retry_at.is_some() => publishing.try_publish(),
            _ = gc.tick() => {
                if let Some(p) = &publishing.publisher {
                    let removed = p.collect_garbage();
                    if removed > 0 {
                        tracing::debug!(removed, "released table snapshots every gateway worker has moved past");
                    }
                }
            }
            r = tokio::signal::ctrl_c() => {
                r.context("waiting for SIGINT")?;
                tracing::info!("SIGINT: stopping");
                break;
            }
            _ = sigterm.recv() => {
                tracing::info!("SIGTERM: stopping");
                break;
            }
        }
    }
    Ok(())
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
