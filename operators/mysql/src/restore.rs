//! Restoring a new cluster from a `MySQLBackup`: reading the stored snapshot back from the
//! backup's destination into a member, verified against what the backup recorded. No
//! Kubernetes here: the reconciler reads the backup and its credentials, and passes a
//! [`StoredSnapshot`].
//!
//! The snapshot is streamed from the store into the server as it is read, and its SHA-256 is
//! known only at the end. So the end of the stream is held back until the digest matches:
//! [`snapshot_in`] refuses a stream without its trailer, or with anything after it, and a
//! stream whose digest differs gets a line after its trailer. A restore that did not verify
//! is an error, whatever the server already executed; the member then holds part of a
//! snapshot, which the next attempt (each database and account is dropped before it is
//! recreated) replaces.

use quorum_core::backup::{BackupError, BackupSink, BackupTarget, scoped_target};
use tokio::io::AsyncWriteExt;

use crate::admin::{
    AdminError, MySqlAdmin,
    gtid::GtidPosition,
    snapshot::{SnapshotError, snapshot_in},
};

/// A snapshot a `MySQLBackup` stored, and what it recorded about it.
#[derive(Clone, Debug)]
pub struct StoredSnapshot {
    /// The `MySQLBackup`.
    pub backup: String,
    pub sink: BackupSink,
    /// The object's name in `sink`.
    pub key: String,
    /// Where it is, as the backup recorded it.
    pub location: String,
    /// As the backup recorded it, lowercase hex.
    pub sha256: String,
    /// The GTID position the backup recorded.
    pub position: GtidPosition,
}

impl StoredSnapshot {
    /// The snapshot a backup of `cluster` in `namespace` stored at `location`, in the store
    /// the backup's destination maps to (`target`, unscoped). The backup controller stores
    /// each cluster's snapshots below `<namespace>/<cluster>` of the destination; the object's
    /// name is what follows that in `location`.
    ///
    /// # Errors
    /// A message when the store cannot be built or `location` is not in it.
    pub fn locate(
        backup: &str,
        target: BackupTarget,
        namespace: &str,
        cluster: &str,
        location: &str,
        sha256: &str,
        position: GtidPosition,
    ) -> Result<Self, String> {
        let sink =
            BackupSink::new(scoped_target(target, namespace, cluster)).map_err(|error| error.to_string())?;
        let key = location
            .strip_prefix(&sink.location(""))
            .filter(|key| !key.is_empty())
            .ok_or_else(|| {
                format!(
                    "the snapshot's location {location} is not in the backup's destination ({})",
                    sink.location("")
                )
            })?
            .to_string();
        Ok(Self {
            backup: backup.to_string(),
            sink,
            key,
            location: location.to_string(),
            sha256: sha256.to_ascii_lowercase(),
            position,
        })
    }
}

/// Why a restore failed. The member may hold part of the snapshot.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// Reading the object failed, or its bytes do not have the recorded SHA-256.
    #[error("reading {key}: {source}")]
    Fetch {
        key: String,
        #[source]
        source: BackupError,
    },
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
    /// The stream's header names another position than the backup recorded.
    #[error("the snapshot was taken at GTID position {stream}, the backup recorded {recorded}")]
    PositionMismatch { stream: String, recorded: String },
    #[error("setting the GTID history to the backup's position: {0}")]
    History(#[source] AdminError),
}

/// Streams `snapshot` into the member behind `admin`, verifies it, and makes its position the
/// member's GTID history ([`MySqlAdmin::adopt_position`]). Returns the position. The member's
/// read-only state is left as it was.
///
/// # Errors
/// [`RestoreError::Fetch`] for a missing or unreadable object or a digest that differs;
/// `Snapshot` for a stream the server or the format check refused; `PositionMismatch`;
/// `History`. After any of them the member holds what the server executed so far.
pub async fn restore_snapshot(
    admin: &MySqlAdmin,
    snapshot: &StoredSnapshot,
) -> Result<GtidPosition, RestoreError> {
    let (writer, reader) = tokio::io::duplex(1 << 20);
    let fetch = async move {
        let mut writer = writer;
        let fetched = snapshot
            .sink
            .download(&snapshot.key, &mut writer, Some(&snapshot.sha256))
            .await;
        if fetched.is_err() {
            // Bytes that failed the check never end a stream that reads as complete.
            let _ = writer.write_all(b"-- not verified\n").await;
        }
        fetched
    };
    let restore = snapshot_in(admin, tokio::io::BufReader::new(reader));
    let (fetched, restored) = tokio::join!(fetch, restore);
    // The store's error says why a stream was cut short; the server's would only say it was.
    fetched.map_err(|source| RestoreError::Fetch {
        key: snapshot.key.clone(),
        source,
    })?;
    let position = restored?;
    if position != snapshot.position {
        return Err(RestoreError::PositionMismatch {
            stream: position.to_string(),
            recorded: snapshot.position.to_string(),
        });
    }
    admin
        .adopt_position(&position)
        .await
        .map_err(RestoreError::History)?;
    Ok(position)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Flavor;

    fn position() -> GtidPosition {
        GtidPosition::parse(Flavor::MariaDB, "0-1-42").unwrap()
    }

    #[test]
    fn a_snapshot_is_found_below_its_cluster_in_the_destination() {
        let directory = std::env::temp_dir().join(format!("quorum-restore-locate-{}", std::process::id()));
        let target = BackupTarget::Filesystem {
            directory: directory.clone(),
        };
        let sink = BackupSink::new(scoped_target(target.clone(), "prod", "shop")).unwrap();
        let location = sink.location("shop/shop-20260101T000000Z.sql");
        let snapshot = StoredSnapshot::locate(
            "nightly",
            target.clone(),
            "prod",
            "shop",
            &location,
            "AB".repeat(32).as_str(),
            position(),
        )
        .unwrap();
        assert_eq!(snapshot.key, "shop/shop-20260101T000000Z.sql");
        assert_eq!(snapshot.sha256, "ab".repeat(32));

        let elsewhere = StoredSnapshot::locate("nightly", target, "prod", "other", &location, "", position())
            .unwrap_err();
        assert!(
            elsewhere.contains("is not in the backup's destination"),
            "{elsewhere}"
        );
        let _ = std::fs::remove_dir_all(directory);
    }

    #[test]
    fn an_s3_snapshot_is_found_below_the_prefix() {
        let target = BackupTarget::S3(quorum_core::backup::S3Target {
            bucket: "backups".into(),
            prefix: Some("mysql".into()),
            endpoint: None,
            region: None,
            access_key_id: "id".into(),
            secret_access_key: "secret".into(),
            allow_http: false,
        });
        let snapshot = StoredSnapshot::locate(
            "nightly",
            target,
            "prod",
            "shop",
            "s3://backups/mysql/prod/shop/shop/shop-20260101T000000Z.sql",
            &"0".repeat(64),
            position(),
        )
        .unwrap();
        assert_eq!(snapshot.key, "shop/shop-20260101T000000Z.sql");
    }
}
