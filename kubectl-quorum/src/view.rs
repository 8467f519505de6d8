//! What `kubectl quorum status` shows: one shape for every engine, built from the cluster's own
//! status (what the operator last observed) and its pods' placement, without I/O.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use quorum_core::{
    crd::{BackupRecord, RecoveryRecord, RepairRecord},
    runner::is_paused,
};
use serde::Serialize;

/// Where a member's pod runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Placement {
    pub pod: String,
    pub node: Option<String>,
    /// The PersistentVolumeClaim of its data.
    pub volume: Option<String>,
}

/// One member.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MemberView {
    pub name: String,
    /// `leader`, `follower`, `learner`, `primary`, `replica`, `sentinel`, or the engine's state.
    pub role: String,
    /// `Healthy`, `Unhealthy` or `Unknown`, as the operator last observed it.
    pub health: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lag_seconds: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,
}

/// One condition, as the cluster reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ConditionView {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// The newest backup and how old it is.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BackupView {
    pub name: String,
    pub location: String,
    pub completed_at: String,
    pub age_seconds: i64,
}

/// The last failover or switchover.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FailoverView {
    pub from: String,
    pub to: String,
    pub at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_millis: Option<i64>,
    /// From the old primary's loss to the new primary accepting writes (or to the operator's
    /// first sight of it, where the database does not say).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_loss_millis: Option<i64>,
}

/// A cluster, as `status` shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterView {
    pub kind: String,
    pub name: String,
    pub namespace: String,
    /// Reconciliation paused (`kubectl quorum pause`).
    pub paused: bool,
    /// The leader (etcd) or primary.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub members: Vec<MemberView>,
    pub conditions: Vec<ConditionView>,
    /// A disruptive step recorded before it was taken and not finished yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<String>,
    /// What the operator waits for, when it waits (the `Progressing` condition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waiting_for: Option<String>,
    /// A repair asked for (`kubectl quorum repair`) and where it stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repair: Option<String>,
    /// A recovery asked for (`kubectl quorum recover`) and where it stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_backup: Option<BackupView>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_failover: Option<FailoverView>,
}

/// Pods of the cluster by name.
pub type Pods = BTreeMap<String, Placement>;

fn conditions(conditions: &[Condition]) -> Vec<ConditionView> {
    conditions
        .iter()
        .map(|condition| ConditionView {
            type_: condition.type_.clone(),
            status: condition.status.clone(),
            reason: condition.reason.clone(),
            message: condition.message.clone(),
        })
        .collect()
}

fn waiting_for(conditions: &[ConditionView]) -> Option<String> {
    conditions
        .iter()
        .find(|condition| condition.type_ == "Progressing" && condition.status == "True")
        .map(|condition| format!("{}: {}", condition.reason, condition.message))
}

fn backup(record: Option<&BackupRecord>, now: Timestamp) -> Option<BackupView> {
    record.map(|record| BackupView {
        name: record.name.clone(),
        location: record.location.clone(),
        completed_at: record.completed_at.0.to_string(),
        age_seconds: now.duration_since(record.completed_at.0).as_secs().max(0),
    })
}

/// A repair asked for and where it stands, for people.
fn repair(record: Option<&RepairRecord>) -> Option<String> {
    record.map(|record| format!("{} {}: {}", record.member, wire(&record.phase), record.message))
}

/// A recovery asked for and where it stands, for people.
fn recovery(record: Option<&RecoveryRecord>) -> Option<String> {
    record.map(|record| {
        format!(
            "from {} {}: {}",
            record.member,
            wire(&record.phase),
            record.message
        )
    })
}

/// The wire name of a typed record (its serialized form), for people.
fn wire<T: Serialize>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(text)) => text,
        Ok(other) => other.to_string(),
        Err(_) => "?".to_string(),
    }
}

fn frame<K: kube::Resource<DynamicType = ()>>(cluster: &K) -> ClusterView {
    ClusterView {
        kind: K::kind(&()).to_string(),
        name: cluster.name_any(),
        namespace: cluster.namespace().unwrap_or_default(),
        paused: is_paused(cluster),
        primary: None,
        version: None,
        members: Vec::new(),
        conditions: Vec::new(),
        in_flight: None,
        waiting_for: None,
        repair: None,
        recovery: None,
        last_backup: None,
        last_failover: None,
    }
}

fn member(name: &str, role: &str, health: &str, pods: &Pods) -> MemberView {
    MemberView {
        name: name.to_string(),
        role: role.to_string(),
        health: health.to_string(),
        reason: None,
        lag_seconds: None,
        version: None,
        placement: pods.get(name).cloned(),
    }
}

