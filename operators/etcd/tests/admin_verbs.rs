//! The etcd admin verbs against real etcd processes on distinct loopback addresses.

use std::time::Duration;

use etcd_operator::admin::EtcdAdmin;
use quorum_e2e::{etcd::EtcdProcesses, wait};
use sha2::{Digest, Sha256};

const TIMEOUT: Duration = Duration::from_secs(3);

async fn admin(url: &str) -> EtcdAdmin {
    EtcdAdmin::connect(url, TIMEOUT, None).await.expect("connect")
}

#[tokio::test]
async fn member_list_status_learner_promote_remove_and_leader_move() {
    let mut cluster = EtcdProcesses::start_cluster(3).await;
    let first = admin(&cluster.members[0].client_url()).await;

    let members = first.members().await.unwrap();
    assert_eq!(members.len(), 3);
    assert!(members.iter().all(|m| !m.learner && !m.name.is_empty()));
    let status = first.status().await.unwrap();
    assert_ne!(status.leader_id, 0, "a formed cluster has a leader");
    assert!(status.version.starts_with("3.6"), "{}", status.version);
    assert!(status.errors.is_empty());

    // Add a learner before its process exists, then start it against the new membership.
    let peer_url = cluster.peer_url(3);
    // etcd refuses membership changes until every member has been connected for a few
    // seconds ("unhealthy cluster"); the refusal changes nothing, so asking again is safe.
    let added = wait::until("etcd to accept a learner", Duration::from_secs(30), || async {
        first.add_learner(&peer_url).await.map_err(|e| e.to_string())
    })
    .await;
    assert!(added.learner);
    let listed = first.members().await.unwrap();
    let pending = listed.iter().find(|m| m.id == added.id).expect("learner listed");
    assert!(
        pending.learner && pending.name.is_empty(),
        "not started yet: {pending:?}"
    );
    let mut initial: Vec<String> = listed
        .iter()
        .filter(|m| !m.name.is_empty())
        .map(|m| format!("{}={}", m.name, m.peer_urls[0]))
        .collect();
    initial.push(format!("m-3={peer_url}"));
    cluster.join("m-3", 3, &initial.join(",")).await;

    // Promotion is refused until the learner caught up; it then succeeds.
    wait::until("the learner to be promoted", Duration::from_secs(30), || async {
        first.promote(added.id).await.map_err(|e| e.to_string())
    })
    .await;
    let promoted = first.members().await.unwrap();
    assert!(promoted.iter().all(|m| !m.learner));
    assert_eq!(promoted.len(), 4);

    // Leadership moves to the member we name.
    let leader = first.status().await.unwrap().leader_id;
    let leader_admin = {
        let mut found = None;
        for member in &cluster.members {
            let candidate = admin(&member.client_url()).await;
            if candidate.status().await.unwrap().member_id == leader {
                found = Some(candidate);
            }
        }
        found.expect("the leader answers")
    };
    let successor = promoted.iter().find(|m| m.id != leader).unwrap().id;
    leader_admin.move_leader(successor).await.unwrap();
    wait::until("leadership to move", Duration::from_secs(10), || async {
        let now = first.status().await.map_err(|e| e.to_string())?.leader_id;
        if now == successor {
            Ok(())
        } else {
            Err(format!("leader {now:x}"))
        }
    })
    .await;

    // Remove the added member, then stop its process.
    first.remove_member(added.id).await.unwrap();
    assert_eq!(first.members().await.unwrap().len(), 3);
    cluster.member("m-3").kill().await;
    assert!(
        first.remove_member(added.id).await.is_err(),
        "removing an absent member is refused, not ignored"
    );
}

#[tokio::test]
async fn snapshot_streams_the_keyspace_with_a_verified_checksum() {
    let cluster = EtcdProcesses::start_cluster(1).await;
    let url = cluster.members[0].client_url();
    let mut kv = etcd_client::Client::connect([url.as_str()], None).await.unwrap();
    for i in 0..200 {
        kv.put(format!("key-{i:03}"), format!("value-{i}"), None)
            .await
            .unwrap();
    }
    let mut bytes = Vec::new();
    let info = admin(&url).await.snapshot(&mut bytes).await.unwrap();
    assert_eq!(info.size, bytes.len() as u64);
    assert_eq!(info.sha256, hex::encode(Sha256::digest(&bytes)));
    // etcd's own trailer: the last 32 bytes are the SHA-256 of the database before them.
    let (database, trailer) = bytes.split_at(bytes.len() - 32);
    assert_eq!(Sha256::digest(database).as_slice(), trailer);
    assert!(
        database.windows(b"key-199".len()).any(|w| w == b"key-199"),
        "the snapshot holds the keys"
    );
}

