//! Alerts and dashboards, from the metrics the operators export: one list of alerts (rules and
//! their runbooks) and one list of panels, written as a Prometheus rule file, Grafana dashboards,
//! the charts' copies and the pages of `docs/` that describe them.

use std::path::Path;

use serde_json::{Value, json};

use crate::{GeneratedFile, HEADER, OperatorPackage};

/// How long without a successful backup before `QuorumBackupStale` fires: a daily schedule and
/// two hours of slack.
pub const BACKUP_STALE_HOURS: u32 = 26;

/// One alert: its rule and its runbook.
pub struct Alert {
    pub name: &'static str,
    pub severity: &'static str,
    /// How long the condition holds before the alert fires (`None`: at once).
    pub for_: Option<&'static str>,
    pub expr: String,
    pub summary: &'static str,
    /// What it means and what to do, in Markdown, for `docs/alerts.md`.
    pub runbook: &'static str,
}

const CLUSTER: &str = "engine, namespace, cluster";

/// Whose series a rule file reads: every operator's (`monitoring/`), or one operator's (its
/// chart, so that four charts installed side by side do not raise each alert four times).
#[derive(Clone, Debug, Default)]
pub struct Scope {
    /// `engine` label value.
    pub engine: Option<String>,
    /// `controller` label values (the operator's resources, plural), as a regex alternation.
    pub controllers: Option<String>,
    /// `operator` label value.
    pub operator: Option<String>,
}

impl Scope {
    pub fn of(operator: &OperatorPackage) -> Self {
        Self {
            engine: Some(operator.engine.to_string()),
            controllers: Some(controllers(operator)),
            operator: Some(operator.package.to_string()),
        }
    }

    /// `metric{matchers}` with this scope's matchers added: `engine` for the families labelled
    /// by engine, `controller` for the reconcile families, `operator` for the leader gauge.
    fn select(&self, metric: &str, matchers: &[&str]) -> String {
        let mut all: Vec<String> = matchers.iter().map(|m| (*m).to_string()).collect();
        if metric.starts_with("quorum_reconcile") {
            if let Some(controllers) = &self.controllers {
                all.push(format!("controller=~\"{controllers}\""));
            }
        } else if metric == "quorum_leader" {
            if let Some(operator) = &self.operator {
                all.push(format!("operator=\"{operator}\""));
            }
        } else if let Some(engine) = &self.engine {
            all.push(format!("engine=\"{engine}\""));
        }
        if all.is_empty() {
            metric.to_string()
        } else {
            format!("{metric}{{{}}}", all.join(", "))
        }
    }
}

/// The operator's resources, plural, as its controllers are labelled in the metrics.
fn controllers(operator: &OperatorPackage) -> String {
    operator
        .crds
        .iter()
        .map(|crd| crd.spec.names.plural.clone())
        .collect::<Vec<_>>()
        .join("|")
}

/// A quorum alert's expression: `by_majority` over the voters of every engine but MySQL, and
/// `mysql` over MySQL's members; for one operator's scope, only its engine's.
fn quorum_rule(scope: &Scope, by_majority: &str, mysql: &str) -> String {
    match scope.engine.as_deref() {
        Some("mysql") => mysql.to_string(),
        Some(_) => by_majority.to_string(),
        None => format!("({by_majority}) or ({mysql})"),
    }
}

