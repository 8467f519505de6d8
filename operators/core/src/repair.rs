//! A person's request to rebuild one member from its healthy peers on an empty volume
//! ([`REPAIR_ANNOTATION`]), the same for every engine: read from the cluster's annotation and
//! joined with what the cluster's status recorded of it (`status.repair`).
//!
//! Whether and when a member may be rebuilt is each engine's decision, through its safety gate;
//! the act is [`crate::wipe::wipe_member`] or the engine's own membership steps. What is shared
//! is the request's reading and its one rule: what status recorded as taken for this request is
//! never taken again. A member wiped for a request is known by its pod and, when it keeps its
//! data on a claim, by that claim: a pod replaced before the wipe reached it stands on the same
//! claim, with the same data, and is wiped in its turn.

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::{Api, Client, ResourceExt};

use crate::pod::data_claim_name;

pub use crate::crd::{REPAIR_ANNOTATION, RepairPhase, RepairRecord};

/// A standing repair request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepairRequest {
    /// The member the annotation names, as written (trimmed).
    pub member: String,
    /// What status recorded as taken for this request (the engine's identity of what it
    /// removed or wiped), once it was.
    pub taken: Option<String>,
    /// The uid of the data claim the wiped pod stood on, when status recorded one with `taken`.
    pub taken_claim: Option<String>,
}

/// The repair `object` asks for, if it carries [`REPAIR_ANNOTATION`], with what `recorded`
/// (its `status.repair`) says was taken for the same member.
pub fn request(object: &impl ResourceExt, recorded: Option<&RepairRecord>) -> Option<RepairRequest> {
    let member = object.annotations().get(REPAIR_ANNOTATION)?.trim().to_string();
    let recorded = recorded.filter(|record| record.member == member);
    Some(RepairRequest {
        member,
        taken: recorded.and_then(|record| record.replaced.clone()),
        taken_claim: recorded.and_then(|record| record.replaced_claim.clone()),
    })
}

/// A member's pod wiped for a repair, and the data claim it stood on (for members that keep
/// their data on one): what status records before the wipe is taken.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WipedPod {
    pub uid: String,
    pub claim: Option<String>,
}

impl WipedPod {
    /// The wipe `record` says was taken, if any.
    pub fn recorded(record: &RepairRecord) -> Option<Self> {
        Some(Self {
            uid: record.replaced.clone()?,
            claim: record.replaced_claim.clone(),
        })
    }
}

/// Whether the member's data was wiped for a request that recorded pod `taken` (standing on
/// claim `taken_claim`) as wiped, given its pod (`pod_uid`) and standing claim (`claim_uid`) now:
/// the recorded pod is no longer the member's pod, and the recorded claim no longer its claim.
/// A pod replaced before the wipe reached it (deleted by someone else, evicted; or the operator
/// stopped between the record and the wipe) is another pod on the same claim and the same data.
fn wiped(
    taken: Option<&str>,
    taken_claim: Option<&str>,
    pod_uid: Option<&str>,
    claim_uid: Option<&str>,
) -> bool {
    taken.is_some() && taken != pod_uid && (taken_claim.is_none() || taken_claim != claim_uid)
}

/// The repair `object` asks for ([`request`], with what `recorded`, its `status.repair`, says
/// was taken), resolved against its member `pods` ([`PodRepair::resolve`]) and the named
/// member's standing data claim, which is read only while a request stands. `ordinal_of` gives
/// a member name's ordinal, `None` for a name of no member.
///
/// # Errors
/// The API server's error when the claim cannot be read.
pub async fn observe(
    client: &Client,
    object: &impl ResourceExt,
    recorded: Option<&RepairRecord>,
    pods: &[Pod],
    ordinal_of: impl FnOnce(&str) -> Option<usize>,
) -> Result<Option<PodRepair>, kube::Error> {
    let Some(request) = request(object, recorded) else {
        return Ok(None);
    };
    let namespace = object.namespace().unwrap_or_default();
    let claim = standing_claim(client, &namespace, &request.member).await?;
    let ordinal = ordinal_of(&request.member);
    Ok(Some(PodRepair::resolve(request, ordinal, pods, claim)))
}

/// The uid of pod `member`'s data claim while it stands (not being deleted); `None` when it has
/// none. Read only while a repair request stands: a settled cluster costs no read.
///
/// # Errors
/// The API server's error when the claim cannot be read.
pub async fn standing_claim(
    client: &Client,
    namespace: &str,
    member: &str,
) -> Result<Option<String>, kube::Error> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    let claim = claims.get_metadata_opt(&data_claim_name(member)).await?;
    Ok(claim
        .filter(|claim| claim.metadata.deletion_timestamp.is_none())
        .and_then(|claim| claim.metadata.uid))
}

