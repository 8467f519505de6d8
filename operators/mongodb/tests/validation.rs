//! Bad input is refused by the API server itself, with a message that names the field, before
//! the operator sees it: the CRDs' schema and CEL rules against the real local control plane.
//! An even number of voting members without an arbiter is accepted with a warning from the
//! shipped admission policy, also through `kubectl scale`.

use std::time::Duration;

use k8s_openapi::{
    api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding},
    apimachinery::pkg::api::resource::Quantity,
};
use kube::{
    Api, CustomResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use mongodb_operator::{
    admission::even_voting_members_policy,
    crd::{
        MongoDBBackup, MongoDBBackupSpec, MongoDBReplicaSet, MongoDBReplicaSetSpec, MongoRestoreSource,
        Storage,
    },
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, install_crd, kubeconfig_path},
    tools::{kubectl_binary, run_tool},
    wait,
};

fn spec(members: i32, arbiter: bool) -> MongoDBReplicaSetSpec {
    MongoDBReplicaSetSpec {
        members,
        non_voting_members: 0,
        hidden_members: 0,
        arbiter,
        version: "7.0.14".into(),
        image: None,
        storage: Storage {
            size: Quantity("1Gi".into()),
            storage_class_name: None,
        },
        resources: None,
        pod_template: None,
        admin_secret: None,
        keyfile_secret: None,
        backup: None,
        restore_from: None,
    }
}

fn replica_set(name: &str, change: impl FnOnce(&mut MongoDBReplicaSetSpec)) -> MongoDBReplicaSet {
    let mut spec = spec(3, false);
    change(&mut spec);
    MongoDBReplicaSet::new(name, spec)
}

/// The message of the API server's refusal to create `object`.
async fn refusal<K>(api: &Api<K>, object: &K) -> String
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    match api.create(&PostParams::default(), object).await {
        Ok(_) => panic!("the API server accepted an invalid object: {object:?}"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            status.message
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
}

/// The message of the API server's refusal of a merge patch to `name`.
async fn refused_change(api: &Api<MongoDBReplicaSet>, name: &str, change: serde_json::Value) -> String {
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&change))
        .await
    {
        Ok(_) => panic!("the API server accepted {change} on {name}"),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            status.message
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
}

/// Runs `kubectl` in `namespace`; returns whether it succeeded, its stdout, and its stderr,
/// where it prints the API server's warnings.
fn kubectl(namespace: &str, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let kubeconfig = kubeconfig_path().display().to_string();
    let mut all = vec!["--kubeconfig", kubeconfig.as_str(), "-n", namespace];
    all.extend_from_slice(args);
    let (_, output) = run_tool(&kubectl_binary(), &all, stdin.map(str::as_bytes));
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn manifest(name: &str, members: i32, arbiter: bool) -> String {
    format!(
        "apiVersion: mongodb.quorum.dev/v1alpha1\nkind: MongoDBReplicaSet\nmetadata: {{name: {name}}}\n\
         spec: {{members: {members}, arbiter: {arbiter}, version: \"7.0.14\", storage: {{size: 1Gi}}}}\n"
    )
}

fn warnings(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|line| line.starts_with("Warning:"))
        .collect()
}

