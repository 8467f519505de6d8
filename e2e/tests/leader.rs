//! Leader election against the real API server: one holder at a time, takeover after a
//! release, and no takeover while the holder keeps renewing.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use quorum_core::leader::{LeaderElector, LeaseTimings};
use quorum_e2e::control_plane::{TestNamespace, admin_client};

fn fast() -> LeaseTimings {
    LeaseTimings {
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    }
}

#[tokio::test]
async fn one_leader_at_a_time_and_handover_on_release() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "leader").await;
    let ns = namespace.name();
    let first = LeaderElector::new(client.clone(), ns, "op-leader", "first", fast());
    let second = LeaderElector::new(client.clone(), ns, "op-leader", "second", fast());

    assert!(
        first.try_acquire_or_renew().await.unwrap(),
        "the first candidate creates the lease"
    );
    assert!(
        !second.try_acquire_or_renew().await.unwrap(),
        "a held lease is not taken"
    );
    assert!(first.try_acquire_or_renew().await.unwrap(), "the holder renews");

    // While the holder keeps renewing, the other never gets it, even past the lease duration.
    for _ in 0..15 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(first.try_acquire_or_renew().await.unwrap());
        assert!(!second.try_acquire_or_renew().await.unwrap());
    }

    first.release().await;
    assert!(
        second.try_acquire_or_renew().await.unwrap(),
        "a released lease is taken at once"
    );
    let lease = Api::<Lease>::namespaced(client.clone(), ns)
        .get("op-leader")
        .await
        .unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("second"));
    assert_eq!(spec.lease_transitions, Some(1));
    namespace.delete().await;
}

#[tokio::test]
async fn an_abandoned_lease_is_taken_over_after_it_expires() {
    let client = admin_client().await;
    let namespace = TestNamespace::create(&client, "leader").await;
    let ns = namespace.name();
    let crashed = LeaderElector::new(client.clone(), ns, "op-leader", "crashed", fast());
    let standby = LeaderElector::new(client.clone(), ns, "op-leader", "standby", fast());
    assert!(crashed.try_acquire_or_renew().await.unwrap());
    drop(crashed); // stops renewing without releasing, as a killed process would

    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(10), standby.acquire())
        .await
        .expect("standby takes over");
    assert!(
        started.elapsed() >= Duration::from_secs(2),
        "not before the lease duration has passed unchanged"
    );
    namespace.delete().await;
}
