//! The backup sink against a real S3-compatible server (gofakes3, multipart uploads over HTTP)
//! and against a local directory: the same scenarios run on both. No control plane is needed.

use std::{
    io,
    path::{Path, PathBuf},
    pin::Pin,
    task::{Context, Poll},
};

use quorum_core::backup::{BackupError, BackupObject, BackupSink, BackupTarget, PART_SIZE, Retention};
use quorum_e2e::s3::S3Server;
use rand::{RngCore, SeedableRng, rngs::StdRng};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};

/// Larger than one multipart part, and not a multiple of it, so the last part is a short one.
const LARGE_SIZE: usize = 12 * 1024 * 1024 + 12_345;

/// Where the scenarios store backups.
enum Fixture {
    // Boxed: a server (with its child process handle) is much larger than a path.
    S3(Box<S3Server>),
    Directory(PathBuf),
}

impl Fixture {
    async fn s3() -> Self {
        Fixture::S3(Box::new(S3Server::start().await))
    }

    fn directory() -> Self {
        let directory = std::env::temp_dir().join(format!(
            "quorum-backup-sink-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        Fixture::Directory(directory)
    }

    /// A sink for one cluster's backups: a prefix in the bucket, or a subdirectory.
    fn sink(&self, cluster: &str) -> BackupSink {
        let target = match self {
            Fixture::S3(server) => server.backup_target(Some(&format!("etcd/{cluster}"))),
            Fixture::Directory(directory) => BackupTarget::Filesystem {
                directory: directory.join(cluster),
            },
        };
        BackupSink::new(target).expect("backup sink")
    }

    fn expected_location(&self, cluster: &str, key: &str) -> String {
        match self {
            Fixture::S3(server) => format!("s3://{}/etcd/{cluster}/{key}", server.bucket()),
            Fixture::Directory(directory) => {
                let canonical = std::fs::canonicalize(directory.join(cluster)).expect("canonical path");
                format!("{}/{key}", canonical.display())
            }
        }
    }

    /// Nothing of an aborted upload may remain: no unfinished S3 multipart upload, no staging file.
    async fn assert_no_unfinished_upload(&self) {
        match self {
            Fixture::S3(server) => assert_eq!(server.unfinished_multipart_uploads().await, 0),
            Fixture::Directory(directory) => {
                let files = files_under(directory);
                assert!(files.is_empty(), "files left behind: {files:?}");
            }
        }
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Fixture::Directory(directory) = self {
            let _ = std::fs::remove_dir_all(directory);
        }
    }
}

fn files_under(directory: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(directory) else {
        return Vec::new();
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else {
            files.push(path);
        }
    }
    files
}

fn pseudo_random_bytes(size: usize, seed: u64) -> Vec<u8> {
    let mut bytes = vec![0_u8; size];
    StdRng::seed_from_u64(seed).fill_bytes(&mut bytes);
    bytes
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// A source that fails on every read, as a snapshot stream whose connection broke would.
struct BrokenSource;

impl AsyncRead for BrokenSource {
    fn poll_read(
        self: Pin<&mut Self>,
        _context: &mut Context<'_>,
        _buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::ConnectionReset,
            "snapshot stream reset",
        )))
    }
}