#[tokio::test]
async fn invalid_replica_sets_and_backups_are_refused_naming_the_field() {
    let client = admin_client().await;
    install_crd(&client, &MongoDBReplicaSet::crd()).await;
    install_crd(&client, &MongoDBBackup::crd()).await;
    let namespace = TestNamespace::create(&client, "mongodb-validation").await;
    let sets: Api<MongoDBReplicaSet> = Api::namespaced(client.clone(), namespace.name());

    let with = |change: fn(&mut MongoDBReplicaSetSpec)| {
        let mut spec = spec(3, false);
        change(&mut spec);
        spec
    };
    for (name, spec, expected) in [
        ("none", with(|s| s.members = 0), &["spec.members"][..]),
        ("eight", with(|s| s.members = 8), &["spec.members"]),
        (
            "seven-and-arbiter",
            with(|s| {
                s.members = 7;
                s.arbiter = true;
            }),
            &["spec.members", "at most 7 voting members"],
        ),
        (
            "fifty-one",
            with(|s| {
                s.members = 6;
                s.arbiter = true;
                s.non_voting_members = 44;
            }),
            &["spec.nonVotingMembers", "at most 50 members"],
        ),
        (
            "hidden",
            with(|s| {
                s.non_voting_members = 1;
                s.hidden_members = 2;
            }),
            &["spec.hiddenMembers", "cannot exceed nonVotingMembers"],
        ),
        (
            "old-release",
            with(|s| s.version = "5.0".into()),
            &["spec.version"],
        ),
        (
            "bad-patch",
            with(|s| s.version = "7.0.x".into()),
            &["spec.version"],
        ),
        ("bare-major", with(|s| s.version = "7".into()), &["spec.version"]),
    ] {
        let message = refusal(&sets, &MongoDBReplicaSet::new(name, spec)).await;
        for part in expected {
            assert!(message.contains(part), "{name}: {part} not in {message}");
        }
    }

    // Valid sets are accepted: three voting members, two with an arbiter, the most of each.
    for valid in [
        replica_set("orders", |_| {}),
        replica_set("pair", |s| {
            s.members = 2;
            s.arbiter = true;
        }),
        replica_set("largest", |s| {
            s.members = 6;
            s.arbiter = true;
            s.non_voting_members = 43;
            s.hidden_members = 43;
        }),
        replica_set("restored", |s| {
            s.restore_from = Some(MongoRestoreSource::newest("nightly"));
        }),
    ] {
        sets.create(&PostParams::default(), &valid)
            .await
            .unwrap_or_else(|error| panic!("{valid:?} refused: {error}"));
    }

    // What cannot change afterwards.
    for (name, change, expected) in [
        (
            "orders",
            serde_json::json!({"spec": {"version": "6.0"}}),
            "downgrades are not supported",
        ),
        (
            "orders",
            serde_json::json!({"spec": {"version": "6.0.20"}}),
            "downgrades are not supported",
        ),
        (
            "orders",
            serde_json::json!({"spec": {"storage": {"size": "2Gi"}}}),
            "storage is immutable",
        ),
        (
            "orders",
            serde_json::json!({"spec": {"restoreFrom": {"backupName": "nightly"}}}),
            "restoreFrom is immutable",
        ),
        (
            "restored",
            serde_json::json!({"spec": {"restoreFrom": {"backupName": "weekly"}}}),
            "restoreFrom is immutable",
        ),
        (
            "restored",
            serde_json::json!({"spec": {"restoreFrom": null}}),
            "restoreFrom is immutable",
        ),
    ] {
        let message = refused_change(&sets, name, change.clone()).await;
        assert!(message.contains(expected), "{change} on {name}: {message}");
    }
    // A patch within the release is allowed at any time; the next release once the
    // featureCompatibilityVersion has reached the release running now, one release at a time.
    let set_version = |name: &'static str, version: &'static str| {
        let sets = sets.clone();
        async move {
            sets.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"spec": {"version": version}})),
            )
            .await
            .map(drop)
        }
    };
    let report_compatibility = |name: &'static str, release: &'static str| {
        let sets = sets.clone();
        async move {
            sets.patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"status": {"featureCompatibilityVersion": release}})),
            )
            .await
            .expect("status written");
        }
    };
    set_version("orders", "7.0.15")
        .await
        .expect("a patch within the release");
    let one_release =
        "upgrade one release at a time (6.0 to 7.0 to 8.0), and only once status.featureCompatibilityVersion";
    let message = refused_change(&sets, "orders", serde_json::json!({"spec": {"version": "8.0"}})).await;
    assert!(
        message.contains(one_release),
        "before any compatibility is reported: {message}"
    );
    report_compatibility("orders", "7.0").await;
    set_version("orders", "8.0")
        .await
        .expect("the next release once compatibility reached 7.0");

    // A release skipped (6.0 to 8.0), or two steps taken before the first completed: a server of
    // the new release would refuse the data, and the way back is closed.
    sets.create(
        &PostParams::default(),
        &replica_set("legacy", |s| s.version = "6.0".into()),
    )
    .await
    .expect("a 6.0 replica set");
    report_compatibility("legacy", "6.0").await;
    let message = refused_change(&sets, "legacy", serde_json::json!({"spec": {"version": "8.0"}})).await;
    assert!(message.contains(one_release), "6.0 to 8.0: {message}");
    assert!(message.contains("spec.version"), "{message}");
    set_version("legacy", "7.0").await.expect("6.0 to 7.0");
    let message = refused_change(&sets, "legacy", serde_json::json!({"spec": {"version": "8.0"}})).await;
    assert!(
        message.contains(one_release),
        "8.0 before compatibility reached 7.0: {message}"
    );
    report_compatibility("legacy", "7.0").await;
    set_version("legacy", "8.0")
        .await
        .expect("7.0 to 8.0 once compatibility is 7.0");

    let backups: Api<MongoDBBackup> = Api::namespaced(client.clone(), namespace.name());
    let backup = |destination: serde_json::Value, schedule: Option<&str>, retain: Option<u32>| {
        MongoDBBackup::new(
            "nightly",
            MongoDBBackupSpec {
                backup: quorum_core::crd::BackupSpec {
                    cluster_name: "orders".into(),
                    destination: serde_json::from_value(destination).unwrap(),
                    schedule: schedule.map(str::to_string),
                    retain,
                    verify: false,
                },
                archive_oplog: false,
            },
        )
    };
    let filesystem = serde_json::json!({"filesystem": {"path": "/backups"}});
    let message = refusal(&backups, &backup(filesystem.clone(), None, Some(3))).await;
    assert!(
        message.contains("retain applies only to scheduled backups"),
        "{message}"
    );
    let both = serde_json::json!({
        "filesystem": {"path": "/backups"},
        "s3": {"bucket": "b", "credentialsSecretName": "c"}
    });
    let message = refusal(&backups, &backup(both, None, None)).await;
    assert!(
        message.contains("spec.destination") && message.contains("set exactly one of s3 or filesystem"),
        "{message}"
    );
    backups
        .create(
            &PostParams::default(),
            &backup(filesystem, Some("0 3 * * *"), Some(3)),
        )
        .await
        .expect("a scheduled backup with retention is accepted");
    namespace.delete().await;
}

