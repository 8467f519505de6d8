//! The real-pod tier's shared scenario steps, the same for every engine: an operator installed by
//! its chart onto the real node in a test namespace, member pods found by their cluster's labels,
//! a database process killed inside its container, a pod deleted, a claim followed across both.
//! Each engine's `tests/real_pods.rs` adds only what is its own (clients, histories, members).

use std::{collections::BTreeMap, path::Path, time::Duration};

use k8s_openapi::api::core::v1::{Event, PersistentVolumeClaim, Pod};
use kube::{
    Api, Client,
    api::{DeleteParams, ListParams},
};

use quorum_core::{
    backup::controller::BackupResource,
    crd::{BackupPhase, BackupRunStatus, BackupSpec},
};

use crate::{
    control_plane::{TestNamespace, admin_client},
    helm::ChartRelease,
    real_node, wait,
};

/// The in-cluster S3 store's pod and Service.
pub const S3_STORE: &str = "backups-s3";
/// The Secret with the store's credentials (`accessKeyId`, `secretAccessKey`).
pub const S3_CREDENTIALS: &str = "s3-credentials";
const S3_PORT: u16 = 9000;

/// An S3-compatible store in the test namespace ([`OnRealNode::deploy_s3_store`]).
pub struct InClusterS3 {
    /// What pods use: the Service's cluster DNS name.
    pub endpoint: String,
    /// What the test on the host uses: the Service's cluster IP.
    pub host_endpoint: String,
    /// The store's pod, as it was once Ready.
    pod: Pod,
}

impl InClusterS3 {
    /// A backup destination in the store's bucket under `prefix`.
    pub fn destination(&self, prefix: &str) -> quorum_core::crd::BackupDestination {
        quorum_core::crd::BackupDestination {
            s3: Some(quorum_core::crd::S3Destination {
                bucket: crate::s3::DEFAULT_BUCKET.into(),
                prefix: Some(prefix.into()),
                endpoint: Some(self.endpoint.clone()),
                region: None,
                credentials_secret_name: S3_CREDENTIALS.into(),
            }),
            filesystem: None,
        }
    }

    /// Freezes the store's server (the cgroup freezer): every request to it hangs, as it
    /// would to a store that stopped answering, until [`InClusterS3::thaw`].
    pub fn freeze(&self) {
        real_node::freeze_container(&self.pod, "s3");
    }

    /// Lets the store frozen by [`InClusterS3::freeze`] answer again.
    pub fn thaw(&self) {
        real_node::thaw_container(&self.pod, "s3");
    }

    /// A backup sink into the store's bucket under `prefix` for the host, through the Service's
    /// cluster IP: the operators' own upload code, run beside the test.
    pub fn host_sink(&self, prefix: &str) -> quorum_core::backup::BackupSink {
        let target = quorum_core::backup::BackupTarget::S3(quorum_core::backup::S3Target {
            bucket: crate::s3::DEFAULT_BUCKET.to_string(),
            prefix: Some(prefix.to_string()),
            endpoint: Some(self.host_endpoint.clone()),
            region: None,
            access_key_id: crate::s3::ACCESS_KEY_ID.to_string(),
            secret_access_key: crate::s3::SECRET_ACCESS_KEY.to_string(),
            allow_http: true,
        });
        quorum_core::backup::BackupSink::new(target).expect("a sink for the in-cluster store")
    }

    /// Deletes every object stored under `prefix` (the store keeps them in memory).
    pub async fn delete_all(&self, prefix: &str) {
        let client = reqwest::Client::new();
        for key in self.keys(prefix).await {
            client
                .delete(format!(
                    "{}/{}/{key}",
                    self.host_endpoint,
                    crate::s3::DEFAULT_BUCKET
                ))
                .send()
                .await
                .and_then(reqwest::Response::error_for_status)
                .unwrap_or_else(|error| panic!("delete the store's object {key}: {error}"));
        }
    }

    /// The bytes of the object a backup recorded at `location` (`s3://<bucket>/<key>`).
    pub async fn object(&self, location: &str) -> Vec<u8> {
        let path = location
            .strip_prefix("s3://")
            .unwrap_or_else(|| panic!("{location} is no s3:// location"));
        reqwest::get(format!("{}/{path}", self.host_endpoint))
            .await
            .and_then(reqwest::Response::error_for_status)
            .unwrap_or_else(|error| panic!("read {location} from the store: {error}"))
            .bytes()
            .await
            .expect("the object's body")
            .to_vec()
    }

    /// The keys of the objects stored under `prefix` (S3 `ListObjectsV2`; the store does not
    /// check signatures, so a plain GET does).
    pub async fn keys(&self, prefix: &str) -> Vec<String> {
        let body = reqwest::get(format!(
            "{}/{}?list-type=2&prefix={prefix}",
            self.host_endpoint,
            crate::s3::DEFAULT_BUCKET
        ))
        .await
        .and_then(reqwest::Response::error_for_status)
        .expect("list the store's objects")
        .text()
        .await
        .expect("the listing's body");
        body.split("<Key>")
            .skip(1)
            .filter_map(|rest| rest.split_once("</Key>").map(|(key, _)| key.to_string()))
            .collect()
    }
}

/// The one-shot backup of the store scenario ([`InClusterS3::back_up_once`]).
pub const ONE_SHOT_BACKUP: &str = "one-shot";
/// The scheduled backup of the store scenario: every minute, keeping one run
/// ([`InClusterS3::schedule_every_minute`]).
pub const SCHEDULED_BACKUP: &str = "every-minute";

impl InClusterS3 {
    /// The spec of a backup of `cluster` into the store under `prefix`.
    pub fn backup_spec(
        &self,
        cluster: &str,
        prefix: &str,
        schedule: Option<&str>,
        retain: Option<u32>,
    ) -> BackupSpec {
        BackupSpec {
            cluster_name: cluster.into(),
            destination: self.destination(prefix),
            schedule: schedule.map(str::to_string),
            retain,
            verify: false,
        }
    }

