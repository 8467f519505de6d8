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
    backup::{
        BackupSink,
        controller::{self, BackupControllerError, BackupEngine, Snapshot, Sources},
        job::{JobOutcome, JobSettings},
    },
    runner::{Context, object_key},
};

use crate::{
    backup::{BackupStepError, choose_snapshot_member, snapshot_to_sink},
    crd::{EtcdBackup, EtcdBackupSpec, EtcdBackupStatus, EtcdCluster},
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

/// The member a snapshot is read from.
struct Member {
    cluster: String,
    ordinal: usize,
}

impl BackupEngine for EtcdSnapshots<'_> {
    type Backup = EtcdBackup;
    type Cluster = EtcdCluster;
    type Source = Member;
    type Info = ();
    type Error = BackupStepError;

    const ENGINE: &'static str = crate::observe::ENGINE;

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

    fn member(&self, source: &Member) -> String {
        member_name(&source.cluster, source.ordinal)
    }

    fn extension(&self, _: &Member) -> String {
        "db".to_string()
    }

    async fn produce(
        &self,
        cluster: &EtcdCluster,
        source: &Member,
        sink: &BackupSink,
        name: &str,
    ) -> Result<Snapshot<()>, BackupStepError> {
        let resolver = self.context.state.resolver(cluster);
        let key = object_key(cluster);
        let stored = snapshot_to_sink(
            &self.context.state.clients,
            &key,
            &resolver,
            source.ordinal,
            sink,
            name,
        )
        .await?;
        Ok(Snapshot { stored, info: () })
    }

    fn describe(&self, member: &Member, snapshot: &Snapshot<()>) -> String {
        format!(
            "{} bytes from {} to {} (sha256 {})",
            snapshot.stored.size,
            self.member(member),
            snapshot.stored.location,
            snapshot.stored.sha256
        )
    }
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
    started: jiff::Timestamp,
) -> JobOutcome {
    let engine = EtcdSnapshots { context: &context };
    controller::run_in_job(&engine, backup.as_ref(), &context, started).await
}
