//! Backups run beside the data: each run of a backup resource is a Job in the cluster's
//! namespace, running the operator's own image (`<operator> backup-run`), so the bytes stream
//! from the member to the destination there and never through the operator.
//!
//! The operator starts a run (records it `Running` with its Job's name, then creates the Job),
//! and later passes follow the Job: still running, done, or failed. The Job's process runs the
//! engine's part of the controller (sources, snapshot, store, and the check that the snapshots
//! make one backup) and reports a [`JobOutcome`] in its termination message; the operator
//! records the run from it, exactly as it records a run taken in its own process. A Job that
//! disappears (deleted by a person, or its pod evicted and the Job gone) leaves the run
//! interrupted; an operator restart does not, since the Job goes on without it.
//!
//! The Job runs as a service account of its backup's own (`<operator>-backup-<backup>`, with a
//! Role and RoleBinding of the same name, all owned by the backup so they go with it), which may
//! read only what a run reads ([`job_rules`]): the backup and its cluster, their pods and
//! Services, and by name the Secrets the run needs (the cluster's credentials and TLS material,
//! and the destination's); it writes only its own backup's `status.progress`
//! ([`super::progress`]). One identity per backup, not per operator, because a Role names the
//! Secrets it allows: a shared one would let every backup's Job read every backup's Secrets.

use std::{collections::BTreeMap, io::Read, io::Write};

use base64::Engine as _;
use k8s_openapi::{
    api::{
        batch::v1::{Job, JobSpec},
        core::v1::{
            Container, ContainerStateTerminated, EnvVar, Pod, PodSpec, PodTemplateSpec, ResourceRequirements,
            ServiceAccount,
        },
        rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject},
    },
    apimachinery::pkg::{api::resource::Quantity, apis::meta::v1::ObjectMeta},
};
use serde::{Deserialize, Serialize};

use crate::{crd::PodOverrides, rbac::rule};

/// The service account (and Role and RoleBinding) the Jobs of backup `backup` run as, made by
/// operator `operator` (two engines' backups may share a name in one namespace).
pub fn job_account(operator: &str, backup: &str) -> String {
    crate::naming::shorten(&format!("{operator}-backup-{backup}"), MAX_OBJECT_NAME)
}

/// The one account, Role and RoleBinding an operator's backup Jobs shared in a namespace
/// before each backup had its own; the operator deletes them when it next starts a Job there,
/// since that Role let any Job read every Secret of the namespace.
pub fn shared_job_account(operator: &str) -> String {
    format!("{operator}-backup")
}

/// The longest name of a service account, Role or RoleBinding (a DNS subdomain).
const MAX_OBJECT_NAME: usize = 253;
/// The label naming the backup resource a Job runs for.
pub const BACKUP_LABEL: &str = "quorum.dev/backup";
/// The first argument of the operator's process in a backup Job.
pub const BACKUP_RUN_COMMAND: &str = "backup-run";
/// Where a backup Job's process writes its outcome (the container's termination message).
pub const TERMINATION_LOG: &str = "/dev/termination-log";
/// The kubelet keeps at most this many bytes of a termination message.
const MESSAGE_LIMIT: usize = 4096;
/// An outcome too long for the message as JSON is sent compressed, after this prefix.
const COMPRESSED: &str = "gzip+base64:";
/// A run's Job that has not finished after this long (its pod could not be created or
/// scheduled, its image not pulled) is failed by Kubernetes (`DeadlineExceeded`): the run is
/// recorded failed, with why, and the next one may start, rather than the backup staying
/// `Running` for ever.
const RUN_DEADLINE_SECONDS: i64 = 12 * 3600;
/// A finished Job is kept this long for `kubectl describe` and its logs, then removed by
/// Kubernetes (a run the operator recorded as a success is deleted at once).
const FINISHED_JOB_SECONDS: i32 = 24 * 3600;

/// How an operator runs backups in Jobs: the image they run, and the environment the Job's
/// process reads its settings from (the operator's own member settings).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSettings {
    pub image: String,
    pub environment: Vec<(&'static str, String)>,
}

impl JobSettings {
    /// Jobs of `image` with the operator's member settings when `members` says backups run in
    /// Jobs; `None` when they run in the operator's process.
    pub fn when_configured(members: &crate::config::MemberConfig, image: &str) -> Option<Self> {
        (members.backup_runner == crate::config::BackupRunner::Job).then(|| Self {
            image: image.to_string(),
            environment: members.job_environment(),
        })
    }
}

/// One stored object, as the Job reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StoredObject {
    pub location: String,
    pub size: u64,
    pub sha256: String,
}

impl From<&crate::backup::StoredBackup> for StoredObject {
    fn from(stored: &crate::backup::StoredBackup) -> Self {
        Self {
            location: stored.location.clone(),
            size: stored.size,
            sha256: stored.sha256.clone(),
        }
    }
}

/// What a backup Job's run came to: stored (every object, in source order; the pod the first
/// was read from; the run's description; the engine's own status fields), or failed with a
/// reason and a message, as a run in the operator's process would be recorded.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum JobOutcome {
    Stored {
        member: String,
        objects: Vec<StoredObject>,
        summary: String,
        /// What the engine's `record` changed in the backup's status for this run.
        #[serde(default)]
        engine_changes: Box<StatusChanges>,
        /// The whole status with the engine's fields set, as Jobs of earlier releases report
        /// it (their runs may finish under this one); `None` from this release on.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        engine_status: Option<serde_json::Value>,
    },
    Failed {
        reason: String,
        message: String,
    },
}