/// The parts every engine's status has: conditions (and what they say the operator waits for)
/// and the newest backup.
fn finish(
    mut view: ClusterView,
    raw_conditions: &[Condition],
    last_backup: Option<&BackupRecord>,
    now: Timestamp,
) -> ClusterView {
    view.conditions = conditions(raw_conditions);
    view.waiting_for = waiting_for(&view.conditions);
    view.last_backup = backup(last_backup, now);
    view
}

/// A step in flight, for people: `<action> of <member> since <time>`.
fn in_flight<A: Serialize>(action: &A, member: &str, started_at: &Time) -> String {
    format!("{} of {member} since {}", wire(action), started_at.0)
}

pub fn etcd(cluster: &etcd_operator::crd::EtcdCluster, pods: &Pods, now: Timestamp) -> ClusterView {
    let mut view = frame(cluster);
    let Some(status) = &cluster.status else {
        return view;
    };
    view.primary = status.leader.clone();
    view.version = status.version.clone();
    view.members = status
        .members
        .iter()
        .map(|m| {
            let role = match (m.leader, m.learner) {
                (true, _) => "leader",
                (_, true) => "learner",
                _ => "follower",
            };
            MemberView {
                reason: m
                    .unhealthy_since
                    .as_ref()
                    .map(|since| format!("unhealthy since {}", since.0)),
                version: status.version.clone(),
                ..member(&m.name, role, &m.health, pods)
            }
        })
        .collect();
    view.in_flight = status.in_flight.as_ref().map(|step| {
        in_flight(
            &step.action,
            &format!("member {}", step.ordinal),
            &step.started_at,
        )
    });
    view.last_failover = status.last_leader_change.as_ref().map(observed_failover);
    view.repair = repair(status.repair.as_ref());
    view.recovery = recovery(status.recovery.as_ref());
    finish(view, &status.conditions, status.last_backup.as_ref(), now)
}

pub fn mysql(cluster: &mysql_operator::crd::MySQLCluster, pods: &Pods, now: Timestamp) -> ClusterView {
    let mut view = frame(cluster);
    view.version = Some(cluster.spec.version.clone());
    let Some(status) = &cluster.status else {
        return view;
    };
    view.primary = status.primary.clone();
    view.members = status
        .members
        .iter()
        .map(|m| MemberView {
            reason: m.errant.clone().or_else(|| m.message.clone()),
            lag_seconds: m.lag_seconds,
            version: Some(cluster.spec.version.clone()),
            ..member(&m.name, &m.role, &m.health, pods)
        })
        .collect();
    view.in_flight = status
        .in_flight
        .as_ref()
        .map(|step| in_flight(&step.action, &step.member, &step.started_at));
    view.last_failover = status.last_failover.as_ref().map(|failover| FailoverView {
        from: failover.from.clone(),
        to: failover.to.clone(),
        at: failover.completed_at.0.to_string(),
        duration_millis: Some(failover.duration_millis),
        from_loss_millis: failover.from_loss_millis,
    });
    view.repair = repair(status.repair.as_ref());
    view.recovery = recovery(status.recovery.as_ref());
    finish(view, &status.conditions, status.last_backup.as_ref(), now)
}

/// A change of primary the database made by itself, as the operator saw it.
fn observed_failover(failover: &quorum_core::crd::ObservedFailover) -> FailoverView {
    FailoverView {
        from: failover.from.clone(),
        to: failover.to.clone(),
        at: failover.observed_at.0.to_string(),
        duration_millis: None,
        from_loss_millis: failover.from_loss_millis,
    }
}

pub fn redis(cluster: &redis_operator::crd::RedisCluster, pods: &Pods, now: Timestamp) -> ClusterView {
    let mut view = frame(cluster);
    view.version = Some(cluster.spec.version.clone());
    let Some(status) = &cluster.status else {
        return view;
    };
    view.primary = status.primary.clone();
    let nodes = status.nodes.iter().map(|node| MemberView {
        reason: node.message.clone(),
        version: Some(cluster.spec.version.clone()),
        ..member(&node.name, &node.role, &node.health, pods)
    });
    let sentinels = status
        .sentinels
        .iter()
        .map(|sentinel| member(&sentinel.name, "sentinel", &sentinel.health, pods));
    view.members = nodes.chain(sentinels).collect();
    view.in_flight = status.rebalance.as_ref().map(wire);
    view.last_failover = status.last_failover.as_ref().map(observed_failover);
    view.repair = repair(status.repair.as_ref());
    view.recovery = recovery(status.recovery.as_ref());
    finish(view, &status.conditions, status.last_backup.as_ref(), now)
}

