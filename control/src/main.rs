//! `torii-control`: compiles Kubernetes Services into torii's table and publishes it.
//!
//! Objects come from a manifests directory (`--manifests DIR`, or `[control] manifests`
//! of the configuration) or from the Kubernetes API (`--kubeconfig FILE`, or
//! `--in-cluster` for the Pod's ServiceAccount).
//!
//! - `torii-control compile [--manifests DIR | --kubeconfig FILE | --in-cluster]
//!   [--node-name NAME] [--cluster-ips] [--config FILE]` prints the compiled table as
//!   JSON on stdout (the contract is [`torii_control::compile::Compiled`]) and every
//!   skipped object on stderr. It exits 0 even when objects were skipped; non-zero only
//!   when the directory, the API (a list fails) or the configuration cannot be read.
//! - `torii-control run [--config FILE] [--manifests DIR | --kubeconfig FILE |
//!   --in-cluster] [--node-name NAME] [--min-interval-ms N]` (the default): compiles,
//!   publishes the table to the gateway through shared memory, watches the source and
//!   republishes on every change until SIGINT or SIGTERM (see
//!   [`torii_control::daemon`]). A failed publication is logged and retried; the gateway
//!   keeps the last table it adopted meanwhile.
//!
//! Logs go to stderr, filtered by `RUST_LOG` (default `info`).

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use torii_control::compile::CompileOptions;
use torii_control::config::Config;
use torii_control::daemon::{self, Source};
use torii_control::source::files::{self, DirWatch, DEFAULT_QUIET};
use torii_control::source::kube::{self as kube_source, ClusterConfig, KubeSettings, KubeWatch};

/// How long `compile --kubeconfig` waits for the API server's lists.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);

/// torii's control plane: Kubernetes Services in, gateway tables out.
#[derive(Parser, Debug)]
#[command(name = "torii-control", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the table compiled from a manifests directory or the Kubernetes API as
    /// JSON (stdout); skipped objects are reported on stderr.
    Compile(CompileArgs),
    /// Compile, publish to the gateway, watch the source and republish on changes
    /// (the default).
    Run(RunArgs),
    /// Show what the gateway serves now: the published table's generation, which gateway
    /// workers adopted it, and per Service port its front doors and endpoints.
    Status(StatusArgs),
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// Gateway configuration (TOML) whose `shm_dir` to read. Default: the embedded
    /// `configs/gateway.toml`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The shared-memory directory, overriding the configuration's `shm_dir`.
    #[arg(long, value_name = "DIR")]
    shm_dir: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Only the backend sets whose name (`namespace/name:port`) contains this.
    #[arg(long, value_name = "TEXT")]
    service: Option<String>,
}

/// Where objects come from.
#[derive(Args, Debug)]
struct SourceArgs {
    /// Manifests source: skip (with an error) any file larger than this many bytes.
    #[arg(long, value_name = "BYTES", default_value_t = files::DEFAULT_MAX_FILE_BYTES)]
    max_manifest_bytes: u64,
    /// Manifests source: skip (with an error) any document nested deeper than this.
    #[arg(long, value_name = "LEVELS", default_value_t = files::DEFAULT_MAX_DEPTH)]
    max_manifest_depth: usize,
    /// Directory of Service, EndpointSlice and Node manifests (YAML or JSON). Default:
    /// `[control] manifests` of the configuration.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["kubeconfig", "in_cluster"])]
    manifests: Option<PathBuf>,
    /// Read Services, EndpointSlices and the gateway's Node from the Kubernetes API of
    /// this kubeconfig's current context.
    #[arg(long, value_name = "FILE", conflicts_with = "in_cluster")]
    kubeconfig: Option<PathBuf>,
    /// Read them from the Kubernetes API with the Pod's ServiceAccount (in a cluster).
    #[arg(long)]
    in_cluster: bool,
}