/// Every alert over `scope`'s series, in the order the docs list them.
pub fn alerts(scope: &Scope) -> Vec<Alert> {
    let s = |metric: &str, matchers: &[&str]| scope.select(metric, matchers);
    // The engine matchers only where no scope names the engine already.
    let sum = |metric: &str, engine: &str, health: Option<&str>| {
        let matchers: Vec<&str> = [(scope.engine.is_none()).then_some(engine), health]
            .into_iter()
            .flatten()
            .collect();
        format!("sum by ({CLUSTER}) ({})", s(metric, &matchers))
    };
    let voters = sum("quorum_voters", "engine!=\"mysql\"", None);
    let healthy_voters = sum("quorum_voters", "engine!=\"mysql\"", Some("health=\"Healthy\""));
    let mysql_members = sum("quorum_members", "engine=\"mysql\"", None);
    let mysql_failing = sum("quorum_members", "engine=\"mysql\"", Some("health!=\"Healthy\""));
    vec![
        Alert {
            name: "QuorumBackupStale",
            severity: "warning",
            for_: Some("10m"),
            expr: format!(
                "time() - {} > {}",
                s("quorum_backup_last_success_timestamp_seconds", &[]),
                BACKUP_STALE_HOURS * 3600
            ),
            summary: "No successful backup of {{ $labels.namespace }}/{{ $labels.cluster }} ({{ $labels.engine }}) for more than 26 hours",
            runbook: "The newest verified backup of the cluster is older than 26 hours (a daily schedule \
and two hours of slack; the cluster's own `BackupStale` condition uses `spec.backup.maxAgeMinutes`). \
Look at the cluster's backups: `kubectl quorum status <kind>/<name>` shows the newest and its age, \
`kubectl get <kind>backups -n <namespace>` the runs and their `status.message`. Common causes: the \
schedule was removed or suspended, the destination refuses writes (credentials, bucket, quota), or \
every run fails on a member that does not answer. Take one now with `kubectl quorum backup \
<kind>/<name>` once the cause is fixed.",
        },
        Alert {
            name: "QuorumBackupFailed",
            severity: "warning",
            for_: None,
            expr: format!("increase({}[1h]) > 0", s("quorum_backup_failures_total", &[])),
            summary: "A backup of {{ $labels.namespace }}/{{ $labels.cluster }} ({{ $labels.engine }}) failed in the last hour",
            runbook: "A backup run failed. The failed backup object's `status.message` says why; the \
next scheduled run is not blocked by it. If failures repeat, `QuorumBackupStale` follows.",
        },
        Alert {
            name: "QuorumMemberUnknown",
            severity: "warning",
            for_: Some("10m"),
            expr: format!("{} > 0", s("quorum_members", &["health=\"Unknown\""])),
            summary: "{{ $value }} member(s) of {{ $labels.namespace }}/{{ $labels.cluster }} ({{ $labels.engine }}) unreachable from the operator for 10 minutes",
            runbook: "The operator cannot reach these members, and their peers do not say they are \
down. Unknown is not down: the operator takes no disruptive step on them (no failover, no \
replacement) until it knows. Check the network between the operator and the members (network \
policies, DNS, TLS material), then the members themselves: `kubectl quorum status <kind>/<name>` \
gives each member's health with the reason.",
        },
        Alert {
            name: "QuorumMemberUnhealthy",
            severity: "warning",
            for_: Some("10m"),
            expr: format!("{} > 0", s("quorum_members", &["health=\"Unhealthy\""])),
            summary: "{{ $value }} member(s) of {{ $labels.namespace }}/{{ $labels.cluster }} ({{ $labels.engine }}) unhealthy for 10 minutes",
            runbook: "Members are down by their peers' word (or their own). Look at the pods (`kubectl \
describe pod`, the cluster's `PodsNotStarting` condition) and at `kubectl quorum status \
<kind>/<name>`. A member whose data is lost or no longer trusted can be rebuilt from its peers with \
`kubectl quorum repair <kind>/<name> <pod>`.",
        },
        Alert {
            name: "QuorumAtRisk",
            severity: "warning",
            for_: Some("5m"),
            expr: quorum_rule(
                scope,
                &format!(
                    "{healthy_voters} <= floor({voters} / 2) + 1 and {healthy_voters} > floor({voters} / 2) and {voters} >= 3"
                ),
                &format!("{mysql_failing} == 1 and {mysql_members} >= 2"),
            ),
            summary: "{{ $labels.namespace }}/{{ $labels.cluster }} ({{ $labels.engine }}) survives no further member failure",
            runbook: "One more member lost and the cluster can no longer elect a leader or fail over. \
What counts is the engine's own rule, from the `quorum_voters` series the operators export: a \
majority of etcd's voting members (learners do not count), of MongoDB's members with a vote, of \
the Sentinels in Redis replication mode (a failover also needs the Sentinels' own `quorum` to \
agree the primary is down, which may be more than a majority), of the shards serving slots in \
Redis cluster mode. MySQL has no majority: a failover waits for every replica to answer, so any \
one member down (`quorum_members`) leaves a cluster of two members or more at risk. Bring the unhealthy or unknown \
members back before any maintenance; the operator already refuses voluntary disruptions \
(restarts, upgrades, scale-in) while a member is not healthy.",
        },
        Alert {
            name: "QuorumLost",
            severity: "critical",
            for_: Some("2m"),
            expr: quorum_rule(
                scope,
                &format!("{healthy_voters} <= floor({voters} / 2) and {voters} >= 2"),
                &format!("{mysql_failing} >= 2 and {mysql_members} >= 2"),
            ),
            summary: "{{ $labels.namespace }}/{{ $labels.cluster }} ({{ $labels.engine }}) cannot elect a leader or fail over",
            runbook: "Half of the voters or more are not healthy (for MySQL: two members or more), \
so writes stop (etcd, MongoDB) or a lost primary is not replaced (MySQL, Redis). Bring them \
back on their volumes first: the cluster comes back by itself with every acknowledged write \
once they answer. Only if members are lost for good, follow the engine's Disaster recovery \
section (docs/<engine>.md): MySQL and MongoDB recover from a named survivor on request \
(`kubectl quorum recover <kind>/<name> <member>`), which gives up what only the lost members \
held.",
        },
        Alert {
            name: "QuorumFailover",
            severity: "warning",
            for_: None,
            expr: format!(
                "increase({}[15m]) > 0",
                s("quorum_primary_changes_total", &["verb=\"Failover\""])
            ),
            summary: "A failover happened in a {{ $labels.engine }} cluster in the last 15 minutes",
            runbook: "The primary (or leader) changed without being asked to. The cluster's \
`status.lastFailover` (`lastLeaderChange` for etcd) says from which member to which, when the old \
one was lost and how long it took, and a `PrimaryChanged` or `FailingOver` event names the \
cluster. Find why the old primary was lost (its pod's events, the node) before it happens again.",
        },
        Alert {
            name: "QuorumReconcileErrors",
            severity: "warning",
            for_: Some("15m"),
            expr: format!(
                "sum by (controller, reason) (rate({}[5m])) > 0",
                s("quorum_reconcile_errors_total", &[])
            ),
            summary: "Reconciliations of {{ $labels.controller }} keep failing ({{ $labels.reason }})",
            runbook: "Passes of this controller have failed for 15 minutes. The operator's log and the \
affected clusters' events (`StepFailed`, `InvalidSpec`) say which cluster and why; a refused admin \
call leaves the cluster as it was and is retried with backoff.",
        },
        Alert {
            name: "QuorumCircuitOpen",
            severity: "warning",
            for_: Some("10m"),
            expr: format!("{} > 0", s("quorum_admin_circuits_open", &[])),
            summary: "{{ $value }} {{ $labels.engine }} member(s) have had their admin circuit open for 10 minutes",
            runbook: "The operator stopped calling these members after repeated failures and probes \
them now and then. Their clusters show them Unknown; see `QuorumMemberUnknown`.",
        },
        Alert {
            name: "QuorumOperatorNotLeading",
            severity: "critical",
            for_: Some("5m"),
            expr: format!("max by (operator) ({}) == 0", s("quorum_leader", &[])),
            summary: "No process of {{ $labels.operator }} runs its controllers",
            runbook: "Every replica of this operator stands by: none holds the leader Lease, so no \
cluster it manages is reconciled (the databases keep serving; nothing is repaired, failed over by \
the operator, or backed up). Look at the operator pods' logs and the Lease \
`<operator>-leader` in the operator's namespace (RBAC on `coordination.k8s.io` leases, a stuck \
holder).",
        },
    ]
}

