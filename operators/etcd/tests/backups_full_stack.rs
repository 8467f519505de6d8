//! Backups through the whole operator: `EtcdBackup` resources on the real control plane, a
//! real etcd cluster (local members), and real stores (a directory and an S3-compatible
//! server). Also: a cluster's backup policy becomes an owned scheduled `EtcdBackup`, and the
//! cluster reports whether its newest backup is recent enough.

use crate::support;

use std::{collections::BTreeMap, time::Duration};

use etcd_operator::{
    crd::{
        BackupDestination, BackupPhase, BackupPolicy, EtcdBackup, EtcdBackupSpec, EtcdCluster,
        EtcdClusterSpec, FilesystemDestination, RestoreSource, S3Destination,
    },
    reconcile::MemberAddresses,
};
use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::StatefulSet,
        core::v1::{Event, Secret},
    },
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, CustomResourceExt, ResourceExt,
    api::{ListParams, Patch, PatchParams, PostParams},
};
use quorum_core::backup::BackupSink;
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, install_crd},
    local_members::{EtcdLauncher, LocalMembers},
    s3::S3Server,
    tools::{etcd_binary, etcdutl_binary},
    wait,
};
use sha2::{Digest, Sha256};

fn cluster_spec(backup: Option<BackupPolicy>) -> EtcdClusterSpec {
    EtcdClusterSpec {
        backup,
        ..support::cluster_spec(3, None)
    }
}

async fn succeeded(backups: &Api<EtcdBackup>, name: &str) -> EtcdBackup {
    wait::until(
        &format!("backup {name} to succeed"),
        Duration::from_secs(120),
        || async {
            let backup = backups.get(name).await.map_err(|e| e.to_string())?;
            let status = backup.status.clone().unwrap_or_default();
            match status.run.phase {
                Some(BackupPhase::Succeeded) => Ok(backup),
                Some(BackupPhase::Failed) => panic!("backup {name} failed: {:?}", status.run.message),
                _ => Err(format!("{status:?}")),
            }
        },
    )
    .await
}

async fn create_s3_secret(client: &kube::Client, namespace: &str, s3: &S3Server) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    secrets
        .create(
            &PostParams::default(),
            &Secret {
                metadata: ObjectMeta {
                    name: Some("s3-credentials".into()),
                    ..ObjectMeta::default()
                },
                data: Some(BTreeMap::from([
                    (
                        "accessKeyId".to_string(),
                        ByteString(s3.access_key_id().as_bytes().to_vec()),
                    ),
                    (
                        "secretAccessKey".to_string(),
                        ByteString(s3.secret_access_key().as_bytes().to_vec()),
                    ),
                ])),
                ..Secret::default()
            },
        )
        .await
        .unwrap();
}

fn s3_backup(name: &str, s3: &S3Server, schedule: Option<&str>, retain: Option<u32>) -> EtcdBackup {
    EtcdBackup::new(
        name,
        EtcdBackupSpec {
            backup: quorum_core::crd::BackupSpec {
                cluster_name: "main".into(),
                destination: BackupDestination {
                    s3: Some(S3Destination {
                        bucket: s3.bucket().into(),
                        prefix: Some("etcd".into()),
                        endpoint: Some(s3.endpoint().into()),
                        region: None,
                        credentials_secret_name: "s3-credentials".into(),
                    }),
                    filesystem: None,
                },
                schedule: schedule.map(str::to_string),
                retain,
                verify: false,
            },
        },
    )
}