/// A restore drill's record of a backup reads every key and value: with values of tens of KiB
/// a page of keys is far larger than a gRPC message's default limit, and with values of a MiB
/// (etcd takes up to 1.5 MiB by default) even the first page, sized before any value is seen,
/// is more than an answer may carry. Neither may make the read fail.
#[tokio::test]
async fn content_is_read_whole_however_large_the_values() {
    let cluster = EtcdProcesses::start_cluster(1).await;
    let url = cluster.members[0].client_url();
    let mut kv = etcd_client::Client::connect([url.as_str()], None).await.unwrap();
    // Read first ("big-" sorts before "key-"): 70 values of 1 MiB.
    const LARGE: usize = 70;
    let large = vec![b'l'; 1024 * 1024];
    for i in 0..LARGE {
        kv.put(format!("big-{i:02}"), large.clone(), None).await.unwrap();
    }
    const KEYS: usize = 300;
    let value = vec![b'v'; 32 * 1024];
    for i in 0..KEYS {
        kv.put(format!("key-{i:03}"), value.clone(), None).await.unwrap();
    }
    let admin = admin(&url).await;
    let revision = admin.status().await.unwrap().revision;
    let content = admin.content_at(revision).await.expect("the whole content");
    assert_eq!(content.records(), (LARGE + KEYS) as u64);
    // The same content read again is the same digest; one value changed is another.
    assert_eq!(
        admin.content_at(revision).await.unwrap().fingerprint(),
        content.fingerprint()
    );
    kv.put("key-150", "changed", None).await.unwrap();
    let now = admin.status().await.unwrap().revision;
    assert_ne!(
        admin.content_at(now).await.unwrap().fingerprint(),
        content.fingerprint()
    );
}

#[tokio::test]
async fn peer_links_report_a_killed_member_as_disconnected() {
    let mut cluster = EtcdProcesses::start_cluster(3).await;
    let first = admin(&cluster.members[0].client_url()).await;
    let members = first.members().await.unwrap();
    let m2 = members.iter().find(|m| m.name == "m-2").unwrap().id;

    let links = first.peer_links().await.unwrap();
    assert!(links.iter().any(|l| l.remote == m2 && l.active), "{links:?}");

    cluster.member("m-2").kill().await;
    wait::until("m0 to see m2 disconnected", Duration::from_secs(15), || async {
        let links = first.peer_links().await.map_err(|e| e.to_string())?;
        if links.iter().any(|l| l.remote == m2 && !l.active) {
            Ok(())
        } else {
            Err(format!("{links:?}"))
        }
    })
    .await;
}

/// A member's leader watch and its admin calls share one connection, checked while the watch
/// holds it. The checks keep to etcd's least interval between pings (five seconds, its
/// `--grpc-keepalive-min-time`): a connection pinged more often is closed by the member as
/// abusive, which ended every leader watch (and woke every cluster's pass) every few seconds.
/// Asked to check every second, the watch is still open twenty seconds later, the admin client
/// answering over the same connection meanwhile; a stopped member still ends it.
#[tokio::test]
async fn a_leader_watch_shares_its_members_connection_and_outlives_its_link_checks() {
    use etcd_operator::admin::{LeaderWatch, member_channel};

    let mut cluster = EtcdProcesses::start_cluster(1).await;
    let url = cluster.members[0].client_url();
    let channel =
        member_channel(&url, Duration::from_secs(1), Duration::from_secs(1), None).expect("a channel");
    let admin = EtcdAdmin::connect_sharing(
        &url,
        channel.clone(),
        None,
        etcd_operator::admin::metrics_client(&url, TIMEOUT, None).unwrap(),
    )
    .await
    .unwrap();
    let mut watch = LeaderWatch::open(&url, channel, TIMEOUT)
        .await
        .expect("the watch opens");
    let ended = tokio::time::timeout(Duration::from_secs(20), watch.ended()).await;
    assert!(ended.is_err(), "the watch ended: {ended:?}");
    assert_ne!(
        admin.status().await.unwrap().leader_id,
        0,
        "the shared connection answers"
    );
    cluster.members[0].kill().await;
    let ended = tokio::time::timeout(Duration::from_secs(10), watch.ended())
        .await
        .expect("a stopped member ends the watch");
    assert!(!ended.is_empty());
}