/// The rule file Prometheus loads (`groups:`) over `scope`'s series, as YAML.
pub fn rule_groups(group: &str, scope: &Scope) -> Value {
    let rules: Vec<Value> = alerts(scope)
        .iter()
        .map(|alert| {
            let mut rule = json!({
                "alert": alert.name,
                "expr": alert.expr,
                "labels": {"severity": alert.severity},
                "annotations": {
                    "summary": alert.summary,
                    "runbook_url": format!(
                        "https://github.com/quorum-dev/quorum/blob/main/docs/alerts.md#{}",
                        alert.name.to_lowercase()
                    ),
                },
            });
            if let Some(duration) = alert.for_ {
                rule["for"] = json!(duration);
            }
            rule
        })
        .collect();
    json!({"groups": [{"name": group, "rules": rules}]})
}

/// One panel of a dashboard.
pub struct Panel {
    pub title: &'static str,
    pub description: &'static str,
    /// PromQL; `$engine`-free, filtered by the dashboard's variables.
    pub expr: String,
    pub legend: &'static str,
    pub unit: &'static str,
}

/// A dashboard: its file name, title and panels.
pub struct Dashboard {
    pub file: String,
    pub title: String,
    pub panels: Vec<Panel>,
}

fn engine_panels(engine: &str, controllers: &str) -> Vec<Panel> {
    let selected = format!("engine=\"{engine}\", namespace=~\"$namespace\", cluster=~\"$cluster\"");
    vec![
        Panel {
            title: "Members by health",
            description: "Members counted Healthy, Unhealthy and Unknown by the operator's last pass over each cluster.",
            expr: format!("sum by (namespace, cluster, health) (quorum_members{{{selected}}})"),
            legend: "{{namespace}}/{{cluster}} {{health}}",
            unit: "short",
        },
        Panel {
            title: "Failovers",
            description: "Changes of primary (or leader) the database or the operator made without being asked, per hour.",
            expr: format!(
                "sum (increase(quorum_primary_changes_total{{engine=\"{engine}\", verb=\"Failover\"}}[1h]))"
            ),
            legend: "failovers",
            unit: "short",
        },
        Panel {
            title: "Failover time from loss (p99)",
            description: "From the old primary's loss to the new primary accepting writes, as the operator saw it.",
            expr: format!(
                "histogram_quantile(0.99, sum by (le) (rate(quorum_failover_from_loss_seconds_bucket{{engine=\"{engine}\"}}[1h])))"
            ),
            legend: "p99",
            unit: "s",
        },
        Panel {
            title: "Newest backup age",
            description: "Time since the newest successful backup of each cluster.",
            expr: format!("time() - quorum_backup_last_success_timestamp_seconds{{{selected}}}"),
            legend: "{{namespace}}/{{cluster}}",
            unit: "s",
        },
        Panel {
            title: "Admin calls by outcome",
            description: "Calls the operator made to the database's own admin interface, per second.",
            expr: format!(
                "sum by (verb, outcome) (rate(quorum_admin_calls_total{{engine=\"{engine}\"}}[5m]))"
            ),
            legend: "{{verb}} {{outcome}}",
            unit: "reqps",
        },
        Panel {
            title: "Admin call latency (p99)",
            description: "How long the database took to answer the operator's admin calls.",
            expr: format!(
                "histogram_quantile(0.99, sum by (verb, le) (rate(quorum_admin_call_duration_seconds_bucket{{engine=\"{engine}\"}}[5m])))"
            ),
            legend: "{{verb}}",
            unit: "s",
        },
        Panel {
            title: "Circuit breakers open",
            description: "Members the operator stopped calling after repeated failures.",
            expr: format!("sum (quorum_admin_circuits_open{{engine=\"{engine}\"}})"),
            legend: "open",
            unit: "short",
        },
        Panel {
            title: "Reconciliations and errors",
            description: "Passes per second of this operator's controllers, and failed passes by reason.",
            expr: format!(
                "sum by (controller) (rate(quorum_reconcile_total{{controller=~\"{controllers}\"}}[5m])) \
or sum by (controller, reason) (rate(quorum_reconcile_errors_total{{controller=~\"{controllers}\"}}[5m]))"
            ),
            legend: "{{controller}} {{reason}}",
            unit: "ops",
        },
    ]
}