    /// Backs `cluster` up once into the store under `prefix` (a `B` named [`ONE_SHOT_BACKUP`]),
    /// waits until the run succeeded, checks that its object is in the store, and returns its
    /// location.
    ///
    /// # Panics
    /// When the run fails, takes over three minutes, or its object is not in the store.
    pub async fn back_up_once<B: BackupResource>(
        &self,
        setup: &OnRealNode,
        cluster: &str,
        prefix: &str,
    ) -> String {
        let backups: Api<B> = Api::namespaced(setup.admin.clone(), &setup.ns);
        let backup = B::with_spec(ONE_SHOT_BACKUP, self.backup_spec(cluster, prefix, None, None));
        backups
            .create(&kube::api::PostParams::default(), &backup)
            .await
            .expect("create the one-shot backup");
        let (location, job) = wait::until("the one-shot backup stored", Duration::from_secs(180), || async {
            let backup = backups.get(ONE_SHOT_BACKUP).await.map_err(|e| e.to_string())?;
            let run = backup.backup_status().map(B::run).cloned().unwrap_or_default();
            match (run.phase, run.last_snapshot) {
                (Some(BackupPhase::Succeeded), Some(snapshot)) => {
                    // At least the first object's bytes (a Redis cluster's run stores a shard's
                    // object each).
                    let sent = run.progress.as_ref().map_or(0, |progress| progress.bytes as i64);
                    assert!(
                        sent >= snapshot.size_bytes,
                        "what the run sent: {:?}",
                        run.progress
                    );
                    Ok((snapshot.location, run.job))
                }
                (Some(BackupPhase::Failed), _) => panic!("the one-shot backup failed: {:?}", run.message),
                (phase, _) => Err(format!("{phase:?}: {:?}", run.message)),
            }
        })
        .await;
        // The bytes went through a Job beside the data, not the operator; once the run is
        // recorded its Job goes.
        let job = job.expect("the run names the Job it ran in");
        let jobs: Api<k8s_openapi::api::batch::v1::Job> = Api::namespaced(setup.admin.clone(), &setup.ns);
        wait::until(
            "the recorded run's Job deleted",
            Duration::from_secs(60),
            || async {
                match jobs.get_opt(&job).await.map_err(|e| e.to_string())? {
                    None => Ok(()),
                    Some(_) => Err(format!("Job {job} still there")),
                }
            },
        )
        .await;
        let stored = self.keys(prefix).await;
        assert!(
            stored.iter().any(|key| location.ends_with(key.as_str())),
            "{location} is not in the store: {stored:?}"
        );
        reads_only_its_secrets(setup, ONE_SHOT_BACKUP).await;
        location
    }

    /// A backup `B` of `cluster` (a `C`) with `verify`, into the store under `prefix`: its
    /// restore drill verifies the snapshot, is recorded on the cluster, and its throw-away
    /// cluster is deleted; then, with the content the snapshot recorded altered, the next drill
    /// of the same snapshot fails with what differs, and the cluster is `BackupUnverified` and
    /// `Degraded`. `cluster` must hold at least `records` records.
    ///
    /// # Panics
    /// When a drill does not end as described within ten minutes.
    pub async fn drill_verifies_then_catches_altered_content<B, C>(
        &self,
        setup: &OnRealNode,
        cluster: &str,
        prefix: &str,
        records: u64,
    ) where
        B: BackupResource,
        C: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + serde::Serialize,
    {
        use kube::api::{Patch, PatchParams, PostParams};
        use quorum_core::{
            backup::drill::BACKUP_UNVERIFIED,
            crd::{DrillPhase, DrillRecord},
        };
        const BACKUP: &str = "drilled";
        let backups: Api<B> = Api::namespaced(setup.admin.clone(), &setup.ns);
        let clusters: Api<C> = Api::namespaced(setup.admin.clone(), &setup.ns);
        let mut spec = self.backup_spec(cluster, prefix, None, None);
        spec.verify = true;
        backups
            .create(&PostParams::default(), &B::with_spec(BACKUP, spec))
            .await
            .expect("create the verified backup");
        // A status change does not wake a backup's pass (the drill's own writes would): an
        // annotation does. A cluster's pass is woken by its `lastDrill` changing.
        let nudge = |value: &str| {
            Patch::Merge(serde_json::json!({"metadata": {"annotations": {"test.quorum.dev/nudge": value}}}))
        };
        let drill_ended = |what: &'static str| {
            let backups = backups.clone();
            async move {
                wait::until(what, Duration::from_secs(600), || async {
                    let backup = backups.get(BACKUP).await.map_err(|e| e.to_string())?;
                    let status = backup.backup_status().cloned().unwrap_or_default();
                    let run = B::run(&status);
                    match run.drill.clone() {
                        Some(drill) if drill.phase != DrillPhase::Restoring => {
                            Ok((drill, serde_json::to_value(&status).expect("a status is JSON")))
                        }
                        other => Err(format!("{other:?}; {:?}", run.message)),
                    }
                })
                .await
            }
        };
        let drill_cluster_gone = |drill: DrillRecord| {
            let clusters = clusters.clone();
            async move {
                wait::until(
                    "the drill's cluster deleted",
                    Duration::from_secs(180),
                    || async {
                        match clusters
                            .get_opt(&drill.cluster)
                            .await
                            .map_err(|e| e.to_string())?
                        {
                            None => Ok(()),
                            Some(_) => Err(format!("{} still there", drill.cluster)),
                        }
                    },
                )
                .await
            }
        };
        let cluster_status = || async {
            let found = clusters.get(cluster).await.map_err(|e| e.to_string())?;
            Ok::<_, String>(serde_json::to_value(&found).expect("a cluster is JSON")["status"].clone())
        };
        let conditions_after = |unverified: &'static str| async move {
            wait::until(
                "the cluster's BackupUnverified",
                Duration::from_secs(120),
                || async {
                    let status = cluster_status().await?;
                    let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
                    let named = |name: &str| conditions.iter().find(|c| c["type"] == name).cloned();
                    match (named(BACKUP_UNVERIFIED), named("Degraded")) {
                        (Some(found), Some(degraded)) if found["status"] == unverified => {
                            Ok((found, degraded))
                        }
                        other => Err(format!("{other:?}")),
                    }
                },
            )
            .await
        };

        let (verified, status) = drill_ended("the first drill").await;
        assert_eq!(verified.phase, DrillPhase::Verified, "{verified:?}");
        assert!(verified.verified_at.is_some());
        let content = status["content"].clone();
        assert!(
            content["records"].as_u64().is_some_and(|found| found >= records),
            "the snapshot recorded its content: {content}"
        );
        let recorded = cluster_status().await.expect("the cluster's status")["lastDrill"]["phase"].clone();
        assert_eq!(recorded, "Verified");
        drill_cluster_gone(verified.clone()).await;
        let (unverified, _) = conditions_after("False").await;
        assert_eq!(unverified["reason"], "DrillVerified");

        // The same snapshot, its recorded content no longer what it holds: drilled again.
        let mut altered = content.clone();
        altered["digest"] = serde_json::json!("0".repeat(32));
        let patch = serde_json::json!({"status": {"content": altered, "drill": null}});
        backups
            .patch_status(BACKUP, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("alter the recorded content");
        backups
            .patch(BACKUP, &PatchParams::default(), &nudge("altered"))
            .await
            .expect("annotate the backup");
        let (failed, _) = drill_ended("the drill of the altered record").await;
        assert_eq!(failed.phase, DrillPhase::Failed, "{failed:?}");
        assert!(failed.message.contains("content differs"), "{}", failed.message);
        assert_eq!(failed.location, verified.location, "the same snapshot");
        drill_cluster_gone(failed).await;
        let (unverified, degraded) = conditions_after("True").await;
        assert!(
            unverified["message"]
                .as_str()
                .is_some_and(|m| m.contains("content differs")),
            "{unverified}"
        );
        assert_eq!(
            (&degraded["status"], &degraded["reason"]),
            (&serde_json::json!("True"), &serde_json::json!("BackupUnverified"))
        );
    }

    /// Starts a `B` named [`SCHEDULED_BACKUP`] of `cluster` into the store under `prefix`: a run
    /// every minute, keeping one.
    pub async fn schedule_every_minute<B: BackupResource>(
        &self,
        setup: &OnRealNode,
        cluster: &str,
        prefix: &str,
    ) {
        let backups: Api<B> = Api::namespaced(setup.admin.clone(), &setup.ns);
        let backup = B::with_spec(
            SCHEDULED_BACKUP,
            self.backup_spec(cluster, prefix, Some("* * * * *"), Some(1)),
        );
        backups
            .create(&kube::api::PostParams::default(), &backup)
            .await
            .expect("create the scheduled backup");
    }

    /// Where the scheduled backup ([`SCHEDULED_BACKUP`]) stands now.
    pub async fn scheduled_run<B: BackupResource>(
        &self,
        setup: &OnRealNode,
    ) -> Result<BackupRunStatus, String> {
        let backups: Api<B> = Api::namespaced(setup.admin.clone(), &setup.ns);
        let backup = backups.get(SCHEDULED_BACKUP).await.map_err(|e| e.to_string())?;
        Ok(backup.backup_status().map(B::run).cloned().unwrap_or_default())
    }

    /// Waits until the scheduled backup has stored a run (after one that failed: the schedule
    /// was not held up), and checks that its object is in the store under `prefix`.
    pub async fn scheduled_run_stored<B: BackupResource>(&self, setup: &OnRealNode, prefix: &str) {
        let stored = wait::until(
            "a later scheduled run stored",
            Duration::from_secs(180),
            || async {
                let run = self.scheduled_run::<B>(setup).await?;
                run.last_snapshot
                    .ok_or_else(|| format!("{:?}: {:?}", run.phase, run.message))
            },
        )
        .await;
        let keys = self.keys(prefix).await;
        assert!(
            keys.iter().any(|key| stored.location.ends_with(key.as_str())),
            "{} is not in the store: {keys:?}",
            stored.location
        );
    }

    /// Waits until the scheduled backup's retention deleted a run (its second run is the
    /// first to prune) and the store under `prefix` holds exactly one run of its own (one
    /// object per run), its newest, none it recorded as pruned, and every location in `kept`
    /// (other backups' objects) still.
    ///
    /// # Panics
    /// When that does not hold within five minutes, or a `kept` object is gone.
    pub async fn scheduled_runs_pruned<B: BackupResource>(
        &self,
        setup: &OnRealNode,
        prefix: &str,
        kept: &[String],
    ) {
        let backups: Api<B> = Api::namespaced(setup.admin.clone(), &setup.ns);
        // The schedule goes on while the store is listed: the listing is taken between two
        // reads of the same pruning record, and taken again when a run came in between.
        wait::until(
            "the scheduled backup's runs pruned to its newest",
            Duration::from_secs(300),
            || async {
                let record = || async {
                    let backup = backups.get(SCHEDULED_BACKUP).await.map_err(|e| e.to_string())?;
                    let run = backup.backup_status().map(B::run).cloned().unwrap_or_default();
                    match (run.last_pruned, run.last_snapshot) {
                        (Some(pruned), Some(newest)) => Ok((pruned.locations, newest.location)),
                        _ => Err(format!("{:?}: {:?}", run.phase, run.message)),
                    }
                };
                let before = record().await?;
                let stored = self.keys(prefix).await;
                if record().await? != before {
                    return Err("a run came in while the store was listed".to_string());
                }
                let (pruned, newest) = before;
                let is_stored = |location: &str| stored.iter().any(|key| location.ends_with(key.as_str()));
                let own = stored
                    .iter()
                    .filter(|key| key.contains(&format!("/{SCHEDULED_BACKUP}/")))
                    .count();
                if own != 1 || !is_stored(&newest) || pruned.iter().any(|location| is_stored(location)) {
                    return Err(format!(
                        "{own} runs of its own stored, newest {newest}, pruned {pruned:?}: {stored:?}"
                    ));
                }
                for location in kept {
                    assert!(
                        is_stored(location),
                        "another backup's {location} did not survive retention: {stored:?}"
                    );
                }
                Ok(())
            },
        )
        .await;
    }
}

