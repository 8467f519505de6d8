//! A change of primary the database made by itself (a Sentinel failover, an election), reported
//! the same way by every engine that follows one: a Warning event and the failover metrics.

use kube::Resource;

use crate::{
    availability::metrics::AdminMetrics,
    crd::ObservedFailover,
    events::{EventPublisher, Severity},
};

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

/// Publishes the event (`by` names who chose the new primary: "the Sentinels", "the replica
/// set's election") and counts the failover in `metrics`.
pub async fn report<K>(
    events: &EventPublisher,
    metrics: &AdminMetrics,
    engine: &str,
    object: &K,
    failover: &ObservedFailover,
    by: &str,
) where
    K: Resource<DynamicType = ()>,
{
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
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;

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
        // Writable before the operator saw it: timed to when the database says.
        let elected = ObservedFailover::new("db-0".into(), "db-1".into(), at(1_000_000), at(1_000_010), now);
        assert_eq!(elected.from_loss_millis, Some(10_000));
        assert_eq!(
            describe(&unseen, "an election"),
            "an election made db-1 the primary in place of db-0"
        );
    }
}