fn overview_panels() -> Vec<Panel> {
    vec![
        Panel {
            title: "Operators leading",
            description: "Operator processes running their controllers (1 per operator; 0 means nothing reconciles).",
            expr: "sum by (job) (quorum_leader)".into(),
            legend: "{{job}}",
            unit: "short",
        },
        Panel {
            title: "Members not healthy",
            description: "Unhealthy and Unknown members across every cluster, by engine.",
            expr: "sum by (engine, health) (quorum_members{health!=\"Healthy\"})".into(),
            legend: "{{engine}} {{health}}",
            unit: "short",
        },
        Panel {
            title: "Reconciliations",
            description: "Passes per second, by controller.",
            expr: "sum by (controller) (rate(quorum_reconcile_total[5m]))".into(),
            legend: "{{controller}}",
            unit: "ops",
        },
        Panel {
            title: "Reconcile errors",
            description: "Failed passes per second, by controller and reason.",
            expr: "sum by (controller, reason) (rate(quorum_reconcile_errors_total[5m]))".into(),
            legend: "{{controller}} {{reason}}",
            unit: "ops",
        },
        Panel {
            title: "Reconcile duration (p99)",
            description: "How long one pass takes, by controller.",
            expr: "histogram_quantile(0.99, sum by (controller, le) (rate(quorum_reconcile_duration_seconds_bucket[5m])))".into(),
            legend: "{{controller}}",
            unit: "s",
        },
        Panel {
            title: "Admin call latency (p99)",
            description: "How long the databases took to answer the operators' admin calls, by engine.",
            expr: "histogram_quantile(0.99, sum by (engine, le) (rate(quorum_admin_call_duration_seconds_bucket[5m])))".into(),
            legend: "{{engine}}",
            unit: "s",
        },
        Panel {
            title: "Circuit breakers open",
            description: "Members the operators stopped calling after repeated failures, by engine.",
            expr: "sum by (engine) (quorum_admin_circuits_open)".into(),
            legend: "{{engine}}",
            unit: "short",
        },
        Panel {
            title: "Failovers",
            description: "Changes of primary not asked for, per hour, by engine.",
            expr: "sum by (engine) (increase(quorum_primary_changes_total{verb=\"Failover\"}[1h]))".into(),
            legend: "{{engine}}",
            unit: "short",
        },
        Panel {
            title: "Oldest newest-backup",
            description: "Across the clusters that have backups: the largest time since a cluster's newest successful backup, by engine.",
            expr: "max by (engine) (time() - quorum_backup_last_success_timestamp_seconds)".into(),
            legend: "{{engine}}",
            unit: "s",
        },
    ]
}