/// A test namespace with one operator installed there by its chart, running on the real node.
pub struct OnRealNode {
    pub admin: Client,
    pub namespace: TestNamespace,
    pub ns: String,
    /// The release; `None` once [`Self::uninstall_operator`] removed it.
    pub chart: Option<ChartRelease>,
    chart_name: String,
}

impl OnRealNode {
    /// Creates a namespace named after `prefix` and installs `chart` there with `settings`
    /// (`--set` values), waiting until the operator's pod is Ready by its probe.
    pub async fn install(prefix: &str, chart: &str, settings: &[&str]) -> Self {
        Self::install_from(prefix, &crate::helm::chart_directory(chart), chart, settings).await
    }

    /// [`Self::install`] from a chart outside this checkout (`chart_directory`, an earlier
    /// release's, say).
    pub async fn install_from(prefix: &str, chart_directory: &Path, chart: &str, settings: &[&str]) -> Self {
        quorum_core::telemetry::init(quorum_core::config::LogFormat::Text);
        let admin = admin_client().await;
        let namespace = TestNamespace::create(&admin, prefix).await;
        let ns = namespace.name().to_string();
        let release =
            ChartRelease::install_on_real_node_from(&admin, chart_directory, chart, &ns, settings).await;
        Self {
            admin,
            namespace,
            ns,
            chart: Some(release),
            chart_name: chart.to_string(),
        }
    }

    /// `helm upgrade` of the operator to this checkout's chart with its default image, as a
    /// user upgrading to this release does, then waits until exactly one operator pod runs,
    /// Ready, from the new chart's image.
    pub async fn upgrade_operator(&self) {
        let chart = self.chart.as_ref().expect("the operator is installed");
        let directory = crate::helm::chart_directory(&self.chart_name);
        chart.upgrade_on_real_node(&directory, &[]);
        let image = crate::helm::default_image(&directory);
        let runs_image = |pod: &Pod| {
            pod.spec.as_ref().is_some_and(|spec| {
                spec.containers
                    .iter()
                    .all(|c| c.image.as_deref() == Some(image.as_str()))
            })
        };
        self.operator_pods_until(
            &format!("one operator pod Ready from {image}"),
            Duration::from_secs(180),
            |now| matches!(now, [pod] if runs_image(pod) && real_node::pod_ready(pod)),
        )
        .await;
    }

