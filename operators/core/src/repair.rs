//! A person's request to rebuild one member from its healthy peers on an empty volume
//! ([`REPAIR_ANNOTATION`]), the same for every engine: read from the cluster's annotation and
//! joined with what the cluster's status recorded of it (`status.repair`).
//!
//! Whether and when a member may be rebuilt is each engine's decision, through its safety gate;
//! the act is [`crate::wipe::wipe_member`] or the engine's own membership steps. What is shared
//! is the request's reading and its one rule: what status recorded as taken for this request is
//! never taken again.

use kube::ResourceExt;

pub use crate::crd::{REPAIR_ANNOTATION, RepairPhase, RepairRecord};

/// A standing repair request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairRequest {
    /// The member the annotation names, as written (trimmed).
    pub member: String,
    /// What status recorded as taken for this request (the engine's identity of what it
    /// removed or wiped), once it was.
    pub taken: Option<String>,
}

/// The repair `object` asks for, if it carries [`REPAIR_ANNOTATION`], with what `recorded`
/// (its `status.repair`) says was taken for the same member.
pub fn request(object: &impl ResourceExt, recorded: Option<&RepairRecord>) -> Option<RepairRequest> {
    let member = object.annotations().get(REPAIR_ANNOTATION)?.trim().to_string();
    let taken = recorded
        .filter(|record| record.member == member)
        .and_then(|record| record.replaced.clone());
    Some(RepairRequest { member, taken })
}

impl RepairRequest {
    /// The record of this request for `status.repair`.
    pub fn record(
        &self,
        phase: RepairPhase,
        taken: Option<String>,
        message: impl Into<String>,
    ) -> RepairRecord {
        RepairRecord {
            member: self.member.clone(),
            phase,
            replaced: taken,
            message: message.into(),
        }
    }
}

/// The ordinal a request's `annotation` names when it is one of `members` (ordinals
/// `0..members`), or the refusal that says why nothing is changed.
pub(crate) fn named_member(
    annotation: &str,
    member: &str,
    ordinal: Option<usize>,
    members: usize,
) -> Result<usize, String> {
    ordinal.filter(|ordinal| *ordinal < members).ok_or_else(|| {
        format!(
            "{annotation} names {member:?}, which is not one of this cluster's {members} members (ordinals 0 to {}), \
             so nothing is changed: name one, or remove the annotation",
            members.saturating_sub(1)
        )
    })
}

/// A request resolved against the cluster's member pods, for engines that rebuild a member by
/// wiping its pod and claim ([`crate::wipe::wipe_member`]): which member, and its pod now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRepair {
    /// The member the request names, as written.
    pub member: String,
    /// Its ordinal, when the name is one of the cluster's member names.
    pub ordinal: Option<usize>,
    /// The uid of the pod wiped for the request, once it was recorded.
    pub taken: Option<String>,
    /// The uid of the named member's pod now, when it has one.
    pub pod_uid: Option<String>,
}

impl PodRepair {
    /// `request`, naming the member of `ordinal` (`None`: no member of this cluster), whose pod
    /// is looked up by name among `pods`. A pod being deleted is no pod: the one wiped for the
    /// request is still listed while it terminates, and must not read as "not wiped yet".
    pub fn resolve(
        request: RepairRequest,
        ordinal: Option<usize>,
        pods: &[k8s_openapi::api::core::v1::Pod],
    ) -> Self {
        let pod_uid = pods
            .iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .find(|pod| pod.metadata.name.as_deref() == Some(request.member.as_str()))
            .and_then(|pod| pod.metadata.uid.clone());
        Self {
            member: request.member,
            ordinal,
            taken: request.taken,
            pod_uid,
        }
    }

    /// The ordinal of the member the request names when it is one of `members` (ordinals
    /// `0..members`), or the refusal that says why nothing is changed.
    pub fn target(&self, members: usize) -> Result<usize, String> {
        named_member(REPAIR_ANNOTATION, &self.member, self.ordinal, members)
    }

    /// Whether the request is done with: a pod was recorded as wiped for it and it is no longer
    /// the member's pod. While the recorded pod is still there (the operator stopped between
    /// the record and the wipe), it is not: that pod is wiped again.
    pub fn wiped(&self) -> bool {
        self.taken.is_some() && self.taken != self.pod_uid
    }

