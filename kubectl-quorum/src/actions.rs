//! What the actions write, built without I/O: merge patches of annotations, and backup objects.

use quorum_core::{
    crd::{BackupDestination, RECOVER_ANNOTATION, REPAIR_ANNOTATION},
    runner::PAUSE_ANNOTATION,
};
use serde_json::{Value, json};

use crate::target::{Engine, Target};

/// Why an action cannot be taken on a cluster; the message says what to do instead.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("{0} has no switchover: {1}")]
    NoSwitchover(String, &'static str),
    #[error(
        "{target} has no spec.backup.destination to back up to; pass --like <an existing {backup_kind}> to use its destination"
    )]
    NoDestination {
        target: String,
        backup_kind: &'static str,
    },
    #[error("the cluster to restore {0} from has no spec to copy")]
    NoSpec(String),
    #[error(
        "{0} has no point-in-time restore: MySQL/MariaDB clusters (a MySQLBackup with archiveBinlogs) and MongoDB replica sets (a MongoDBBackup with archiveOplog, to a time) do"
    )]
    NoPointInTime(String),
}

/// Where a point-in-time restore stops: `restoreFrom.pointInTime`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PointInTime {
    /// RFC 3339.
    Time(String),
    /// A GTID position.
    Gtid(String),
}

/// The merge patch that pauses (`true`) or resumes (`false`) reconciliation.
pub fn pause(paused: bool) -> Value {
    let value = if paused { json!("true") } else { Value::Null };
    json!({"metadata": {"annotations": {PAUSE_ANNOTATION: value}}})
}

/// The merge patch that asks for a switchover to member `to` (a pod name of the cluster).
pub fn switchover(target: &Target, to: &str) -> Result<Value, Refusal> {
    match target.engine {
        Engine::MySql => Ok(json!({
            "metadata": {"annotations": {mysql_operator::crd::SWITCHOVER_ANNOTATION: to}}
        })),
        Engine::Etcd => Err(Refusal::NoSwitchover(
            target.to_string(),
            "etcd elects its leader itself, and the operator moves leadership off a member before it restarts it",
        )),
        Engine::Redis => Err(Refusal::NoSwitchover(
            target.to_string(),
            "Sentinel (replication mode) or the cluster (cluster mode) fails over; run SENTINEL FAILOVER or CLUSTER FAILOVER through `kubectl exec`",
        )),
        Engine::MongoDb => Err(Refusal::NoSwitchover(
            target.to_string(),
            "the replica set elects its primary; run rs.stepDown() on the primary through `kubectl exec`",
        )),
    }
}

/// The merge patch that asks the operator to rebuild `member` (a pod name of the cluster) from
/// its peers, or, with `None`, ends the request. Every engine takes it.
pub fn repair(member: Option<&str>) -> Value {
    json!({"metadata": {"annotations": {REPAIR_ANNOTATION: member}}})
}

/// The merge patch that asks the operator to bring a cluster back into service from `member` (a
/// pod name of the cluster) when its primary or majority is lost for good, or, with `None`, ends
/// the request. Every engine takes it (Redis in replication mode; in cluster mode, where Redis
/// Cluster promotes replicas itself, the operator says in `status.recovery` that it does not).
pub fn recover(member: Option<&str>) -> Value {
    json!({"metadata": {"annotations": {RECOVER_ANNOTATION: member}}})
}

/// A one-shot backup of `target` named `name` to `destination` (the cluster's
/// `spec.backup.destination`, or another backup's): the object a person would create.
pub fn backup(
    target: &Target,
    name: &str,
    destination: Option<&BackupDestination>,
) -> Result<Value, Refusal> {
    let destination = destination.ok_or_else(|| Refusal::NoDestination {
        target: target.to_string(),
        backup_kind: target.engine.backup_kind(),
    })?;
    Ok(json!({
        "apiVersion": format!("{}/v1alpha1", group(target.engine)),
        "kind": target.engine.backup_kind(),
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/created-by": "kubectl-quorum"}
        },
        "spec": {"clusterName": target.name, "destination": destination}
    }))
}

/// A new cluster `target` restored from the backup `backup`, with the spec of the cluster the
/// backup was taken of (`source_spec`) except its backup policy (a copy does not start writing
/// next to the original's backups) and with `restoreFrom` set.
/// With `point`, to that point in time (MySQL/MariaDB only).
pub fn restore(
    target: &Target,
    source_spec: &Value,
    backup: &str,
    point: Option<&PointInTime>,
) -> Result<Value, Refusal> {
    let mut spec = source_spec
        .as_object()
        .cloned()
        .ok_or_else(|| Refusal::NoSpec(target.to_string()))?;
    spec.remove("backup");
    let mut restore_from = json!({"backupName": backup});
    match (point, target.engine) {
        (None, _) => {}
        (Some(PointInTime::Time(time)), Engine::MySql) => restore_from["pointInTime"] = json!({"time": time}),
        (Some(PointInTime::Gtid(gtid)), Engine::MySql) => restore_from["pointInTime"] = json!({"gtid": gtid}),
        (Some(PointInTime::Time(time)), Engine::MongoDb) => {
            restore_from["pointInTime"] = json!({"time": time})
        }
        (Some(_), _) => return Err(Refusal::NoPointInTime(target.to_string())),
    }
    spec.insert("restoreFrom".to_string(), restore_from);
    Ok(json!({
        "apiVersion": format!("{}/v1alpha1", group(target.engine)),
        "kind": target.engine.kind(),
        "metadata": {
            "name": target.name,
            "labels": {"app.kubernetes.io/created-by": "kubectl-quorum"}
        },
        "spec": spec
    }))
}