/// The overview and one dashboard per operator.
pub fn dashboards(operators: &[OperatorPackage]) -> Vec<Dashboard> {
    let mut all = vec![Dashboard {
        file: "quorum-overview.json".into(),
        title: "Quorum: operators overview".into(),
        panels: overview_panels(),
    }];
    for operator in operators {
        let controllers = controllers(operator);
        all.push(Dashboard {
            file: format!("quorum-{}.json", operator.engine),
            title: format!("Quorum: {}", operator.display_name.trim_start_matches("Quorum ")),
            panels: engine_panels(operator.engine, &controllers),
        });
    }
    all
}

fn variable(name: &str, query: &str) -> Value {
    json!({
        "name": name,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": name},
        "definition": query,
        "includeAll": true,
        "multi": true,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
        "refresh": 2,
    })
}

/// A dashboard in Grafana's JSON model.
pub fn dashboard_json(dashboard: &Dashboard) -> Value {
    let panels: Vec<Value> = dashboard
        .panels
        .iter()
        .enumerate()
        .map(|(index, panel)| {
            json!({
                "id": index + 1,
                "type": "timeseries",
                "title": panel.title,
                "description": panel.description,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": (index % 2) * 12, "y": (index / 2) * 8},
                "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
                "targets": [{
                    "refId": "A",
                    "datasource": {"type": "prometheus", "uid": "${datasource}"},
                    "expr": panel.expr,
                    "legendFormat": panel.legend,
                }],
            })
        })
        .collect();
    json!({
        "uid": dashboard.file.trim_end_matches(".json"),
        "title": dashboard.title,
        "tags": ["quorum"],
        "schemaVersion": 39,
        "version": 1,
        "editable": true,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "templating": {"list": [
            {
                "name": "datasource",
                "type": "datasource",
                "query": "prometheus",
                "current": {},
            },
            variable("namespace", "label_values(quorum_members, namespace)"),
            variable("cluster", "label_values(quorum_members{namespace=~\"$namespace\"}, cluster)"),
        ]},
        "panels": panels,
    })
}