    /// Waits until the operator's pods, as a whole, are what `wanted` accepts.
    async fn operator_pods_until(&self, what: &str, timeout: Duration, wanted: impl Fn(&[Pod]) -> bool) {
        let selector = format!("app.kubernetes.io/name={}", self.chart_name);
        let pods = self.pods();
        wait::until(what, timeout, || async {
            let now = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .map_err(|error| error.to_string())?
                .items;
            if wanted(&now) {
                Ok(())
            } else {
                Err(describe_pods(&now))
            }
        })
        .await;
    }

    pub fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    pub fn claims(&self) -> Api<PersistentVolumeClaim> {
        Api::namespaced(self.admin.clone(), &self.ns)
    }

    /// How many pods matching `selector` run the template [`rolled_template_patch`] asks for
    /// and are Ready.
    pub async fn ready_on_rolled_template(&self, selector: &str) -> usize {
        self.ready_with_annotation(selector, ROLLED_ANNOTATION).await
    }

    /// How many pods matching `selector` carry the annotation `key` and are Ready.
    pub async fn ready_with_annotation(&self, selector: &str, key: &str) -> usize {
        self.pods_of(selector)
            .await
            .iter()
            .filter(|pod| {
                pod.metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(key))
                    && crate::real_node::pod_ready(pod)
            })
            .count()
    }

    /// The pods matching `selector`, by name.
    pub async fn pods_of(&self, selector: &str) -> Vec<Pod> {
        let mut pods = self
            .pods()
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items;
        pods.sort_by_key(|pod| pod.metadata.name.clone());
        pods
    }

    /// Waits until exactly `count` pods match `selector` and every one is Ready by its own
    /// probes, then asserts each runs on the real node with a pod-network address.
    pub async fn members_ready(&self, selector: &str, count: usize, timeout: Duration) -> Vec<Pod> {
        let pods = wait::until(
            &format!("{count} pods {selector} Ready by their probes"),
            timeout,
            || async {
                let pods = self.pods_of(selector).await;
                let ready = pods.iter().filter(|pod| real_node::pod_ready(pod)).count();
                if pods.len() == count && ready == count {
                    Ok(pods)
                } else {
                    Err(format!(
                        "{} pods, {ready} Ready: {}",
                        pods.len(),
                        describe_pods(&pods)
                    ))
                }
            },
        )
        .await;
        for pod in &pods {
            real_node::assert_on_real_node(pod);
        }
        pods
    }

    /// The sum of the operator's metric `name` over all its label sets, from its pod's own
    /// `/metrics` (reached at the pod's address on the pod network); 0 when absent.
    pub async fn operator_metric(&self, name: &str) -> Result<f64, String> {
        let selector = format!("app.kubernetes.io/name={}", self.chart_name);
        let pod = self
            .pods_of(&selector)
            .await
            .into_iter()
            .find(real_node::pod_ready)
            .ok_or("no Ready operator pod")?;
        let ip = pod
            .status
            .and_then(|status| status.pod_ip)
            .ok_or("the operator's pod has no address")?;
        let text = reqwest::get(format!("http://{ip}:8080/metrics"))
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|error| error.to_string())?
            .text()
            .await
            .map_err(|error| error.to_string())?;
        Ok(text
            .lines()
            .filter(|line| {
                line.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// Stops the operator's pod and starts it again when any of `reasons` was published more
    /// times than `seen` (the total when last looked, updated here): the step just reported is
    /// then resumed by a new process, which knows only what status and the cluster say. Returns
    /// whether it restarted the operator.
    pub async fn restart_operator_after_new_steps(
        &self,
        reasons: &[&str],
        seen: &std::sync::Mutex<i32>,
    ) -> bool {
        let total: i32 = self.occurrences(reasons).await.values().sum();
        {
            let mut seen = seen.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if total <= *seen {
                return false;
            }
            *seen = total;
        }
        self.restart_operator().await;
        true
    }

    /// Stops the operator's pod and starts it again, waiting for each.
    pub async fn restart_operator(&self) {
        self.scale_operator(0).await;
        self.scale_operator(1).await;
    }

    /// Scales the operator's Deployment to `replicas` and waits until exactly that many of its
    /// pods are Ready and no other is left: at zero, nothing reconciles the namespace's clusters.
    pub async fn scale_operator(&self, replicas: i32) {
        let selector = format!("app.kubernetes.io/name={}", self.chart_name);
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(self.admin.clone(), &self.ns);
        for deployment in deployments
            .list(&ListParams::default().labels(&selector))
            .await
            .unwrap()
            .items
        {
            deployments
                .patch(
                    &deployment.metadata.name.unwrap(),
                    &kube::api::PatchParams::default(),
                    &kube::api::Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
                )
                .await
                .unwrap();
        }
        self.operator_pods_until(
            &format!("{replicas} operator pods Ready"),
            Duration::from_secs(120),
            |now| now.len() == replicas as usize && now.iter().all(real_node::pod_ready),
        )
        .await;
    }

    /// `helm uninstall`, then waits until the operator's pod is gone.
    pub async fn uninstall_operator(&mut self) {
        let chart = self.chart.take().expect("the chart is installed");
        chart.uninstall();
        let selector = format!("app.kubernetes.io/name={}", self.chart_name);
        real_node::pods_gone(
            &self.pods(),
            &selector,
            "the operator's pod gone after helm uninstall",
            Duration::from_secs(60),
        )
        .await
        .unwrap_or_else(|failure| panic!("{failure}"));
    }

    /// Kills `container`'s main process in pod `name` (as a crash or the OOM killer would) and
    /// waits until the kubelet restarted it in the same pod and the pod is Ready again.
    pub async fn kill_and_await_restart(&self, name: &str, container: &str, timeout: Duration) {
        let pods = self.pods();
        let pod = pods.get(name).await.unwrap();
        let restarts_before = real_node::restart_count(&pod, container);
        real_node::kill_container(&pod, container);
        wait::until(
            &format!("{name}'s {container} restarted by the kubelet and Ready again"),
            timeout,
            || async {
                let now = pods.get(name).await.map_err(|error| error.to_string())?;
                let restarts = real_node::restart_count(&now, container);
                if restarts > restarts_before && real_node::pod_ready(&now) {
                    Ok(())
                } else {
                    Err(format!(
                        "restarts {restarts}, ready {}",
                        real_node::pod_ready(&now)
                    ))
                }
            },
        )
        .await;
        assert_eq!(
            pods.get(name).await.unwrap().metadata.uid,
            pod.metadata.uid,
            "{name} was replaced, not restarted"
        );
    }

    /// Every member down at once, then back on its volume, twice: first the main process of each
    /// pod's first container is killed in every pod matching `selector` (a crash of every member;
    /// the kubelet restarts each in its pod, at its address), then, once all are Ready again, every pod is deleted at
    /// once with a one-second grace (a power loss of the node; the StatefulSets make new pods, at
    /// new addresses, on the same claims). Waits until all are Ready by their own probes after
    /// each, and asserts every claim kept its volume.
    pub async fn total_outage(&self, selector: &str, timeout: Duration) {
        let pods = self.pods_of(selector).await;
        assert!(!pods.is_empty(), "no pod matches {selector}");
        let count = pods.len();
        let claims = self.claims_of(&pods).await;
        let main_container = |pod: &Pod| {
            pod.spec
                .as_ref()
                .and_then(|spec| spec.containers.first())
                .map(|container| container.name.clone())
                .unwrap_or_default()
        };
        let restarts_before: BTreeMap<_, _> = pods
            .iter()
            .map(|pod| {
                let restarts = real_node::restart_count(pod, &main_container(pod));
                (pod.metadata.uid.clone(), restarts)
            })
            .collect();
        for pod in &pods {
            real_node::kill_container(pod, &main_container(pod));
        }
        wait::until(
            "every member's main container restarted by the kubelet and Ready again",
            timeout,
            || async {
                let now = self.pods_of(selector).await;
                let restarted = now
                    .iter()
                    .filter(|pod| {
                        restarts_before.get(&pod.metadata.uid).is_some_and(|before| {
                            real_node::restart_count(pod, &main_container(pod)) > *before
                        }) && real_node::pod_ready(pod)
                    })
                    .count();
                (now.len() == count && restarted == count)
                    .then_some(())
                    .ok_or_else(|| describe_pods(&now))
            },
        )
        .await;

        let uids: Vec<_> = pods.iter().map(|pod| pod.metadata.uid.clone()).collect();
        self.pods()
            .delete_collection(
                &DeleteParams::default().grace_period(1),
                &ListParams::default().labels(selector),
            )
            .await
            .unwrap();
        wait::until(
            &format!("every pod matching {selector} re-created and Ready"),
            timeout,
            || async {
                let now = self.pods_of(selector).await;
                let renewed = now
                    .iter()
                    .filter(|pod| !uids.contains(&pod.metadata.uid) && real_node::pod_ready(pod))
                    .count();
                (now.len() == count && renewed == count)
                    .then_some(())
                    .ok_or_else(|| describe_pods(&now))
            },
        )
        .await;
        assert_eq!(
            self.claims_of(&self.pods_of(selector).await).await,
            claims,
            "a claim got a new volume"
        );
    }

    /// The uid of each claim the volumes of `pods` use, by claim name.
    async fn claims_of(&self, pods: &[Pod]) -> BTreeMap<String, String> {
        let mut claims = BTreeMap::new();
        let names = pods
            .iter()
            .flat_map(|pod| pod.spec.iter().flat_map(|spec| spec.volumes.iter().flatten()))
            .filter_map(|volume| Some(volume.persistent_volume_claim.as_ref()?.claim_name.clone()));
        for name in names {
            let uid = self.claim_uid(&name).await;
            claims.insert(name, uid);
        }
        claims
    }

    /// Takes the pods `names` of StatefulSet `statefulset` off the node, their volumes kept (as
    /// members down for good whose data survives): the template asks for a node type no node
    /// has, and each pod is created again from it, unplaced. Scaling down instead would delete
    /// the claims. The operator must be stopped meanwhile; once it runs again, its own template
    /// places pods created from then on, while these stay unplaced until deleted.
    pub async fn hold_off_the_node(&self, statefulset: &str, names: &[String]) {
        self.place_template_on(statefulset, "held").await;
        for name in names {
            self.delete_and_await_new_pod(name, Duration::from_secs(60)).await;
            let held = self.pods().get(name).await.unwrap();
            assert!(
                held.spec
                    .as_ref()
                    .and_then(|spec| spec.node_name.as_ref())
                    .is_none(),
                "{name} was placed on a node: {}",
                describe_pods(std::slice::from_ref(&held))
            );
        }
    }

    /// Sets the node type that StatefulSet `statefulset`'s pod template asks for.
    pub async fn place_template_on(&self, statefulset: &str, node_type: &str) {
        Api::<k8s_openapi::api::apps::v1::StatefulSet>::namespaced(self.admin.clone(), &self.ns)
            .patch(
                statefulset,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(
                    serde_json::json!({"spec": {"template": {"spec": {"nodeSelector": {"type": node_type}}}}}),
                ),
            )
            .await
            .unwrap();
    }

    /// Deletes pod `name` and waits until its StatefulSet made a new one that is Ready.
    pub async fn delete_and_await_recreated(&self, name: &str, timeout: Duration) {
        self.delete_and_await(name, true, timeout).await;
    }

    /// Deletes pod `name` and waits until its StatefulSet created it again, in whatever state.
    pub async fn delete_and_await_new_pod(&self, name: &str, timeout: Duration) {
        self.delete_and_await(name, false, timeout).await;
    }

    async fn delete_and_await(&self, name: &str, ready: bool, timeout: Duration) {
        let pods = self.pods();
        let pod = pods.get(name).await.unwrap();
        pods.delete(name, &DeleteParams::default()).await.unwrap();
        wait::until(&format!("{name} re-created"), timeout, || async {
            let now = pods.get(name).await.map_err(|error| error.to_string())?;
            if now.metadata.uid != pod.metadata.uid && (!ready || real_node::pod_ready(&now)) {
                Ok(())
            } else {
                Err(describe_pods(std::slice::from_ref(&now)))
            }
        })
        .await;
    }

    /// The uid of claim `name`: a volume kept has the same one, a new volume another.
    pub async fn claim_uid(&self, name: &str) -> String {
        self.claims().get(name).await.unwrap().metadata.uid.unwrap()
    }

    /// Waits until claim `name` is gone (its volume with it).
    pub async fn claim_deleted(&self, name: &str, timeout: Duration) {
        let claims = self.claims();
        wait::until(&format!("claim {name} deleted"), timeout, || async {
            match claims.get_opt(name).await.map_err(|error| error.to_string())? {
                None => Ok(()),
                Some(_) => Err("still there".to_string()),
            }
        })
        .await;
    }

    /// How often each of `reasons` was reported in the namespace's events so far (an event
    /// repeated is one object with a count or a series).
    pub async fn occurrences(&self, reasons: &[&str]) -> BTreeMap<String, i32> {
        let mut seen = BTreeMap::new();
        for event in self.events().await {
            let Some(reason) = event.reason.filter(|reason| reasons.contains(&reason.as_str())) else {
                continue;
            };
            let times = event
                .series
                .and_then(|series| series.count)
                .or(event.count)
                .unwrap_or(1);
            *seen.entry(reason).or_insert(0) += times;
        }
        seen
    }

    /// The messages of the namespace's events with `reason`.
    pub async fn messages(&self, reason: &str) -> Vec<String> {
        self.events()
            .await
            .into_iter()
            .filter(|event| event.reason.as_deref() == Some(reason))
            .filter_map(|event| event.message)
            .collect()
    }

    async fn events(&self) -> Vec<Event> {
        Api::<Event>::namespaced(self.admin.clone(), &self.ns)
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
    }

    /// Runs an S3-compatible store in the test namespace ([`deploy_s3_store`]).
    pub async fn deploy_s3_store(&self) -> InClusterS3 {
        deploy_s3_store(&self.admin, &self.ns).await
    }

    /// Removes the release and the namespace (and with it the clusters, pods and claims).
    pub async fn remove(self) {
        if let Some(chart) = self.chart {
            chart.uninstall();
        }
        self.namespace.delete().await;
    }
}

/// Asserts that every pod in `pods` ran its init container `name` to a successful end.
pub fn assert_init_container_succeeded(pods: &[Pod], name: &str) {
    assert!(!pods.is_empty(), "no pod to check for its {name} init container");
    for pod in pods {
        let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
        let ended = pod
            .status
            .as_ref()
            .and_then(|status| status.init_container_statuses.as_ref())
            .and_then(|statuses| statuses.iter().find(|status| status.name == name))
            .and_then(|status| status.state.as_ref())
            .and_then(|state| state.terminated.as_ref())
            .unwrap_or_else(|| panic!("{pod_name} has no finished {name} init container"));
        assert_eq!(ended.exit_code, 0, "{pod_name}'s {name}: {ended:?}");
    }
}

/// Pods with their phases and container states, for a failing wait's message.
pub fn describe_pods(pods: &[Pod]) -> String {
    pods.iter()
        .map(|pod| {
            let status = pod.status.clone().unwrap_or_default();
            let containers: Vec<String> = status
                .container_statuses
                .unwrap_or_default()
                .into_iter()
                .map(|container| {
                    let state = container.state.unwrap_or_default();
                    let why = state
                        .waiting
                        .and_then(|waiting| waiting.reason)
                        .or_else(|| state.terminated.and_then(|terminated| terminated.reason))
                        .unwrap_or_else(|| if container.ready { "ready" } else { "running" }.into());
                    format!("{}={why}/{}", container.name, container.restart_count)
                })
                .collect();
            format!(
                "{} {} [{}]",
                pod.metadata.name.as_deref().unwrap_or_default(),
                status.phase.unwrap_or_default(),
                containers.join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What member pods went through while a roll was watched ([`OnRealNode::watch_roll`]).
#[derive(Clone, Debug, Default)]
pub struct RollRecord {
    /// Every distinct set of members that were down at once (deleted, terminating, not yet
    /// created or not Ready), in the order they were seen.
    pub down: Vec<std::collections::BTreeSet<String>>,
    /// Members in the order their pod was first seen replaced by a new one.
    pub replaced: Vec<String>,
}

impl RollRecord {
    /// The most members that were down at the same moment.
    pub fn most_down_at_once(&self) -> usize {
        self.down.iter().map(|down| down.len()).max().unwrap_or(0)
    }
}

/// A watch of member pods through a roll; [`RollWatch::stop`] gives what it saw.
pub struct RollWatch {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<RollRecord>,
}

impl RollWatch {
    pub async fn stop(self) -> RollRecord {
        self.stop.cancel();
        self.task.await.expect("the roll watch")
    }
}

/// What a roll to the rolled template showed ([`OnRealNode::await_roll`]).
#[derive(Debug)]
pub struct Rolled {
    pub record: RollRecord,
    /// How often the operator was stopped and started again after a step.
    pub operator_restarts: usize,
    /// The leader (or primary) as the operator reported it, each change once, starting with the
    /// one before the roll.
    pub leaders: Vec<String>,
}

impl Rolled {
    /// `members` restarted once each, one at a time, and the leader before the roll last (it
    /// hands over before its restart). When the database elected a leader of its own meanwhile
    /// (a heartbeat late on a busy machine), the order is not checked, and that is said.
    pub fn assert_one_at_a_time_leader_last(&self, members: usize) {
        let record = &self.record;
        assert_eq!(record.most_down_at_once(), 1, "one member at a time: {record:?}");
        assert_eq!(record.replaced.len(), members, "{record:?}");
        match self.leaders.as_slice() {
            [before, _after] => assert_eq!(
                record.replaced.last(),
                Some(before),
                "the leader last: {record:?}"
            ),
            leaders => {
                eprintln!("leaders during the roll: {leaders:?}; the leader-last order is not checked")
            }
        }
    }
}

impl OnRealNode {
    /// Gives cluster `name` of `clusters` the rolled template ([`rolled_template_patch`]) and
    /// waits until `members` pods matching `selector` run Ready on it, watching every pod event
    /// and noting each leader that `leader_now` reports (`leader` before the roll); with
    /// `restart_operator_at_each_step`, the operator is stopped and started again after each new
    /// event of `steps`.
    pub async fn roll_to_a_new_template<K, F, Fut>(
        &self,
        (clusters, name): (&Api<K>, &str),
        (selector, members): (&str, usize),
        (steps, restart_operator_at_each_step): (&[&str], bool),
        leader: String,
        leader_now: F,
    ) -> Rolled
    where
        K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Option<String>>,
    {
        let watch = self.watch_roll(selector).await;
        give_new_template(clusters, name).await;
        let seen = std::sync::Mutex::new(self.occurrences(steps).await.values().sum());
        let restarts = std::sync::atomic::AtomicUsize::new(0);
        let leaders = std::sync::Mutex::new(vec![leader]);
        wait::until(
            "every member on the new template",
            Duration::from_secs(if restart_operator_at_each_step { 720 } else { 420 }),
            || async {
                if restart_operator_at_each_step && self.restart_operator_after_new_steps(steps, &seen).await
                {
                    restarts.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                if let Some(now) = leader_now().await {
                    let mut leaders = leaders.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    if leaders.last() != Some(&now) {
                        leaders.push(now);
                    }
                }
                match self.ready_on_rolled_template(selector).await {
                    rolled if rolled == members => Ok(()),
                    rolled => Err(format!("{rolled} of {members} rolled")),
                }
            },
        )
        .await;
        let rolled = Rolled {
            record: watch.stop().await,
            operator_restarts: restarts.into_inner(),
            leaders: leaders
                .into_inner()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        };
        if restart_operator_at_each_step {
            assert!(
                rolled.operator_restarts >= members,
                "the operator restarted after {} steps",
                rolled.operator_restarts
            );
        }
        rolled
    }

    /// Starts watching the pods matching `selector` (all Ready now): every event is seen, so a
    /// moment when two members were down at once cannot fall between two polls.
    pub async fn watch_roll(&self, selector: &str) -> RollWatch {
        use futures::StreamExt;
        use kube::{ResourceExt, runtime::watcher};

        let original: BTreeMap<String, String> = self
            .pods_of(selector)
            .await
            .iter()
            .map(|pod| (pod.name_any(), pod.uid().unwrap_or_default()))
            .collect();
        let stop = tokio_util::sync::CancellationToken::new();
        let stream = watcher(self.pods(), watcher::Config::default().labels(selector));
        let (started_tx, started) = tokio::sync::oneshot::channel();
        let task = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut record = RollRecord::default();
                let mut started_tx = Some(started_tx);
                // Pod name -> (uid, up).
                let mut seen: BTreeMap<String, (String, bool)> = BTreeMap::new();
                // While the watch (re)lists, `seen` is partial: nothing is judged from it.
                let mut listing = true;
                let mut stream = std::pin::pin!(stream);
                loop {
                    let event = tokio::select! {
                        () = stop.cancelled() => break,
                        next = stream.next() => match next {
                            Some(Ok(event)) => event,
                            Some(Err(error)) => {
                                tracing::warn!(%error, "watching member pods");
                                continue;
                            }
                            None => break,
                        },
                    };
                    match event {
                        watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                            let up = pod.metadata.deletion_timestamp.is_none() && real_node::pod_ready(&pod);
                            seen.insert(pod.name_any(), (pod.uid().unwrap_or_default(), up));
                        }
                        watcher::Event::Delete(pod) => {
                            seen.remove(&pod.name_any());
                        }
                        watcher::Event::Init => {
                            seen.clear();
                            listing = true;
                        }
                        watcher::Event::InitDone => {
                            listing = false;
                            if let Some(started) = started_tx.take() {
                                let _ = started.send(());
                            }
                        }
                    }
                    if listing {
                        continue;
                    }
                    for (name, (uid, _)) in &seen {
                        if original.get(name).is_some_and(|first| first != uid)
                            && !record.replaced.contains(name)
                        {
                            record.replaced.push(name.clone());
                        }
                    }
                    let down: std::collections::BTreeSet<String> = original
                        .keys()
                        .filter(|name| !seen.get(*name).is_some_and(|(_, up)| *up))
                        .cloned()
                        .collect();
                    if record.down.last() != Some(&down) && !down.is_empty() {
                        record.down.push(down);
                    }
                }
                record
            })
        };
        started.await.expect("the pod watch to list the members");
        RollWatch { stop, task }
    }
}

/// The annotation the roll tests add to a cluster's pod template ([`rolled_template_patch`]).
pub const ROLLED_ANNOTATION: &str = "example.com/rolled";

/// A merge patch that gives a cluster a new pod template (the real node's overrides and one
/// annotation more), as a version bump or a new operator release would.
pub fn rolled_template_patch() -> serde_json::Value {
    let mut template = crate::real_node::pod_overrides();
    template
        .annotations
        .insert(ROLLED_ANNOTATION.into(), "once".into());
    serde_json::json!({"spec": {"podTemplate": template}})
}

/// Gives cluster `name` a new pod template ([`rolled_template_patch`]).
pub async fn give_new_template<K>(clusters: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    merge_patch(clusters, name, rolled_template_patch()).await;
}

/// Sets (or, with `None`, removes) the repair request on cluster `name`, as
/// `kubectl annotate <kind> <name> quorum.dev/repair=<member>` does.
pub async fn request_repair<K>(clusters: &Api<K>, name: &str, member: Option<&str>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    annotate(clusters, name, quorum_core::repair::REPAIR_ANNOTATION, member).await;
}

/// Sets annotation `annotation` of object `name` to `value` (or, with `None`, removes it).
pub async fn annotate<K>(objects: &Api<K>, name: &str, annotation: &str, value: Option<&str>)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    merge_patch(
        objects,
        name,
        serde_json::json!({"metadata": {"annotations": {annotation: value}}}),
    )
    .await;
}

/// A JSON merge patch of object `name`.
async fn merge_patch<K>(objects: &Api<K>, name: &str, patch: serde_json::Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    objects
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .unwrap();
}

/// Writes `record` as cluster `name`'s `status.repair`, as an operator does before it takes a
/// wipe: with the operator stopped, what a restart finds after it stopped between the two.
pub async fn record_repair<K>(clusters: &Api<K>, name: &str, record: &quorum_core::repair::RepairRecord)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    clusters
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status": {"repair": record}})),
        )
        .await
        .unwrap();
}

