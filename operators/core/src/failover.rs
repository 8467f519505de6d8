//! A change of primary the database made by itself (a Sentinel failover, an election), reported
//! the same way by every engine that follows one: a Warning event and the failover metrics.

use kube::Resource;

use crate::{
    availability::metrics::AdminMetrics,
    crd::ObservedFailover,
    events::{EventPublisher, Severity},
};

/// Who the primary (or leader) is across passes: the member the database names now, and the one
/// kept as lost while it names none, so the election that follows a loss is seen as a change
/// from the member that was lost.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Following {
    /// The member the previous status named, or kept as lost, while none is named now.
    pub lost: Option<String>,
    /// The member a new one took over from, when the database names another than before.
    pub changed_from: Option<String>,
}

/// Follows the primary from the previous status (`named`, and `lost` kept while it named none)
/// to `named_now`.
pub fn follow(named: Option<String>, lost: Option<String>, named_now: Option<&str>) -> Following {
    let before = named.or(lost);
    match named_now {
        None => Following {
            lost: before,
            changed_from: None,
        },
        Some(now) => Following {
            lost: None,
            changed_from: before.filter(|before| before != now),
        },
    }
}

/// The reason of the event every engine publishes for an [`ObservedFailover`].
pub const PRIMARY_CHANGED: &str = "PrimaryChanged";

/// What the event says: who changed the primary, and the time from loss when there is one.
pub fn describe(failover: &ObservedFailover, by: &str) -> String {
    let from_loss = failover.from_loss_millis.map_or_else(String::new, |millis| {
        format!("; {} was first seen failing {millis} ms before", failover.from)
    });
    format!(
        "{by} made {} the primary in place of {}{from_loss}",
        failover.to, failover.from
    )
}

/// Reports the change of primary a pass stored, when it is new: `stored` is the record as the
/// pass found it, `written` the one it wrote. Called after the write, so a pass that fails
/// before storing it finds the change again and nothing is reported twice. Publishes the event
/// (`by` names who chose the new primary: "the Sentinels", "the replica set's election") and
/// counts the failover in `metrics`; returns whether it did.
pub async fn report_new<K>(
    events: &EventPublisher,
    metrics: &AdminMetrics,
    engine: &str,
    object: &K,
    stored: Option<&ObservedFailover>,
    written: Option<&ObservedFailover>,
    by: &str,
) -> bool
where
    K: Resource<DynamicType = ()>,
{
    let Some(failover) = written.filter(|written| Some(*written) != stored) else {
        return false;
    };
    metrics.observe_observed_failover(engine, failover);
    events
        .publish(
            object,
            Severity::Warning,
            PRIMARY_CHANGED,
            "Reconcile",
            describe(failover, by),
        )
        .await;
    true
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

    #[test]
    fn a_change_is_seen_from_the_member_last_named_even_across_passes_that_named_none() {
        let name = |s: &str| Some(s.to_string());
        assert_eq!(
            follow(name("a"), None, Some("a")),
            Following {
                lost: None,
                changed_from: None
            }
        );
        let lost = follow(name("a"), None, None);
        assert_eq!(
            lost,
            Following {
                lost: name("a"),
                changed_from: None
            }
        );
        assert_eq!(
            follow(None, lost.lost.clone(), None).lost,
            name("a"),
            "kept while none"
        );
        assert_eq!(follow(None, name("a"), Some("b")).changed_from, name("a"));
        assert_eq!(follow(name("a"), None, Some("b")).changed_from, name("a"));
        assert_eq!(
            follow(None, None, Some("a")),
            Following {
                lost: None,
                changed_from: None
            },
            "the first"
        );
    }

    #[test]
    fn the_event_names_both_primaries_and_the_time_from_loss_when_known() {
        let at = |seconds| {
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::from_second(seconds).unwrap(),
            ))
        };
        let now = Timestamp::from_second(1_000_012).unwrap();
        let seen = ObservedFailover::new("db-0".into(), "db-1".into(), at(1_000_000), None, now);
        assert_eq!(seen.from_loss_millis, Some(12_000));
        assert_eq!(
            describe(&seen, "the Sentinels"),
            "the Sentinels made db-1 the primary in place of db-0; db-0 was first seen failing 12000 ms before"
        );
        let unseen = ObservedFailover::new("db-0".into(), "db-1".into(), None, None, now);
        assert_eq!(unseen.from_loss_millis, None);
        // Seen failing only in the pass that sees the new primary: when it was lost is unknown.
        let together = ObservedFailover::new("db-0".into(), "db-1".into(), at(1_000_012), None, now);
        assert_eq!((together.lost_at, together.from_loss_millis), (None, None));
        // Writable before the operator saw it: timed to when the database says.
        let elected = ObservedFailover::new("db-0".into(), "db-1".into(), at(1_000_000), at(1_000_010), now);
        assert_eq!(elected.from_loss_millis, Some(10_000));
        assert_eq!(
            describe(&unseen, "an election"),
            "an election made db-1 the primary in place of db-0"
        );
    }
}