impl Default for SourceArgs {
    fn default() -> Self {
        Self {
            max_manifest_bytes: files::DEFAULT_MAX_FILE_BYTES,
            max_manifest_depth: files::DEFAULT_MAX_DEPTH,
            manifests: None,
            kubeconfig: None,
            in_cluster: false,
        }
    }
}

impl SourceArgs {
    fn limits(&self) -> files::Limits {
        files::Limits { max_file_bytes: self.max_manifest_bytes, max_depth: self.max_manifest_depth }
    }

    fn cluster(&self) -> Option<ClusterConfig> {
        match (&self.kubeconfig, self.in_cluster) {
            (Some(path), _) => Some(ClusterConfig::Kubeconfig(path.clone())),
            (None, true) => Some(ClusterConfig::InCluster),
            (None, false) => None,
        }
    }
}

#[derive(Args, Debug)]
struct CompileArgs {
    #[command(flatten)]
    source: SourceArgs,
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
    #[command(flatten)]
    source: SourceArgs,
    /// The gateway's Kubernetes Node, overriding `node_name` of the configuration (in a
    /// DaemonSet: from the downward API, `spec.nodeName`).
    #[arg(long, value_name = "NAME")]
    node_name: Option<String>,
    /// Kubernetes API source: shortest time between two recompilations and publications
    /// (a change after a quiet period is published at once; bursts are coalesced; this
    /// limits the rate under continuous churn). Default: `min_interval_ms` of the
    /// configuration's [control], else 5.
    #[arg(long, value_name = "MS")]
    min_interval_ms: Option<u64>,
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
        Some(Command::Status(args)) => status(args),
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
        .context("no manifests directory: pass --manifests DIR (or --kubeconfig FILE, --in-cluster), or set `manifests` under [control] in the configuration")
}

/// The compiler's options: the configuration's, with the command line's overrides.
fn compile_options(config: &Config, node_name: Option<String>, cluster_ips: bool) -> CompileOptions {
    CompileOptions {
        node_name: node_name.unwrap_or_else(|| config.node_name.clone()),
        cluster_ips: cluster_ips || config.control.cluster_ips,
        proxy_name: config.control.proxy_name.clone(),
        load_balancer_class: config.control.load_balancer_class.clone(),
        node_port_addresses: config.control.node_port_addresses.clone(),
        snat_addresses: config.snat_addresses.clone(),
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the tokio runtime")
}

fn compile(args: CompileArgs) -> anyhow::Result<()> {
    let config = load_config(args.config.as_deref())?;
    let options = compile_options(&config, args.node_name, args.cluster_ips);
    let compiled = match args.source.cluster() {
        Some(cluster) => {
            let loaded = runtime()?.block_on(async {
                tokio::time::timeout(LIST_TIMEOUT, kube_source::load(&cluster, &options.node_name))
                    .await
                    .with_context(|| format!("no answer from the Kubernetes API within {} s", LIST_TIMEOUT.as_secs()))
            })??;
            torii_control::compile_loaded(&loaded, &options)
        }
        None => {
            let limits = args.source.limits();
            let dir = manifests_dir(args.source.manifests, &config)?;
            let loaded = torii_control::source::files::load_dir_cached(
                &dir,
                &limits,
                &mut torii_control::source::files::FileCache::one_shot(),
            )?;
            let compiled = torii_control::compile_loaded(&loaded, &options);
            // The process exits next: freeing the objects one by one would cost ~6 % of
            // the run at 100 000 documents (perf, BENCHMARKS.md "Manifests at scale").
            std::mem::forget(loaded);
            compiled
        }
    };
    for e in &compiled.errors {
        eprintln!("torii-control: error: {e}");
    }
    for w in &compiled.warnings {
        eprintln!("torii-control: warning: {w}");
    }
    // Streamed: the JSON of 50 000 Services is tens of MB.
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    serde_json::to_writer_pretty(&mut out, &compiled).context("serialising the table")?;
    writeln!(out).and_then(|()| out.flush()).context("writing the table to standard output")?;
    // As above: the process exits next.
    std::mem::forget(compiled);
    Ok(())
}

fn status(args: StatusArgs) -> anyhow::Result<()> {
    let dir = match args.shm_dir {
        Some(d) => d,
        None => load_config(args.config.as_deref())?.shm_dir,
    };
    let mut status = torii_control::status::read(&dir)?;
    if let Some(text) = &args.service {
        status.services.retain(|s| s.name.contains(text.as_str()));
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&status).context("serialising the status")?);
    } else {
        print!("{}", status.render());
    }
    Ok(())
}

fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = load_config(args.config.as_deref())?;
    // One torii-control per shared-memory directory, checked before anything is written there.
    let _lock = torii_table::shm::lock_dir(&config.shm_dir, torii_table::shm::Role::Control)?;
    let options = compile_options(&config, args.node_name, false);
    let cluster = args.source.cluster();
    let limits = args.source.limits();
    let dir = match cluster {
        Some(_) => None,
        None => Some(manifests_dir(args.source.manifests, &config)?),
    };
    runtime()?.block_on(async {
        let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let mut elector_task = None;
        let source = match (&cluster, &dir) {
            (Some(cluster), _) => {
                let (client, url) = kube_source::connect(cluster).await?;
                let min_interval = args
                    .min_interval_ms
                    .or(config.control.min_interval_ms)
                    .map_or(kube_source::DEFAULT_MIN_INTERVAL, Duration::from_millis);
                let settings = KubeSettings { min_interval, ..KubeSettings::new(options.node_name.clone()) };
                tracing::info!(
                    api = %url,
                    config = %cluster,
                    node_name = %options.node_name,
                    cluster_ips = options.cluster_ips,
                    min_interval_ms = min_interval.as_millis() as u64,
                    shm_dir = %config.shm_dir.display(),
                    "torii-control running"
                );
                if let Some(lease) = &config.l2 {
                    let elector =
                        torii_control::l2::Elector::new(client.clone(), lease.clone(), config.shm_dir.clone());
                    elector_task = Some((
                        tokio::spawn(elector.run(async move {
                            let _ = stop_rx.await;
                        })),
                        stop_tx,
                    ));
                }
                Source::Kube(Box::new(KubeWatch::start(&client, settings)))
            }
            (None, Some(dir)) => {
                if let Some(lease) = &config.l2 {
                    // No API, no Lease: the gateway answers for every VIP it can serve.
                    torii_control::l2::own_all(&config.shm_dir, &lease.identity)
                        .with_context(|| format!("L2 mode: writing {}", config.shm_dir.display()))?;
                    tracing::info!("L2 mode with the manifests source: no Lease, the gateway answers for all its VIPs");
                }
                let watch = DirWatch::start_with(dir, DEFAULT_QUIET, limits)?;
                tracing::info!(
                    manifests = %dir.display(),
                    node_name = %options.node_name,
                    cluster_ips = options.cluster_ips,
                    shm_dir = %config.shm_dir.display(),
                    "torii-control running"
                );
                Source::Files(watch)
            }
            (None, None) => unreachable!("a manifests directory or a cluster"),
        };
        let shutdown = async {
            tokio::select! {
                r = tokio::signal::ctrl_c() => {
                    if let Err(e) = r {
                        tracing::error!("waiting for SIGINT: {e}");
                    }
                    tracing::info!("SIGINT: stopping");
                }
                _ = sigterm.recv() => tracing::info!("SIGTERM: stopping"),
            }
        };
        let served = daemon::serve(source, &options, config.shm_dir.clone(), shutdown).await;
        if let Some((task, stop)) = elector_task {
            // Releases the Leases it holds before the process exits.
            let _ = stop.send(());
            let _ = task.await;
        }
        served?;
        Ok(())
    })
}