/// Cluster `name`'s repair record (`status.repair`, read by `record_of`) once it satisfies
/// `until`.
pub async fn repair_record<K>(
    clusters: &Api<K>,
    name: &str,
    what: &str,
    record_of: impl Fn(&K) -> Option<quorum_core::repair::RepairRecord>,
    until: impl Fn(Option<&quorum_core::repair::RepairRecord>) -> bool,
) -> Option<quorum_core::repair::RepairRecord>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    wait::until(what, Duration::from_secs(300), || async {
        let record = record_of(&clusters.get(name).await.map_err(|error| error.to_string())?);
        until(record.as_ref())
            .then(|| record.clone())
            .ok_or_else(|| format!("{record:?}"))
    })
    .await
}

/// Runs an S3-compatible store (gofakes3, in memory, one bucket) as a pod on the real node in
/// `namespace`, with a Service in front, and the credentials Secret backups name; waits until
/// it serves.
/// The operator's pod writes backups there and the members' init containers read them, over
/// the pod network (plain HTTP: the chart needs `backups.allowHttp=true`).
pub async fn deploy_s3_store(admin: &Client, namespace: &str) -> InClusterS3 {
    let image = format!(
        "localhost/quorum-e2e/gofakes3:{}",
        crate::tools::pinned_version("GOFAKES3_VERSION")
    );
    let labels = serde_json::json!({ "app.kubernetes.io/name": S3_STORE });
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": { "name": S3_STORE, "labels": labels },
        "spec": {
            "nodeSelector": real_node::node_selector(),
            "tolerations": real_node::tolerations(),
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 65532, "seccompProfile": { "type": "RuntimeDefault" }
            },
            "containers": [{
                "name": "s3",
                "image": image,
                "imagePullPolicy": "IfNotPresent",
                "args": ["-backend", "memory", "-host", format!(":{S3_PORT}"),
                         "-initialbucket", crate::s3::DEFAULT_BUCKET, "-quiet"],
                "ports": [{ "name": "s3", "containerPort": S3_PORT }],
                "readinessProbe": { "tcpSocket": { "port": S3_PORT }, "periodSeconds": 2 },
                "securityContext": {
                    "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                    "capabilities": { "drop": ["ALL"] }
                }
            }]
        }
    }))
    .expect("the store's pod");
    let service: k8s_openapi::api::core::v1::Service = serde_json::from_value(serde_json::json!({
        "metadata": { "name": S3_STORE },
        "spec": { "selector": labels, "ports": [{ "name": "s3", "port": S3_PORT }] }
    }))
    .expect("the store's Service");
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "metadata": { "name": S3_CREDENTIALS },
        "stringData": {
            "accessKeyId": crate::s3::ACCESS_KEY_ID,
            "secretAccessKey": crate::s3::SECRET_ACCESS_KEY
        }
    }))
    .expect("the credentials Secret");
    let create = kube::api::PostParams::default();
    Api::<Pod>::namespaced(admin.clone(), namespace)
        .create(&create, &pod)
        .await
        .expect("create the S3 store's pod");
    Api::namespaced(admin.clone(), namespace)
        .create(&create, &service)
        .await
        .expect("create the S3 store's Service");
    Api::namespaced(admin.clone(), namespace)
        .create(&create, &secret)
        .await
        .expect("create the S3 credentials Secret");
    real_node::wait_pod_ready(admin, namespace, S3_STORE, Duration::from_secs(120)).await;
    let cluster_ip = real_node::cluster_ip(admin, namespace, S3_STORE).await;
    InClusterS3 {
        endpoint: format!("http://{S3_STORE}.{namespace}.svc.cluster.local:{S3_PORT}"),
        host_endpoint: format!("http://{cluster_ip}:{S3_PORT}"),
        pod: Api::<Pod>::namespaced(admin.clone(), namespace)
            .get(S3_STORE)
            .await
            .expect("the S3 store's pod"),
    }
}