impl RepairRequest {
    /// The record of this request for `status.repair`.
    pub fn record(
        &self,
        phase: RepairPhase,
        taken: Option<WipedPod>,
        message: impl Into<String>,
    ) -> RepairRecord {
        RepairRecord {
            member: self.member.clone(),
            phase,
            replaced_claim: taken.as_ref().and_then(|taken| taken.claim.clone()),
            replaced: taken.map(|taken| taken.uid),
            message: message.into(),
        }
    }

    /// Whether what this request recorded as wiped is gone, given the member's pod (`pod_uid`)
    /// and standing data claim (`claim_uid`) now.
    pub fn wiped(&self, pod_uid: Option<&str>, claim_uid: Option<&str>) -> bool {
        wiped(
            self.taken.as_deref(),
            self.taken_claim.as_deref(),
            pod_uid,
            claim_uid,
        )
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
    /// The uid of the claim that pod stood on, when it was recorded with it.
    pub taken_claim: Option<String>,
    /// The uid of the named member's pod now, when it has one.
    pub pod_uid: Option<String>,
    /// The uid of the named member's data claim now, while it stands ([`standing_claim`]).
    pub claim_uid: Option<String>,
}

impl PodRepair {
    /// `request`, naming the member of `ordinal` (`None`: no member of this cluster), whose pod
    /// is looked up by name among `pods`, and whose standing data claim is `claim_uid`. A pod
    /// being deleted is no pod: the one wiped for the request is still listed while it
    /// terminates, and must not read as "not wiped yet".
    pub fn resolve(
        request: RepairRequest,
        ordinal: Option<usize>,
        pods: &[Pod],
        claim_uid: Option<String>,
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
            taken_claim: request.taken_claim,
            pod_uid,
            claim_uid,
        }
    }

    /// The ordinal of the member the request names when it is one of `members` (ordinals
    /// `0..members`), or the refusal that says why nothing is changed.
    pub fn target(&self, members: usize) -> Result<usize, String> {
        named_member(REPAIR_ANNOTATION, &self.member, self.ordinal, members)
    }

    /// Whether the request is done with: a pod was recorded as wiped for it, it is no longer
    /// the member's pod, and the claim recorded with it is no longer the member's claim. While
    /// the recorded pod is still there (the operator stopped between the record and the wipe),
    /// or another pod stands on the recorded claim (the pod was replaced before the wipe reached
    /// it), it is not: the member's pod is wiped again.
    pub fn wiped(&self) -> bool {
        wiped(
            self.taken.as_deref(),
            self.taken_claim.as_deref(),
            self.pod_uid.as_deref(),
            self.claim_uid.as_deref(),
        )
    }

    /// What wiping the member's pod `pod_uid` now takes, to be recorded before it is taken.
    pub fn wiping(&self, pod_uid: &str) -> WipedPod {
        WipedPod {
            uid: pod_uid.to_string(),
            claim: self.claim_uid.clone(),
        }
    }

