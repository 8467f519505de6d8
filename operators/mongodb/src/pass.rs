//! What every part of a replica set's pass shares: the operator's settings and state, and the
//! reconcile error naming the call that failed. [`crate::reconcile`] runs the pass with
//! [`crate::observe`], [`crate::execute`] and [`crate::status`]; none of them depends on
//! `reconcile`.

use crate::{
    clients::{CallFailure, MongoClients},
    crd::MongoDBReplicaSet,
    resources::member_host,
};

pub use quorum_core::config::{MemberAddresses, MemberConfig};

/// Operator-wide settings.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Where members are found (`--cluster-domain`, `--member-addresses`) and whether backups
    /// may go to an `http://` S3 endpoint (`--allow-http-backups`).
    pub members: MemberConfig,
    /// The operator's own image: backup Jobs run it.
    pub operator_image: String,
}

/// The operator's own state in the shared context.
pub struct State {
    pub clients: MongoClients,
    pub settings: Settings,
    /// When the pass after a step comes.
    pub follow_ups: quorum_core::pass::FollowUps<(crate::decide::Reason, String)>,
}

impl quorum_core::runner::ForgetsClusters for State {
    fn forget_cluster<'a>(&'a self, key: &'a str) -> futures::future::BoxFuture<'a, ()> {
        self.follow_ups.forget_cluster(key);
        Box::pin(self.clients.forget_cluster(key))
    }
}

impl State {
    /// The `host:port` of pod `ordinal` of `statefulset` in the set's configuration.
    pub fn host(&self, replica_set: &MongoDBReplicaSet, statefulset: &str, ordinal: usize) -> String {
        member_host(replica_set, statefulset, ordinal, &self.settings.members)
    }
}

/// A failed pass, naming what failed.
pub type Error = quorum_core::pass::PassError<CallFailure>;