pub fn mongodb(
    replica_set: &mongodb_operator::crd::MongoDBReplicaSet,
    pods: &Pods,
    now: Timestamp,
) -> ClusterView {
    let mut view = frame(replica_set);
    view.version = Some(replica_set.spec.version.clone());
    let Some(status) = &replica_set.status else {
        return view;
    };
    view.primary = status.primary.clone();
    view.members = status
        .members
        .iter()
        .map(|m| MemberView {
            reason: m.message.clone(),
            lag_seconds: m.lag_seconds,
            version: m.version.clone(),
            ..member(&m.name, &m.state.to_ascii_lowercase(), &m.health, pods)
        })
        .collect();
    view.in_flight = status
        .membership_change
        .as_ref()
        .map(|change| in_flight(&change.kind, &change.member, &change.started_at));
    view.last_failover = status.last_failover.as_ref().map(observed_failover);
    view.repair = repair(status.repair.as_ref());
    view.recovery = recovery(status.recovery.as_ref());
    finish(view, &status.conditions, status.last_backup.as_ref(), now)
}

/// Whether text goes to a terminal (colour) or a pipe (plain).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Colour,
    Plain,
}

fn paint(style: Style, health: &str) -> String {
    let code = match health {
        "Healthy" | "True" => "32",
        "Unhealthy" | "False" => "31",
        _ => "33",
    };
    match style {
        Style::Colour => format!("\x1b[{code}m{health}\x1b[0m"),
        Style::Plain => health.to_string(),
    }
}