    /// The record for `status.repair`. Before anything was wiped for it (`wiped_now` is what
    /// this pass wiped): `Waiting`, saying `waiting`. After: `Done` once `back` (the engine's
    /// word that the member serves again from its new pod) on a new pod and claim, `Rebuilding`
    /// until then.
    pub fn record(&self, wiped_now: Option<&WipedPod>, waiting: &str, back: bool) -> RepairRecord {
        let recorded = self.taken.clone().map(|uid| WipedPod {
            uid,
            claim: self.taken_claim.clone(),
        });
        let Some(taken) = wiped_now.cloned().or(recorded) else {
            return RepairRecord {
                member: self.member.clone(),
                phase: RepairPhase::Waiting,
                replaced: None,
                replaced_claim: None,
                message: waiting.to_string(),
            };
        };
        let done = back
            && self.pod_uid.is_some()
            && wiped(
                Some(&taken.uid),
                taken.claim.as_deref(),
                self.pod_uid.as_deref(),
                self.claim_uid.as_deref(),
            );
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
            replaced: Some(taken.uid),
            replaced_claim: taken.claim,
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
            replaced_claim: taken.map(|uid| format!("claim-of-{uid}")),
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
            taken_claim: None,
        };
        let terminating = PodRepair::resolve(request(), Some(1), &[pod("a", true)], None);
        assert_eq!(terminating.pod_uid, None);
        assert!(
            terminating.wiped(),
            "the wiped pod, still terminating, is not wiped again"
        );
        let running = PodRepair::resolve(request(), Some(1), &[pod("a", false)], None);
        assert!(!running.wiped(), "recorded, not deleted yet: wiped again");
    }

    #[test]
    fn a_pod_repair_is_done_with_once_another_pod_runs_under_the_name() {
        let repair = |taken: Option<&str>, now: Option<&str>| PodRepair {
            member: "demo-1".into(),
            ordinal: Some(1),
            taken: taken.map(str::to_string),
            taken_claim: None,
            pod_uid: now.map(str::to_string),
            claim_uid: None,
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
        let now = repair(None, Some("a")).wiping("a");
        let rebuilding = repair(None, Some("a")).record(Some(&now), "", true);
        assert_eq!(
            (rebuilding.phase, rebuilding.replaced),
            (RepairPhase::Rebuilding, Some(now.uid))
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
    fn a_pod_replaced_before_the_wipe_reached_it_is_wiped_in_its_turn() {
        // (case, recorded pod and claim, pod and standing claim now, wiped, done once back)
        type Uids = (Option<&'static str>, Option<&'static str>);
        let cases: [(&str, Uids, Uids, bool, bool); 8] = [
            (
                "not taken yet",
                (None, None),
                (Some("p1"), Some("c1")),
                false,
                false,
            ),
            (
                "recorded, the operator stopped before the wipe",
                (Some("p1"), Some("c1")),
                (Some("p1"), Some("c1")),
                false,
                false,
            ),
            (
                "the pod replaced before the wipe reached it: the same claim, the same data",
                (Some("p1"), Some("c1")),
                (Some("p2"), Some("c1")),
                false,
                false,
            ),
            (
                "the claim deleted, the operator stopped before the pod was",
                (Some("p1"), Some("c1")),
                (Some("p1"), None),
                false,
                false,
            ),
            (
                "wiped: the pod and its claim going",
                (Some("p1"), Some("c1")),
                (None, None),
                true,
                false,
            ),
            (
                "wiped: a new pod on a new claim",
                (Some("p1"), Some("c1")),
                (Some("p2"), Some("c2")),
                true,
                true,
            ),
            (
                "a member that keeps its data in its pod: the pod is the data",
                (Some("p1"), None),
                (Some("p2"), None),
                true,
                true,
            ),
            (
                "recorded before claims were: the pod alone tells",
                (Some("p1"), None),
                (Some("p2"), Some("c1")),
                true,
                true,
            ),
        ];
        for (case, (taken, taken_claim), (pod_uid, claim_uid), wiped, done) in cases {
            let repair = PodRepair {
                member: "demo-1".into(),
                ordinal: Some(1),
                taken: taken.map(str::to_string),
                taken_claim: taken_claim.map(str::to_string),
                pod_uid: pod_uid.map(str::to_string),
                claim_uid: claim_uid.map(str::to_string),
            };
            assert_eq!(repair.wiped(), wiped, "{case}");
            let request = RepairRequest {
                member: "demo-1".into(),
                taken: repair.taken.clone(),
                taken_claim: repair.taken_claim.clone(),
            };
            assert_eq!(
                request.wiped(pod_uid, claim_uid),
                wiped,
                "{case}: the request's reading"
            );
            let record = repair.record(None, "waiting", true);
            assert_eq!(record.phase == RepairPhase::Done, done, "{case}: {record:?}");
            assert_eq!(
                (record.replaced.as_deref(), record.replaced_claim.as_deref()),
                (taken, taken_claim),
                "{case}: what was taken stays recorded"
            );
        }
    }

    #[test]
    fn a_wipe_records_the_claim_its_pod_stands_on_and_a_second_wipe_replaces_the_record() {
        let replaced_on_the_same_claim = PodRepair {
            member: "demo-1".into(),
            ordinal: Some(1),
            taken: Some("p1".into()),
            taken_claim: Some("c1".into()),
            pod_uid: Some("p2".into()),
            claim_uid: Some("c1".into()),
        };
        let wiping = replaced_on_the_same_claim.wiping("p2");
        assert_eq!(
            wiping,
            WipedPod {
                uid: "p2".into(),
                claim: Some("c1".into())
            }
        );
        let record = replaced_on_the_same_claim.record(Some(&wiping), "", false);
        assert_eq!(
            (
                record.phase,
                record.replaced.as_deref(),
                record.replaced_claim.as_deref()
            ),
            (RepairPhase::Rebuilding, Some("p2"), Some("c1"))
        );
        assert_eq!(WipedPod::recorded(&record), Some(wiping));
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
        assert_eq!(taken.taken_claim.as_deref(), Some("claim-of-uid-1"));
        // A record of another member is another request's.
        let other = request(
            &annotated(Some("demo-2")),
            Some(&recorded("demo-1", Some("uid-1"))),
        )
        .unwrap();
        assert_eq!(other.taken, None);
    }
}