/// The service account backup `backup`'s Jobs ran as (the one it owns) may read the store's
/// credentials and no other Secret of the namespace: asked of the API server's own authorizer.
pub async fn reads_only_its_secrets(setup: &OnRealNode, backup: &str) {
    use k8s_openapi::api::{
        authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec},
        core::v1::ServiceAccount,
    };
    let accounts: Api<ServiceAccount> = Api::namespaced(setup.admin.clone(), &setup.ns);
    let owned: Vec<String> = accounts
        .list(&Default::default())
        .await
        .expect("list service accounts")
        .items
        .into_iter()
        .filter(|account| {
            account
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|owner| owner.name == backup)
        })
        .filter_map(|account| account.metadata.name)
        .collect();
    let [account] = &owned[..] else {
        panic!("backup {backup} owns the service accounts {owned:?}, not one");
    };
    let reviews: Api<SubjectAccessReview> = Api::all(setup.admin.clone());
    let allowed = |secret: &'static str| {
        let reviews = reviews.clone();
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(format!("system:serviceaccount:{}:{account}", setup.ns)),
                resource_attributes: Some(ResourceAttributes {
                    namespace: Some(setup.ns.clone()),
                    verb: Some("get".into()),
                    resource: Some("secrets".into()),
                    name: Some(secret.into()),
                    ..ResourceAttributes::default()
                }),
                ..SubjectAccessReviewSpec::default()
            },
            ..SubjectAccessReview::default()
        };
        async move {
            reviews
                .create(&kube::api::PostParams::default(), &review)
                .await
                .expect("review access")
                .status
                .is_some_and(|status| status.allowed)
        }
    };
    assert!(
        allowed(S3_CREDENTIALS).await,
        "{account} may not read the store's credentials"
    );
    assert!(
        !allowed("someone-elses-secret").await,
        "{account} may read a Secret its backup does not need"
    );
}

