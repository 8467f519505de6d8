//! Following the Sentinels' own announcements. For each replication-mode cluster, one task per
//! Sentinel stays subscribed to `+switch-master` and wakes the cluster's pass the moment a
//! Sentinel names another primary, so the role labels (and with them the primary Service) follow
//! a failover at once rather than at the next scheduled pass.
//!
//! A switch only wakes the pass; the pass observes every node and Sentinel afresh and decides as
//! it always does. A subscription that breaks is opened again with a growing delay; one that was
//! broken wakes the pass once it is back, since a switch may have come meanwhile. The scheduled
//! pass stays the safety net for whatever a subscription misses. No Kubernetes here beyond the
//! cluster's key.

use std::{
    collections::{BTreeSet, HashMap},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use quorum_core::{
    runner::RetryPolicy,
    wakeups::{ObjectKey, Wakeups},
};
use secrecy::ExposeSecret;
use tokio_util::sync::CancellationToken;

use crate::admin::{
    AdminError, Credentials,
    sentinel::{PrimarySwitch, SwitchSubscription},
};

/// How the subscriptions behave.
#[derive(Clone, Copy, Debug)]
pub struct ListenSettings {
    /// Bounds a connection, a subscription and a link check.
    pub timeout: Duration,
    /// How often a quiet subscription's link is checked.
    pub keepalive: Duration,
    /// The longest wait before a broken subscription is opened again.
    pub max_retry_delay: Duration,
    /// A cluster no pass has followed for this long is taken for deleted: its subscriptions
    /// end at their next failure (or at the next pass of any cluster).
    pub expiry: Duration,
}

impl Default for ListenSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(5),
            keepalive: Duration::from_secs(30),
            max_retry_delay: Duration::from_secs(30),
            expiry: Duration::from_secs(600),
        }
    }
}

/// The subscriptions of every cluster this operator follows.
pub struct SentinelEvents {
    wakeups: Wakeups,
    settings: ListenSettings,
    followed: Mutex<HashMap<ObjectKey, Followed>>,
    /// Ends every subscription when the operator's state is dropped.
    stop: CancellationToken,
}

struct Followed {
    sentinels: BTreeSet<SocketAddr>,
    credentials: Option<Credentials>,
    last_followed: Arc<Mutex<Instant>>,
    stop: CancellationToken,
}

impl Drop for SentinelEvents {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

fn same_credentials(a: Option<&Credentials>, b: Option<&Credentials>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => {
            a.username == b.username && a.password.expose_secret() == b.password.expose_secret()
        }
        _ => false,
    }
}

impl SentinelEvents {
    pub fn new(wakeups: Wakeups, settings: ListenSettings) -> Self {
        Self {
            wakeups,
            settings,
            followed: Mutex::new(HashMap::new()),
            stop: CancellationToken::new(),
        }
    }

    /// What a Sentinel's switch of the primary wakes: the cluster controller's pass.
    pub fn wakeups(&self) -> Wakeups {
        self.wakeups.clone()
    }

    /// Subscribes to `cluster`'s Sentinels at `sentinels` (called by every pass). Subscriptions
    /// already open to the same Sentinels with the same credentials are kept; a changed set or
    /// password replaces them. Clusters no pass has followed within the expiry are dropped.
    pub fn follow(
        &self,
        cluster: ObjectKey,
        sentinels: BTreeSet<SocketAddr>,
        credentials: Option<Credentials>,
    ) {
        self.follow_at(cluster, sentinels, credentials, Instant::now());
    }

    fn follow_at(
        &self,
        cluster: ObjectKey,
        sentinels: BTreeSet<SocketAddr>,
        credentials: Option<Credentials>,
        now: Instant,
    ) {
        let mut followed = self.followed.lock().expect("followed lock");
        let expiry = self.settings.expiry;
        followed.retain(|key, entry| {
            let last = *entry.last_followed.lock().expect("last followed");
            let live = *key == cluster || now.saturating_duration_since(last) < expiry;
            if !live {
                tracing::info!(cluster = %key, "no longer following its Sentinels: not reconciled for {expiry:?}");
                entry.stop.cancel();
            }
            live
        });
        if let Some(entry) = followed.get(&cluster)
            && entry.sentinels == sentinels
            && same_credentials(entry.credentials.as_ref(), credentials.as_ref())
        {
            *entry.last_followed.lock().expect("last followed") = now;
            return;
        }
        if let Some(previous) = followed.remove(&cluster) {
            previous.stop.cancel();
        }
        if sentinels.is_empty() {
            return;
        }
        let stop = self.stop.child_token();
        let last_followed = Arc::new(Mutex::new(now));
        for &address in &sentinels {
            tokio::spawn(listen(Listener {
                cluster: cluster.clone(),
                address,
                credentials: credentials.clone(),
                wakeups: self.wakeups.clone(),
                settings: self.settings,
                last_followed: last_followed.clone(),
                stop: stop.clone(),
            }));
        }
        tracing::debug!(%cluster, ?sentinels, "following the Sentinels' primary switches");
        followed.insert(
            cluster,
            Followed {
                sentinels,
                credentials,
                last_followed,
                stop,
            },
        );
    }

