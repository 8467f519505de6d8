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
