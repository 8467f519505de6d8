//! A person's request to bring a cluster whose primary or majority is lost for good back into
//! service from one surviving member ([`RECOVER_ANNOTATION`]), the same for every engine: read
//! from the cluster's annotation and joined with what `status.recovery` recorded of it.
//!
//! Whether the named member may serve is each engine's decision (it must answer, and hold
//! everything any member that answers holds); what is shared is the request's reading, its
//! record, and its one rule: a request recorded as done is never taken again.

use kube::ResourceExt;

pub use crate::crd::{RECOVER_ANNOTATION, RecoveryPhase, RecoveryRecord};

/// The value of [`RECOVER_ANNOTATION`] that asks, when no member survives, for the cluster to be
/// restored in place from its newest successful backup (`status.lastBackup`), where the engine
/// offers it (etcd).
pub const NEWEST_BACKUP: &str = "newest-backup";

/// The command that asks for a recovery of cluster `cluster` (of kind `kind`, as
/// `EtcdCluster`) from `member`, exactly as a person runs it: what a cluster that waits on a
/// lost quorum or primary names in its condition.
pub fn request_command(kind: &str, cluster: &str, member: &str) -> String {
    format!(
        "kubectl annotate {} {cluster} {RECOVER_ANNOTATION}={member}",
        kind.to_lowercase()
    )
}

/// A standing recovery request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryRequest {
    /// The member the annotation names, as written (trimmed).
    pub member: String,
    /// Its ordinal, when the name is one of the cluster's member names.
    pub ordinal: Option<usize>,
    /// The primary it replaced, when status recorded this request as done.
    pub done: Option<String>,
    /// Status recorded this request as expired: it is for no loss and is never taken.
    pub expired: bool,
}

/// The recovery `object` asks for, if it carries [`RECOVER_ANNOTATION`]; `ordinal_of` reads a
/// member name's ordinal, and `recorded` (its `status.recovery`) says whether it was done.
pub fn request(
    object: &impl ResourceExt,
    recorded: Option<&RecoveryRecord>,
    ordinal_of: impl Fn(&str) -> Option<usize>,
) -> Option<RecoveryRequest> {
    let member = object.annotations().get(RECOVER_ANNOTATION)?.trim().to_string();
    let same = recorded.filter(|record| record.member == member);
    let done = same
        .filter(|record| record.phase == RecoveryPhase::Done)
        .map(|record| record.replaced.clone().unwrap_or_default());
    Some(RecoveryRequest {
        ordinal: ordinal_of(&member),
        member,
        done,
        expired: same.is_some_and(|record| record.phase == RecoveryPhase::Expired),
    })
}

impl RecoveryRequest {
    /// The ordinal of the member the request names when it is one of `members` (ordinals
    /// `0..members`), or the refusal that says why nothing is changed.
    pub fn target(&self, members: usize) -> Result<usize, String> {
        crate::repair::named_member(RECOVER_ANNOTATION, &self.member, self.ordinal, members)
    }

    /// Whether the request was already taken.
    pub fn is_done(&self) -> bool {
        self.done.is_some()
    }

    /// Whether the request may still be taken: neither done nor expired.
    pub fn is_open(&self) -> bool {
        !self.is_done() && !self.expired
    }

    /// The record of a request that is for no loss (the cluster was not blocked on a lost
    /// primary or majority when the pass saw it), and is never taken.
    pub fn expire(&self) -> RecoveryRecord {
        RecoveryRecord {
            member: self.member.clone(),
            phase: RecoveryPhase::Expired,
            replaced: None,
            message: format!(
                "not taken: the cluster was not waiting on a lost primary or majority when this request was seen, \
                 or that loss is over. A request is for one loss: remove {RECOVER_ANNOTATION}, and set it again \
                 during a loss if one comes"
            ),
        }
    }

    /// The record while the request is not taken: what the operator waits for or why it refuses.
    pub fn waiting(&self, message: impl Into<String>) -> RecoveryRecord {
        RecoveryRecord {
            member: self.member.clone(),
            phase: RecoveryPhase::Waiting,
            replaced: None,
            message: message.into(),
        }
    }