/// What a run changed in a backup's status, as its Job reports it: each field it set or
/// removed, except a list it only added to (the kept runs of a backup archiving its log), which
/// carries only what it added. The whole list would not fit a termination message once a
/// backup keeps a few dozen runs, and the operator holds the rest already.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusChanges {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set: BTreeMap<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub appended: BTreeMap<String, Appended>,
}

/// Entries added to the end of a list that held `after` entries.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Appended {
    pub after: usize,
    pub entries: Vec<serde_json::Value>,
}

impl StatusChanges {
    /// What turned status `before` into `after` (both JSON objects; anything else is taken as
    /// an empty one).
    pub fn between(before: &serde_json::Value, after: &serde_json::Value) -> Self {
        let empty = serde_json::Map::new();
        let before = before.as_object().unwrap_or(&empty);
        let after = after.as_object().unwrap_or(&empty);
        let mut changes = Self::default();
        for (field, value) in after {
            match (before.get(field), value) {
                (Some(old), new) if old == new => {}
                (Some(serde_json::Value::Array(old)), serde_json::Value::Array(new))
                    if new.len() > old.len() && new.starts_with(old) =>
                {
                    let entries = new[old.len()..].to_vec();
                    changes.appended.insert(
                        field.clone(),
                        Appended {
                            after: old.len(),
                            entries,
                        },
                    );
                }
                _ => {
                    changes.set.insert(field.clone(), value.clone());
                }
            }
        }
        changes.removed = before
            .keys()
            .filter(|field| !after.contains_key(*field))
            .cloned()
            .collect();
        changes
    }

    /// Status `stored` with these changes made.
    ///
    /// # Errors
    /// A list changed since the run began (it no longer holds the entries the run added to).
    pub fn apply(&self, stored: &serde_json::Value) -> Result<serde_json::Value, String> {
        let mut status = stored.as_object().cloned().unwrap_or_default();
        for field in &self.removed {
            status.remove(field);
        }
        for (field, value) in &self.set {
            status.insert(field.clone(), value.clone());
        }
        for (field, appended) in &self.appended {
            let list = status
                .entry(field.clone())
                .or_insert_with(|| serde_json::Value::Array(Vec::new()));
            let held = list.as_array().map(Vec::len);
            match list.as_array_mut() {
                Some(list) if held == Some(appended.after) => list.extend(appended.entries.iter().cloned()),
                _ => {
                    return Err(format!(
                        "`{field}` changed while the run's Job ran: the run added to {} entries, the \
                         status now holds {}",
                        appended.after,
                        held.map_or_else(|| "no list".to_string(), |held| held.to_string())
                    ));
                }
            }
        }
        Ok(serde_json::Value::Object(status))
    }
}

impl JobOutcome {
    /// The outcome as a termination message: JSON, or compressed JSON when that would not fit.
    pub fn encode(&self) -> String {
        let json = serde_json::to_string(self).expect("an outcome is JSON");
        if json.len() <= MESSAGE_LIMIT {
            return json;
        }
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        encoder.write_all(json.as_bytes()).expect("writing to memory");
        let compressed = encoder.finish().expect("writing to memory");
        format!(
            "{COMPRESSED}{}",
            base64::engine::general_purpose::STANDARD.encode(compressed)
        )
    }

    /// Reads a termination message written by [`JobOutcome::encode`].
    ///
    /// # Errors
    /// What is wrong with the message (cut short by the kubelet, or not an outcome).
    pub fn decode(message: &str) -> Result<Self, String> {
        let message = message.trim();
        let json = match message.strip_prefix(COMPRESSED) {
            Some(encoded) => {
                let compressed = base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|error| format!("the compressed outcome is not base64: {error}"))?;
                let mut json = String::new();
                flate2::read::GzDecoder::new(compressed.as_slice())
                    .read_to_string(&mut json)
                    .map_err(|error| format!("the compressed outcome does not decompress: {error}"))?;
                json
            }
            None => message.to_string(),
        };
        serde_json::from_str(&json).map_err(|error| format!("the outcome is not one: {error}"))
    }
}

/// The flags of `<operator> backup-run`, the process of a backup Job.
#[derive(clap::Args, Clone, Debug)]
pub struct BackupRunArgs {
    /// The backup resource, in the pod's own namespace.
    #[arg(long)]
    pub backup: String,
    /// When the operator recorded the run as started (RFC 3339): its objects are named by it.
    #[arg(long)]
    pub started_at: String,
    /// The uid of the backup the run was started for: a backup deleted and created again
    /// under its name is another backup, and this run is not its. Absent from the Jobs of
    /// earlier releases.
    #[arg(long)]
    pub backup_uid: Option<String>,
    /// The member's pod a run placed beside it reads ([`BesideMember`]).
    #[arg(long)]
    pub member: Option<String>,
}

impl BackupRunArgs {
    /// The process's arguments that parse as these.
    pub fn to_args(&self) -> Vec<String> {
        [
            BACKUP_RUN_COMMAND.to_string(),
            format!("--backup={}", self.backup),
            format!("--started-at={}", self.started_at),
        ]
        .into_iter()
        .chain(self.backup_uid.iter().map(|uid| format!("--backup-uid={uid}")))
        .chain(self.member.iter().map(|member| format!("--member={member}")))
        .collect()
    }
}

/// The arguments of the operator's process that copies its own binary ([`install_binary`]).
#[derive(clap::Args, Debug, Clone)]
pub struct InstallBinaryArgs {
    /// The directory to copy it into.
    #[arg(long)]
    pub to: std::path::PathBuf,
}

/// One run a Job's process takes, as its arguments say: when the operator recorded it started,
/// and, for a run placed beside a member ([`BesideMember`]), that member's pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobRun {
    pub started: jiff::Timestamp,
    pub member: Option<String>,
}