/// The API group of an engine's kinds.
pub fn group(engine: Engine) -> &'static str {
    match engine {
        Engine::Etcd => "etcd.quorum.dev",
        Engine::MySql => "mysql.quorum.dev",
        Engine::Redis => "redis.quorum.dev",
        Engine::MongoDb => "mongodb.quorum.dev",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::parse;

    #[test]
    fn repair_sets_or_ends_the_request() {
        assert_eq!(
            repair(Some("main-1")),
            json!({"metadata": {"annotations": {"quorum.dev/repair": "main-1"}}})
        );
        assert_eq!(
            repair(None),
            json!({"metadata": {"annotations": {"quorum.dev/repair": null}}})
        );
    }

    #[test]
    fn recover_sets_or_ends_the_request() {
        assert_eq!(
            recover(Some("shop-1")),
            json!({"metadata": {"annotations": {"quorum.dev/recover-from": "shop-1"}}})
        );
        assert_eq!(
            recover(None),
            json!({"metadata": {"annotations": {"quorum.dev/recover-from": null}}})
        );
    }

    #[test]
    fn pause_sets_and_resume_removes_the_annotation() {
        assert_eq!(
            pause(true),
            json!({"metadata": {"annotations": {"quorum.dev/paused": "true"}}})
        );
        assert_eq!(
            pause(false),
            json!({"metadata": {"annotations": {"quorum.dev/paused": null}}})
        );
    }

    #[test]
    fn switchover_is_mysql_s_annotation_and_refused_elsewhere_with_what_to_do() {
        assert_eq!(
            switchover(&parse("mysql/shop").unwrap(), "shop-1"),
            Ok(json!({"metadata": {"annotations": {"mysql.quorum.dev/switchover-to": "shop-1"}}}))
        );
        for target in ["etcd/main", "redis/cache", "mongodb/orders"] {
            let refused = switchover(&parse(target).unwrap(), "x-1").unwrap_err();
            assert!(refused.to_string().contains("has no switchover: "), "{refused}");
        }
    }

    #[test]
    fn a_backup_is_the_engine_s_backup_kind_and_needs_a_destination() {
        let destination: BackupDestination =
            serde_json::from_value(json!({"filesystem": {"path": "/backups"}})).unwrap();
        let target = parse("redis/cache").unwrap();
        let object = backup(&target, "cache-now", Some(&destination)).unwrap();
        assert_eq!(object["kind"], "RedisBackup");
        assert_eq!(object["apiVersion"], "redis.quorum.dev/v1alpha1");
        assert_eq!(object["spec"]["clusterName"], "cache");
        assert_eq!(object["spec"]["destination"]["filesystem"]["path"], "/backups");
        let refused = backup(&target, "cache-now", None).unwrap_err();
        assert!(
            refused.to_string().contains("--like <an existing RedisBackup>"),
            "{refused}"
        );
    }

    #[test]
    fn a_restore_is_a_new_cluster_with_the_source_spec_restore_from_and_no_backup_policy() {
        let source = json!({"replicas": 3, "version": "3.6.16", "backup": {"schedule": "0 3 * * *"}});
        let object = restore(&parse("etcd/copy").unwrap(), &source, "nightly", None).unwrap();
        assert_eq!(object["kind"], "EtcdCluster");
        assert_eq!(object["metadata"]["name"], "copy");
        assert_eq!(
            object["spec"],
            json!({"replicas": 3, "version": "3.6.16", "restoreFrom": {"backupName": "nightly"}})
        );
        assert!(restore(&parse("etcd/copy").unwrap(), &Value::Null, "nightly", None).is_err());
    }

    #[test]
    fn a_point_in_time_restore_is_asked_of_mysql_clusters_and_mongodb_sets_only() {
        let source = json!({"replicas": 3, "flavor": "MariaDB"});
        let at = PointInTime::Time("2026-12-01T09:38:00Z".into());
        let object = restore(&parse("mysql/copy").unwrap(), &source, "pitr", Some(&at)).unwrap();
        assert_eq!(
            object["spec"]["restoreFrom"],
            json!({"backupName": "pitr", "pointInTime": {"time": "2026-12-01T09:38:00Z"}})
        );
        let gtid = PointInTime::Gtid("0-1-42".into());
        let object = restore(&parse("mysql/copy").unwrap(), &source, "pitr", Some(&gtid)).unwrap();
        assert_eq!(
            object["spec"]["restoreFrom"]["pointInTime"],
            json!({"gtid": "0-1-42"})
        );
        let object = restore(
            &parse("mongodb/copy").unwrap(),
            &json!({"members": 3}),
            "pitr",
            Some(&at),
        )
        .unwrap();
        assert_eq!(
            object["spec"]["restoreFrom"],
            json!({"backupName": "pitr", "pointInTime": {"time": "2026-12-01T09:38:00Z"}})
        );
        for (target, point) in [("redis/copy", &at), ("mongodb/copy", &gtid)] {
            let refused = restore(&parse(target).unwrap(), &source, "pitr", Some(point)).unwrap_err();
            assert!(
                refused.to_string().contains("has no point-in-time restore"),
                "{target}: {refused}"
            );
        }
    }
}
