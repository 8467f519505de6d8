//! Hearing of a lost leader from the members themselves. For each cluster, one task per member
//! holds a watch that the member ends when it has no leader and that breaks when the member
//! stops (`quorum_core::database_events`). Either wakes the cluster's pass at once, so the loss
//! is seen (and timed) when it happens rather than at the next scheduled pass; a watch opened
//! again after a break wakes the pass too, which then sees the new leader or the member back.
//! No Kubernetes here beyond the cluster's key.

use std::sync::Arc;

pub use quorum_core::database_events::ListenSettings;
use quorum_core::{
    database_events::{DatabaseEvents, Listen, Notify},
    wakeups::Wakeups,
};

use crate::admin::{LeaderWatch, TlsMaterial};

/// The watches of every cluster this operator follows, by member client URL.
pub type LeaderEvents = DatabaseEvents<LeaderLoss>;

/// Follows no cluster yet; each pass names its cluster's members ([`DatabaseEvents::follow`]).
pub fn leader_events(wakeups: Wakeups, settings: ListenSettings) -> LeaderEvents {
    DatabaseEvents::new(LeaderLoss, wakeups, settings)
}

/// One member's leader watch.
pub struct LeaderLoss;

impl Listen for LeaderLoss {
    /// The member's client URL.
    type Target = String;
    /// The cluster's client TLS material, for members on `https://`.
    type Login = Option<Arc<TlsMaterial>>;

    fn same_login(a: &Self::Login, b: &Self::Login) -> bool {
        a == b
    }

    async fn listen(
        &self,
        endpoint: &String,
        tls: &Option<Arc<TlsMaterial>>,
        settings: ListenSettings,
        notify: Notify<'_>,
    ) -> String {
        let mut watch =
            match LeaderWatch::open(endpoint, settings.timeout, settings.keepalive, tls.as_deref()).await {
                Ok(watch) => watch,
                Err(error) => return error.to_string(),
            };
        notify.opened();
        let why = watch.ended().await;
        tracing::info!(cluster = %notify.cluster(), member = %endpoint, %why, "a member's leader watch ended; reconciling now");
        notify.wake();
        why
    }
}