    /// Where the request stands at the end of a pass, for `status.recovery`. It is done once the
    /// member it names became the primary while it stood: as recorded before, or in this pass
    /// (`took_over_from`: the primary it took over from, when the primary changed to it).
    /// Otherwise, while the primary is lost, every pass decides on the request: `refused` is the
    /// pass's refusal of it, `taking` the step it takes for it. Neither means the cluster is not
    /// (or no longer) waiting on a loss, and the request expires.
    pub fn outcome(
        &self,
        took_over_from: Option<String>,
        refused: Option<String>,
        taking: Option<String>,
    ) -> RecoveryRecord {
        if let Some(replaced) = &self.done {
            return self.done(replaced);
        }
        if self.expired {
            return self.expire();
        }
        if let Some(replaced) = took_over_from {
            return self.done(&replaced);
        }
        match refused.or(taking) {
            Some(message) => self.waiting(message),
            None => self.expire(),
        }
    }

    /// The record once the named member serves in place of `replaced`.
    pub fn done(&self, replaced: &str) -> RecoveryRecord {
        RecoveryRecord {
            member: self.member.clone(),
            phase: RecoveryPhase::Done,
            replaced: Some(replaced.to_string()),
            message: format!(
                "{} serves in place of {replaced}; what only the lost members held is not in it. Remove the annotation to end the request",
                self.member
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    #[test]
    fn the_request_command_is_what_a_person_runs() {
        assert_eq!(
            request_command("EtcdCluster", "demo", "demo-2"),
            "kubectl annotate etcdcluster demo quorum.dev/recover-from=demo-2"
        );
    }

    fn annotated(member: &str) -> ConfigMap {
        let mut object = ConfigMap::default();
        object.metadata.annotations = Some([(RECOVER_ANNOTATION.to_string(), format!(" {member} "))].into());
        object
    }

    fn ordinal_of(name: &str) -> Option<usize> {
        name.strip_prefix("main-")?.parse().ok()
    }

    #[test]
    fn a_request_is_read_with_its_ordinal_and_is_done_only_when_recorded_done_for_the_same_member() {
        assert_eq!(request(&ConfigMap::default(), None, ordinal_of), None);
        let fresh = request(&annotated("main-2"), None, ordinal_of).unwrap();
        assert_eq!(
            (fresh.member.as_str(), fresh.ordinal, fresh.is_done()),
            ("main-2", Some(2), false)
        );
        assert_eq!(fresh.target(3), Ok(2));
        assert!(
            fresh
                .target(2)
                .unwrap_err()
                .contains("not one of this cluster's 2 members")
        );
        assert_eq!(
            request(&annotated("other"), None, ordinal_of).unwrap().ordinal,
            None
        );

        let done = fresh.done("main-0");
        assert_eq!(done.phase, RecoveryPhase::Done);
        let again = request(&annotated("main-2"), Some(&done), ordinal_of).unwrap();
        assert_eq!(again.done.as_deref(), Some("main-0"));
        let waiting = fresh.waiting("waits");
        assert!(
            !request(&annotated("main-2"), Some(&waiting), ordinal_of)
                .unwrap()
                .is_done()
        );
        assert!(
            !request(&annotated("main-1"), Some(&done), ordinal_of)
                .unwrap()
                .is_done()
        );
        let expired = fresh.expire();
        let later = request(&annotated("main-2"), Some(&expired), ordinal_of).unwrap();
        assert!(!later.is_open() && !later.is_done());
        assert!(
            request(&annotated("main-1"), Some(&expired), ordinal_of)
                .unwrap()
                .is_open()
        );
    }

    #[test]
    fn a_pass_ends_a_request_done_refused_taking_or_expired() {
        let open = request(&annotated("main-1"), None, ordinal_of).unwrap();
        let done = open.outcome(Some("main-0".into()), Some("ignored".into()), None);
        assert_eq!(
            (done.phase, done.replaced.as_deref()),
            (RecoveryPhase::Done, Some("main-0"))
        );
        let refused = open.outcome(None, Some("member 1 does not answer".into()), None);
        assert_eq!(
            (refused.phase, refused.message.as_str()),
            (RecoveryPhase::Waiting, "member 1 does not answer")
        );
        let taking = open.outcome(None, None, Some("promoting main-1".into()));
        assert_eq!(taking.phase, RecoveryPhase::Waiting);
        assert_eq!(open.outcome(None, None, None).phase, RecoveryPhase::Expired);
        // A request recorded done or expired stays so, whatever the pass did.
        let recorded = request(&annotated("main-1"), Some(&done), ordinal_of).unwrap();
        assert_eq!(recorded.outcome(None, None, None), done);
        let expired = open.expire();
        let recorded = request(&annotated("main-1"), Some(&expired), ordinal_of).unwrap();
        assert_eq!(
            recorded.outcome(None, None, Some("x".into())).phase,
            RecoveryPhase::Expired
        );
    }
}
