//! The alerts and dashboards of docs/alerts.md and docs/dashboards.md: the rules checked and
//! unit-tested by `promtool` (built from its Go module by `e2e/toolchain/packaging.sh`), every
//! query of the rules and dashboards naming only metrics the operators export, and the charts
//! rendering both when asked. A missing tool fails the test; nothing is skipped.

use std::collections::BTreeSet;

use quorum_e2e::tools::{packaging_tool, repository_root, succeeds};
use serde_json::Value;

const CHARTS: [&str; 4] = [
    "quorum-etcd-operator",
    "quorum-mysql-operator",
    "quorum-redis-operator",
    "quorum-mongodb-operator",
];

#[test]
fn promtool_accepts_the_rules_and_every_alert_passes_its_unit_test() {
    let promtool = packaging_tool("promtool");
    let mut files = vec!["monitoring/prometheus-rules.yaml".to_string()];
    files.extend(
        CHARTS
            .iter()
            .map(|chart| format!("charts/{chart}/monitoring/rules.yaml")),
    );
    for file in &files {
        let (out, _) = succeeds(&promtool, &["check", "rules", file], None);
        assert!(out.contains("SUCCESS: 10 rules found"), "{file}: {out}");
    }
    let (out, err) = succeeds(&promtool, &["test", "rules", "monitoring/rules-test.yaml"], None);
    assert!(out.contains("SUCCESS"), "{out}{err}");
    // Every alert has a unit test.
    let tests = std::fs::read_to_string(repository_root().join("monitoring/rules-test.yaml")).unwrap();
    let rules = std::fs::read_to_string(repository_root().join("monitoring/prometheus-rules.yaml")).unwrap();
    for alert in rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!("alertname: {alert}\n")),
            "{alert} has no unit test in monitoring/rules-test.yaml"
        );
    }
}

/// The metric families an operator process exports, by name as `# TYPE` gives it, each with
/// one series recorded (a family without one is not rendered).
fn exported_families() -> BTreeSet<String> {
    use quorum_core::availability::metrics::Outcome;
    let metrics = quorum_core::metrics::Metrics::new();
    metrics.observe_reconcile("etcdclusters", std::time::Duration::from_millis(5));
    metrics.observe_error("etcdclusters", "apply");
    metrics.observe_backup_success("etcd", "prod", "main", 1.0);
    metrics.observe_backup_failure("etcd", "prod", "main");
    metrics.observe_members("etcd", "prod", "main", ["Healthy"], ["Healthy"]);
    metrics.set_leading("quorum-etcd-operator", true);
    let admin = &metrics.admin;
    admin.observe_call("etcd", "status", Outcome::Ok, 0.01);
    admin.observe_retry("etcd", "status");
    admin.breaker_opened("etcd");
    admin.observe_primary_change("etcd", "Failover", 1.0);
    admin.observe_failover_from_loss("etcd", 1.0);
    metrics
        .render()
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// The `quorum_*` series a PromQL expression reads, by family name.
fn families_in(expr: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let bytes = expr.as_bytes();
    let mut start = 0;
    while let Some(offset) = expr[start..].find("quorum_") {
        let begin = start + offset;
        let mut end = begin;
        while end < bytes.len() && (bytes[end].is_ascii_lowercase() || bytes[end] == b'_') {
            end += 1;
        }
        let name = &expr[begin..end];
        let family = ["_total", "_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        // A label value such as operator="quorum-etcd-operator" is not a series.
        if begin == 0 || !matches!(bytes[begin - 1], b'"' | b'-') {
            found.insert(family.to_string());
        }
        start = end;
    }
    found
}

#[test]
fn every_rule_and_panel_reads_only_metrics_the_operators_export() {
    let exported = exported_families();
    assert!(exported.contains("quorum_members"), "{exported:?}");
    let root = repository_root();
    let rules = std::fs::read_to_string(root.join("monitoring/prometheus-rules.yaml")).unwrap();
    let mut read = BTreeSet::new();
    for expr in rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("expr: "))
    {
        read.extend(families_in(expr));
    }
    let directory = root.join("monitoring/dashboards");
    let mut dashboards: Vec<_> = std::fs::read_dir(&directory)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    dashboards.sort();
    assert_eq!(
        dashboards.len(),
        5,
        "an overview and one per operator: {dashboards:?}"
    );
    for path in &dashboards {
        let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap())
            .unwrap_or_else(|error| panic!("{}: {error}", path.display()));
        let panels = dashboard["panels"].as_array().expect("panels");
        assert!(!panels.is_empty(), "{}", path.display());
        let ids: BTreeSet<i64> = panels.iter().map(|p| p["id"].as_i64().unwrap()).collect();
        assert_eq!(
            ids.len(),
            panels.len(),
            "panel ids are unique in {}",
            path.display()
        );
        assert!(dashboard["uid"].as_str().is_some_and(|uid| !uid.is_empty()));
        for panel in panels {
            let expr = panel["targets"][0]["expr"].as_str().expect("a query");
            let families = families_in(expr);
            assert!(!families.is_empty(), "{}: {expr}", path.display());
            read.extend(families);
        }
    }
    let unknown: Vec<&String> = read.iter().filter(|family| !exported.contains(*family)).collect();
    assert!(
        unknown.is_empty(),
        "not exported: {unknown:?}; exported: {exported:?}"
    );
}

#[test]
fn the_charts_render_the_rules_and_dashboards_only_when_asked() {
    let helm = packaging_tool("helm");
    for chart in CHARTS {
        let path = format!("charts/{chart}");
        let (plain, _) = succeeds(&helm, &["template", chart, &path], None);
        assert!(!plain.contains("kind: PrometheusRule"), "{chart}");
        assert!(!plain.contains("grafana_dashboard"), "{chart}");
        let (rendered, _) = succeeds(
            &helm,
            &[
                "template",
                chart,
                &path,
                "--set",
                "metrics.prometheusRule.enabled=true",
                "--set",
                "metrics.prometheusRule.labels.release=monitoring",
                "--set",
                "metrics.grafanaDashboards.enabled=true",
            ],
            None,
        );
        assert!(rendered.contains("kind: PrometheusRule"), "{chart}: {rendered}");
        assert!(rendered.contains("release: monitoring"), "{chart}: {rendered}");
        assert!(rendered.contains("- alert: QuorumLost"), "{chart}: {rendered}");
        assert!(
            rendered.contains(&format!("operator=\"{chart}\"")),
            "{chart}'s rules read its own series: {rendered}"
        );
        let engine = chart.trim_start_matches("quorum-").trim_end_matches("-operator");
        assert!(rendered.contains("grafana_dashboard: \"1\""), "{chart}");
        for file in ["quorum-overview.json", &format!("quorum-{engine}.json")] {
            assert!(
                rendered.contains(&format!("{file}: ")),
                "{chart} carries {file}: {rendered}"
            );
        }
    }
}
