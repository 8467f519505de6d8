//! Reconciling an `EtcdBackup`: core's backup controller
//! ([`quorum_core::backup::controller`]) around etcd's part, a snapshot from one healthy
//! member.
//!
//! Snapshots of one cluster are stored under `<destination prefix>/<namespace>/<cluster>/`, so
//! retention never touches another cluster's backups sharing a bucket or directory.

use std::sync::Arc;

use kube::{ResourceExt, runtime::controller::Action};
use quorum_core::{
    ReconcileError,
    availability::{clients::MemberKey, retry::Idempotency},
    backup::{
        BackupSink,
        controller::{self, BackupControllerError, BackupEngine, Snapshot, Sources},
        digest::ContentFingerprint,
        job::{JobOutcome, JobSettings},
    },
    runner::{Context, object_key},
};

use crate::{
    backup::{BackupStepError, choose_snapshot_member, snapshot_to_sink},
    crd::{EtcdBackup, EtcdBackupSpec, EtcdBackupStatus, EtcdCluster, EtcdContent},
    reconcile::State,
    resolver::member_name,
};

quorum_core::backup_resource!(EtcdBackup, EtcdBackupSpec, EtcdBackupStatus);

impl ReconcileError for BackupStepError {
    fn metric_label(&self) -> &'static str {
        BackupStepError::metric_label(self)
    }
}

/// etcd's part of a backup: one member, its snapshot.
struct EtcdSnapshots<'a> {
    context: &'a Context<State>,
}

/// The snapshot a cluster was created from, and the one it restores in place while it does.
fn restore_locations(cluster: &EtcdCluster) -> Vec<String> {
    cluster
        .status
        .iter()
        .flat_map(|status| [&status.restored_from, &status.restoring_from])
        .flatten()
        .map(|record| record.location.clone())
        .collect()
}

/// The member a snapshot is read from.
struct Member {
    cluster: String,
    ordinal: usize,
}

impl BackupEngine for EtcdSnapshots<'_> {
    type Backup = EtcdBackup;
    type Cluster = EtcdCluster;
    type Source = Member;
    /// What the snapshot holds, when it could be read.
    type Info = Option<EtcdContent>;
    type Error = BackupStepError;

    const ENGINE: &'static str = crate::observe::ENGINE;
    const MAX_CLUSTER_NAME: usize = crate::crd::MAX_NAME;

    fn allow_http(&self) -> bool {
        self.context.state.settings.members.allow_http_backups
    }

    fn pod_overrides<'c>(&self, cluster: &'c EtcdCluster) -> Option<&'c quorum_core::crd::PodOverrides> {
        cluster.spec.pod_template.as_ref()
    }

    fn secrets(&self, cluster: &EtcdCluster) -> Vec<String> {
        cluster
            .spec
            .tls
            .iter()
            .filter_map(|tls| tls.client_secret_name.clone())
            .collect()
    }

    fn jobs(&self) -> Option<JobSettings> {
        let settings = &self.context.state.settings;
        JobSettings::when_configured(&settings.members, &settings.operator_image)
    }

    async fn sources(
        &self,
        _: &EtcdBackup,
        cluster: &EtcdCluster,
    ) -> Result<Sources<Member>, BackupStepError> {
        crate::reconcile::hand_client_tls(self.context, cluster)
            .await
            .map_err(|error| BackupStepError::ClientTls(error.to_string()))?;
        let resolver = self.context.state.resolver(cluster);
        let candidates = cluster
            .status
            .as_ref()
            .map_or(0, |status| status.members.len())
            .max(cluster.spec.replicas as usize);
        let view = self
            .context
            .state
            .clients
            .observe(&object_key(cluster), &resolver, candidates)
            .await;
        Ok(match choose_snapshot_member(&view) {
            Some(ordinal) => Sources::From(vec![Member {
                cluster: cluster.name_any(),
                ordinal,
            }]),
            None => Sources::Wait {
                reason: "NoHealthyMember",
                message: "no healthy member to take a snapshot from; waiting".to_string(),
            },
        })
    }

    fn restored_from(&self, cluster: &EtcdCluster) -> Vec<String> {
        restore_locations(cluster)
    }

    fn member(&self, source: &Member) -> String {
        member_name(&source.cluster, source.ordinal)
    }

    fn extension(&self, _: &Member) -> String {
        "db".to_string()
    }

    async fn produce(
        &self,
        backup: &EtcdBackup,
        cluster: &EtcdCluster,
        source: &Member,
        sink: &BackupSink,
        name: &str,
    ) -> Result<Snapshot<Option<EtcdContent>>, BackupStepError> {
        let resolver = self.context.state.resolver(cluster);
        let key = object_key(cluster);
        let (stored, content) = snapshot_to_sink(
            &self.context.state.clients,
            &key,
            &resolver,
            source.ordinal,
            sink,
            name,
            backup.spec.backup.verify,
        )
        .await?;
        Ok(Snapshot {
            stored,
            info: content,
        })
    }

    fn record(&self, status: &mut EtcdBackupStatus, snapshots: &[(&Member, Snapshot<Option<EtcdContent>>)]) {
        if let Some((_, snapshot)) = snapshots.first() {
            status.content = snapshot.info.clone();
        }
    }

    fn describe(&self, member: &Member, snapshot: &Snapshot<Option<EtcdContent>>) -> String {
        let keys = match &snapshot.info {
            Some(content) => format!(
                " ({} keys at revision {})",
                content.fingerprint.records, content.revision
            ),
            None => String::new(),
        };
        format!(
            "{} bytes{keys} from {} to {} (sha256 {})",
            snapshot.stored.size,
            self.member(member),
            snapshot.stored.location,
            snapshot.stored.sha256
        )
    }

    fn drill_cluster(
        &self,
        backup: &EtcdBackup,
        cluster: &EtcdCluster,
        name: &str,
    ) -> Result<EtcdCluster, String> {
        Ok(drill_cluster(backup, cluster, name))
    }

    fn drill_claims(&self, name: &str) -> Vec<String> {
        vec![quorum_core::pod::data_claim_name(&member_name(name, 0))]
    }

    fn drill_ready(&self, scratch: &EtcdCluster) -> bool {
        scratch.status.as_ref().is_some_and(|status| {
            quorum_core::backup::drill::restored_and_ready(
                scratch.spec.restore_from.is_some(),
                &status.conditions,
            )
        })
    }

    async fn drill_content(
        &self,
        scratch: &EtcdCluster,
        recorded: &EtcdBackupStatus,
    ) -> Result<ContentFingerprint, String> {
        let revision = recorded
            .content
            .as_ref()
            .map(|content| content.revision)
            .ok_or("the snapshot recorded no revision to read at")?;
        crate::reconcile::hand_client_tls(self.context, scratch)
            .await
            .map_err(|error| format!("the client certificate: {error}"))?;
        let resolver = self.context.state.resolver(scratch);
        let endpoint = resolver
            .client_url(0)
            .ok_or_else(|| format!("{} has no address", member_name(&scratch.name_any(), 0)))?;
        let admin = self
            .context
            .state
            .clients
            .call(
                &MemberKey::new(object_key(scratch), "0"),
                &endpoint,
                "status",
                Idempotency::Read,
                |admin| async move {
                    admin.status().await?;
                    Ok(admin)
                },
            )
            .await
            .map_err(|error| format!("unreachable: {error}"))?;
        admin
            .content_at(revision)
            .await
            .map(|digest| digest.fingerprint())
            .map_err(|error| error.to_string())
    }

    fn recorded_content(&self, status: &EtcdBackupStatus) -> Option<ContentFingerprint> {
        status.content.as_ref().map(|content| content.fingerprint.clone())
    }
}

