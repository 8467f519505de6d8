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

use crate::{
    admin::{LeaderWatch, TlsMaterial},
    observe::MemberChannels,
};

/// The watches of every cluster this operator follows, by member client URL.
pub type LeaderEvents = DatabaseEvents<LeaderLoss>;

/// Follows no cluster yet; each pass names its cluster's members ([`DatabaseEvents::follow`]).
/// Each watch goes over its member's connection in `channels`, the one its admin client uses,
/// whose link checks end the watch when the member stops without closing it.
pub fn leader_events(
    wakeups: Wakeups,
    settings: ListenSettings,
    channels: Arc<MemberChannels>,
) -> LeaderEvents {
    DatabaseEvents::new(LeaderLoss { channels }, wakeups, settings)
}

/// One member's leader watch.
pub struct LeaderLoss {
    channels: Arc<MemberChannels>,
}

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
        let channel = match self
            .channels
            .channel(&notify.cluster().to_string(), endpoint, tls.as_ref())
        {
            Ok(channel) => channel,
            Err(error) => return error.to_string(),
        };
        let mut watch = match LeaderWatch::open(endpoint, channel, settings.timeout).await {
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