    /// The record for `status.repair`. Before anything was wiped for it (`wiped_now` is the
    /// pod this pass wiped): `Waiting`, saying `waiting`. After: `Done` once `back` (the
    /// engine's word that the member serves again from its new pod), `Rebuilding` until then.
    pub fn record(&self, wiped_now: Option<&String>, waiting: &str, back: bool) -> RepairRecord {
        let Some(taken) = self.taken.clone().or_else(|| wiped_now.cloned()) else {
            return RepairRecord {
                member: self.member.clone(),
                phase: RepairPhase::Waiting,
                replaced: None,
                message: waiting.to_string(),
            };
        };
        let done = back && self.pod_uid.as_ref().is_some_and(|uid| *uid != taken);
        let (phase, message) = if done {
            (
                RepairPhase::Done,
                format!(
                    "{} was rebuilt on a new volume from its peers; remove the annotation to end the request",
                    self.member
                ),
            )
        } else {
            (
                RepairPhase::Rebuilding,
                format!(
                    "{}'s claim and pod were deleted; it comes back on an empty volume and copies the data from its peers",
                    self.member
                ),
            )
        };
        RepairRecord {
            member: self.member.clone(),
            phase,
            replaced: Some(taken),
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::ObjectMeta;

    use super::*;

    fn annotated(value: Option<&str>) -> ConfigMap {
        ConfigMap {
            metadata: ObjectMeta {
                annotations: value.map(|v| BTreeMap::from([(REPAIR_ANNOTATION.to_string(), v.to_string())])),
                ..ObjectMeta::default()
            },
            ..ConfigMap::default()
        }
    }

    fn recorded(member: &str, taken: Option<&str>) -> RepairRecord {
        RepairRecord {
            member: member.into(),
            phase: RepairPhase::Rebuilding,
            replaced: taken.map(str::to_string),
            message: String::new(),
        }
    }

    #[test]
    fn a_terminating_pod_is_not_the_members_pod() {
        use k8s_openapi::{api::core::v1::Pod, apimachinery::pkg::apis::meta::v1::Time};
        let pod = |uid: &str, terminating: bool| Pod {
            metadata: ObjectMeta {
                name: Some("demo-1".into()),
                uid: Some(uid.into()),
                deletion_timestamp: terminating.then(|| Time(k8s_openapi::jiff::Timestamp::now())),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        };
        let request = || RepairRequest {
            member: "demo-1".into(),
            taken: Some("a".into()),
        };
        let terminating = PodRepair::resolve(request(), Some(1), &[pod("a", true)]);
        assert_eq!(terminating.pod_uid, None);
        assert!(
            terminating.wiped(),
            "the wiped pod, still terminating, is not wiped again"
        );
        let running = PodRepair::resolve(request(), Some(1), &[pod("a", false)]);
        assert!(!running.wiped(), "recorded, not deleted yet: wiped again");
    }

    #[test]
    fn a_pod_repair_is_done_with_once_another_pod_runs_under_the_name() {
        let repair = |taken: Option<&str>, now: Option<&str>| PodRepair {
            member: "demo-1".into(),
            ordinal: Some(1),
            taken: taken.map(str::to_string),
            pod_uid: now.map(str::to_string),
        };
        assert!(!repair(None, Some("a")).wiped());
        assert!(!repair(Some("a"), Some("a")).wiped(), "recorded, not wiped yet");
        assert!(repair(Some("a"), Some("b")).wiped());
        assert!(repair(Some("a"), None).wiped(), "the pod not created again yet");

        let waiting = repair(None, Some("a")).record(None, "the gate waits", false);
        assert_eq!(
            (waiting.phase, waiting.message.as_str()),
            (RepairPhase::Waiting, "the gate waits")
        );
        let now = "a".to_string();
        let rebuilding = repair(None, Some("a")).record(Some(&now), "", true);
        assert_eq!(
            (rebuilding.phase, rebuilding.replaced),
            (RepairPhase::Rebuilding, Some(now))
        );
        assert_eq!(
            repair(Some("a"), Some("b")).record(None, "", false).phase,
            RepairPhase::Rebuilding
        );
        assert_eq!(
            repair(Some("a"), Some("b")).record(None, "", true).phase,
            RepairPhase::Done
        );
    }

    #[test]
    fn a_request_is_taken_once_per_member_named() {
        assert_eq!(request(&annotated(None), None), None);
        let fresh = request(&annotated(Some(" demo-1 ")), None).unwrap();
        assert_eq!((fresh.member.as_str(), fresh.taken), ("demo-1", None));
        let taken = request(
            &annotated(Some("demo-1")),
            Some(&recorded("demo-1", Some("uid-1"))),
        )
        .unwrap();
        assert_eq!(taken.taken.as_deref(), Some("uid-1"));
        // A record of another member is another request's.
        let other = request(
            &annotated(Some("demo-2")),
            Some(&recorded("demo-1", Some("uid-1"))),
        )
        .unwrap();
        assert_eq!(other.taken, None);
    }
}