/// The throw-away cluster `name` a drill restores `backup`'s newest snapshot into: one member of
/// `cluster`'s version, storage, pod template and TLS (whose certificates must then name the
/// drill's member too), with no backups of its own.
pub fn drill_cluster(backup: &EtcdBackup, cluster: &EtcdCluster, name: &str) -> EtcdCluster {
    let mut spec = cluster.spec.clone();
    spec.replicas = 1;
    spec.backup = None;
    spec.restore_from = Some(quorum_core::crd::RestoreSource {
        backup_name: backup.name_any(),
    });
    let mut scratch = EtcdCluster::new(name, spec);
    scratch.metadata.namespace = backup.namespace();
    scratch
}

/// Reconciles one `EtcdBackup`.
pub async fn reconcile_backup(
    backup: Arc<EtcdBackup>,
    context: Arc<Context<State>>,
) -> Result<Action, BackupControllerError<BackupStepError>> {
    let engine = EtcdSnapshots { context: &context };
    controller::reconcile(&engine, backup.as_ref(), &context).await
}

/// Takes one run of an `EtcdBackup` in a backup Job's process.
pub async fn run_backup(
    backup: Arc<EtcdBackup>,
    context: Arc<Context<State>>,
    run: quorum_core::backup::job::JobRun,
) -> JobOutcome {
    let engine = EtcdSnapshots { context: &context };
    controller::run_in_job(&engine, backup.as_ref(), &context, run).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{BackupRecord, EtcdClusterStatus};

    /// Retention keeps the snapshot a cluster was created from and the one it restores in
    /// place, whatever the backup's newest is by then.
    #[test]
    fn a_restored_cluster_holds_the_snapshots_it_restores() {
        let mut cluster = crate::resources::tests::cluster();
        assert!(restore_locations(&cluster).is_empty());
        let record = |location: &str| BackupRecord {
            name: "nightly".into(),
            location: location.into(),
            completed_at: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::UNIX_EPOCH),
            size_bytes: 1,
            sha256: "0".repeat(64),
        };
        cluster.status = Some(EtcdClusterStatus {
            restored_from: Some(record("s3://backups/main-1.db")),
            ..EtcdClusterStatus::default()
        });
        assert_eq!(restore_locations(&cluster), ["s3://backups/main-1.db"]);
        cluster.status = Some(EtcdClusterStatus {
            restored_from: Some(record("s3://backups/main-1.db")),
            restoring_from: Some(record("s3://backups/main-7.db")),
            ..EtcdClusterStatus::default()
        });
        assert_eq!(
            restore_locations(&cluster),
            ["s3://backups/main-1.db", "s3://backups/main-7.db"]
        );
    }
}