/// A run that reads a member's own files (a physical copy), not the member over the network:
/// its Job runs on the member's node, with the member's volume mounted read-only (a
/// `ReadWriteOnce` volume may be mounted by any number of pods of one node), from the member's
/// own image (which carries the engine's copy tool), as the member's user. The operator's
/// binary, which streams the copy to the destination and reports, is copied into the pod by an
/// init container of the operator's image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BesideMember {
    /// The member's pod, passed to the run as `--member`.
    pub pod: String,
    pub node: String,
    /// The member's volume claim.
    pub claim: String,
    /// Where the member mounts it: the run finds the files there too.
    pub mount_path: String,
    /// The member's image.
    pub image: String,
    /// The user (and group) the member's server runs as, who owns its files.
    pub uid: i64,
}

/// Where, in a run beside a member, the operator's binary is copied to.
pub const BESIDE_BINARY_DIR: &str = "/quorum/bin";
/// A run beside a member's own writable directory (the copy tool's temporary files).
pub const BESIDE_SCRATCH_DIR: &str = "/quorum/scratch";
/// The first argument of the operator's process that copies its own binary into a directory.
pub const INSTALL_BINARY_COMMAND: &str = "install-binary";

/// The CA bundle the operator's image carries, for its clients' TLS (an S3 destination).
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// Its copy beside the binary, which a run beside a member names in `SSL_CERT_FILE`: the
/// member's image may carry none.
pub const CA_BUNDLE_COPY: &str = "ca-certificates.crt";

/// Copies the running binary into `dir` as `name`, executable, and the image's CA bundle next
/// to it: what the init container of a run beside a member does.
///
/// # Errors
/// The I/O error, naming the path.
pub fn install_binary(dir: &std::path::Path, name: &str) -> Result<std::path::PathBuf, String> {
    use std::os::unix::fs::PermissionsExt;
    let from = std::env::current_exe().map_err(|error| format!("the running binary: {error}"))?;
    let to = dir.join(name);
    std::fs::copy(&from, &to)
        .map_err(|error| format!("copying {} to {}: {error}", from.display(), to.display()))?;
    std::fs::set_permissions(&to, std::fs::Permissions::from_mode(0o755))
        .map_err(|error| format!("{}: {error}", to.display()))?;
    let bundle = dir.join(CA_BUNDLE_COPY);
    std::fs::copy(CA_BUNDLE, &bundle)
        .map_err(|error| format!("copying {CA_BUNDLE} to {}: {error}", bundle.display()))?;
    Ok(to)
}

/// Why the backup a Job's process read is not the one its run was started for (`expected`, the
/// uid the operator passed), if it is not.
pub fn replaced(expected: Option<&str>, backup: &str, found: Option<&str>) -> Option<String> {
    let expected = expected?;
    (found != Some(expected)).then(|| {
        format!(
            "backup {backup} was deleted and created again since this run was started (uid {expected}, now {}): \
             the run is not the new backup's",
            found.unwrap_or("none")
        )
    })
}

/// Where a run's Job stands.
#[derive(Clone, Debug, PartialEq)]
pub enum JobState {
    /// No such Job (deleted, or never created because the operator stopped first).
    Missing,
    /// Created and not finished.
    Running,
    /// Finished, with the outcome its process reported, or why none can be read.
    Finished(Result<JobOutcome, String>),
}

/// How the one container of a backup Job's pod ended, once it has.
pub fn terminated_container(pod: &Pod) -> Option<&ContainerStateTerminated> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .first()?
        .state
        .as_ref()?
        .terminated
        .as_ref()
}

/// Where `job` stands, from it and its pods: finished once Kubernetes says it succeeded or
/// failed; the outcome is the termination message of its newest pod that has one. A failed Job
/// whose pod left no outcome (killed, evicted, out of memory) says what its pod's container
/// said instead.
pub fn job_state(job: Option<&Job>, pods: &[Pod]) -> JobState {
    let Some(job) = job else {
        return JobState::Missing;
    };
    let finished = job
        .status
        .as_ref()
        .and_then(|status| status.conditions.as_ref())
        .into_iter()
        .flatten()
        .find(|condition| {
            (condition.type_ == "Complete" || condition.type_ == "Failed") && condition.status == "True"
        });
    let Some(finished) = finished else {
        return JobState::Running;
    };
    let mut terminated: Vec<_> = pods
        .iter()
        .filter_map(|pod| {
            Some((
                pod.metadata.creation_timestamp.clone(),
                terminated_container(pod)?.clone(),
            ))
        })
        .collect();
    terminated.sort_by(|(a, _), (b, _)| a.as_ref().map(|t| t.0).cmp(&b.as_ref().map(|t| t.0)));
    let outcome = match terminated.last() {
        Some((_, state)) => match state.message.as_deref().filter(|m| !m.trim().is_empty()) {
            Some(message) => JobOutcome::decode(message),
            None => Err(format!(
                "its container ended ({}, exit code {}) without reporting an outcome",
                state.reason.as_deref().unwrap_or("no reason given"),
                state.exit_code
            )),
        },
        None => Err(format!(
            "the Job {} ({}) and no pod of it reported an outcome",
            if finished.type_ == "Complete" {
                "completed"
            } else {
                "failed"
            },
            finished
                .message
                .as_deref()
                .or(finished.reason.as_deref())
                .unwrap_or("no reason given")
        )),
    };
    JobState::Finished(outcome)
}

