//! The figures the two runs give, each with its target and whether it is met, as a table and as
//! JSON.

use serde::Serialize;

use crate::{
    backups::Backups,
    contender::{Contender, Engine},
    convergence::Run,
    failover::Failovers,
    operations::Resizes,
    reshard::Reshard,
};

pub const MIB: f64 = 1024.0 * 1024.0;

/// `bytes` over `seconds`, in MiB/s; 0 without time.
pub fn mib_per_second(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / MIB / seconds
    } else {
        0.0
    }
}

/// How much resident memory grew from `before_bytes` to its `peak_bytes`, in MiB; never
/// negative (a peak reset can read below the resident memory read before it).
pub fn growth_mib(before_bytes: u64, peak_bytes: u64) -> f64 {
    peak_bytes.saturating_sub(before_bytes) as f64 / MIB
}

/// What a figure must be to meet its target.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Target {
    /// Quorum's figure over the peer's, at most this.
    RatioAtMost(f64),
    /// Quorum's figure over the peer's, at least this.
    RatioAtLeast(f64),
    /// Quorum's own figure, at most this.
    AtMost(f64),
    /// Quorum's own figure, at least this.
    AtLeast(f64),
    /// Printed for reference only.
    None,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Verdict {
    Pass,
    Short,
    /// Nothing to judge (no target, or the run was too small to measure it).
    NotJudged,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Figure {
    pub name: String,
    pub unit: &'static str,
    pub quorum: f64,
    pub peer: Option<f64>,
    pub ratio: Option<f64>,
    pub target: Target,
    pub verdict: Verdict,
}

impl Figure {
    fn new(
        name: impl Into<String>,
        unit: &'static str,
        quorum: f64,
        peer: Option<f64>,
        target: Target,
    ) -> Self {
        let ratio = peer.filter(|peer| *peer > 0.0).map(|peer| quorum / peer);
        let verdict = match target {
            Target::RatioAtMost(most) => match ratio {
                Some(ratio) if ratio <= most => Verdict::Pass,
                Some(_) => Verdict::Short,
                None => Verdict::NotJudged,
            },
            Target::RatioAtLeast(least) => match ratio {
                Some(ratio) if ratio >= least => Verdict::Pass,
                Some(_) => Verdict::Short,
                None => Verdict::NotJudged,
            },
            Target::AtMost(most) if quorum <= most => Verdict::Pass,
            Target::AtMost(_) => Verdict::Short,
            Target::AtLeast(least) if quorum >= least => Verdict::Pass,
            Target::AtLeast(_) => Verdict::Short,
            Target::None => Verdict::NotJudged,
        };
        Self {
            name: name.into(),
            unit,
            quorum,
            peer,
            ratio,
            target,
            verdict,
        }
    }
}

/// Per cluster, scaled to `per_seconds`.
fn rate(count: u64, run: &Run, per_seconds: f64) -> f64 {
    count as f64 / run.clusters as f64 / run.idle_seconds * per_seconds
}

/// One figure as read from a run, and its target.
struct Measure {
    name: &'static str,
    unit: &'static str,
    value: fn(&Run) -> f64,
    target: Target,
}

/// While N clusters converge: judged as ratios against the peer.
const CONVERGING: [Measure; 4] = [
    Measure {
        name: "clusters ready, from creation",
        unit: "s",
        value: |run| run.convergence_seconds,
        target: Target::RatioAtMost(0.5),
    },
    Measure {
        name: "operator peak RSS while converging",
        unit: "MiB",
        value: |run| run.convergence_peak_rss_bytes as f64 / MIB,
        target: Target::RatioAtMost(0.33),
    },
    Measure {
        name: "operator CPU while converging",
        unit: "s",
        value: |run| run.convergence_cpu_seconds,
        target: Target::None,
    },
    Measure {
        name: "API requests while converging",
        unit: "requests",
        value: |run| run.convergence_requests.total() as f64,
        target: Target::RatioAtMost(0.5),
    },
];

/// Settled, per cluster: judged on Quorum's own figure, for every engine.
const SETTLED: [Measure; 6] = [
    Measure {
        name: "settled: writes per cluster per hour",
        unit: "requests",
        value: |run| rate(run.idle_requests.writes(), run, 3600.0),
        target: Target::AtMost(0.0),
    },
    Measure {
        name: "settled: GETs and LISTs per cluster per 10 min",
        unit: "requests",
        value: |run| rate(run.idle_requests.reads(), run, 600.0),
        target: Target::AtMost(1.0),
    },
    Measure {
        name: "settled: requests per cluster per minute",
        unit: "requests",
        value: |run| rate(run.idle_requests.total(), run, 60.0),
        target: Target::None,
    },
    Measure {
        name: "settled: operator CPU per cluster per hour",
        unit: "s",
        value: |run| run.idle_cpu_seconds / run.clusters as f64 / run.idle_seconds * 3600.0,
        target: Target::None,
    },
    Measure {
        name: "settled: operator RSS per cluster above its base",
        unit: "MiB",
        value: |run| (run.idle_rss_bytes as f64 - run.base.rss_bytes as f64) / MIB / run.clusters as f64,
        target: Target::None,
    },
    Measure {
        name: "settled: operator anonymous memory per cluster above its base",
        unit: "MiB",
        value: |run| anonymous_growth_per_cluster(run) / MIB,
        target: Target::None,
    },
];

/// The memory target is stated at 100 settled clusters: a smaller run prints its figure
/// unjudged.
const SETTLED_RSS: Measure = Measure {
    name: "settled: operator RSS (target: 40 MiB at 100 clusters)",
    unit: "MiB",
    value: |run| run.idle_rss_bytes as f64 / MIB,
    target: Target::AtMost(40.0),
};

/// A smaller run's memory carried to 100 clusters: as measured, plus what each of its clusters
/// added to the process's own data (anonymous memory: the caches hold each cluster's objects,
/// its connections their buffers) for each cluster more. The pages of the program file it
/// reads in as more of its code runs are not counted again: the program is the same size at
/// 100 clusters.
const PROJECTED_RSS: Measure = Measure {
    name: "settled: operator RSS projected to 100 clusters (measured + anonymous growth per cluster for each more)",
    unit: "MiB",
    value: |run| {
        let clusters = run.clusters as f64;
        (run.idle_rss_bytes as f64 + anonymous_growth_per_cluster(run) * (100.0 - clusters).max(0.0)) / MIB
    },
    target: Target::AtMost(40.0),
};

/// What each cluster of a run added to the operator's anonymous memory, in bytes.
fn anonymous_growth_per_cluster(run: &Run) -> f64 {
    (run.idle_anonymous_bytes as f64 - run.base.anonymous_bytes as f64).max(0.0) / run.clusters as f64
}

/// The settled memory against its target: judged as measured at 100 clusters or more, else
/// printed as measured and judged as projected.
fn settled_rss(quorum: &Run, peer: Option<&Run>) -> Vec<Figure> {
    let mut measured = figure_of(&SETTLED_RSS, quorum, peer);
    if quorum.clusters >= 100 {
        return vec![measured];
    }
    measured.verdict = Verdict::NotJudged;
    vec![measured, figure_of(&PROJECTED_RSS, quorum, peer)]
}

fn figure_of(measure: &Measure, quorum: &Run, peer: Option<&Run>) -> Figure {
    Figure::new(
        measure.name,
        measure.unit,
        (measure.value)(quorum),
        peer.map(measure.value),
        measure.target,
    )
}

/// The figures of Quorum's run against the peer's, with the targets.
pub fn figures(quorum: &Run, peer: &Run) -> Vec<Figure> {
    let mut figures: Vec<Figure> = CONVERGING
        .iter()
        .chain(&SETTLED)
        .map(|measure| figure_of(measure, quorum, Some(peer)))
        .collect();
    figures.extend(settled_rss(quorum, Some(peer)));
    figures
}

/// The resize scenario's times, Quorum's against the peer's (when its resize completed):
/// printed, not judged (no target is set for them yet).
pub fn resizes(quorum: &Resizes, peer: Option<&Resizes>) -> Vec<Figure> {
    quorum
        .resizes
        .iter()
        .map(|resize| {
            Figure::new(
                format!(
                    "etcd {} to {} members: settled, from the spec change",
                    resize.from, resize.to
                ),
                "s",
                resize.seconds,
                peer.and_then(|peer| peer.seconds_to(resize.to)),
                Target::None,
            )
        })
        .collect()
}

/// A shard added to a loaded Redis cluster, against `redis-cli --cluster rebalance` on the
/// same data: keys moved per second judged, the rest printed.
pub fn reshard_figures(reshard: &Reshard) -> Vec<Figure> {
    let (quorum, cli) = (&reshard.quorum, &reshard.redis_cli);
    vec![
        Figure::new(
            "Redis 3 to 4 shards: keys moved per second",
            "keys/s",
            quorum.keys_per_second(),
            Some(cli.keys_per_second()),
            Target::RatioAtLeast(1.0),
        ),
        Figure::new(
            "keys moved",
            "keys",
            quorum.keys_moved as f64,
            Some(cli.keys_moved as f64),
            Target::None,
        ),
        Figure::new("moving", "s", quorum.seconds, Some(cli.seconds), Target::None),
        Figure::new(
            "Quorum's scale-out, from the spec change",
            "s",
            reshard.quorum_from_spec_seconds,
            None,
            Target::None,
        ),
    ]
}

/// One row per engine of Quorum's settled cost (no peer runs these), judged on the same targets.
pub fn engines(runs: &[Run]) -> Vec<EngineRow> {
    runs.iter()
        .map(|run| {
            let mut figures = vec![Figure::new(
                "ready, from creation",
                "s",
                run.convergence_seconds,
                None,
                Target::None,
            )];
            figures.extend(SETTLED.iter().map(|measure| figure_of(measure, run, None)));
            figures.extend(settled_rss(run, None));
            EngineRow {
                operator: run.contender.name(),
                clusters: run.clusters,
                figures,
            }
        })
        .collect()
}

/// One row per engine of the failover scenario: how often the primary moved, the time from a
/// kill to the first acknowledged write (p99 judged for MySQL and Redis, whose failover the
/// operator's defaults decide), and the acknowledged writes found again.
pub fn failovers(runs: &[Failovers]) -> Vec<EngineRow> {
    runs.iter()
        .map(|run| {
            let p99_target = match run.engine {
                Engine::Mysql | Engine::Redis => Target::AtMost(5.0),
                Engine::Etcd | Engine::Mongodb => Target::None,
            };
            let count = |name: &str, value: usize| Figure::new(name, "", value as f64, None, Target::None);
            let operator = Contender::Quorum(run.engine).name();
            EngineRow {
                operator: if run.one_shard {
                    format!("{operator}, one shard of {}", crate::shard_failover::SHARDS)
                } else {
                    operator.to_string()
                },
                clusters: 1,
                figures: vec![
                    count("kills", run.kills.len()),
                    count("primary moved", run.primary_moved()),
                    Figure::new(
                        "first write after the kill, p50",
                        "s",
                        run.seconds_to_first_write(50.0),
                        None,
                        Target::None,
                    ),
                    Figure::new(
                        "first write after the kill, p99",
                        "s",
                        run.seconds_to_first_write(99.0),
                        None,
                        p99_target,
                    ),
                    count("acknowledged writes, none lost", run.writes_checked),
                ],
            }
        })
        .collect()
}

/// Per engine: Quorum's backup and the engine's own tool, their ratio (at least 0.9), the
/// store's own intake and Quorum's share of it, and how much the operator's memory grew while
/// it backed up (at most 10 MiB).
pub fn backups(runs: &[Backups]) -> Vec<EngineRow> {
    let over = |part: f64, whole: f64| if whole > 0.0 { part / whole } else { 0.0 };
    runs.iter()
        .map(|run| {
            let (quorum, tool) = (run.quorum_mib_per_second(), run.tool_mib_per_second());
            let store = run.store_mib_per_second();
            let ratio = over(quorum, tool);
            EngineRow {
                operator: Contender::Quorum(run.engine).name(),
                clusters: 1,
                figures: vec![
                    Figure::new("Quorum's backup", "MiB/s", quorum, None, Target::None),
                    Figure::new("the engine's tool", "MiB/s", tool, None, Target::None),
                    Figure::new("Quorum over the tool", "", ratio, None, Target::AtLeast(0.9)),
                    Figure::new("the store's own intake", "MiB/s", store, None, Target::None),
                    Figure::new(
                        "Quorum over the store's intake",
                        "",
                        over(quorum, store),
                        None,
                        Target::None,
                    ),
                    Figure::new(
                        "operator memory growth",
                        "MiB",
                        run.operator_rss_growth_mib(),
                        None,
                        Target::AtMost(10.0),
                    ),
                ],
            }
        })
        .collect()
}

/// The MySQL replica seeded from the backup scenario's data, when it ran: how long, how fast,
/// and the operator's memory growth while it streamed the snapshot (judged as the backups').
pub fn seeding(runs: &[Backups]) -> Vec<EngineRow> {
    runs.iter()
        .filter_map(|run| {
            let seed = run.seed.as_ref()?;
            Some(EngineRow {
                operator: Contender::Quorum(run.engine).name(),
                clusters: 1,
                figures: vec![
                    Figure::new(
                        "seeded, from the spec change",
                        "s",
                        seed.seconds,
                        None,
                        Target::None,
                    ),
                    Figure::new(
                        "data over the time",
                        "MiB/s",
                        seed.mib_per_second(),
                        None,
                        Target::None,
                    ),
                    Figure::new(
                        "operator memory growth",
                        "MiB",
                        seed.operator_rss_growth_mib(),
                        None,
                        Target::AtMost(10.0),
                    ),
                ],
            })
        })
        .collect()
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EngineRow {
    pub operator: String,
    pub clusters: usize,
    pub figures: Vec<Figure>,
}

/// A Markdown table of [`engines`]: one row per engine, one column per figure.
pub fn engines_table(rows: &[EngineRow]) -> String {
    let Some(first) = rows.first() else {
        return String::new();
    };
    let mut header = vec!["operator".to_string(), "clusters".to_string()];
    header.extend(first.figures.iter().map(|figure| match figure.unit {
        "" => figure.name.clone(),
        unit => format!("{} ({unit})", figure.name),
    }));
    let mut lines = vec![
        format!("| {} |", header.join(" | ")),
        format!("|---|{}", "---:|".repeat(header.len() - 1)),
    ];
    for row in rows {
        let mut cells = vec![row.operator.clone(), row.clusters.to_string()];
        cells.extend(row.figures.iter().map(|figure| {
            let verdict = match figure.verdict {
                Verdict::Pass => " (pass)",
                Verdict::Short => " (short)",
                Verdict::NotJudged => "",
            };
            format!("{}{verdict}", number(figure.quorum))
        }));
        lines.push(format!("| {} |", cells.join(" | ")));
    }
    lines.join("\n")
}

fn number(value: f64) -> String {
    if value.fract() == 0.0 || value.abs() >= 100.0 {
        format!("{value:.0}")
    } else if value.abs() >= 1.0 {
        format!("{value:.1}")
    } else {
        format!("{value:.3}")
    }
}

/// A Markdown table against the peer (the README's Performance section shows the latest one).
pub fn table(figures: &[Figure]) -> String {
    table_against(figures, "etcd-io/etcd-operator")
}

/// A Markdown table of Quorum's figures against `baseline`'s.
pub fn table_against(figures: &[Figure], baseline: &str) -> String {
    let mut lines = vec![
        format!("| figure | unit | Quorum | {baseline} | ratio | target | |"),
        "|---|---|---:|---:|---:|---|---|".to_string(),
    ];
    for figure in figures {
        let target = match figure.target {
            Target::RatioAtMost(most) => format!("ratio ≤ {most}"),
            Target::RatioAtLeast(least) => format!("ratio ≥ {least}"),
            Target::AtMost(most) => format!("≤ {}", number(most)),
            Target::AtLeast(least) => format!("≥ {}", number(least)),
            Target::None => String::new(),
        };
        let verdict = match figure.verdict {
            Verdict::Pass => "pass",
            Verdict::Short => "short",
            Verdict::NotJudged => "",
        };
        lines.push(format!(
            "| {} | {} | {} | {} | {} | {target} | {verdict} |",
            figure.name,
            figure.unit,
            number(figure.quorum),
            figure.peer.map(number).unwrap_or_default(),
            figure
                .ratio
                .map(|ratio| format!("{ratio:.2}"))
                .unwrap_or_default(),
        ));
    }
    lines.join("\n")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::{
        audit::Requests,
        contender::{Contender, Engine},
        process::Reading,
    };

    fn run(contender: Contender, seconds: f64, peak_mib: u64, gets: u64, patches: u64) -> Run {
        let reading = |rss_mib: u64| Reading {
            rss_bytes: rss_mib << 20,
            peak_rss_bytes: rss_mib << 20,
            anonymous_bytes: (rss_mib / 2) << 20,
            cpu_seconds: 1.0,
            started_ticks: 100,
        };
        Run {
            contender,
            clusters: 2,
            base: reading(10),
            convergence_seconds: seconds,
            convergence_requests: Requests {
                by_verb: BTreeMap::from([("get".into(), gets)]),
                writes_by_resource: BTreeMap::new(),
                reads_by_resource: BTreeMap::new(),
                on_leases: 7,
            },
            convergence_cpu_seconds: 2.0,
            convergence_peak_rss_bytes: peak_mib << 20,
            converged_rss_bytes: peak_mib << 20,
            idle_seconds: 600.0,
            idle_requests: Requests {
                by_verb: BTreeMap::from([("get".into(), gets), ("patch".into(), patches)]),
                writes_by_resource: BTreeMap::from([("patch pods".into(), patches)]),
                reads_by_resource: BTreeMap::new(),
                on_leases: 300,
            },
            idle_cpu_seconds: 1.0,
            idle_rss_bytes: 14 << 20,
            idle_anonymous_bytes: 9 << 20,
        }
    }

    #[test]
    fn ratios_are_quorum_over_the_peer_and_judged_against_their_targets() {
        let quorum = run(Contender::Quorum(Engine::Etcd), 20.0, 30, 10, 0);
        let peer = run(Contender::Peer, 60.0, 60, 40, 6);
        let figures = figures(&quorum, &peer);
        let named = |start: &str| {
            figures
                .iter()
                .find(|figure| figure.name.starts_with(start))
                .unwrap()
        };

        let ready = named("clusters ready");
        assert_eq!((ready.ratio, ready.verdict), (Some(20.0 / 60.0), Verdict::Pass));
        // 30 MiB against 60 MiB is 0.5, over 0.33.
        assert_eq!(named("operator peak RSS").verdict, Verdict::Short);
        // No patch in 600 s over 2 clusters: none per hour; the peer's 6 are 18 per cluster-hour.
        let writes = named("settled: writes");
        assert_eq!(
            (writes.quorum, writes.peer, writes.verdict),
            (0.0, Some(18.0), Verdict::Pass)
        );
        // 10 GETs over 2 clusters in 10 minutes: 5 each, over the target of 1.
        assert_eq!(named("settled: GETs").quorum, 5.0);
        assert_eq!(named("settled: GETs").verdict, Verdict::Short);
        // Two clusters say nothing of a target stated at 100.
        assert_eq!(named("settled: operator RSS (target").verdict, Verdict::NotJudged);
        assert_eq!(named("settled: operator RSS per cluster").quorum, 2.0);
        assert_eq!(
            named("settled: operator anonymous memory per cluster").quorum,
            2.0
        );
        // Judged carried to 100: the 14 MiB measured and, for each of 98 clusters more, the
        // 2 MiB of anonymous memory each cluster added (5 MiB of the base, 9 settled).
        let projected = named("settled: operator RSS projected");
        assert_eq!((projected.quorum, projected.verdict), (210.0, Verdict::Short));

        let table = table(&figures);
        assert!(
            table.contains("| clusters ready, from creation | s | 20 | 60 | 0.33 | ratio ≤ 0.5 | pass |"),
            "{table}"
        );
    }

    #[test]
    fn each_engine_is_a_row_judged_on_the_settled_targets() {
        let rows = engines(&[run(Contender::Quorum(Engine::Mysql), 30.0, 20, 1, 3)]);
        let table = engines_table(&rows);
        // 3 patches over 2 clusters in 600 s: 9 per cluster-hour; 1 GET: 0.5 per 10 min.
        assert!(
            table.ends_with(
                "| quorum-mysql-operator | 2 | 30 | 9 (short) | 0.500 (pass) | 0.200 | 3 | 2 | 2 | 14 | 210 (short) |"
            ),
            "{table}"
        );
    }

    #[test]
    fn resharding_is_judged_on_keys_per_second_against_redis_cli() {
        use crate::reshard::Moved;
        let reshard = Reshard {
            keys: 1_000,
            quorum: Moved {
                keys_moved: 250,
                seconds: 5.0,
            },
            quorum_from_spec_seconds: 20.0,
            redis_cli: Moved {
                keys_moved: 250,
                seconds: 10.0,
            },
        };
        let figures = reshard_figures(&reshard);
        assert_eq!(
            (
                figures[0].quorum,
                figures[0].peer,
                figures[0].ratio,
                figures[0].verdict
            ),
            (50.0, Some(25.0), Some(2.0), Verdict::Pass)
        );
        let table = table_against(&figures, "redis-cli");
        assert!(
            table.contains(
                "| Redis 3 to 4 shards: keys moved per second | keys/s | 50 | 25 | 2.00 | ratio ≥ 1 | pass |"
            ),
            "{table}"
        );
        let slower = Figure::new("f", "keys/s", 20.0, Some(25.0), Target::RatioAtLeast(1.0));
        assert_eq!(slower.verdict, Verdict::Short);
    }

    #[test]
    fn a_peer_figure_of_zero_gives_no_ratio_to_judge() {
        let figure = Figure::new("f", "s", 1.0, Some(0.0), Target::RatioAtMost(0.5));
        assert_eq!((figure.ratio, figure.verdict), (None, Verdict::NotJudged));
    }
}
