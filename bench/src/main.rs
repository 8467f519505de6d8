//! `make bench`: Quorum's etcd operator against etcd-io/etcd-operator on the same local control
//! plane and real node, one after the other in one invocation, then every other Quorum operator's
//! settled cost, and for each Quorum operator failovers as a client sees them and (MongoDB's
//! simulator aside) backups against the engine's own tool. Prints tables of
//! figures, ratios and targets, and writes the raw numbers as JSON under `bench/results/`.
//! Absolute figures are printed, never asserted; `--quick` runs the smallest size and fails only when an invariant
//! breaks (a cluster never ready, an operator restarted, a measurement that saw nothing).

mod audit;
mod backups;
mod contender;
mod convergence;
mod failover;
mod operations;
mod process;
mod report;
mod reshard;
mod seeding;
mod shard_failover;

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use clap::Parser;
use serde_json::json;

use crate::{
    audit::AuditLog,
    backups::Backups,
    contender::{Contender, Engine},
    convergence::{Run, Settings},
    failover::Failovers,
    operations::Resizes,
    reshard::Reshard,
};

const ALL_ENGINES: [Engine; 4] = [Engine::Etcd, Engine::Mysql, Engine::Redis, Engine::Mongodb];

#[derive(Parser)]
#[command(about = "Quorum's operators measured on the local real node, etcd against etcd-io/etcd-operator")]
struct Arguments {
    /// The smallest size (one cluster per operator, a 30-second settled window), as CI runs
    /// it beside other tests; the sizes below are then ignored.
    #[arg(long)]
    quick: bool,
    /// etcd clusters created at once per operator.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    clusters: u16,
    /// Clusters per operator for MySQL, Redis and MongoDB (their members weigh more than etcd's).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    engine_clusters: u16,
    /// The settled window, in seconds.
    #[arg(long, default_value_t = 600, value_parser = clap::value_parser!(u64).range(10..))]
    idle_seconds: u64,
    /// The engines to measure (etcd also runs the peer beside it).
    #[arg(long, value_enum, value_delimiter = ',', default_values_t = [Engine::Etcd, Engine::Mysql, Engine::Redis, Engine::Mongodb])]
    engines: Vec<Engine>,
    /// Kills of the primary per Quorum engine in the failover scenario (2 with --quick).
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u16).range(1..))]
    kills: u16,
    /// MiB of data loaded into each engine's cluster for the backup scenario, and the MySQL
    /// member seeded after it (4 with --quick).
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u16).range(1..=4096))]
    backup_mib: u16,
    /// Backups each way per engine, alternating Quorum's and the engine's tool (1 with --quick).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..))]
    backup_rounds: u16,
    /// Keys in the Redis cluster a shard is added to, for Quorum and for `redis-cli --cluster
    /// rebalance` (20,000 with --quick).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1_000..=10_000_000))]
    reshard_keys: u64,
    /// Where the JSON goes (default: bench/results, or bench/results/quick with --quick).
    #[arg(long)]
    results: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let arguments = Arguments::parse();
    let settings = if arguments.quick {
        Settings {
            clusters: 1,
            idle: Duration::from_secs(30),
            ready_timeout: Duration::from_secs(300),
        }
    } else {
        Settings {
            clusters: arguments.clusters.into(),
            idle: Duration::from_secs(arguments.idle_seconds),
            ready_timeout: Duration::from_secs(300 + 60 * u64::from(arguments.clusters)),
        }
    };
    let admin = quorum_e2e::control_plane::admin_client().await;
    quorum_e2e::real_node::require(&admin).await;
    if !arguments.quick {
        alone_on_the_node(&admin).await?;
    }
    let audit = AuditLog::local()?;
    let ticks = process::ticks_per_second()?;
    let scenarios = if arguments.quick {
        Scenarios {
            kills: 2,
            backup_mib: 4,
            backup_rounds: 1,
            reshard_keys: 20_000,
            ticks,
        }
    } else {
        Scenarios {
            kills: arguments.kills.into(),
            backup_mib: arguments.backup_mib.into(),
            backup_rounds: arguments.backup_rounds.into(),
            reshard_keys: arguments.reshard_keys as usize,
            ticks,
        }
    };
    let kills = scenarios.kills;

    let engine_settings = Settings {
        clusters: if arguments.quick {
            1
        } else {
            arguments.engine_clusters.into()
        },
        ..settings
    };
    let results = arguments.results.unwrap_or_else(|| {
        let root = quorum_e2e::tools::repository_root().join("bench").join("results");
        if arguments.quick { root.join("quick") } else { root }
    });
    std::fs::create_dir_all(&results).with_context(|| format!("creating {}", results.display()))?;
    // Each operator's log, kept for the diagnosis of what its figures show (not in the repository).
    let logs = results.join("logs");
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let mut comparison = None;
    let mut engine_runs = Vec::new();
    let mut failovers: Vec<Failovers> = Vec::new();
    let mut backups: Vec<Backups> = Vec::new();
    let mut resizes: [Option<Resizes>; 2] = [None, None];
    let mut resize_rows = None;
    let mut reshard = None;
    // An engine whose turn fails is reported at the end; the others still run and print.
    let mut failed: Vec<String> = Vec::new();
    for engine in ALL_ENGINES {
        if !arguments.engines.contains(&engine) {
            continue;
        }
        let contender = Contender::Quorum(engine);
        if engine == Engine::Etcd {
            let both = async {
                let quorum = measure(&admin, &audit, contender, settings, scenarios, &logs).await?;
                let peer = measure(&admin, &audit, Contender::Peer, settings, scenarios, &logs).await?;
                anyhow::Ok((quorum, peer))
            };
            let (quorum, peer) = match both.await {
                Ok(both) => both,
                Err(error) => {
                    failed.push(report_failure(&error));
                    continue;
                }
            };
            print_comparison(&quorum.run, &peer.run, settings.clusters);
            resize_rows = quorum
                .resizes
                .as_ref()
                .map(|ours| report::resizes(ours, peer.resizes.as_ref()));
            if let Some(rows) = &resize_rows {
                println!(
                    "\nOne etcd cluster resized by its spec under a writer, no acknowledged write lost:\n"
                );
                println!("{}", report::table(rows));
            }
            resizes = [quorum.resizes.clone(), peer.resizes.clone()];
            engine_runs.push(quorum.run.clone());
            failovers.extend(quorum.failovers);
            backups.extend(quorum.backups);
            comparison = Some([quorum.run, peer.run]);
        } else {
            let measured = match measure(&admin, &audit, contender, engine_settings, scenarios, &logs).await {
                Ok(measured) => measured,
                Err(error) => {
                    failed.push(report_failure(&error));
                    continue;
                }
            };
            engine_runs.push(measured.run);
            reshard = reshard.or(measured.reshard);
            failovers.extend(measured.failovers);
            backups.extend(measured.backups);
        }
    }
    let engines = report::engines(&engine_runs);
    println!("\nEvery Quorum operator, settled:\n");
    println!("{}", report::engines_table(&engines));
    engine_runs
        .iter()
        .filter(|run| run.contender != Contender::Quorum(Engine::Etcd))
        .for_each(print_requests);

    let failover_rows = report::failovers(&failovers);
    println!(
        "\nFailover as a client sees it, the primary's (etcd: the leader's) server killed {kills} times:\n"
    );
    println!("{}", report::engines_table(&failover_rows));

    let backup_rows = report::backups(&backups);
    println!(
        "\nBackups of {} MiB to an S3-compatible store in the cluster, against the engine's own tool on the \
         same member, the median of {} each:\n",
        scenarios.backup_mib, scenarios.backup_rounds
    );
    println!("{}", report::engines_table(&backup_rows));

    let seed_rows = report::seeding(&backups);
    if !seed_rows.is_empty() {
        println!(
            "\nA fourth MySQL member seeded from the backup scenario's {} MiB, the operator streaming the primary's \
             snapshot into it:\n",
            scenarios.backup_mib
        );
        println!("{}", report::engines_table(&seed_rows));
    }

    let reshard_rows = reshard.as_ref().map(report::reshard_figures);
    if let Some(rows) = &reshard_rows {
        println!(
            "\nA fourth shard added to a Redis cluster of {} keys, against redis-cli --cluster rebalance on \
             the same data, every key found after:\n",
            scenarios.reshard_keys
        );
        println!("{}", report::table_against(rows, "redis-cli"));
    }

    let now = jiff::Timestamp::now();
    // Runs of different engines may share the node and end in the same second.
    let engines_measured: String = if arguments.engines.len() < ALL_ENGINES.len() {
        arguments
            .engines
            .iter()
            .map(|engine| format!("-{}", engine.name()))
            .collect()
    } else {
        String::new()
    };
    let path = results.join(format!(
        "bench-{}{engines_measured}.json",
        now.strftime("%Y%m%dT%H%M%SZ")
    ));
    let record = json!({
        "date": now.to_string(),
        "quick": arguments.quick,
        "machine": machine(),
        "versions": versions(),
        "settings": settings,
        "engine_settings": engine_settings,
        "runs": comparison,
        "figures": comparison.as_ref().map(|[quorum, peer]| report::figures(quorum, peer)),
        "engine_runs": engine_runs,
        "engines": engines,
        "failovers": failovers,
        "failover_figures": failover_rows,
        "backups": backups,
        "backup_figures": backup_rows,
        "seed_figures": seed_rows,
        "resizes": resizes,
        "resize_figures": resize_rows,
        "reshard": reshard,
        "reshard_figures": reshard_rows,
        "failed": failed,
    });
    std::fs::write(&path, serde_json::to_string_pretty(&record)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    eprintln!("[bench] raw figures: {}", path.display());
    anyhow::ensure!(
        failed.is_empty(),
        "{} of the operators' turns failed (the figures above are the others'):\n{}",
        failed.len(),
        // Indented, so that the lines of CI's log that name a failure carry each turn's cause.
        failed
            .iter()
            .map(|failure| format!("    {}", failure.replace('\n', "\n    ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
    Ok(())
}

/// Writes the operator's log (its container's, as `kubectl logs` gives it) under `directory`;
/// one that cannot be read or written is said, never fatal.
fn keep_operator_log(installed: &contender::Installed, directory: &std::path::Path) {
    let namespace = installed.pod.metadata.namespace.as_deref().unwrap_or_default();
    let pod = installed.pod.metadata.name.as_deref().unwrap_or_default();
    let (command, output) =
        quorum_e2e::real_node::kubectl(&["logs", "-n", namespace, pod, "-c", installed.container]);
    let name = installed.contender.name().replace('/', "-");
    let path = directory.join(format!(
        "{name}-{}.log",
        jiff::Timestamp::now().strftime("%Y%m%dT%H%M%SZ")
    ));
    let kept = if output.status.success() {
        std::fs::write(&path, &output.stdout).map_err(|error| error.to_string())
    } else {
        Err(format!("{command}: {}", String::from_utf8_lossy(&output.stderr)))
    };
    match kept {
        Ok(()) => eprintln!("[bench] {name}'s log: {}", path.display()),
        Err(why) => eprintln!("[bench] {name}'s log not kept: {why}"),
    }
}

/// Prints why an operator's turn failed, as it happens, and returns it for the end.
fn report_failure(error: &anyhow::Error) -> String {
    let described = format!("{error:#}");
    eprintln!("[bench] {described}");
    described
}

/// Quorum's etcd operator against the peer, as a table.
fn print_comparison(quorum: &Run, peer: &Run, clusters: usize) {
    println!(
        "Quorum's etcd operator against etcd-io/etcd-operator, {clusters} clusters of 3 members each:\n"
    );
    println!("{}", report::table(&report::figures(quorum, peer)));
    [quorum, peer].into_iter().for_each(print_requests);
}

/// The requests one operator made, by verb and resource.
fn print_requests(run: &Run) {
    println!(
        "\n{}: requests while converging {}; settled {}",
        run.contender.name(),
        run.convergence_requests.describe(),
        run.idle_requests.describe()
    );
}

/// What runs after convergence and the settled window, for Quorum's operators.
#[derive(Clone, Copy, Debug)]
struct Scenarios {
    kills: usize,
    backup_mib: usize,
    backup_rounds: usize,
    reshard_keys: usize,
    ticks: u64,
}

/// What one contender's turn measured.
struct Measured {
    run: Run,
    /// Redis's: its replication mode's, then one shard's in cluster mode.
    failovers: Vec<Failovers>,
    backups: Option<Backups>,
    /// etcd's operators only.
    resizes: Option<Resizes>,
    /// Redis's only.
    reshard: Option<Reshard>,
}

/// The etcd cluster grown and shrunk under a writer ([`operations`]).
async fn resize(admin: &kube::Client, installed: &contender::Installed) -> anyhow::Result<Resizes> {
    let sizes: Vec<String> = operations::SIZES.iter().map(usize::to_string).collect();
    eprintln!(
        "[bench] {}: resized to {} members under a writer",
        installed.contender.name(),
        sizes.join(", then ")
    );
    operations::measure(admin, installed).await
}

/// Installs `contender`, measures its convergence and settled cost and, for Quorum's operators,
/// failovers on the first cluster and backups of a cluster of their own, and removes it (also
/// when a measurement fails).
async fn measure(
    admin: &kube::Client,
    audit: &AuditLog,
    contender: Contender,
    settings: Settings,
    scenarios: Scenarios,
    logs: &std::path::Path,
) -> anyhow::Result<Measured> {
    eprintln!(
        "[bench] {}: {} clusters of 3 members at once, then {} s settled",
        contender.name(),
        settings.clusters,
        settings.idle.as_secs()
    );
    let installed = contender.install(admin).await?;
    let measured = async {
        let run = convergence::measure(admin, audit, &installed, settings, scenarios.ticks).await?;
        check_invariants(&run)?;
        let Contender::Quorum(engine) = contender else {
            // The baseline's own failure is a finding to print, not a broken run.
            let resizes = resize(admin, &installed)
                .await
                .inspect_err(|error| {
                    eprintln!(
                        "[bench] {}: the resize did not complete: {error:#}",
                        contender.name()
                    )
                })
                .ok();
            return anyhow::Ok(Measured {
                run,
                failovers: Vec::new(),
                backups: None,
                resizes,
                reshard: None,
            });
        };
        eprintln!(
            "[bench] {}: the primary killed {} times under a writer",
            contender.name(),
            scenarios.kills
        );
        let mut failovers = vec![failover::measure(admin, &installed, engine, scenarios.kills).await?];
        if engine == Engine::Redis {
            eprintln!(
                "[bench] {}: one shard's primary killed {} times under a writer",
                contender.name(),
                scenarios.kills
            );
            failovers.push(shard_failover::measure(admin, &installed, scenarios.kills).await?);
        }
        let resizes = if engine == Engine::Etcd {
            Some(resize(admin, &installed).await?)
        } else {
            None
        };
        let reshard = if engine == Engine::Redis {
            eprintln!(
                "[bench] {}: a fourth shard added to {} keys, then redis-cli's rebalance on the same",
                contender.name(),
                scenarios.reshard_keys
            );
            Some(reshard::measure(admin, &installed, scenarios.reshard_keys).await?)
        } else {
            None
        };
        let backups = if engine == Engine::Mongodb {
            None
        } else {
            eprintln!(
                "[bench] {}: {} MiB backed up {} times each way",
                contender.name(),
                scenarios.backup_mib,
                scenarios.backup_rounds
            );
            Some(
                backups::measure(
                    admin,
                    &installed,
                    engine,
                    scenarios.backup_mib,
                    scenarios.backup_rounds,
                    scenarios.ticks,
                )
                .await?,
            )
        };
        anyhow::Ok(Measured {
            run,
            failovers,
            backups,
            resizes,
            reshard,
        })
    }
    .await;
    keep_operator_log(&installed, logs);
    let removed = installed.remove(admin).await;
    let measured = measured.with_context(|| format!("measuring {}", contender.name()))?;
    removed.with_context(|| format!("removing {}", contender.name()))?;
    Ok(measured)
}

/// A full run's figures are the operators' alone: no other pod may share the node (a demo's
/// operators would also act on the benchmark's clusters, and its databases would load the node).
/// The quick run shares it with the tests by design and judges no figure.
async fn alone_on_the_node(admin: &kube::Client) -> anyhow::Result<()> {
    const SYSTEM: [&str; 3] = ["kube-system", "local-path-storage", "default"];
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::all(admin.clone());
    let others: Vec<String> = pods
        .list(&Default::default())
        .await?
        .items
        .iter()
        .filter_map(|pod| {
            let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
            let ours = namespace.starts_with("quorum-bench") || namespace == contender::PEER_NAMESPACE;
            (!SYSTEM.contains(&namespace) && !ours)
                .then(|| format!("{namespace}/{}", pod.metadata.name.as_deref().unwrap_or_default()))
        })
        .collect();
    anyhow::ensure!(
        others.is_empty(),
        "the benchmark needs the control plane to itself, and these pods run: {} (make demo-stop, or \
         stop what runs them)",
        others.join(", ")
    );
    Ok(())
}

/// What must hold whatever the machine's speed: the measurement saw the operator at work.
fn check_invariants(run: &Run) -> anyhow::Result<()> {
    let name = run.contender.name();
    anyhow::ensure!(
        run.convergence_requests.total() > 0,
        "{name}: the audit log shows no request while its clusters converged: the count is broken"
    );
    anyhow::ensure!(
        run.base.rss_bytes > 0 && run.convergence_peak_rss_bytes >= run.converged_rss_bytes,
        "{name}: implausible memory readings (a peak below the resident memory it covers): {run:?}"
    );
    anyhow::ensure!(
        run.convergence_cpu_seconds > 0.0,
        "{name}: no CPU time while converging: the process read is not the operator's"
    );
    Ok(())
}

fn machine() -> serde_json::Value {
    let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
    let memory_kib = read("/proc/meminfo")
        .lines()
        .find_map(|line| line.strip_prefix("MemTotal:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse::<u64>().ok());
    json!({
        "cpus": std::thread::available_parallelism().map(usize::from).ok(),
        "memory_bytes": memory_kib.map(|kib| kib * 1024),
        "kernel": read("/proc/sys/kernel/osrelease").trim(),
    })
}

fn versions() -> serde_json::Value {
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(quorum_e2e::tools::repository_root())
        .output()
        .ok()
        .filter(|output| output.status.success())
        .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_string());
    json!({
        "quorum": env!("CARGO_PKG_VERSION"),
        "quorum_commit": commit,
        "etcd": quorum_e2e::tools::pinned_version("ETCD_VERSION"),
        "kubernetes": quorum_e2e::tools::pinned_version("K8S_VERSION"),
        "peer": contender::peer_image(),
    })
}