/// `status` as text: the cluster, its members as a tree, what it waits for, its conditions,
/// its newest backup and its last failover.
pub fn render(view: &ClusterView, style: Style) -> String {
    let mut out = String::new();
    let ready = view
        .conditions
        .iter()
        .find(|condition| condition.type_ == "Ready")
        .map_or_else(
            || "Ready unknown".to_string(),
            |c| format!("Ready {}", paint(style, &c.status)),
        );
    out.push_str(&format!(
        "{}/{} in {}: {ready}{}\n",
        view.kind,
        view.name,
        view.namespace,
        if view.paused {
            ", reconciliation PAUSED"
        } else {
            ""
        }
    ));
    if let Some(primary) = &view.primary {
        out.push_str(&format!("  primary: {primary}\n"));
    }
    if let Some(version) = &view.version {
        out.push_str(&format!("  version: {version}\n"));
    }
    out.push_str(&format!("  members: {}\n", view.members.len()));
    for (index, member) in view.members.iter().enumerate() {
        let branch = if index + 1 == view.members.len() {
            "└─"
        } else {
            "├─"
        };
        let mut line = format!(
            "  {branch} {} {} {}",
            member.name,
            member.role,
            paint(style, &member.health)
        );
        if let Some(lag) = member.lag_seconds {
            line.push_str(&format!(" lag {lag}s"));
        }
        if let Some(placement) = &member.placement {
            if let Some(node) = &placement.node {
                line.push_str(&format!(" node {node}"));
            }
            if let Some(volume) = &placement.volume {
                line.push_str(&format!(" volume {volume}"));
            }
        }
        if let Some(reason) = &member.reason {
            line.push_str(&format!(" ({reason})"));
        }
        out.push_str(&line);
        out.push('\n');
    }
    if let Some(step) = &view.in_flight {
        out.push_str(&format!("  in flight: {step}\n"));
    }
    if let Some(waiting) = &view.waiting_for {
        out.push_str(&format!("  waiting for: {waiting}\n"));
    }
    if let Some(repair) = &view.repair {
        out.push_str(&format!("  repair: {repair}\n"));
    }
    if let Some(recovery) = &view.recovery {
        out.push_str(&format!("  recovery: {recovery}\n"));
    }
    out.push_str("  conditions:\n");
    for condition in &view.conditions {
        out.push_str(&format!(
            "    {} {} {}: {}\n",
            condition.type_,
            paint(style, &condition.status),
            condition.reason,
            condition.message
        ));
    }
    match &view.last_backup {
        Some(backup) => out.push_str(&format!(
            "  last backup: {} at {} ({}s ago) {}\n",
            backup.name, backup.completed_at, backup.age_seconds, backup.location
        )),
        None => out.push_str("  last backup: none\n"),
    }
    if let Some(failover) = &view.last_failover {
        out.push_str(&format!(
            "  last failover: {} -> {} at {}{}{}\n",
            failover.from,
            failover.to,
            failover.at,
            failover
                .duration_millis
                .map_or_else(String::new, |millis| format!(" in {millis} ms")),
            failover
                .from_loss_millis
                .map_or_else(String::new, |millis| format!(
                    ", {millis} ms from the old primary's loss"
                ))
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: Time(Timestamp::UNIX_EPOCH),
            observed_generation: None,
        }
    }

    fn mysql_cluster() -> mysql_operator::crd::MySQLCluster {
        let mut cluster: mysql_operator::crd::MySQLCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "mysql.quorum.dev/v1alpha1",
            "kind": "MySQLCluster",
            "metadata": {"name": "shop", "namespace": "prod", "annotations": {"quorum.dev/paused": "true"}},
            "spec": {"replicas": 2, "flavor": "MariaDB", "version": "10.11", "storage": {"size": "1Gi"}}
        }))
        .expect("a MySQLCluster");
        cluster.status = Some(mysql_operator::crd::MySQLClusterStatus {
            primary: Some("shop-0".into()),
            members: vec![
                mysql_operator::crd::MemberStatus {
                    name: "shop-0".into(),
                    role: "primary".into(),
                    health: "Healthy".into(),
                    gtid: None,
                    lag_seconds: None,
                    errant: None,
                    message: None,
                    failing_since: None,
                },
                mysql_operator::crd::MemberStatus {
                    name: "shop-1".into(),
                    role: "replica".into(),
                    health: "Unknown".into(),
                    gtid: None,
                    lag_seconds: Some(3),
                    errant: None,
                    message: Some("unreachable from the operator: timed out".into()),
                    failing_since: None,
                },
            ],
            last_backup: Some(BackupRecord {
                name: "nightly".into(),
                location: "s3://backups/prod/shop/nightly/shop-1.sql".into(),
                completed_at: Time("2026-11-26T00:00:00Z".parse().unwrap()),
                size_bytes: 10,
                sha256: "00".into(),
            }),
            conditions: vec![
                condition("Ready", "False", "MemberUnknown", "shop-1 is Unknown"),
                condition(
                    "Progressing",
                    "True",
                    "SwitchoverBlocked",
                    "member 1 is unreachable",
                ),
            ],
            recovery: Some(RecoveryRecord {
                member: "shop-2".into(),
                phase: quorum_core::crd::RecoveryPhase::Waiting,
                replaced: None,
                message: "member 2 does not answer".into(),
            }),
            ..Default::default()
        });
        cluster
    }

    #[test]
    fn a_mysql_cluster_shows_roles_health_lag_placement_waits_and_backup_age() {
        let pods = Pods::from([(
            "shop-1".to_string(),
            Placement {
                pod: "shop-1".into(),
                node: Some("node-a".into()),
                volume: Some("data-shop-1".into()),
            },
        )]);
        let now: Timestamp = "2026-11-26T01:00:00Z".parse().unwrap();
        let view = mysql(&mysql_cluster(), &pods, now);
        assert!(view.paused);
        assert_eq!(view.primary.as_deref(), Some("shop-0"));
        assert_eq!(view.members[1].role, "replica");
        assert_eq!(view.members[1].lag_seconds, Some(3));
        assert_eq!(
            view.members[1].placement.as_ref().unwrap().node.as_deref(),
            Some("node-a")
        );
        assert_eq!(
            view.waiting_for.as_deref(),
            Some("SwitchoverBlocked: member 1 is unreachable")
        );
        assert_eq!(view.last_backup.as_ref().unwrap().age_seconds, 3600);

        let text = render(&view, Style::Plain);
        assert!(
            text.starts_with("MySQLCluster/shop in prod: Ready False, reconciliation PAUSED\n"),
            "{text}"
        );
        assert!(
            text.contains("└─ shop-1 replica Unknown lag 3s node node-a volume data-shop-1 (unreachable from the operator: timed out)"),
            "{text}"
        );
        assert!(
            text.contains("last backup: nightly at 2026-11-26T00:00:00Z (3600s ago)"),
            "{text}"
        );
        assert!(
            text.contains("  recovery: from shop-2 Waiting: member 2 does not answer\n"),
            "{text}"
        );
        assert!(!text.contains('\x1b'), "plain text has no colour codes");
        assert!(render(&view, Style::Colour).contains("\x1b[33mUnknown\x1b[0m"));

        let json = serde_json::to_value(&view).unwrap();
        assert_eq!(json["members"][1]["lagSeconds"], 3);
        assert_eq!(json["lastBackup"]["ageSeconds"], 3600);
        assert_eq!(json["paused"], true);
    }

    #[test]
    fn a_cluster_the_operator_has_not_reported_yet_shows_no_members() {
        let mut cluster = mysql_cluster();
        cluster.status = None;
        let view = mysql(&cluster, &Pods::new(), Timestamp::UNIX_EPOCH);
        assert!(view.members.is_empty());
        assert!(render(&view, Style::Plain).contains("Ready unknown"));
    }
}
