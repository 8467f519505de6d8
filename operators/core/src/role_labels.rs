//! The role label on member pods (primary or replica), which the primary and replicas Services
//! select: set from what is true now, on the pods listed once per pass.

use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams},
};

/// The member pods one pass listed, kept in step with every label it sets, so labelling twice in
/// a pass (before a step and after it) sends only what changed in between.
pub struct LabelledPods {
    pods: Vec<Pod>,
    label: &'static str,
}

impl LabelledPods {
    /// `pods` as listed this pass; `label` is the engine's role label key.
    pub fn new(pods: Vec<Pod>, label: &'static str) -> Self {
        Self { pods, label }
    }

    pub fn pods(&self) -> &[Pod] {
        &self.pods
    }

    /// Sets the label of each pod `role` names a role for, where it differs; pods `role` says
    /// nothing of keep theirs (a member the operator cannot see is not moved in or out of a
    /// Service on a guess).
    ///
    /// # Errors
    /// The API server's error for the first patch refused; the pods before it are labelled.
    pub async fn set<'r>(
        &mut self,
        client: &Client,
        namespace: &str,
        role: impl Fn(&str) -> Option<&'r str>,
    ) -> Result<(), crate::Error> {
        let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
        for pod in &mut self.pods {
            let name = pod.name_any();
            let Some(wanted) = role(&name) else {
                continue;
            };
            if pod.labels().get(self.label).map(String::as_str) == Some(wanted) {
                continue;
            }
            // The UID makes the patch a precondition (the API server refuses to change it): a
            // pod deleted since it was listed (a restart this pass) and created again under
            // its name is left to the next pass, which sees what the new one runs.
            let patch = serde_json::json!({"metadata": {"uid": pod.uid(), "labels": {self.label: wanted}}});
            let written = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await;
            crate::freshness::record_write::<Pod, _>(namespace, &name, &written);
            match written {
                Ok(_) => {
                    pod.labels_mut()
                        .insert(self.label.to_string(), wanted.to_string());
                }
                // Gone, or another pod under the name now (its UID cannot be patched: 422).
                Err(kube::Error::Api(status))
                    if status.code == 404
                        || (status.code == 422 && status.message.contains("metadata.uid")) => {}
                Err(source) => {
                    return Err(crate::Error::Apply {
                        kind: "Pod".into(),
                        name: format!("{namespace}/{name}"),
                        source,
                    });
                }
            }
        }
        Ok(())
    }
}