async fn round_trip(fixture: Fixture) {
    let sink = fixture.sink("cluster-a");
    let data = pseudo_random_bytes(LARGE_SIZE, 7);
    assert!(data.len() > PART_SIZE, "the object must span more than one part");
    let expected_sha256 = sha256_hex(&data);

    let stored = sink
        .upload("snapshot-0001.db", data.as_slice())
        .await
        .expect("upload");
    assert_eq!(stored.key, "snapshot-0001.db");
    assert_eq!(stored.size, data.len() as u64);
    assert_eq!(stored.sha256, expected_sha256);
    assert_eq!(
        stored.location,
        fixture.expected_location("cluster-a", "snapshot-0001.db")
    );

    let listed = sink.list().await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].key, "snapshot-0001.db");
    assert_eq!(listed[0].size, data.len() as u64);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64;
    assert!(
        (now - listed[0].last_modified.as_second()).abs() < 120,
        "last_modified {} is not recent",
        listed[0].last_modified
    );

    let mut downloaded = Vec::new();
    let report = sink
        .download(
            "snapshot-0001.db",
            &mut downloaded,
            Some(&expected_sha256.to_uppercase()),
        )
        .await
        .expect("download with the right checksum");
    assert_eq!(report.size, data.len() as u64);
    assert_eq!(report.sha256, expected_sha256);
    assert!(
        downloaded == data,
        "downloaded bytes differ from the uploaded ones"
    );

    let mut wrong = expected_sha256.clone().into_bytes();
    wrong[0] = if wrong[0] == b'0' { b'1' } else { b'0' };
    let wrong = String::from_utf8(wrong).expect("hex is ASCII");
    let error = sink
        .download("snapshot-0001.db", &mut Vec::new(), Some(&wrong))
        .await
        .expect_err("a checksum mismatch must be refused");
    match &error {
        BackupError::ChecksumMismatch { expected, actual, .. } => {
            assert_eq!(expected, &wrong);
            assert_eq!(actual, &expected_sha256);
        }
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
    assert_eq!(error.metric_label(), "checksum_mismatch");

    let missing = sink
        .download("snapshot-9999.db", &mut Vec::new(), None)
        .await
        .expect_err("a missing backup must be an error");
    assert!(matches!(missing, BackupError::NotFound { .. }), "{missing:?}");

    // Another cluster's sink on the same store sees none of it.
    assert!(fixture.sink("cluster-b").list().await.expect("list").is_empty());
}

fn keep(keep: usize) -> Retention {
    Retention {
        keep,
        ..Retention::default()
    }
}

fn keys(objects: Vec<BackupObject>) -> Vec<String> {
    objects.into_iter().map(|object| object.key).collect()
}

async fn retention(fixture: Fixture) {
    let sink = fixture.sink("cluster-a");
    let neighbour = fixture.sink("cluster-b");
    neighbour
        .upload("snapshot-0000.db", pseudo_random_bytes(1024, 0).as_slice())
        .await
        .expect("upload to the neighbour");
    for index in 1..=5_u64 {
        let data = pseudo_random_bytes(64 * 1024, index);
        sink.upload(&format!("snapshot-{index:04}.db"), data.as_slice())
            .await
            .expect("upload");
    }

    let refused = sink
        .apply_retention(&keep(0))
        .await
        .expect_err("keeping nothing is refused");
    assert!(matches!(refused, BackupError::InvalidRetention), "{refused:?}");
    assert_eq!(sink.list().await.expect("list").len(), 5);

    let deleted = sink.apply_retention(&keep(2)).await.expect("retention");
    assert_eq!(
        deleted,
        ["snapshot-0001.db", "snapshot-0002.db", "snapshot-0003.db"]
    );
    assert_eq!(
        keys(sink.list().await.expect("list")),
        ["snapshot-0004.db", "snapshot-0005.db"]
    );

    assert!(
        sink.apply_retention(&keep(2))
            .await
            .expect("retention")
            .is_empty(),
        "a second pass has nothing to delete"
    );
    assert_eq!(
        neighbour.list().await.expect("list").len(),
        1,
        "another prefix is untouched"
    );
}

/// One backup resource's retention sees only its own objects (its name's prefix) and never
/// deletes a protected one, however old.
async fn retention_of_one_policy(fixture: Fixture) {
    let sink = fixture.sink("cluster-a");
    for name in [
        "before-upgrade/main-1.db",
        "nightly/main-1.db",
        "nightly/main-2.db",
        "nightly/main-3.db",
        "nightly/main-4.db",
        "nightly-eu/main-1.db",
    ] {
        sink.upload(name, pseudo_random_bytes(1024, 1).as_slice())
            .await
            .expect("upload");
    }
    let retention = Retention {
        prefix: Some("nightly".into()),
        keep: 1,
        run_objects: 1,
        protected: [sink.location("nightly/main-2.db")].into(),
        made_since: None,
    };
    let deleted = sink.apply_retention(&retention).await.expect("retention");
    assert_eq!(deleted, ["nightly/main-1.db", "nightly/main-3.db"]);
    let mut left = keys(sink.list().await.expect("list"));
    left.sort();
    assert_eq!(
        left,
        [
            "before-upgrade/main-1.db",
            "nightly-eu/main-1.db",
            "nightly/main-2.db",
            "nightly/main-4.db"
        ]
    );

    // A policy created again under its name owns only the runs started since: its
    // predecessor's runs are neither pruned nor counted.
    for name in [
        "hourly/main-20261201T010000.000Z.db",
        "hourly/main-20261201T020000.000Z.db",
        "hourly/main-20261202T010000.000Z.db",
        "hourly/main-20261202T020000.000Z.db",
        "hourly/main-20261202T030000.000Z.db",
    ] {
        sink.upload(name, pseudo_random_bytes(1024, 2).as_slice())
            .await
            .expect("upload");
    }
    let retention = Retention {
        prefix: Some("hourly".into()),
        keep: 1,
        run_objects: 1,
        protected: Default::default(),
        made_since: Some("2026-12-02T00:00:00Z".parse().expect("timestamp")),
    };
    let deleted = sink.apply_retention(&retention).await.expect("retention");
    assert_eq!(
        deleted,
        [
            "hourly/main-20261202T010000.000Z.db",
            "hourly/main-20261202T020000.000Z.db"
        ]
    );
    let mut left: Vec<String> = keys(sink.list().await.expect("list"))
        .into_iter()
        .filter(|key| key.starts_with("hourly/"))
        .collect();
    left.sort();
    assert_eq!(
        left,
        [
            "hourly/main-20261201T010000.000Z.db",
            "hourly/main-20261201T020000.000Z.db",
            "hourly/main-20261202T030000.000Z.db"
        ]
    );
}