/// The account, Role and RoleBinding operator `operator`'s backup Jobs shared in a namespace in
/// earlier releases, its Role allowing every Secret there, as such a release left them.
pub async fn leave_a_shared_backup_identity(setup: &OnRealNode, operator: &str) {
    use k8s_openapi::api::{
        core::v1::ServiceAccount,
        rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject},
    };
    let name = format!("{operator}-backup");
    let metadata = kube::api::ObjectMeta {
        name: Some(name.clone()),
        namespace: Some(setup.ns.clone()),
        ..Default::default()
    };
    let create = kube::api::PostParams::default();
    Api::<ServiceAccount>::namespaced(setup.admin.clone(), &setup.ns)
        .create(
            &create,
            &ServiceAccount {
                metadata: metadata.clone(),
                ..Default::default()
            },
        )
        .await
        .expect("create the shared account");
    Api::<Role>::namespaced(setup.admin.clone(), &setup.ns)
        .create(
            &create,
            &Role {
                metadata: metadata.clone(),
                rules: Some(vec![PolicyRule {
                    api_groups: Some(vec![String::new()]),
                    resources: Some(vec!["secrets".into()]),
                    verbs: vec!["get".into()],
                    ..Default::default()
                }]),
            },
        )
        .await
        .expect("create the shared Role");
    Api::<RoleBinding>::namespaced(setup.admin.clone(), &setup.ns)
        .create(
            &create,
            &RoleBinding {
                metadata,
                role_ref: RoleRef {
                    api_group: "rbac.authorization.k8s.io".into(),
                    kind: "Role".into(),
                    name: name.clone(),
                },
                subjects: Some(vec![Subject {
                    kind: "ServiceAccount".into(),
                    name,
                    namespace: Some(setup.ns.clone()),
                    ..Default::default()
                }]),
            },
        )
        .await
        .expect("create the shared RoleBinding");
}