/// The name of the Job of the run of backup `backup` of kind `kind` started at `started` (Unix
/// milliseconds): one per run, within the 63 characters a Job's pods' labels allow. A hash of
/// the kind and the whole name keeps apart the runs of two engines' backups of one name (a
/// MySQL and a Redis cluster `orders`, each with `orders-scheduled`) and of two backups whose
/// names share their beginning, started in the same millisecond: neither follows the other's Job.
pub fn job_name(kind: &str, backup: &str, started_millis: i64) -> String {
    let identity = crate::naming::fnv1a(format!("{kind}/{backup}").as_bytes()) as u32;
    let suffix = format!("-{identity:08x}-{started_millis:x}");
    let room = 52 - suffix.len();
    let base: String = backup.chars().take(room).collect();
    format!("{}{suffix}", base.trim_end_matches('-'))
}

/// The Job of one run: the operator's image, `backup-run` with the run's identity, the
/// operator's member settings as environment, the service account `account`, no retry
/// (a failed run is recorded and a schedule tries again at its next time), owned by the
/// backup so it goes with it.
pub fn backup_job(
    metadata: ObjectMeta,
    run_args: &BackupRunArgs,
    settings: &JobSettings,
    account: &str,
    placement: Option<&PodOverrides>,
    beside: Option<&BesideMember>,
) -> Job {
    let mut environment: Vec<EnvVar> = settings
        .environment
        .iter()
        .map(|(name, value)| crate::pod::value_env(name, value.clone()))
        .collect();
    environment.push(crate::pod::field_env("POD_NAMESPACE", "metadata.namespace"));
    let labels = metadata.labels.clone();
    let args = run_args.to_args();
    let mut run = Container {
        name: "backup".into(),
        image: Some(settings.image.clone()),
        image_pull_policy: Some("IfNotPresent".into()),
        env: Some(environment),
        security_context: Some(crate::pod::member_container_security(true)),
        termination_message_path: Some(TERMINATION_LOG.into()),
        termination_message_policy: Some("File".into()),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("100m".into())),
                ("memory".into(), Quantity("64Mi".into())),
            ])),
            limits: Some(BTreeMap::from([("memory".into(), Quantity("512Mi".into()))])),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    };
    let mut pod = PodSpec {
        // Where the members may run, the Job may too (dedicated, tainted nodes); not their
        // affinity, which keeps members apart, nor their labels, which the members' Services
        // select.
        node_selector: placement
            .map(|p| p.node_selector.clone())
            .filter(|selector| !selector.is_empty()),
        tolerations: placement
            .map(|p| p.tolerations.clone())
            .filter(|tolerations| !tolerations.is_empty()),
        priority_class_name: placement.and_then(|p| p.priority_class_name.clone()),
        service_account_name: Some(account.into()),
        restart_policy: Some("Never".into()),
        security_context: Some(crate::pod::member_pod_security(65532)),
        ..PodSpec::default()
    };
    if let Some(member) = beside {
        place_beside(&mut pod, &mut run, member, &settings.image);
    }
    run.args = Some(args);
    pod.containers = vec![run];
    Job {
        metadata,
        spec: Some(JobSpec {
            backoff_limit: Some(0),
            active_deadline_seconds: Some(RUN_DEADLINE_SECONDS),
            ttl_seconds_after_finished: Some(FINISHED_JOB_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels,
                    ..ObjectMeta::default()
                }),
                spec: Some(pod),
            },
            ..JobSpec::default()
        }),
        status: None,
    }
}

/// The binary's name in [`BESIDE_BINARY_DIR`].
pub const BESIDE_BINARY: &str = "operator";

/// Puts the run beside `member` ([`BesideMember`]): on its node, as its user, its volume
/// mounted read-only, from its image, with the operator's binary (of `operator_image`) copied in
/// first.
fn place_beside(pod: &mut PodSpec, run: &mut Container, member: &BesideMember, operator_image: &str) {
    use k8s_openapi::api::core::v1::{
        EmptyDirVolumeSource, PersistentVolumeClaimVolumeSource, Volume, VolumeMount,
    };
    let mount = |name: &str, path: &str, read_only: bool| VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(read_only),
        ..VolumeMount::default()
    };
    let empty = |name: &str| Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    };
    pod.node_name = Some(member.node.clone());
    // The member's own user reads its files; no fsGroup, which would have the kubelet change
    // the ownership of a live member's volume.
    pod.security_context = Some(k8s_openapi::api::core::v1::PodSecurityContext {
        fs_group: None,
        ..crate::pod::member_pod_security(member.uid)
    });
    pod.volumes = Some(vec![
        Volume {
            name: "member-data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: member.claim.clone(),
                read_only: Some(true),
            }),
            ..Volume::default()
        },
        empty("operator-binary"),
        empty("scratch"),
    ]);
    pod.init_containers = Some(vec![Container {
        name: "install-operator".into(),
        image: Some(operator_image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(vec![
            INSTALL_BINARY_COMMAND.into(),
            format!("--to={BESIDE_BINARY_DIR}"),
        ]),
        volume_mounts: Some(vec![mount("operator-binary", BESIDE_BINARY_DIR, false)]),
        security_context: Some(crate::pod::member_container_security(true)),
        resources: run.resources.clone(),
        ..Container::default()
    }]);
    run.image = Some(member.image.clone());
    run.command = Some(vec![format!("{BESIDE_BINARY_DIR}/{BESIDE_BINARY}")]);
    run.env.get_or_insert_with(Vec::new).push(crate::pod::value_env(
        "SSL_CERT_FILE",
        format!("{BESIDE_BINARY_DIR}/{CA_BUNDLE_COPY}"),
    ));
    run.volume_mounts = Some(vec![
        mount("member-data", &member.mount_path, true),
        mount("operator-binary", BESIDE_BINARY_DIR, true),
        mount("scratch", BESIDE_SCRATCH_DIR, false),
    ]);
}

