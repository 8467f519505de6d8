//! What every engine's backup tests check the same way: a cluster's `BackupStale` condition
//! and the backup metrics its operator exposes.

use std::time::Duration;

use kube::{
    Api, Client, Resource,
    api::{ApiResource, DynamicObject},
};

use crate::wait;

/// A backup policy that never comes due during a test (once a year), with `maxAgeMinutes: 1`:
/// the cluster's `BackupStale` turns True a minute after it was created unless a backup lands.
pub fn stale_after_a_minute(destination: &std::path::Path) -> serde_json::Value {
    serde_json::json!({
        "schedule": "0 0 1 1 *",
        "destination": {"filesystem": {"path": destination.display().to_string()}},
        "retain": 1,
        "maxAgeMinutes": 1,
    })
}

/// Holds the scheduled backup `name` (of kind `K`): no more runs during the test, so retention
/// leaves the runs it took as they are.
pub async fn hold_schedule<K>(backups: &Api<K>, name: &str)
where
    K: Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    backups
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"spec": {"schedule": "0 0 1 1 *"}})),
        )
        .await
        .expect("hold the schedule");
}

/// Waits until the `BackupStale` condition of cluster `name` (of kind `K`) has `status`
/// (`"True"` or `"False"`), and returns its message.
pub async fn backup_stale_until<K: Resource<DynamicType = ()>>(
    client: &Client,
    namespace: &str,
    name: &str,
    status: &str,
    timeout: Duration,
) -> String {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &ApiResource::erase::<K>(&()));
    wait::until(
        &format!("{} {name} BackupStale={status}", K::kind(&())),
        timeout,
        || async {
            let object = api.get(name).await.map_err(|e| e.to_string())?;
            let conditions = object.data["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let stale = conditions.iter().find(|c| c["type"] == "BackupStale");
            match stale {
                Some(condition) if condition["status"] == status => {
                    Ok(condition["message"].as_str().unwrap_or_default().to_string())
                }
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// The value of the sample `metric{labels}` in a Prometheus text exposition, where `labels` is
/// written as the exposition writes it (`engine="etcd",namespace="ns",cluster="main"`).
pub fn sample(exposition: &str, metric: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{metric}{{{labels}}} ");
    exposition
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse().ok())
}

/// Asserts that an operator's metrics (`exposition`) give `completed_at`, in whole seconds as
/// status records it, as the newest successful backup of `namespace/cluster`.
pub fn assert_last_success(
    exposition: &str,
    engine: &str,
    namespace: &str,
    cluster: &str,
    completed_at: k8s_openapi::jiff::Timestamp,
) {
    let labels = format!(r#"engine="{engine}",namespace="{namespace}",cluster="{cluster}""#);
    assert_eq!(
        sample(
            exposition,
            "quorum_backup_last_success_timestamp_seconds",
            &labels
        ),
        Some(completed_at.as_second() as f64),
        "{exposition}"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_found_by_its_metric_and_labels() {
        let text = "# TYPE quorum_backup_last_success_timestamp_seconds gauge\n\
                    quorum_backup_last_success_timestamp_seconds{engine=\"etcd\",namespace=\"a\",cluster=\"main\"} 1700000000.5\n\
                    quorum_backup_last_success_timestamp_seconds{engine=\"etcd\",namespace=\"b\",cluster=\"main\"} 12.0\n";
        let metric = "quorum_backup_last_success_timestamp_seconds";
        assert_eq!(
            sample(text, metric, r#"engine="etcd",namespace="b",cluster="main""#),
            Some(12.0)
        );
        assert_eq!(
            sample(text, metric, r#"engine="etcd",namespace="a",cluster="main""#),
            Some(1_700_000_000.5)
        );
        assert_eq!(
            sample(text, metric, r#"engine="etcd",namespace="c",cluster="main""#),
            None
        );
    }
}
