//! Following the Sentinels' own announcements. For each replication-mode cluster, one task per
//! Sentinel stays subscribed to `+switch-master` and `+sdown` and wakes the cluster's pass the
//! moment a Sentinel names another primary, so the role labels (and with them the primary
//! Service) follow a failover at once rather than at the next scheduled pass, and the moment a
//! Sentinel takes an instance for down, so the pass sees the primary failing before its failover
//! (which is where a failover's time from loss starts).
//!
//! An announcement only wakes the pass; the pass observes every node and Sentinel afresh and decides as
//! it always does. A subscription that breaks is opened again with a growing delay; one that was
//! broken wakes the pass once it is back, since a switch may have come meanwhile. The scheduled
//! pass stays the safety net for whatever a subscription misses. No Kubernetes here beyond the
//! cluster's key.

use std::net::SocketAddr;

pub use quorum_core::database_events::ListenSettings;
use quorum_core::database_events::{DatabaseEvents, Listen, Notify};
use secrecy::ExposeSecret;

use crate::admin::{
    Credentials,
    sentinel::{Announcement, PrimarySwitch, SentinelSubscription},
};

/// The subscriptions of every cluster this operator follows.
pub type SentinelEvents = DatabaseEvents<SentinelSwitches>;

/// Starts following no cluster yet; [`DatabaseEvents::follow`] adds each cluster's Sentinels.
pub fn sentinel_events(wakeups: quorum_core::wakeups::Wakeups, settings: ListenSettings) -> SentinelEvents {
    DatabaseEvents::new(SentinelSwitches, wakeups, settings)
}

/// One Sentinel's `+switch-master` and `+sdown` subscription.
pub struct SentinelSwitches;

impl Listen for SentinelSwitches {
    type Target = SocketAddr;
    type Login = Option<Credentials>;

    fn same_login(a: &Self::Login, b: &Self::Login) -> bool {
        match (a, b) {
            (None, None) => true,
            (Some(a), Some(b)) => {
                a.username == b.username && a.password.expose_secret() == b.password.expose_secret()
            }
            _ => false,
        }
    }

    async fn listen(
        &self,
        address: &SocketAddr,
        credentials: &Option<Credentials>,
        settings: ListenSettings,
        notify: Notify<'_>,
    ) -> String {
        let mut subscription =
            match SentinelSubscription::open(*address, credentials.as_ref(), settings.timeout).await {
                Ok(subscription) => subscription,
                Err(error) => return error.to_string(),
            };
        notify.opened();
        loop {
            match subscription.next(settings.keepalive).await {
                Ok(Announcement::Switch(PrimarySwitch { name, from, to })) => {
                    tracing::info!(
                        cluster = %notify.cluster(),
                        sentinel = %address,
                        %name, %from, %to,
                        "a Sentinel switched the primary; reconciling now"
                    );
                    notify.wake();
                }
                Ok(Announcement::Down(instance)) => {
                    tracing::info!(
                        cluster = %notify.cluster(),
                        sentinel = %address,
                        %instance,
                        "a Sentinel takes an instance for down; reconciling now"
                    );
                    notify.wake();
                }
                Err(error) => return error.to_string(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_password_or_user_is_another_login() {
        let login = |user: Option<&str>, password: &str| {
            Some(Credentials {
                username: user.map(str::to_string),
                password: password.to_string().into(),
            })
        };
        assert!(SentinelSwitches::same_login(&None, &None));
        assert!(SentinelSwitches::same_login(&login(None, "a"), &login(None, "a")));
        assert!(!SentinelSwitches::same_login(
            &login(None, "a"),
            &login(None, "b")
        ));
        assert!(!SentinelSwitches::same_login(
            &login(Some("ops"), "a"),
            &login(None, "a")
        ));
        assert!(!SentinelSwitches::same_login(&None, &login(None, "a")));
    }
}