/// What the Jobs of backup `backup` read, and nothing else: the engine's clusters and backups
/// (API `group`), their pods and Services, and the Secrets named in `secrets` (the cluster's
/// credentials and TLS material, the destination's); and the one thing they write, their own
/// backup's `status.progress`. Every one is also the operator's (the API server lets it grant
/// only what it holds).
pub fn job_rules(
    group: &str,
    clusters: &str,
    backups: &str,
    backup: &str,
    secrets: &[String],
) -> Vec<PolicyRule> {
    let named = |mut rule: PolicyRule, names: Vec<String>| {
        rule.resource_names = Some(names);
        rule
    };
    let mut rules = vec![
        rule(group, &[clusters, backups], &["get", "list"]),
        named(
            rule(group, &[&format!("{backups}/status")], &["patch"]),
            vec![backup.to_string()],
        ),
        rule("", &["pods"], &["get", "list"]),
        rule("", &["services", "configmaps"], &["get"]),
    ];
    let mut secrets = secrets.to_vec();
    secrets.sort();
    secrets.dedup();
    // A rule with no names would allow every Secret: with none to read, none is allowed.
    if !secrets.is_empty() {
        rules.push(named(rule("", &["secrets"], &["get"]), secrets));
    }
    rules
}

/// The service account, Role and RoleBinding of `metadata` (its name, namespace, labels and
/// owner), the Role holding `rules`.
pub fn job_identity(metadata: ObjectMeta, rules: Vec<PolicyRule>) -> (ServiceAccount, Role, RoleBinding) {
    let account = metadata.name.clone().unwrap_or_default();
    let namespace = metadata.namespace.clone();
    (
        ServiceAccount {
            metadata: metadata.clone(),
            ..ServiceAccount::default()
        },
        Role {
            metadata: metadata.clone(),
            rules: Some(rules),
        },
        RoleBinding {
            metadata,
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: account.clone(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".into(),
                name: account,
                namespace,
                ..Subject::default()
            }]),
        },
    )
}