/// A run in progress writes how many bytes it has sent into its backup's `status.progress`
/// while it streams, not only at the end.
#[tokio::test]
async fn a_run_in_progress_reports_the_bytes_it_has_sent() {
    use quorum_core::backup::progress::reporting;
    use tokio::io::AsyncWriteExt;
    const CHUNK: usize = 64 * 1024;
    const CHUNKS: usize = 40;

    let client = admin_client().await;
    install_crd(&client, &EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-backup-progress").await;
    let backups: Api<EtcdBackup> = Api::namespaced(client.clone(), namespace.name());
    let store = std::env::temp_dir().join(format!("quorum-progress-{}", namespace.name()));
    let backup = backups
        .create(
            &PostParams::default(),
            &EtcdBackup::new(
                "slow",
                EtcdBackupSpec {
                    backup: quorum_core::crd::BackupSpec {
                        cluster_name: "main".into(),
                        destination: BackupDestination {
                            s3: None,
                            filesystem: Some(FilesystemDestination {
                                path: store.display().to_string(),
                            }),
                        },
                        schedule: None,
                        retain: None,
                        verify: false,
                    },
                },
            ),
        )
        .await
        .unwrap();
    let sink = BackupSink::new(quorum_core::backup::BackupTarget::Filesystem {
        directory: store.clone(),
    })
    .unwrap();
    // A source that yields a chunk every 25 ms, as a slow member would.
    let (mut source_writer, source) = tokio::io::duplex(CHUNK);
    let feed = async move {
        let chunk = vec![7_u8; CHUNK];
        for _ in 0..CHUNKS {
            tokio::time::sleep(Duration::from_millis(25)).await;
            source_writer.write_all(&chunk).await.unwrap();
        }
    };
    let upload = reporting(
        &client,
        &backup,
        &sink,
        Duration::from_millis(100),
        sink.upload("slow.db", source),
    );
    let seen_midway = async {
        wait::until(
            "the backup's status reporting part of the stream sent",
            Duration::from_secs(30),
            || async {
                let progress = backups
                    .get_status("slow")
                    .await
                    .map_err(|e| e.to_string())?
                    .status
                    .and_then(|status| status.run.progress);
                match progress {
                    Some(p) if p.bytes > 0 && p.bytes < (CHUNK * CHUNKS) as u64 => Ok(p),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await
    };
    let ((), stored, midway) = tokio::join!(feed, upload, seen_midway);
    let stored = stored.unwrap();
    assert_eq!(stored.size, (CHUNK * CHUNKS) as u64);
    assert!(midway.bytes_per_second > 0, "{midway:?}");

    // A backup deleted and created again under the name is another backup: a run of the first
    // one reports nothing into it.
    backups.delete("slow", &Default::default()).await.unwrap();
    wait::until("the first backup gone", Duration::from_secs(30), || async {
        match backups.get_opt("slow").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(_) => Err("still there".to_string()),
        }
    })
    .await;
    let mut again = backup.clone();
    again.metadata = kube::api::ObjectMeta {
        name: Some("slow".into()),
        ..Default::default()
    };
    again.status = None;
    let again = backups.create(&PostParams::default(), &again).await.unwrap();
    assert_ne!(again.metadata.uid, backup.metadata.uid);
    let (mut source_writer, source) = tokio::io::duplex(CHUNK);
    let feed = async move {
        let chunk = vec![7_u8; CHUNK];
        for _ in 0..CHUNKS {
            tokio::time::sleep(Duration::from_millis(25)).await;
            source_writer.write_all(&chunk).await.unwrap();
        }
    };
    let upload = reporting(
        &client,
        &backup,
        &sink,
        Duration::from_millis(100),
        sink.upload("slow-again.db", source),
    );
    let ((), stored) = tokio::join!(feed, upload);
    assert_eq!(stored.unwrap().size, (CHUNK * CHUNKS) as u64);
    let progress = backups
        .get_status("slow")
        .await
        .unwrap()
        .status
        .and_then(|status| status.run.progress);
    assert_eq!(
        progress, None,
        "the new backup holds no report of the first one's run"
    );
    let _ = std::fs::remove_dir_all(store);
    namespace.delete().await;
}

#[tokio::test]
async fn backups_reach_a_directory_and_s3_are_recorded_and_restore_into_a_new_cluster() {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    install_crd(&client, &EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-backup").await;
    let ns = namespace.name().to_string();
    let scratch = std::env::temp_dir().join(format!("quorum-backups-{ns}"));
    let _members = LocalMembers::start(
        client.clone(),
        EtcdLauncher {
            restore_with: Some((
                std::path::PathBuf::from(env!("CARGO_BIN_EXE_etcd-operator")),
                etcdutl_binary(),
            )),
            ..EtcdLauncher::new(BTreeMap::from([(cluster_spec(None).version, etcd_binary())]))
        },
        scratch.join("members"),
        Some(ns.clone()),
    );
    let operator = support::operator::start(client.clone(), &ns, MemberAddresses::Loopback);
    let s3 = S3Server::start().await;

    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .create(
            &PostParams::default(),
            &EtcdCluster::new("main", cluster_spec(None)),
        )
        .await
        .unwrap();
    support::ready_with(&clusters, "main", 3, Duration::from_secs(120)).await;
    let url = format!("http://{}:2379", quorum_core::naming::loopback_ip(&ns, "main", 0));
    let mut kv = etcd_client::Client::connect([url], None).await.unwrap();
    for i in 0..20 {
        kv.put(format!("backup/{i}"), "v", None).await.unwrap();
    }

    create_s3_secret(&client, &ns, &s3).await;

    let backups: Api<EtcdBackup> = Api::namespaced(client.clone(), &ns);
    let to_directory = EtcdBackup::new(
        "to-directory",
        EtcdBackupSpec {
            backup: quorum_core::crd::BackupSpec {
                cluster_name: "main".into(),
                destination: BackupDestination {
                    s3: None,
                    filesystem: Some(FilesystemDestination {
                        path: scratch.join("store").display().to_string(),
                    }),
                },
                schedule: None,
                retain: None,
                verify: false,
            },
        },
    );
    let to_s3 = s3_backup("to-s3", &s3, None, None);
    backups
        .create(&PostParams::default(), &to_directory)
        .await
        .unwrap();
    backups.create(&PostParams::default(), &to_s3).await.unwrap();

    // The directory backup: the file is where status says, with the size and checksum it says.
    let done = succeeded(&backups, "to-directory").await;
    let run = done.status.unwrap().run;
    let record = run.last_snapshot.unwrap();
    let progress = run.progress.expect("a stored run records what it sent");
    assert_eq!(progress.bytes as i64, record.size_bytes, "{progress:?}");
    let path = std::path::PathBuf::from(&record.location);
    assert!(
        path.starts_with(scratch.join("store").join(&ns).join("main")),
        "{path:?}"
    );
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes.len() as i64, record.size_bytes);
    assert_eq!(hex::encode(Sha256::digest(&bytes)), record.sha256);

    // The S3 backup: downloaded back with its checksum verified.
    let done = succeeded(&backups, "to-s3").await;
    let record = done.status.unwrap().run.last_snapshot.unwrap();
    assert!(
        record
            .location
            .starts_with(&format!("s3://{}/etcd/{ns}/main/", s3.bucket())),
        "{}",
        record.location
    );
    let sink = BackupSink::new(s3.backup_target(Some(&format!("etcd/{ns}/main")))).unwrap();
    let objects = sink.list().await.unwrap();
    assert_eq!(objects.len(), 1);
    let mut downloaded = Vec::new();
    let fetched = sink
        .download(&objects[0].key, &mut downloaded, Some(&record.sha256))
        .await
        .unwrap();
    assert_eq!(fetched.size as i64, record.size_bytes);

    // The cluster records its newest backup.
    let last = clusters
        .get("main")
        .await
        .unwrap()
        .status
        .unwrap()
        .last_backup
        .unwrap();
    assert!(last.name == "to-s3" || last.name == "to-directory");
    // The metric alerts use: the newest of the two completions, as status records it.
    let newest = ["to-directory", "to-s3"].map(|name| {
        let backups = backups.clone();
        async move {
            backups
                .get(name)
                .await
                .unwrap()
                .status
                .unwrap()
                .run
                .completed_at
                .unwrap()
                .0
        }
    });
    let newest = futures::future::join_all(newest).await.into_iter().max().unwrap();
    quorum_e2e::backups::assert_last_success(&operator.context.metrics.render(), "etcd", &ns, "main", newest);

    // A new cluster restored from the directory backup holds the same keys, as a new cluster.
    let mut restored_spec = cluster_spec(None);
    restored_spec.restore_from = Some(RestoreSource {
        backup_name: "to-directory".into(),
    });
    clusters
        .create(
            &PostParams::default(),
            &EtcdCluster::new("restored", restored_spec),
        )
        .await
        .unwrap();
    let restored = support::ready_with(&clusters, "restored", 3, Duration::from_secs(120)).await;
    let original = clusters.get("main").await.unwrap().status.unwrap();
    assert_ne!(
        restored.cluster_id, original.cluster_id,
        "a new cluster, not a second copy of the old one"
    );
    assert_eq!(restored.members.len(), 3);
    let url = format!(
        "http://{}:2379",
        quorum_core::naming::loopback_ip(&ns, "restored", 1)
    );
    let mut restored_kv = etcd_client::Client::connect([url], None).await.unwrap();
    let keys = restored_kv
        .get("backup/", Some(etcd_client::GetOptions::new().with_prefix()))
        .await
        .unwrap();
    assert_eq!(
        keys.kvs().len(),
        20,
        "every key of the backup is in the restored cluster"
    );

    // The restored cluster recorded the snapshot it restored, and keeps to it when the backup
    // has a newer one: members starting later restore the same, and none is rolled onto
    // another snapshot.
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let restore_location = |statefulset: StatefulSet| -> Option<String> {
        let template = statefulset.spec?.template.spec?;
        let init = template
            .init_containers?
            .into_iter()
            .find(|c| c.name == "restore")?;
        init.args?
            .iter()
            .find_map(|arg| arg.strip_prefix("--location=").map(str::to_string))
    };
    let snapshot = backups
        .get("to-directory")
        .await
        .unwrap()
        .status
        .unwrap()
        .run
        .last_snapshot
        .unwrap();
    let recorded = clusters
        .get("restored")
        .await
        .unwrap()
        .status
        .unwrap()
        .restored_from;
    assert_eq!(recorded.as_ref(), Some(&snapshot));
    assert_eq!(
        restore_location(statefulsets.get("restored").await.unwrap()).as_ref(),
        Some(&snapshot.location)
    );
    let newer = quorum_core::crd::BackupRecord {
        location: format!("{}.newer", snapshot.location),
        sha256: "0".repeat(64),
        ..snapshot.clone()
    };
    backups
        .patch_status(
            "to-directory",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"lastSnapshot": newer}})),
        )
        .await
        .unwrap();
    // A change of spec, so that a pass runs and reports its generation.
    let changed = clusters
        .patch(
            "restored",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"backup": {
                "schedule": "0 3 * * *",
                "destination": to_directory.spec.backup.destination,
            }}})),
        )
        .await
        .unwrap();
    let generation = changed.metadata.generation;
    wait::until(
        "a pass of the restored cluster after the backup's newer run",
        Duration::from_secs(60),
        || async {
            let status = clusters
                .get_status("restored")
                .await
                .map_err(|e| e.to_string())?
                .status;
            let observed = status.as_ref().and_then(|s| s.observed_generation);
            (observed == generation)
                .then_some(())
                .ok_or(format!("{observed:?} of {generation:?}"))
        },
    )
    .await;
    assert_eq!(
        restore_location(statefulsets.get("restored").await.unwrap()).as_ref(),
        Some(&snapshot.location),
        "the members keep to the snapshot recorded"
    );
    let recorded = clusters
        .get("restored")
        .await
        .unwrap()
        .status
        .unwrap()
        .restored_from;
    assert_eq!(recorded.as_ref(), Some(&snapshot));

    // A cluster restored by a release that recorded no snapshot is not rolled onto the
    // backup's newest one at each of its runs: once formed, its members restore nothing.
    clusters
        .patch_status(
            "restored",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"restoredFrom": null}})),
        )
        .await
        .unwrap();
    let changed = clusters
        .patch(
            "restored",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"backup": {"schedule": "0 4 * * *"}}})),
        )
        .await
        .unwrap();
    let generation = changed.metadata.generation;
    let location = wait::until(
        "a pass of the restored cluster with no snapshot recorded",
        Duration::from_secs(60),
        || async {
            let status = clusters
                .get_status("restored")
                .await
                .map_err(|e| e.to_string())?
                .status;
            let observed = status.as_ref().and_then(|s| s.observed_generation);
            if observed != generation {
                return Err(format!("{observed:?} of {generation:?}"));
            }
            Ok(restore_location(
                statefulsets.get("restored").await.map_err(|e| e.to_string())?,
            ))
        },
    )
    .await;
    assert_eq!(
        location, None,
        "a formed cluster with no snapshot recorded restores nothing, the backup's newest included"
    );
    let recorded = clusters
        .get("restored")
        .await
        .unwrap()
        .status
        .unwrap()
        .restored_from;
    assert_eq!(recorded, None, "no record is made up after the cluster formed");

    // A backup policy on the cluster becomes an owned, scheduled EtcdBackup, and the cluster
    // reports BackupStale from the newest backup's age.
    let mut cluster = clusters.get("main").await.unwrap();
    cluster.spec.backup = Some(BackupPolicy {
        schedule: "0 3 * * *".into(),
        destination: to_directory.spec.backup.destination.clone(),
        retain: 3,
        max_age_minutes: Some(60),
        verify: false,
    });
    clusters
        .replace("main", &PostParams::default(), &cluster)
        .await
        .unwrap();
    let scheduled = wait::until("the scheduled backup", Duration::from_secs(30), || async {
        backups
            .get_opt("main-scheduled")
            .await
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "absent".to_string())
    })
    .await;
    assert_eq!(scheduled.owner_references()[0].name, "main");
    assert_eq!(scheduled.spec.backup.schedule.as_deref(), Some("0 3 * * *"));
    wait::until(
        "BackupStale=False and a next run",
        Duration::from_secs(30),
        || async {
            let cluster = clusters.get("main").await.map_err(|e| e.to_string())?;
            let fresh = cluster.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "BackupStale" && c.status == "False")
            });
            let next = backups
                .get("main-scheduled")
                .await
                .map_err(|e| e.to_string())?
                .status
                .and_then(|s| s.run.next_scheduled_at);
            if fresh && next.is_some() {
                Ok(())
            } else {
                Err(format!("{:?} next {next:?}", cluster.status))
            }
        },
    )
    .await;

    operator.stop().await;
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_minute_schedules_keep_their_newest_runs_never_prune_what_they_did_not_make_and_outlive_an_interrupted_run()
 {
    quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
    let client = admin_client().await;
    install_crd(&client, &EtcdCluster::crd()).await;
    install_crd(&client, &EtcdBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "etcd-retention").await;
    let ns = namespace.name().to_string();
    let scratch = std::env::temp_dir().join(format!("quorum-retention-{ns}"));
    let _members = LocalMembers::start(
        client.clone(),
        EtcdLauncher::new(BTreeMap::from([(cluster_spec(None).version, etcd_binary())])),
        scratch.join("members"),
        Some(ns.clone()),
    );
    let operator = support::operator::start(client.clone(), &ns, MemberAddresses::Loopback);
    let s3 = S3Server::start().await;
    create_s3_secret(&client, &ns, &s3).await;
    let clusters: Api<EtcdCluster> = Api::namespaced(client.clone(), &ns);
    clusters
        .create(
            &PostParams::default(),
            &EtcdCluster::new("main", cluster_spec(None)),
        )
        .await
        .unwrap();
    support::ready_with(&clusters, "main", 3, Duration::from_secs(120)).await;

    // A scheduled backup whose run the operator stopped during: found `Running` by the next
    // operator, it is recorded as interrupted, and the schedule goes on.
    operator.stop().await;
    let backups: Api<EtcdBackup> = Api::namespaced(client.clone(), &ns);
    backups
        .create(
            &PostParams::default(),
            &s3_backup("interrupted", &s3, Some("* * * * *"), None),
        )
        .await
        .unwrap();
    let started = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(30);
    backups
        .patch_status(
            "interrupted",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "status": {"phase": "Running", "startedAt": started.to_string(), "member": "main-0"}
            })),
        )
        .await
        .unwrap();
    let operator = support::operator::start(client.clone(), &ns, MemberAddresses::Loopback);

    // A run of a deleted predecessor under the schedule's name, an hour old: a cluster deleted
    // by mistake and applied again with its schedule finds it under its prefix, and it may be
    // the only copy of what the deleted cluster held.
    let sink = BackupSink::new(s3.backup_target(Some(&format!("etcd/{ns}/main")))).unwrap();
    let predecessor_key = quorum_core::backup::object_name(
        "EtcdBackup",
        "every-minute",
        "main",
        jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1),
        "db",
    );
    sink.upload(&predecessor_key, &b"the deleted cluster's snapshot"[..])
        .await
        .unwrap();
    let predecessor = sink.location(&predecessor_key);

    // Two one-shot backups created together, and a schedule every minute keeping one run.
    for backup in [
        s3_backup("one-shot-a", &s3, None, None),
        s3_backup("one-shot-b", &s3, None, None),
        s3_backup("every-minute", &s3, Some("* * * * *"), Some(1)),
    ] {
        backups.create(&PostParams::default(), &backup).await.unwrap();
    }
    let one_shots = [
        succeeded(&backups, "one-shot-a").await,
        succeeded(&backups, "one-shot-b").await,
    ]
    .map(|backup| backup.status.unwrap().run.last_snapshot.unwrap().location);
    assert_ne!(one_shots[0], one_shots[1], "two backups, two objects");

    // The second run is the first to prune: two objects of its own, one kept.
    let pruned = wait::until(
        "the scheduled backup's second run and its first pruning",
        Duration::from_secs(240),
        || async {
            let backup = backups.get("every-minute").await.map_err(|e| e.to_string())?;
            let run = backup.status.map(|status| status.run).unwrap_or_default();
            match (run.phase, &run.last_pruned) {
                (Some(BackupPhase::Failed), _) => panic!("the scheduled backup failed: {:?}", run.message),
                (_, Some(pruned)) => Ok((pruned.clone(), run.last_snapshot.unwrap().location)),
                _ => Err(format!("{run:?}")),
            }
        },
    )
    .await;
    let (pruned, newest) = pruned;
    assert_eq!(pruned.locations.len(), 1, "{pruned:?}");

    let stored: Vec<String> = sink
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|object| sink.location(&object.key))
        .collect();
    assert!(
        stored.contains(&predecessor),
        "a run the schedule did not make is never pruned: {stored:?}"
    );
    let own: Vec<&String> = stored
        .iter()
        .filter(|location| location.contains("/every-minute/") && **location != predecessor)
        .collect();
    assert_eq!(own.len(), 1, "exactly `retain` runs of its own kept: {stored:?}");
    assert!(own.contains(&&newest), "the newest run is kept: {stored:?}");
    assert!(!stored.contains(&pruned.locations[0]), "{stored:?}");
    for one_shot in &one_shots {
        assert!(
            stored.contains(one_shot),
            "a one-shot backup survives retention: {stored:?}"
        );
    }
    let others = stored
        .iter()
        .filter(|location| !location.contains("/interrupted/"))
        .count();
    assert_eq!(
        others, 4,
        "two one-shots, one run of the schedule and its predecessor's: {stored:?}"
    );
    let events: Api<Event> = Api::namespaced(client.clone(), &ns);
    wait::until("a BackupsPruned event", Duration::from_secs(30), || async {
        let listed = events
            .list(&ListParams::default().fields("involvedObject.name=every-minute"))
            .await
            .map_err(|e| e.to_string())?;
        listed
            .items
            .iter()
            .find(|event| event.reason.as_deref() == Some("BackupsPruned"))
            .and_then(|event| event.message.clone())
            .filter(|message| message.contains(&pruned.locations[0]))
            .ok_or_else(|| format!("{} events", listed.items.len()))
    })
    .await;

    // The interrupted run was reported, counted, and the schedule's next run succeeded.
    let reported = wait::until("an Interrupted event", Duration::from_secs(30), || async {
        let listed = events
            .list(&ListParams::default().fields("involvedObject.name=interrupted"))
            .await
            .map_err(|e| e.to_string())?;
        listed
            .items
            .iter()
            .find(|event| event.reason.as_deref() == Some("Interrupted"))
            .and_then(|event| event.message.clone())
            .ok_or_else(|| format!("{} events", listed.items.len()))
    })
    .await;
    assert!(reported.contains("did not finish"), "{reported}");
    let interrupted = succeeded_schedule(&backups, "interrupted").await;
    assert!(interrupted.run.started_at.unwrap().0 > started);
    let failures: Vec<String> = operator
        .context
        .metrics
        .render()
        .lines()
        .filter(|line| {
            line.starts_with("quorum_backup_failures_total{") && line.contains(&format!("namespace=\"{ns}\""))
        })
        .map(str::to_string)
        .collect();
    let runs: Vec<String> = backups
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|backup| {
            let run = backup.status.unwrap_or_default().run;
            format!(
                "{}: {:?} {:?}",
                backup.metadata.name.unwrap_or_default(),
                run.phase,
                run.message
            )
        })
        .collect();
    assert!(
        failures.len() == 1 && failures[0].ends_with(" 1"),
        "the interrupted run counts as a failure, and no other run failed: {failures:?}; {runs:#?}"
    );

    operator.stop().await;
    namespace.delete().await;
    let _ = std::fs::remove_dir_all(scratch);
}

/// The status of a scheduled backup once a run of it has stored a snapshot.
async fn succeeded_schedule(backups: &Api<EtcdBackup>, name: &str) -> etcd_operator::crd::EtcdBackupStatus {
    wait::until(
        &format!("a run of {name} to store a snapshot"),
        Duration::from_secs(90),
        || async {
            let status = backups
                .get(name)
                .await
                .map_err(|e| e.to_string())?
                .status
                .unwrap_or_default();
            match (status.run.phase, &status.run.last_snapshot) {
                (Some(BackupPhase::Pending), Some(_)) => Ok(status),
                _ => Err(format!("{:?}", status.run)),
            }
        },
    )
    .await
}