#[tokio::test]
async fn even_voting_members_without_an_arbiter_are_accepted_with_a_warning() {
    let client = admin_client().await;
    install_crd(&client, &MongoDBReplicaSet::crd()).await;
    let (policy, binding) = even_voting_members_policy();
    let apply = PatchParams::apply("quorum-e2e").force();
    Api::<ValidatingAdmissionPolicy>::all(client.clone())
        .patch(
            policy.metadata.name.as_deref().unwrap(),
            &apply,
            &Patch::Apply(&policy),
        )
        .await
        .expect("install the policy");
    Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
        .patch(
            binding.metadata.name.as_deref().unwrap(),
            &apply,
            &Patch::Apply(&binding),
        )
        .await
        .expect("bind the policy");
    let namespace = TestNamespace::create(&client, "mongodb-admission").await;
    let ns = namespace.name().to_string();

    // The policy takes effect once the API server has loaded and type-checked it.
    let mut attempt = 0;
    let warning = wait::until("the even-count warning", Duration::from_secs(30), || {
        attempt += 1;
        let (accepted, _, stderr) = kubectl(
            &ns,
            &["apply", "-f", "-"],
            Some(&manifest(&format!("even-{attempt}"), 4, false)),
        );
        async move {
            assert!(accepted, "an even count is allowed: {stderr}");
            match warnings(&stderr).first() {
                Some(warning) => Ok(warning.to_string()),
                None => Err(stderr),
            }
        }
    })
    .await;
    assert!(warning.contains("spec.members: 4"), "{warning}");
    assert!(warning.contains("spec.arbiter: true"), "{warning}");

    for (name, members, arbiter) in [("odd", 3, false), ("pair", 2, true), ("five", 5, false)] {
        let (accepted, _, stderr) = kubectl(
            &ns,
            &["apply", "-f", "-"],
            Some(&manifest(name, members, arbiter)),
        );
        assert!(accepted, "{stderr}");
        assert!(
            warnings(&stderr).is_empty(),
            "no warning for {members} members with arbiter {arbiter}: {stderr}"
        );
    }

    // `kubectl scale` sends a Scale, which has spec.replicas and no spec.arbiter.
    let (accepted, _, stderr) = kubectl(&ns, &["scale", "mongodbreplicaset/odd", "--replicas=4"], None);
    assert!(accepted, "{stderr}");
    let warned = warnings(&stderr);
    assert!(
        warned.iter().any(|warning| warning.contains("spec.members: 4")),
        "scaling to an even count is warned about: {stderr}"
    );
    let (accepted, _, stderr) = kubectl(&ns, &["scale", "mongodbreplicaset/odd", "--replicas=5"], None);
    assert!(accepted, "{stderr}");
    assert!(warnings(&stderr).is_empty(), "{stderr}");
    let sets: Api<MongoDBReplicaSet> = Api::namespaced(client.clone(), &ns);
    assert_eq!(sets.get("odd").await.unwrap().spec.members, 5);
    namespace.delete().await;
}

