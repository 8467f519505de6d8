//! Restoring one member from a stored snapshot, before its etcd starts.
//!
//! A cluster created with `spec.restoreFrom` runs this in an init container of every member
//! pod (`etcd-operator restore-member ...`, the operator image carries `etcdutl`). It restores
//! only members of the bootstrap (initial cluster state `new`) whose data directory is empty:
//! a pod restarted later, or a member added by a scale-up, keeps or syncs its own data.
//! The snapshot's SHA-256, recorded when it was taken, is verified before it is used.

use std::path::PathBuf;

use quorum_core::backup::{BackupError, BackupSink, LocateError, S3Credentials, StoreSettings, locate};

use crate::backup::{RestoreError, restore_data_dir};

/// What the init container is told (flags of `etcd-operator restore-member`).
#[derive(clap::Args, Clone, Debug)]
pub struct RestoreMemberArgs {
    /// Where the snapshot is: `s3://bucket/key` or an absolute path.
    #[arg(long)]
    pub location: String,
    /// The snapshot's SHA-256 (hex), as recorded by the backup.
    #[arg(long)]
    pub sha256: String,
    /// This member's name.
    #[arg(long)]
    pub name: String,
    /// `name=peerURL,...` of the bootstrap members.
    #[arg(long)]
    pub initial_cluster: String,
    /// `new` restores; `existing` (a member joining later) does nothing.
    #[arg(long)]
    pub initial_cluster_state: String,
    #[arg(long)]
    pub initial_cluster_token: String,
    /// This member's peer URL.
    #[arg(long)]
    pub peer_url: String,
    #[arg(long)]
    pub data_dir: PathBuf,
    #[arg(long, default_value = "/usr/local/bin/etcdutl")]
    pub etcdutl: PathBuf,
    #[command(flatten)]
    pub store: StoreSettings,
}

/// What happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreOutcome {
    Restored,
    Skipped(&'static str),
}

/// Why the restore failed. Nothing is left in the data directory.
#[derive(Debug, thiserror::Error)]
pub enum RestoreMemberError {
    #[error("{0} (credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")]
    Locate(#[from] LocateError),
    #[error("fetching the snapshot: {0}")]
    Fetch(#[from] BackupError),
    #[error("writing the snapshot to {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("restoring: {0}")]
    Restore(#[from] RestoreError),
}

/// Restores this member if it is a bootstrap member with an empty data directory.
pub async fn restore_member(
    args: &RestoreMemberArgs,
    credentials: Option<S3Credentials>,
) -> Result<RestoreOutcome, RestoreMemberError> {
    if args.initial_cluster_state != "new" {
        return Ok(RestoreOutcome::Skipped("the member joins an existing cluster"));
    }
    let has_data = std::fs::read_dir(&args.data_dir).is_ok_and(|mut entries| entries.next().is_some());
    if has_data {
        return Ok(RestoreOutcome::Skipped("the data directory already holds data"));
    }
    let (target, key) = locate(&args.location, &args.store, credentials)?;
    let sink = BackupSink::new(target)?;
    let mut snapshot_path = args.data_dir.clone().into_os_string();
    snapshot_path.push(".snapshot");
    let snapshot_path = PathBuf::from(snapshot_path);
    if let Some(parent) = snapshot_path.parent() {
        std::fs::create_dir_all(parent).map_err(|source| RestoreMemberError::Write {
            path: parent.to_path_buf(),
            source,
        })?;
    }
    let file = tokio::fs::File::create(&snapshot_path)
        .await
        .map_err(|source| RestoreMemberError::Write {
            path: snapshot_path.clone(),
            source,
        })?;
    let downloaded = sink.download(&key, file, Some(&args.sha256)).await;
    if let Err(error) = downloaded {
        let _ = std::fs::remove_file(&snapshot_path);
        return Err(error.into());
    }
    let restored = restore_data_dir(
        &args.etcdutl,
        &snapshot_path,
        &args.name,
        &args.initial_cluster,
        &args.initial_cluster_token,
        &args.peer_url,
        &args.data_dir,
    )
    .await;
    let _ = std::fs::remove_file(&snapshot_path);
    restored?;
    Ok(RestoreOutcome::Restored)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: RestoreMemberArgs,
    }

    fn args(location: &str) -> RestoreMemberArgs {
        Cli::parse_from([
            "x",
            "--location",
            location,
            "--sha256=00",
            "--name=main-0",
            "--initial-cluster=main-0=http://a:2380",
            "--initial-cluster-state=new",
            "--initial-cluster-token=t",
            "--peer-url=http://a:2380",
            "--data-dir=/var/lib/etcd/data",
        ])
        .args
    }

    #[tokio::test]
    async fn members_joining_later_or_holding_data_are_not_restored() {
        let mut joining = args("/nowhere/x.db");
        joining.initial_cluster_state = "existing".into();
        assert_eq!(
            restore_member(&joining, None).await.unwrap(),
            RestoreOutcome::Skipped("the member joins an existing cluster")
        );
        let data = std::env::temp_dir().join(format!("quorum-restore-skip-{}", std::process::id()));
        std::fs::create_dir_all(data.join("member")).unwrap();
        let mut holding = args("/nowhere/x.db");
        holding.data_dir = data.clone();
        assert_eq!(
            restore_member(&holding, None).await.unwrap(),
            RestoreOutcome::Skipped("the data directory already holds data")
        );
        std::fs::remove_dir_all(data).unwrap();
    }
}
