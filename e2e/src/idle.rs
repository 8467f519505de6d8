//! What passes over a settled cluster cost the API server, counted by the operator's own
//! client ([`crate::control_plane::recording_admin_client`]).
//!
//! A pass is asked for by touching an annotation of the cluster object (the test's write, not
//! counted) and awaited on the operator's pass counter. The first passes after the operator
//! started may still apply children once, and read them until the watches deliver those
//! writes, and a cluster just settled may still report a replica catching up; once one pass
//! has written nothing and read nothing but the cluster object, the rounds after it must
//! write nothing, and read nothing but the cluster object that the annotation changed:
//! everything else a pass needs is in the operator's watch caches.

use std::{fmt::Debug, time::Duration};

use kube::{
    Api, Resource,
    api::{Patch, PatchParams},
};
use quorum_core::metrics::Metrics;
use serde::{Serialize, de::DeserializeOwned};

use crate::{control_plane::RequestLog, wait};

/// The passes counted by `controller`'s reconcile counter in `metrics`.
pub fn passes(metrics: &Metrics, controller: &str) -> u64 {
    let prefix = format!(r#"quorum_reconcile_total{{controller="{controller}"}}"#);
    metrics
        .render()
        .lines()
        .find(|line| line.starts_with(&prefix))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// Touches an annotation of `name` and waits until `controller` has made one more pass.
pub async fn poke<K>(objects: &Api<K>, name: &str, metrics: &Metrics, controller: &str, round: usize)
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let before = passes(metrics, controller);
    // A value never used before, so the touch is a change whatever touched it before.
    let value = format!(
        "{round}-{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos()
    );
    let poke = serde_json::json!({"metadata": {"annotations": {"test.quorum.dev/poke": value}}});
    objects
        .patch(name, &PatchParams::default(), &Patch::Merge(&poke))
        .await
        .expect("touch the cluster");
    wait::until("a pass", Duration::from_secs(30), || async {
        let after = passes(metrics, controller);
        if after > before {
            Ok(())
        } else {
            Err(format!("{after} passes"))
        }
    })
    .await;
}

/// The status of `name`, as JSON, for a failure's message.
async fn status_of<K>(objects: &Api<K>, name: &str) -> serde_json::Value
where
    K: Resource + Clone + DeserializeOwned + Debug + Serialize,
{
    match objects.get(name).await {
        Ok(object) => serde_json::to_value(&object).unwrap_or_default()["status"].clone(),
        Err(error) => serde_json::Value::String(error.to_string()),
    }
}

/// Waits until `name` says it is settled: its `Progressing` condition `False`.
pub async fn settled<K>(objects: &Api<K>, name: &str)
where
    K: Resource + Clone + DeserializeOwned + Debug + Serialize,
{
    wait::until("the cluster settled", Duration::from_secs(120), || async {
        let object = objects.get(name).await.map_err(|error| error.to_string())?;
        let conditions = serde_json::to_value(&object).unwrap_or_default()["status"]["conditions"].clone();
        let progressing = conditions
            .as_array()
            .into_iter()
            .flatten()
            .find(|condition| condition["type"] == "Progressing")
            .cloned();
        match &progressing {
            Some(condition) if condition["status"] == "False" => Ok(()),
            _ => Err(format!("Progressing: {progressing:?}")),
        }
    })
    .await;
}

/// Waits until `name` is settled, asks for one pass over it, then for `rounds` more, and
/// asserts that those wrote nothing and read nothing but `name` itself (its path
/// `object_path`).
///
/// # Panics
/// When they did, naming every request.
pub async fn assert_settled_passes_are_free<K>(
    objects: &Api<K>,
    name: &str,
    object_path: &str,
    metrics: &Metrics,
    controller: &str,
    sent: &RequestLog,
    rounds: usize,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Serialize,
{
    settled(objects, name).await;
    // Until its watches deliver the operator's own last writes (a moment; longer on a loaded
    // machine), a pass reads what it wrote rather than trust a copy that may predate it: a
    // cost of the first moments after a change, not of a settled cluster. And a cluster
    // that has just settled may still be moving under it: a replica applying the last
    // transactions of the primary's first moments reports lag, then none, and the status
    // says so. So the rounds counted start once one pass has written nothing and read
    // nothing but the cluster object.
    let mut round = 0;
    wait::until(
        "a pass over the settled cluster that writes nothing and reads nothing but it",
        Duration::from_secs(60),
        || {
            round += 1;
            let this_round = round;
            async move {
                let (writes, reads) = (sent.writes().len(), sent.reads().len());
                poke(objects, name, metrics, controller, this_round).await;
                let written = &sent.writes()[writes..];
                let read = &sent.reads()[reads..];
                if written.is_empty() && read.iter().all(|(_, target)| target == object_path) {
                    Ok(())
                } else {
                    Err(format!("round {this_round} wrote {written:?} and read {read:?}"))
                }
            }
        },
    )
    .await;
    let status_before = status_of(objects, name).await;
    let (writes, reads) = (sent.writes().len(), sent.reads().len());
    for counted in 1..=rounds {
        poke(objects, name, metrics, controller, round + counted).await;
    }
    let written = &sent.writes()[writes..];
    assert!(
        written.is_empty(),
        "{rounds} passes over a settled cluster wrote: {written:?}\nits status before them: {status_before}\nand after: {}",
        status_of(objects, name).await
    );
    let read = &sent.reads()[reads..];
    assert!(
        read.iter().all(|(_, target)| target == object_path),
        "{rounds} passes over a settled cluster read more than the cluster itself: {read:?}"
    );
}