#[tokio::test]
async fn kubectl_shows_ready_primary_members_version_and_age() {
    let client = admin_client().await;
    install_crd(&client, &MongoDBReplicaSet::crd()).await;
    let columns: Vec<String> = MongoDBReplicaSet::crd().spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|column| column.name.to_uppercase())
        .collect();
    assert_eq!(columns, ["READY", "PRIMARY", "MEMBERS", "VERSION", "AGE"]);

    let namespace = TestNamespace::create(&client, "mongodb-columns").await;
    let ns = namespace.name().to_string();
    let (accepted, _, stderr) = kubectl(&ns, &["apply", "-f", "-"], Some(&manifest("orders", 3, false)));
    assert!(accepted, "{stderr}");
    let (listed, stdout, stderr) = kubectl(&ns, &["get", "mongodbreplicasets"], None);
    assert!(listed, "{stderr}");
    let header: Vec<&str> = stdout
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "READY", "PRIMARY", "MEMBERS", "VERSION", "AGE"],
        "{stdout}"
    );
    let (listed, stdout, stderr) = kubectl(&ns, &["get", "mongors", "orders"], None);
    assert!(listed && stdout.contains("7.0.14"), "{stdout}{stderr}");
    namespace.delete().await;
}

/// A name too long for the arbiter's StatefulSet (`<name>-arbiter`, whose pods get a label made
/// of it and a hash) is refused at admission rather than failing pod creation later.
#[tokio::test]
async fn names_too_long_for_the_statefulsets_are_refused_naming_metadata_name() {
    let client = admin_client().await;
    install_crd(&client, &MongoDBReplicaSet::crd()).await;
    let namespace = TestNamespace::create(&client, "mongodb-long-name").await;
    let sets: Api<MongoDBReplicaSet> = Api::namespaced(client.clone(), namespace.name());
    quorum_e2e::control_plane::assert_names_limited_to(&sets, mongodb_operator::crd::MAX_NAME, |name| {
        MongoDBReplicaSet::new(name, spec(3, false))
    })
    .await;
    namespace.delete().await;
}