/// `docs/alerts.md`: every alert with its rule and runbook.
fn alerts_page() -> String {
    let mut page = String::from(
        "<!-- Written by `cargo xtask generate` from xtask/src/monitoring.rs: edit it there. -->\n\
# Alerts\n\n\
Every chart ships these rules as a `PrometheusRule` (`--set metrics.prometheusRule.enabled=true`, \
for the Prometheus Operator); `monitoring/prometheus-rules.yaml` holds the same rules for any \
Prometheus. They read the operators' own metrics (`/metrics` on each operator, scraped through the \
chart's ServiceMonitor). `monitoring/rules-test.yaml` tests each with `promtool test rules`.\n\n\
| alert | severity | fires after |\n|---|---|---|\n",
    );
    for alert in alerts(&Scope::default()) {
        page.push_str(&format!(
            "| [{}](#{}) | {} | {} |\n",
            alert.name,
            alert.name.to_lowercase(),
            alert.severity,
            alert.for_.unwrap_or("at once")
        ));
    }
    for alert in alerts(&Scope::default()) {
        page.push_str(&format!(
            "\n## {}\n\n{}\n\n```promql\n{}\n```\n\n{}\n",
            alert.name, alert.summary, alert.expr, alert.runbook
        ));
    }
    page
}

/// `docs/dashboards.md`: each dashboard's panels, as a user sees them listed.
fn dashboards_page(dashboards: &[Dashboard]) -> String {
    let mut page = String::from(
        "<!-- Written by `cargo xtask generate` from xtask/src/monitoring.rs: edit it there. -->\n\
# Dashboards\n\n\
Grafana dashboards, in `monitoring/dashboards/` and in every chart \
(`--set metrics.grafanaDashboards.enabled=true` writes them into a ConfigMap labelled \
`grafana_dashboard: \"1\"`, which Grafana's dashboard sidecar loads). Each has a `datasource`, \
a `namespace` and a `cluster` variable.\n",
    );
    for dashboard in dashboards {
        page.push_str(&format!(
            "\n## {} (`{}`)\n\n| panel | shows |\n|---|---|\n",
            dashboard.title, dashboard.file
        ));
        for panel in &dashboard.panels {
            page.push_str(&format!("| {} | {} |\n", panel.title, panel.description));
        }
    }
    page
}

/// Every monitoring file: the rules and dashboards under `monitoring/`, their copies in each
/// chart, and the two pages of `docs/`.
pub fn monitoring_files(operators: &[OperatorPackage]) -> anyhow::Result<Vec<GeneratedFile>> {
    let rules = |group: &str, scope: &Scope| -> anyhow::Result<String> {
        Ok(format!(
            "{HEADER}{}",
            serde_yaml::to_string(&rule_groups(group, scope))?
        ))
    };
    let dashboards = dashboards(operators);
    let json_of = |dashboard: &Dashboard| -> anyhow::Result<String> {
        Ok(format!(
            "{}\n",
            serde_json::to_string_pretty(&dashboard_json(dashboard))?
        ))
    };
    let mut files = vec![GeneratedFile {
        path: Path::new("monitoring").join("prometheus-rules.yaml"),
        contents: rules("quorum", &Scope::default())?,
    }];
    for dashboard in &dashboards {
        files.push(GeneratedFile {
            path: Path::new("monitoring").join("dashboards").join(&dashboard.file),
            contents: json_of(dashboard)?,
        });
    }
    for operator in operators {
        let chart = crate::chart::chart_directory(operator);
        files.push(GeneratedFile {
            path: chart.join("monitoring").join("rules.yaml"),
            contents: rules(operator.package, &Scope::of(operator))?,
        });
        for dashboard in dashboards.iter().filter(|d| {
            d.file == "quorum-overview.json" || d.file == format!("quorum-{}.json", operator.engine)
        }) {
            files.push(GeneratedFile {
                path: chart.join("monitoring").join("dashboards").join(&dashboard.file),
                contents: json_of(dashboard)?,
            });
        }
    }
    files.push(GeneratedFile {
        path: Path::new("docs").join("alerts.md"),
        contents: alerts_page(),
    });
    files.push(GeneratedFile {
        path: Path::new("docs").join("dashboards.md"),
        contents: dashboards_page(&dashboards),
    });
    Ok(files)
}