async fn broken_stream_leaves_nothing(fixture: Fixture) {
    let sink = fixture.sink("cluster-a");
    // The failure comes after more than one part was sent, so there is something to abort.
    let prefix_length = PART_SIZE + PART_SIZE / 2;
    let data = pseudo_random_bytes(prefix_length, 3);
    let error = sink
        .upload("snapshot-0001.db", data.as_slice().chain(BrokenSource))
        .await
        .expect_err("a broken source must fail the upload");
    match &error {
        BackupError::ReadSource { key, bytes_read, .. } => {
            assert_eq!(key, "snapshot-0001.db");
            assert_eq!(*bytes_read, prefix_length as u64);
        }
        other => panic!("expected a read error, got {other:?}"),
    }
    assert_eq!(error.metric_label(), "read_source");

    let empty = sink
        .upload("snapshot-0002.db", tokio::io::empty())
        .await
        .expect_err("an empty source must fail the upload");
    assert!(matches!(empty, BackupError::EmptySource { .. }), "{empty:?}");

    assert!(sink.list().await.expect("list").is_empty());
    let missing = sink
        .download("snapshot-0001.db", &mut Vec::new(), None)
        .await
        .expect_err("no object may exist");
    assert!(matches!(missing, BackupError::NotFound { .. }), "{missing:?}");
    fixture.assert_no_unfinished_upload().await;
}

async fn invalid_names_are_refused(fixture: Fixture) {
    let sink = fixture.sink("cluster-a");
    for name in ["", "../escape", "with space", "a//b"] {
        let error = sink
            .upload(name, b"data".as_slice())
            .await
            .expect_err("an invalid name must be refused");
        assert!(
            matches!(error, BackupError::InvalidName { .. }),
            "{name:?}: {error:?}"
        );
    }
    assert!(sink.list().await.expect("list").is_empty());
}

#[tokio::test]
async fn s3_round_trip() {
    round_trip(Fixture::s3().await).await;
}

#[tokio::test]
async fn s3_retention_keeps_the_newest() {
    retention(Fixture::s3().await).await;
}

#[tokio::test]
async fn s3_retention_of_one_policy_spares_others_and_protected_objects() {
    retention_of_one_policy(Fixture::s3().await).await;
}

#[tokio::test]
async fn s3_broken_stream_leaves_nothing() {
    broken_stream_leaves_nothing(Fixture::s3().await).await;
}

#[tokio::test]
async fn s3_invalid_names_are_refused() {
    invalid_names_are_refused(Fixture::s3().await).await;
}

#[tokio::test]
async fn directory_round_trip() {
    round_trip(Fixture::directory()).await;
}

#[tokio::test]
async fn directory_retention_keeps_the_newest() {
    retention(Fixture::directory()).await;
}

#[tokio::test]
async fn directory_retention_of_one_policy_spares_others_and_protected_objects() {
    retention_of_one_policy(Fixture::directory()).await;
}

#[tokio::test]
async fn directory_broken_stream_leaves_nothing() {
    broken_stream_leaves_nothing(Fixture::directory()).await;
}

#[tokio::test]
async fn directory_invalid_names_are_refused() {
    invalid_names_are_refused(Fixture::directory()).await;
}
