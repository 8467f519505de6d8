//! Backups and restore against real processes: a 3-member etcd cluster behind fault proxies,
//! a real S3-compatible server and a local directory as sinks, and `etcdutl` restoring the
//! stored snapshot into a new 3-member cluster on another loopback block.

use crate::support;

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use crate::support::{CLUSTER, Harness, KEY};
use etcd_client::GetOptions;
use etcd_operator::backup::{
    BackupStepError, choose_snapshot_member, restore_data_dir, restore_plan, snapshot_to_sink,
};
use quorum_core::backup::{BackupSink, BackupTarget};
use quorum_e2e::{etcd::EtcdProcesses, fault_proxy::Fault, s3::S3Server, tools, wait};
use sha2::{Digest, Sha256};

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(label: &str) -> Self {
        let directory = std::env::temp_dir().join(format!(
            "quorum-backup-restore-{label}-{}-{}",
            std::process::id(),
            jiff::Timestamp::now().as_nanosecond()
        ));
        std::fs::create_dir_all(&directory).expect("scratch directory");
        Self(directory)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every key and value in the cluster behind `urls`.
async fn keyspace(urls: &[String]) -> BTreeMap<String, String> {
    let mut client = etcd_client::Client::connect(urls, None).await.expect("connect");
    let response = client
        .get("", Some(GetOptions::new().with_all_keys()))
        .await
        .expect("read every key");
    response
        .kvs()
        .iter()
        .map(|kv| {
            (
                kv.key_str().expect("utf-8 key").to_string(),
                kv.value_str().expect("utf-8 value").to_string(),
            )
        })
        .collect()
}

/// Writes, overwrites and deletes keys, returning what the keyspace must hold afterwards.
async fn write_keys(urls: &[String]) -> BTreeMap<String, String> {
    let mut client = etcd_client::Client::connect(urls, None).await.expect("connect");
    let mut expected = BTreeMap::new();
    for i in 0..300 {
        let key = format!("app/key-{i:03}");
        // Some large values, so the snapshot spans many stream messages and sink reads.
        let value = if i % 30 == 0 {
            format!("large-{i}-{}", "x".repeat(200_000))
        } else {
            format!("value-{i}")
        };
        client.put(key.as_str(), value.as_str(), None).await.expect("put");
        expected.insert(key, value);
    }
    for i in (0..300).step_by(7) {
        let key = format!("app/key-{i:03}");
        client
            .put(key.as_str(), "overwritten", None)
            .await
            .expect("overwrite");
        expected.insert(key, "overwritten".to_string());
    }
    for i in (0..300).step_by(11) {
        let key = format!("app/key-{i:03}");
        client.delete(key.as_str(), None).await.expect("delete");
        expected.remove(&key);
    }
    expected
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[tokio::test]
async fn snapshots_are_stored_verified_and_restore_into_a_new_cluster() {
    let harness = Harness::start(3).await;
    let expected = write_keys(&harness.processes.client_urls()).await;
    assert_eq!(keyspace(&harness.processes.client_urls()).await, expected);

    let view = harness.observe().await;
    let ordinal = choose_snapshot_member(&view).expect("a healthy member to snapshot");
    assert_ne!(Some(ordinal), view.leader(), "a follower spares the leader");
    let resolver = harness.resolver();

    // (a) Into the S3 server.
    let s3 = S3Server::start().await;
    let s3_sink = BackupSink::new(s3.backup_target(Some("etcd"))).expect("S3 sink");
    let name = quorum_core::backup::object_name("EtcdBackup", "test", CLUSTER, jiff::Timestamp::now(), "db");
    // With drills asked for: the content is recorded too.
    let (stored, content) =
        snapshot_to_sink(&harness.clients, KEY, &resolver, ordinal, &s3_sink, &name, true)
            .await
            .expect("snapshot into S3");
    let content = content.expect("the snapshot's content recorded");
    assert_eq!(
        content.fingerprint.records,
        expected.len() as u64,
        "every key counted once"
    );
    assert_eq!(stored.key, name);
    assert_eq!(stored.location, format!("s3://{}/etcd/{name}", s3.bucket()));
    assert!(
        stored.size > 300 * 1024,
        "the large values are in it: {} bytes",
        stored.size
    );
    let listed = s3_sink.list().await.expect("list");
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(
        (listed[0].key.as_str(), listed[0].size),
        (name.as_str(), stored.size)
    );
    let mut downloaded = Vec::new();
    let download = s3_sink
        .download(&name, &mut downloaded, Some(&stored.sha256))
        .await
        .expect("download with the recorded checksum");
    assert_eq!(download.size, stored.size);
    assert_eq!(downloaded.len() as u64, stored.size);
    assert_eq!(sha256_hex(&downloaded), stored.sha256);
    // What was stored is etcd's stream itself: the database and its trailing SHA-256.
    let (database, trailer) = downloaded.split_at(downloaded.len() - 32);
    assert_eq!(Sha256::digest(database).as_slice(), trailer);
    assert_eq!(s3.unfinished_multipart_uploads().await, 0);

    // (b) Into a directory.
    let directory = Scratch::new("sink");
    let directory_sink = BackupSink::new(BackupTarget::Filesystem {
        directory: directory.0.clone(),
    })
    .expect("directory sink");
    // Without drills: the keyspace is not read a second time.
    let (in_directory, not_recorded) = snapshot_to_sink(
        &harness.clients,
        KEY,
        &resolver,
        ordinal,
        &directory_sink,
        &name,
        false,
    )
    .await
    .expect("snapshot into a directory");
    assert_eq!(not_recorded, None);
    let file = std::fs::read(directory.0.join(&name)).expect("the stored file");
    assert_eq!(file.len() as u64, in_directory.size);
    assert_eq!(sha256_hex(&file), in_directory.sha256);
    let canonical = std::fs::canonicalize(directory.0.join(&name)).expect("canonical path");
    assert_eq!(in_directory.location, canonical.display().to_string());

    // Restore: download (verifying the recorded checksum), then one data directory per member
    // of a new cluster on a new loopback block.
    let scratch = Scratch::new("restore");
    let snapshot_path = scratch.0.join("snapshot.db");
    let mut snapshot_file = tokio::fs::File::create(&snapshot_path)
        .await
        .expect("snapshot file");
    s3_sink
        .download(&name, &mut snapshot_file, Some(&stored.sha256))
        .await
        .expect("download for restore");
    drop(snapshot_file);

    let mut restored = EtcdProcesses::new();
    let members: Vec<(String, String)> = (0..3)
        .map(|index| (format!("restored-{index}"), restored.peer_url(index)))
        .collect();
    let plan = restore_plan(&members, &restored.cluster_token()).expect("plan");
    let etcdutl = tools::etcdutl_binary();
    for member in &plan.members {
        let data_dir = restored.data_dir(&member.name);
        restore_data_dir(
            &etcdutl,
            &snapshot_path,
            &member.name,
            &plan.initial_cluster,
            &plan.token,
            &member.peer_url,
            &data_dir,
        )
        .await
        .expect("restore");
        assert!(
            data_dir.join("member").is_dir(),
            "{} restored",
            data_dir.display()
        );
        // A second run (an init container after a pod restart) leaves the member alone.
        restore_data_dir(
            &etcdutl,
            &snapshot_path,
            &member.name,
            &plan.initial_cluster,
            &plan.token,
            &member.peer_url,
            &data_dir,
        )
        .await
        .expect("restoring again is a no-op");
    }
    for (index, member) in plan.members.iter().enumerate() {
        restored
            .spawn(&member.name, index, &plan.initial_cluster, "new")
            .await;
    }
    for index in 0..plan.members.len() {
        restored.wait_healthy(index).await;
    }

    let restored_urls = restored.client_urls();
    assert_eq!(
        keyspace(&restored_urls).await,
        expected,
        "the same keys and values"
    );
    // What a restore drill compares: the restored member, at the revision the snapshot
    // recorded, holds what the snapshot recorded; a key changed since shows at a later one.
    let admin = etcd_operator::admin::EtcdAdmin::connect(&restored_urls[0], Duration::from_secs(5), None)
        .await
        .expect("connect to a restored member");
    let at_backup = admin
        .content_at(content.revision)
        .await
        .expect("read at the revision");
    assert_eq!(at_backup.fingerprint(), content.fingerprint);
    let mut writer = etcd_client::Client::connect([restored_urls[0].as_str()], None)
        .await
        .expect("connect");
    writer.put("app/key-001", "changed", None).await.expect("put");
    let now = admin.status().await.expect("status").revision;
    let changed = admin.content_at(now).await.expect("read now");
    assert_eq!(changed.records(), at_backup.records());
    assert_ne!(
        changed.fingerprint(),
        content.fingerprint,
        "a changed value shows"
    );
    let mut client = etcd_client::Client::connect(&restored_urls, None)
        .await
        .expect("connect");
    let membership = client.member_list().await.expect("member list");
    let mut listed: Vec<(String, Vec<String>)> = membership
        .members()
        .iter()
        .map(|m| (m.name().to_string(), m.peer_urls().to_vec()))
        .collect();
    listed.sort();
    let planned: Vec<(String, Vec<String>)> = members
        .iter()
        .map(|(name, url)| (name.clone(), vec![url.clone()]))
        .collect();
    assert_eq!(listed, planned, "exactly the three new members");
    assert!(membership.members().iter().all(|m| !m.is_learner()));

    // A new cluster, not a copy of the old one's identity.
    let original_id = view.reports.values().next().expect("a report").cluster_id;
    let restored_id = client
        .status()
        .await
        .expect("status")
        .header()
        .expect("header")
        .cluster_id();
    assert_ne!(restored_id, original_id);
}

#[tokio::test]
async fn a_blackholed_member_fails_the_snapshot_within_the_timeout_and_nothing_is_stored() {
    let harness = Harness::start(1).await;
    write_keys(&harness.processes.client_urls()).await;
    let resolver = harness.resolver();
    // Warm the client cache: the blackhole must also silence an established connection.
    harness.observe().await;

    let s3 = S3Server::start().await;
    let s3_sink = BackupSink::new(s3.backup_target(Some("etcd"))).expect("S3 sink");
    let directory = Scratch::new("blackhole");
    let directory_sink = BackupSink::new(BackupTarget::Filesystem {
        directory: directory.0.clone(),
    })
    .expect("directory sink");
    let name = quorum_core::backup::object_name("EtcdBackup", "test", CLUSTER, jiff::Timestamp::now(), "db");

    harness.proxies[&0].set(Fault::Blackhole);
    for sink in [&s3_sink, &directory_sink] {
        let started = std::time::Instant::now();
        let error = snapshot_to_sink(&harness.clients, KEY, &resolver, 0, sink, &name, false)
            .await
            .expect_err("a blackholed member gives no snapshot");
        // Two attempts of 800 ms and a short backoff, an HTTP/2 keep-alive timeout on the
        // established connection, or an open circuit: all before any upload starts.
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "failed after {:?}: {error}",
            started.elapsed()
        );
        assert!(
            matches!(error, BackupStepError::Unreachable { ordinal: 0, .. }),
            "{error}"
        );
    }
    assert!(s3_sink.list().await.expect("list").is_empty());
    assert!(directory_sink.list().await.expect("list").is_empty());

    // Unknown is not down: once the path heals, the same member serves a snapshot.
    harness.proxies[&0].set(Fault::None);
    let (stored, _) = wait::until(
        "a snapshot after the blackhole lifts",
        Duration::from_secs(60),
        || async {
            snapshot_to_sink(&harness.clients, KEY, &resolver, 0, &s3_sink, &name, false)
                .await
                .map_err(|error| error.to_string())
        },
    )
    .await;
    assert_eq!(s3_sink.list().await.expect("list").len(), 1);
    assert!(stored.size > 0);
    // Asked only now: the server answers 404 to the question until a first upload was made.
    assert_eq!(
        s3.unfinished_multipart_uploads().await,
        0,
        "the failed attempts left no upload behind"
    );
}

#[tokio::test]
async fn a_snapshot_may_take_longer_than_the_call_timeout_while_it_makes_progress() {
    let harness = Harness::start(1).await;
    let urls = harness.processes.client_urls();
    let mut client = etcd_client::Client::connect(&urls, None).await.expect("connect");
    for i in 0..2 {
        client
            .put(format!("bulk/{i:02}"), "z".repeat(1_000_000), None)
            .await
            .expect("put");
    }
    let directory = Scratch::new("slow");
    let sink = BackupSink::new(BackupTarget::Filesystem {
        directory: directory.0.clone(),
    })
    .expect("directory sink");
    let name = quorum_core::backup::object_name("EtcdBackup", "test", CLUSTER, jiff::Timestamp::now(), "db");

    // Every forwarded chunk waits: the 2 MB stream takes well over the 800 ms call timeout.
    harness.proxies[&0].set(Fault::Delay(Duration::from_millis(10)));
    let started = std::time::Instant::now();
    let (stored, _) = snapshot_to_sink(&harness.clients, KEY, &harness.resolver(), 0, &sink, &name, false)
        .await
        .expect("a slow but steady snapshot is stored");
    let took = started.elapsed();
    assert!(took > support::quick_policy().timeout, "took only {took:?}");
    assert!(stored.size > 2_000_000, "{} bytes", stored.size);
    let file = std::fs::read(directory.0.join(&name)).expect("the stored file");
    assert_eq!(sha256_hex(&file), stored.sha256);
}

#[tokio::test]
async fn a_member_cut_off_mid_snapshot_fails_it_and_nothing_is_stored() {
    let harness = Harness::start(1).await;
    // About 24 MB, so the snapshot through a slowed proxy takes far longer than the test waits.
    let urls = harness.processes.client_urls();
    let mut client = etcd_client::Client::connect(&urls, None).await.expect("connect");
    for i in 0..24 {
        client
            .put(format!("bulk/{i:02}"), "y".repeat(1_000_000), None)
            .await
            .expect("put");
    }
    let resolver = harness.resolver();
    let s3 = S3Server::start().await;
    let s3_sink = BackupSink::new(s3.backup_target(Some("etcd"))).expect("S3 sink");
    let name = quorum_core::backup::object_name("EtcdBackup", "test", CLUSTER, jiff::Timestamp::now(), "db");

    harness.proxies[&0].set(Fault::Delay(Duration::from_millis(20)));
    let started = std::time::Instant::now();
    let snapshot = snapshot_to_sink(&harness.clients, KEY, &resolver, 0, &s3_sink, &name, false);
    let cut = async {
        // Let the stream start, then cut the member off.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        harness.proxies[&0].set(Fault::Blackhole);
    };
    let (result, ()) = tokio::join!(snapshot, cut);
    let error = result.expect_err("a member cut off mid-stream gives no snapshot");
    assert!(
        matches!(
            error,
            BackupStepError::Snapshot { .. } | BackupStepError::Stalled { .. }
        ),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "gave up after {:?}",
        started.elapsed()
    );
    assert!(s3_sink.list().await.expect("list").is_empty(), "nothing stored");
    assert_eq!(
        s3.unfinished_multipart_uploads().await,
        0,
        "the upload was aborted"
    );
}