/// The shared identity [`leave_a_shared_backup_identity`] left is gone, all three objects.
pub async fn shared_backup_identity_gone(setup: &OnRealNode, operator: &str) {
    use k8s_openapi::api::{
        core::v1::ServiceAccount,
        rbac::v1::{Role, RoleBinding},
    };
    let name = format!("{operator}-backup");
    wait::until(
        "the shared backup identity deleted",
        Duration::from_secs(60),
        || async {
            let left = [
                kind_if_present::<ServiceAccount>(setup, &name).await?,
                kind_if_present::<Role>(setup, &name).await?,
                kind_if_present::<RoleBinding>(setup, &name).await?,
            ];
            let left: Vec<String> = left.into_iter().flatten().collect();
            left.is_empty()
                .then_some(())
                .ok_or(format!("still there: {left:?}"))
        },
    )
    .await;
}

/// The kind of `K`, when the object `name` of that kind is in the setup's namespace.
async fn kind_if_present<K>(setup: &OnRealNode, name: &str) -> Result<Option<String>, String>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned,
{
    let found = Api::<K>::namespaced(setup.admin.clone(), &setup.ns)
        .get_opt(name)
        .await
        .map_err(|error| error.to_string())?;
    Ok(found.map(|_| K::kind(&()).to_string()))
}