    /// Ends `cluster`'s subscriptions (the cluster is gone).
    pub fn forget(&self, cluster: &ObjectKey) {
        if let Some(entry) = self.followed.lock().expect("followed lock").remove(cluster) {
            entry.stop.cancel();
        }
    }

    /// How many clusters are followed.
    pub fn len(&self) -> usize {
        self.followed.lock().expect("followed lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One subscription's task.
struct Listener {
    cluster: ObjectKey,
    address: SocketAddr,
    credentials: Option<Credentials>,
    wakeups: Wakeups,
    settings: ListenSettings,
    last_followed: Arc<Mutex<Instant>>,
    stop: CancellationToken,
}

impl Listener {
    fn expired(&self) -> bool {
        self.last_followed.lock().expect("last followed").elapsed() >= self.settings.expiry
    }

    /// Subscribes and wakes the pass on every switch, until the subscription breaks.
    async fn follow_switches(&self, reconnected: bool) -> AdminError {
        let settings = self.settings;
        let mut subscription =
            match SwitchSubscription::open(self.address, self.credentials.as_ref(), settings.timeout).await {
                Ok(subscription) => subscription,
                Err(error) => return error,
            };
        if reconnected {
            self.wakeups.wake(self.cluster.clone());
        }
        loop {
            match subscription.next(settings.keepalive).await {
                Ok(PrimarySwitch { name, from, to }) => {
                    tracing::info!(
                        cluster = %self.cluster,
                        sentinel = %self.address,
                        %name, %from, %to,
                        "a Sentinel switched the primary; reconciling now"
                    );
                    self.wakeups.wake(self.cluster.clone());
                }
                Err(error) => return error,
            }
        }
    }
}

async fn listen(listener: Listener) {
    let mut failures: u32 = 0;
    loop {
        let error = tokio::select! {
            () = listener.stop.cancelled() => return,
            error = listener.follow_switches(failures > 0) => error,
        };
        failures = failures.saturating_add(1);
        if listener.expired() {
            return;
        }
        tracing::debug!(
            cluster = %listener.cluster,
            sentinel = %listener.address,
            %error,
            "Sentinel subscription broken; opening it again"
        );
        let delay = RetryPolicy {
            first: Duration::from_millis(500),
            max: listener.settings.max_retry_delay,
        }
        .delay(failures);
        tokio::select! {
            () = listener.stop.cancelled() => return,
            () = tokio::time::sleep(delay) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_cluster_is_followed_once_and_forgotten() {
        let events = SentinelEvents::new(
            Wakeups::new(),
            ListenSettings {
                // Nothing listens on these addresses: every attempt fails and waits.
                timeout: Duration::from_millis(100),
                ..ListenSettings::default()
            },
        );
        let cluster = ObjectKey::new("team-a", "cache");
        let sentinels: BTreeSet<SocketAddr> = ["127.0.0.1:1".parse().unwrap()].into();
        events.follow(cluster.clone(), sentinels.clone(), None);
        events.follow(cluster.clone(), sentinels, None);
        assert_eq!(events.len(), 1);
        events.forget(&cluster);
        assert!(events.is_empty());
    }

    #[tokio::test]
    async fn clusters_not_followed_within_the_expiry_are_dropped() {
        let settings = ListenSettings {
            timeout: Duration::from_millis(100),
            ..ListenSettings::default()
        };
        let events = SentinelEvents::new(Wakeups::new(), settings);
        let sentinel: BTreeSet<SocketAddr> = ["127.0.0.1:1".parse().unwrap()].into();
        let start = Instant::now();
        events.follow_at(ObjectKey::new("team-a", "gone"), sentinel.clone(), None, start);
        events.follow_at(ObjectKey::new("team-a", "live"), sentinel.clone(), None, start);
        let later = start + settings.expiry;
        events.follow_at(ObjectKey::new("team-a", "live"), sentinel, None, later);
        assert_eq!(
            events.len(),
            1,
            "the cluster not followed for the expiry is dropped"
        );
    }
}