/// Every field of the `MongoDBReplicaSet` and `MongoDBBackup` specs is checked at admission:
/// what the operator could not build is refused with a message naming the field, and boundary
/// values are accepted.
#[tokio::test]
async fn every_field_of_the_spec_is_validated_naming_the_field() {
    use quorum_e2e::admission::{self, Row, spec as change};
    use serde_json::json;

    let (sets, backups) = (MongoDBReplicaSet::crd(), MongoDBBackup::crd());
    let valid = serde_json::to_value(MongoDBReplicaSet::new("valid", spec(3, false))).unwrap();
    let version = |version: &str| change(json!({"version": version}));

    let mut rows = admission::cluster_rows();
    rows.extend([
        Row::refused("no members", change(json!({"members": 0})), &["spec.members"]),
        Row::refused("eight members", change(json!({"members": 8})), &["spec.members"]),
        Row::refused(
            "seven members and an arbiter",
            change(json!({"members": 7, "arbiter": true})),
            &["spec.members", "at most 7 voting members"],
        ),
        Row::accepted(
            "two members and an arbiter",
            change(json!({"members": 2, "arbiter": true})),
        ),
        Row::refused(
            "a negative number of non-voting members",
            change(json!({"nonVotingMembers": -1})),
            &["spec.nonVotingMembers"],
        ),
        Row::refused(
            "51 members",
            change(json!({"members": 7, "nonVotingMembers": 44})),
            &["spec.nonVotingMembers", "at most 50 members"],
        ),
        Row::refused(
            "more hidden than non-voting members",
            change(json!({"nonVotingMembers": 1, "hiddenMembers": 2})),
            &["spec.hiddenMembers"],
        ),
        Row::refused(
            "negative hidden members",
            change(json!({"hiddenMembers": -1})),
            &["spec.hiddenMembers"],
        ),
        Row::accepted(
            "50 members, every non-voting one hidden",
            change(json!({"members": 7, "nonVotingMembers": 43, "hiddenMembers": 43})),
        ),
        Row::refused("MongoDB 5.0", version("5.0.29"), &["spec.version"]),
        Row::refused("a bare major version", version("7"), &["spec.version"]),
        Row::accepted("a release without a patch", version("8.0")),
        Row::update_accepted("a patch release", json!({}), version("7.0.15")),
        Row::update_refused(
            "a downgrade",
            json!({}),
            version("6.0.20"),
            &["spec.version", "downgrades are not supported"],
        ),
        Row::update_refused(
            "the next release before the compatibility version reached this one",
            json!({}),
            version("8.0"),
            &["spec.version", "featureCompatibilityVersion"],
        ),
        Row::refused(
            "an admin Secret that is no object name",
            change(json!({"adminSecret": "Admin Secret"})),
            &["spec.adminSecret"],
        ),
        Row::refused(
            "a keyfile Secret that is no object name",
            change(json!({"keyfileSecret": "keyfile_secret"})),
            &["spec.keyfileSecret"],
        ),
        Row::accepted(
            "admin and keyfile Secrets",
            change(json!({"adminSecret": "orders-admin", "keyfileSecret": "orders.keyfile"})),
        ),
        // The cluster's backup policy archiving its log, for point-in-time restores.
        Row::accepted(
            "a backup policy that archives the log",
            change(json!({"backup": {"schedule": "*/15 * * * *", "destination": {"filesystem": {"path": "/backups"}},
                "retain": 96, "archiveOplog": true}})),
        ),
        Row::refused(
            "a log archive flag that is no boolean",
            change(json!({"backup": {"schedule": "*/15 * * * *", "destination": {"filesystem": {"path": "/backups"}},
                "archiveOplog": "yes"}})),
            &["spec.backup.archiveOplog"],
        ),
        // restoreFrom.pointInTime
        Row::accepted(
            "restored to a time",
            change(json!({"restoreFrom": {"backupName": "nightly",
                "pointInTime": {"time": "2026-11-30T12:00:00Z"}}})),
        ),
        Row::refused(
            "a point without a time",
            change(json!({"restoreFrom": {"backupName": "nightly", "pointInTime": {}}})),
            &["spec.restoreFrom.pointInTime.time"],
        ),
        Row::refused(
            "a time that is no time",
            change(json!({"restoreFrom": {"backupName": "nightly", "pointInTime": {"time": "yesterday"}}})),
            &["spec.restoreFrom.pointInTime.time"],
        ),
    ]);
    let backup_rows = [
        Row::accepted(
            "a schedule that archives the oplog",
            change(json!({"schedule": "*/15 * * * *", "retain": 4, "archiveOplog": true})),
        ),
        Row::refused(
            "archiving the oplog without a schedule",
            change(json!({"archiveOplog": true, "schedule": null, "retain": null})),
            &["spec", "archiveOplog needs schedule and retain"],
        ),
        Row::refused(
            "archiving the oplog without retain",
            change(json!({"archiveOplog": true, "retain": null})),
            &["spec", "archiveOplog needs schedule and retain"],
        ),
    ];
    admission::check_engine_with_backup_rows(
        "mongodb-every-field",
        &sets,
        &valid,
        &rows,
        &backups,
        &backup_rows,
    )
    .await;
}