/// The rules an operator needs to run backups in Jobs: the Jobs (created, followed, their
/// pods' termination messages read, deleted once recorded) and the Jobs' identities (applied;
/// the shared one of earlier releases deleted).
pub fn operator_rules() -> Vec<PolicyRule> {
    vec![
        rule("batch", &["jobs"], &["get", "list", "watch", "create", "delete"]),
        rule("", &["serviceaccounts"], &["get", "create", "patch", "delete"]),
        rule(
            "rbac.authorization.k8s.io",
            &["roles", "rolebindings"],
            &["get", "create", "patch", "delete"],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use k8s_openapi::{
        api::{
            batch::v1::{JobCondition, JobStatus},
            core::v1::{ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus},
        },
        apimachinery::pkg::apis::meta::v1::Time,
    };

    use super::*;

    fn stored(objects: usize) -> JobOutcome {
        JobOutcome::Stored {
            member: "shop-1".into(),
            objects: (0..objects)
                .map(|n| StoredObject {
                    location: format!("s3://backups/prod/shop/main/redisbackup/nightly/main-20261129T000000.000Z.shard-{n}.rdb"),
                    size: 1 << 20,
                    sha256: format!("{n:064x}"),
                })
                .collect(),
            summary: "stored".into(),
            engine_changes: Box::new(StatusChanges::between(
                &serde_json::json!({}),
                &serde_json::json!({"shards": (0..objects).map(|n| serde_json::json!({"shard": n, "sha256": format!("{n:064x}")})).collect::<Vec<_>>()}),
            )),
            engine_status: None,
        }
    }

    /// A kept run of a backup archiving its log, as MySQL records one (unique hashes, so
    /// compression finds little to share between runs).
    fn kept_run(n: u64) -> serde_json::Value {
        let at = |minute: u64| format!("2026-12-0{}T{:02}:{:02}:00Z", 1 + n / 1440, n / 60 % 24, minute);
        serde_json::json!({
            "snapshot": {
                "location": format!("s3://backups/prod/shop/main/mysqlbackup/nightly/main-2026120{}T{:02}0000.000Z.sql.gz", 1 + n / 24, n % 24),
                "sha256": format!("{:064x}", n.wrapping_mul(0x9e37_79b9_7f4a_7c15)),
                "sizeBytes": 1_073_741_824u64 + n,
            },
            "snapshotPosition": format!("0-1-{}", 1000 * n + 17),
            "snapshotCompletedAt": at(n % 60),
            "binlog": {
                "location": format!("s3://backups/prod/shop/main/mysqlbackup/nightly/main-2026120{}T{:02}0000.000Z.binlog", 1 + n / 24, n % 24),
                "sha256": format!("{:064x}", n.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)),
                "sizeBytes": 52_428_800u64 + n,
            },
            "binlogAfter": format!("0-1-{}", 1000 * n),
            "binlogThrough": format!("0-1-{}", 1000 * n + 999),
            "archivedAt": at((n + 1) % 60),
        })
    }

    fn archiving_status(runs: u64) -> serde_json::Value {
        serde_json::json!({
            "gtidPosition": format!("0-1-{}", 1000 * runs),
            "recoveryRuns": (0..runs).map(kept_run).collect::<Vec<_>>(),
            "recoverableFrom": "2026-12-01T00:00:00Z",
        })
    }

    #[test]
    fn a_backup_keeping_a_hundred_runs_reports_its_new_run_within_the_termination_message() {
        let before = archiving_status(100);
        let mut after = archiving_status(101);
        after["recoverableUntil"] = serde_json::json!("2026-12-05T04:41:00Z");
        let changes = StatusChanges::between(&before, &after);
        assert_eq!(changes.appended["recoveryRuns"].after, 100);
        assert_eq!(changes.appended["recoveryRuns"].entries, vec![kept_run(100)]);
        assert_eq!(changes.apply(&before), Ok(after.clone()));

        let outcome = |engine_changes: StatusChanges, engine_status| JobOutcome::Stored {
            member: "main-1".into(),
            objects: vec![StoredObject {
                location: "s3://backups/prod/shop/main/mysqlbackup/nightly/main-20261205T040000.000Z.sql.gz"
                    .into(),
                size: 1 << 30,
                sha256: format!("{:064x}", 7),
            }],
            summary: "stored 1073741824 bytes (5000000 rows) from main-1".into(),
            engine_changes: Box::new(engine_changes),
            engine_status,
        };
        let message = outcome(changes.clone(), None).encode();
        assert!(message.len() <= MESSAGE_LIMIT, "{} bytes", message.len());
        assert_eq!(JobOutcome::decode(&message), Ok(outcome(changes, None)));
        let whole = outcome(StatusChanges::default(), Some(after)).encode();
        assert!(
            whole.len() > MESSAGE_LIMIT,
            "the whole status ({} bytes) is what would not fit",
            whole.len()
        );
    }

    #[test]
    fn changes_set_remove_and_append_and_refuse_a_list_that_changed_meanwhile() {
        let before =
            serde_json::json!({"content": {"rows": 1}, "old": true, "runs": [1, 2], "shards": [1, 2]});
        let after = serde_json::json!({"content": {"rows": 2}, "runs": [1, 2, 3], "shards": [2]});
        let changes = StatusChanges::between(&before, &after);
        assert_eq!(changes.removed, vec!["old".to_string()]);
        assert_eq!(
            changes.set.keys().collect::<Vec<_>>(),
            ["content", "shards"],
            "a list cut is set whole"
        );
        assert_eq!(changes.apply(&before), Ok(after));
        assert_eq!(
            StatusChanges::between(&before, &before),
            StatusChanges::default(),
            "nothing changed, nothing reported"
        );
        let pruned_meanwhile = serde_json::json!({"runs": [2]});
        let refused = changes.apply(&pruned_meanwhile).unwrap_err();
        assert!(
            refused.contains("`runs` changed while the run's Job ran"),
            "{refused}"
        );
    }

    #[test]
    fn an_outcome_from_an_earlier_release_is_still_read_with_its_whole_status() {
        let message = r#"{"stored":{"member":"main-0","objects":[],"summary":"s","engine_status":{"gtidPosition":"0-1-5"}}}"#;
        let Ok(JobOutcome::Stored {
            engine_changes,
            engine_status,
            ..
        }) = JobOutcome::decode(message)
        else {
            panic!("not read: {message}");
        };
        assert_eq!(*engine_changes, StatusChanges::default());
        assert_eq!(engine_status, Some(serde_json::json!({"gtidPosition": "0-1-5"})));
    }

    #[test]
    fn outcomes_round_trip_through_a_termination_message_and_long_ones_are_compressed() {
        for outcome in [
            stored(1),
            stored(40),
            JobOutcome::Failed {
                reason: "SnapshotFailed".into(),
                message: "no".into(),
            },
        ] {
            let message = outcome.encode();
            assert!(message.len() <= MESSAGE_LIMIT, "{} bytes", message.len());
            assert_eq!(JobOutcome::decode(&message), Ok(outcome));
        }
        assert!(
            stored(1).encode().starts_with('{'),
            "a short outcome stays readable"
        );
        assert!(stored(40).encode().starts_with(COMPRESSED));
        assert!(JobOutcome::decode("{\"stored\":").is_err(), "cut short");
    }

    fn job(condition: Option<&str>) -> Job {
        Job {
            status: Some(JobStatus {
                conditions: condition.map(|type_| {
                    vec![JobCondition {
                        type_: type_.into(),
                        status: "True".into(),
                        reason: Some("BackoffLimitExceeded".into()),
                        ..JobCondition::default()
                    }]
                }),
                ..JobStatus::default()
            }),
            ..Job::default()
        }
    }

    fn pod(second: i64, message: Option<&str>, exit_code: i32) -> Pod {
        Pod {
            metadata: ObjectMeta {
                creation_timestamp: Some(Time(jiff::Timestamp::from_second(second).unwrap())),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                container_statuses: Some(vec![ContainerStatus {
                    state: Some(ContainerState {
                        terminated: Some(ContainerStateTerminated {
                            exit_code,
                            message: message.map(String::from),
                            reason: Some("OOMKilled".into()),
                            ..ContainerStateTerminated::default()
                        }),
                        ..ContainerState::default()
                    }),
                    ..ContainerStatus::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn a_job_is_followed_until_it_finishes_and_its_newest_pod_says_how() {
        assert_eq!(job_state(None, &[]), JobState::Missing);
        assert_eq!(job_state(Some(&job(None)), &[]), JobState::Running);
        let failed = JobOutcome::Failed {
            reason: "SnapshotFailed".into(),
            message: "refused".into(),
        };
        assert_eq!(
            job_state(
                Some(&job(Some("Failed"))),
                &[pod(2, Some(&failed.encode()), 1), pod(1, None, 137)]
            ),
            JobState::Finished(Ok(failed))
        );
        assert_eq!(
            job_state(
                Some(&job(Some("Complete"))),
                &[pod(1, Some(&stored(1).encode()), 0)]
            ),
            JobState::Finished(Ok(stored(1)))
        );
        let JobState::Finished(Err(why)) = job_state(Some(&job(Some("Failed"))), &[pod(1, None, 137)]) else {
            panic!("a killed pod reports no outcome")
        };
        assert!(why.contains("OOMKilled, exit code 137"), "{why}");
        let JobState::Finished(Err(why)) = job_state(Some(&job(Some("Failed"))), &[]) else {
            panic!("no pod")
        };
        assert!(why.contains("BackoffLimitExceeded"), "{why}");
    }

    #[test]
    fn job_names_are_one_per_run_and_backup_and_fit_a_label() {
        let long = "a".repeat(80);
        let name = job_name("EtcdBackup", &long, 1_795_000_000_000);
        assert!(name.len() <= 52, "{name}");
        assert_ne!(
            job_name("EtcdBackup", "nightly", 1),
            job_name("EtcdBackup", "nightly", 2)
        );
        assert!(job_name("EtcdBackup", "nightly", 255).starts_with("nightly-"));
        assert!(job_name("EtcdBackup", "nightly", 255).ends_with("-ff"));
        // Two engines' backups of one name, and two names alike in their first 40 characters,
        // started in the same millisecond.
        assert_ne!(
            job_name("MySQLBackup", "orders-scheduled", 7),
            job_name("RedisBackup", "orders-scheduled", 7)
        );
        let alike = "a".repeat(40);
        assert_ne!(
            job_name("EtcdBackup", &format!("{alike}-x"), 7),
            job_name("EtcdBackup", &format!("{alike}-y"), 7)
        );
    }

    #[test]
    fn a_job_runs_the_operators_image_as_the_backup_account_once() {
        let settings = JobSettings {
            image: "ghcr.io/quorum-dev/etcd-operator:v1".into(),
            environment: vec![("CLUSTER_DOMAIN", "cluster.local".into())],
        };
        let placement = PodOverrides {
            labels: BTreeMap::from([("team".into(), "db".into())]),
            node_selector: BTreeMap::from([("pool".into(), "databases".into())]),
            tolerations: vec![k8s_openapi::api::core::v1::Toleration {
                key: Some("dedicated".into()),
                operator: Some("Exists".into()),
                ..Default::default()
            }],
            ..PodOverrides::default()
        };
        let job = backup_job(
            ObjectMeta::default(),
            &BackupRunArgs {
                backup: "nightly".into(),
                started_at: "2026-11-29T00:00:00Z".into(),
                backup_uid: Some("3f0c".into()),
                member: None,
            },
            &settings,
            "quorum-etcd-operator-backup",
            Some(&placement),
            None,
        );
        let spec = job.spec.unwrap();
        assert_eq!(spec.backoff_limit, Some(0));
        // A Job that never finishes (its pod never created or scheduled) fails in the end, so
        // it does not hold every later run back.
        assert_eq!(spec.active_deadline_seconds, Some(12 * 3600));
        let template_labels = spec.template.metadata.and_then(|meta| meta.labels);
        assert!(template_labels.is_none_or(|labels| !labels.contains_key("team")));
        let pod = spec.template.spec.unwrap();
        // Placed where the members may run.
        assert_eq!(pod.node_selector.as_ref(), Some(&placement.node_selector));
        assert_eq!(pod.tolerations.as_ref(), Some(&placement.tolerations));
        assert_eq!(
            pod.service_account_name.as_deref(),
            Some("quorum-etcd-operator-backup")
        );
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        let container = &pod.containers[0];
        assert_eq!(
            container.image.as_deref(),
            Some("ghcr.io/quorum-dev/etcd-operator:v1")
        );
        assert_eq!(
            container.args.as_deref().unwrap(),
            [
                "backup-run",
                "--backup=nightly",
                "--started-at=2026-11-29T00:00:00Z",
                "--backup-uid=3f0c"
            ]
        );
        assert!(
            container
                .env
                .iter()
                .flatten()
                .any(|env| env.name == "CLUSTER_DOMAIN" && env.value.as_deref() == Some("cluster.local"))
        );
    }

    #[test]
    fn a_run_beside_a_member_runs_on_its_node_from_its_image_with_its_volume_read_only() {
        let settings = JobSettings {
            image: "ghcr.io/quorum-dev/mysql-operator:v1".into(),
            environment: vec![],
        };
        let member = BesideMember {
            pod: "shop-1".into(),
            node: "node-a".into(),
            claim: "data-shop-1".into(),
            mount_path: "/var/lib/mysql".into(),
            image: "docker.io/library/mariadb:10.11".into(),
            uid: 999,
        };
        let job = backup_job(
            ObjectMeta::default(),
            &BackupRunArgs {
                backup: "nightly".into(),
                started_at: "2026-11-29T00:00:00Z".into(),
                backup_uid: Some("3f0c".into()),
                member: Some("shop-1".into()),
            },
            &settings,
            "quorum-mysql-operator-backup-nightly",
            None,
            Some(&member),
        );
        let pod = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.node_name.as_deref(), Some("node-a"));
        let security = pod.security_context.unwrap();
        assert_eq!((security.run_as_user, security.fs_group), (Some(999), None));
        let volumes = pod.volumes.unwrap();
        let claim = volumes[0].persistent_volume_claim.as_ref().unwrap();
        assert_eq!(
            (claim.claim_name.as_str(), claim.read_only),
            ("data-shop-1", Some(true))
        );
        let install = &pod.init_containers.unwrap()[0];
        assert_eq!(
            install.image.as_deref(),
            Some("ghcr.io/quorum-dev/mysql-operator:v1")
        );
        assert_eq!(
            install.args.as_deref().unwrap(),
            ["install-binary", "--to=/quorum/bin"]
        );
        let run = &pod.containers[0];
        assert_eq!(run.image.as_deref(), Some("docker.io/library/mariadb:10.11"));
        assert_eq!(run.command.as_deref().unwrap(), ["/quorum/bin/operator"]);
        assert_eq!(run.args.as_deref().unwrap().last().unwrap(), "--member=shop-1");
        let mounts = run.volume_mounts.as_ref().unwrap();
        assert!(mounts.iter().any(|m| m.name == "member-data"
            && m.mount_path == "/var/lib/mysql"
            && m.read_only == Some(true)));
        assert_eq!(
            run.security_context.as_ref().unwrap().read_only_root_filesystem,
            Some(true)
        );
    }

    #[test]
    fn a_runs_arguments_parse_back_as_the_same_run() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(subcommand)]
            command: Command,
        }
        #[derive(clap::Subcommand)]
        enum Command {
            BackupRun(BackupRunArgs),
        }
        let run = BackupRunArgs {
            backup: "nightly".into(),
            started_at: "2026-11-29T00:00:00Z".into(),
            backup_uid: Some("3f0c".into()),
            member: Some("shop-1".into()),
        };
        let parsed =
            <Cli as clap::Parser>::parse_from(std::iter::once("operator".to_string()).chain(run.to_args()));
        let Command::BackupRun(parsed) = parsed.command;
        assert_eq!(
            (parsed.backup, parsed.started_at, parsed.backup_uid, parsed.member),
            (run.backup, run.started_at, run.backup_uid, run.member)
        );
    }

    #[test]
    fn a_run_is_refused_by_a_backup_created_again_under_its_name() {
        assert_eq!(replaced(Some("a1"), "nightly", Some("a1")), None);
        let message = replaced(Some("a1"), "nightly", Some("b2")).unwrap();
        assert!(
            message.contains("nightly") && message.contains("a1") && message.contains("b2"),
            "{message}"
        );
        assert!(replaced(Some("a1"), "nightly", None).is_some());
        // A Job of an earlier release names no uid.
        assert_eq!(replaced(None, "nightly", Some("b2")), None);
    }

    fn etcd_rules(secrets: &[&str]) -> Vec<PolicyRule> {
        let secrets: Vec<String> = secrets.iter().map(|name| name.to_string()).collect();
        job_rules(
            "etcd.quorum.dev",
            "etcdclusters",
            "etcdbackups",
            "nightly",
            &secrets,
        )
    }

    #[test]
    fn a_job_may_do_only_what_the_operator_may() {
        let operator = crate::rbac::operator_rules(
            "etcd.quorum.dev",
            "etcdclusters",
            "etcdbackups",
            &[],
            [
                rule("", &["secrets"], &["get", "list", "watch"]),
                rule("", &["pods"], &["get", "list", "watch", "delete"]),
            ],
        );
        let granted = etcd_rules(&["client-tls", "s3-credentials"]);
        assert_eq!(crate::rbac::beyond(&granted, &operator), Vec::<String>::new());
        let without_pods = crate::rbac::operator_rules(
            "etcd.quorum.dev",
            "etcdclusters",
            "etcdbackups",
            &[],
            [rule("", &["secrets"], &["get"])],
        );
        assert_eq!(
            crate::rbac::beyond(&granted, &without_pods),
            ["get /pods", "list /pods"]
        );
    }

    /// A Job reads the Secrets its run needs by name and no other, and writes only its own
    /// backup's status; with no Secret to read it may read none (a rule without names would
    /// allow them all).
    #[test]
    fn a_jobs_secrets_and_status_are_its_backups_own() {
        let named = |rules: &[PolicyRule], resource: &str| -> Option<Vec<String>> {
            rules
                .iter()
                .find(|rule| rule.resources.iter().flatten().any(|r| r == resource))
                .map(|rule| {
                    rule.resource_names
                        .clone()
                        .expect("the rule names what it allows")
                })
        };
        let rules = etcd_rules(&["s3-credentials", "client-tls", "s3-credentials"]);
        assert_eq!(
            named(&rules, "secrets"),
            Some(vec!["client-tls".to_string(), "s3-credentials".to_string()])
        );
        assert_eq!(
            named(&rules, "etcdbackups/status"),
            Some(vec!["nightly".to_string()])
        );
        assert!(
            rules
                .iter()
                .filter(|rule| rule.resource_names.is_none())
                .all(|rule| !rule.resources.iter().flatten().any(|r| r == "secrets"))
        );
        assert_eq!(named(&etcd_rules(&[]), "secrets"), None);
    }

    /// Each backup has an identity of its own, named for its operator and itself: operators of
    /// two engines back up in one namespace, and their backups may share a name.
    #[test]
    fn each_backup_has_an_identity_of_its_own() {
        let etcd = job_account("quorum-etcd-operator", "nightly");
        let mysql = job_account("quorum-mysql-operator", "nightly");
        assert_eq!(etcd, "quorum-etcd-operator-backup-nightly");
        assert_ne!(etcd, mysql);
        assert_ne!(etcd, job_account("quorum-etcd-operator", "hourly"));
        assert_ne!(etcd, shared_job_account("quorum-etcd-operator"));
        let long = job_account("quorum-etcd-operator", &"b".repeat(253));
        assert!(long.len() <= 253, "{}", long.len());
        assert_ne!(long, job_account("quorum-etcd-operator", &"b".repeat(252)));

        let metadata = ObjectMeta {
            name: Some(etcd.clone()),
            namespace: Some("shop".into()),
            ..ObjectMeta::default()
        };
        let (account, role, binding) = job_identity(metadata, etcd_rules(&["client-tls"]));
        for name in [
            account.metadata.name.as_ref(),
            role.metadata.name.as_ref(),
            binding.metadata.name.as_ref(),
            Some(&binding.role_ref.name),
            Some(&binding.subjects.as_ref().unwrap()[0].name),
        ] {
            assert_eq!(name, Some(&etcd));
        }
        assert_eq!(binding.subjects.unwrap()[0].namespace.as_deref(), Some("shop"));
    }
}
