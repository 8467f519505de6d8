//! The first operator-shaped proof, against the real local control plane: a tiny test-only
//! resource whose controller, built on quorum-core's runner, creates a StatefulSet and a
//! Service with owner references, recreates the Service after it is deleted, and reports
//! `Ready` once KWOK marks the pods ready.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use k8s_openapi::{
    api::{
        apps::v1::{StatefulSet, StatefulSetSpec},
        core::v1::{Container, PodSpec, PodTemplateSpec, Service, ServicePort, ServiceSpec},
    },
    apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    Api, CustomResource, CustomResourceExt, ResourceExt,
    api::{DeleteParams, PostParams},
    runtime::controller::Action,
};
use quorum_core::{
    apply::child_metadata,
    conditions::{ConditionType, ConditionUpdate, set_condition},
    config::{LogFormat, OperatorConfig},
    naming::{child_name, selector_labels, standard_labels},
    runner::{Context, RetryPolicy, Runtime},
    status::patch_status,
};
use quorum_e2e::{
    control_plane::{TestNamespace, admin_client, install_crd},
    wait,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

const OPERATOR: &str = "proof-operator";

#[derive(CustomResource, Clone, Debug, Deserialize, Serialize, JsonSchema)]
#[kube(
    group = "test.quorum.dev",
    version = "v1alpha1",
    kind = "Proof",
    namespaced,
    status = "ProofStatus"
)]
struct ProofSpec {
    replicas: i32,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
struct ProofStatus {
    ready_replicas: i32,
    conditions: Vec<Condition>,
}

impl quorum_core::pass::ClusterObject for Proof {
    fn statefulsets(&self) -> Vec<String> {
        Vec::new()
    }
    fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map_or(&[], |status| status.conditions.as_slice())
    }
}

fn build_service(proof: &Proof) -> Result<Service, quorum_core::Error> {
    let name = proof.name_any();
    Ok(Service {
        metadata: child_metadata(
            proof,
            child_name(&name, ""),
            standard_labels("proof", &name, "server", OPERATOR),
        )?,
        spec: Some(ServiceSpec {
            cluster_ip: Some("None".into()),
            selector: Some(selector_labels("proof", &name, "server")),
            ports: Some(vec![ServicePort {
                name: Some("client".into()),
                port: 7000,
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}

fn build_statefulset(proof: &Proof) -> Result<StatefulSet, quorum_core::Error> {
    let name = proof.name_any();
    let selector = selector_labels("proof", &name, "server");
    Ok(StatefulSet {
        metadata: child_metadata(
            proof,
            child_name(&name, ""),
            standard_labels("proof", &name, "server", OPERATOR),
        )?,
        spec: Some(StatefulSetSpec {
            replicas: Some(proof.spec.replicas),
            service_name: Some(child_name(&name, "")),
            selector: LabelSelector {
                match_labels: Some(selector.clone()),
                ..LabelSelector::default()
            },
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(selector),
                    ..ObjectMeta::default()
                }),
                spec: Some(PodSpec {
                    containers: vec![Container {
                        name: "server".into(),
                        image: Some("registry.invalid/proof:1".into()),
                        ..Container::default()
                    }],
                    ..PodSpec::default()
                }),
            },
            ..StatefulSetSpec::default()
        }),
        ..StatefulSet::default()
    })
}

async fn reconcile(proof: Arc<Proof>, context: Arc<Context<()>>) -> Result<Action, quorum_core::Error> {
    context.applier.apply(&build_service(&proof)?).await?;
    let statefulset = context.applier.apply(&build_statefulset(&proof)?).await?;
    let ready_replicas = statefulset.status.and_then(|s| s.ready_replicas).unwrap_or(0);

    let mut status = proof.status.clone().unwrap_or_default();
    status.ready_replicas = ready_replicas;
    let ready = ready_replicas == proof.spec.replicas;
    let message = format!("{ready_replicas}/{} pods ready", proof.spec.replicas);
    let reason = if ready { "AllPodsReady" } else { "PodsNotReady" };
    set_condition(
        &mut status.conditions,
        ConditionUpdate::new(ConditionType::Ready, ready, reason, message),
        proof.metadata.generation,
        Timestamp::now(),
    );
    patch_status(&context.client, proof.as_ref(), proof.status.as_ref(), &status).await?;
    // StatefulSet status changes wake us through the owned-object watch; the requeue is a backstop.
    Ok(Action::requeue(Duration::from_secs(30)))
}

fn config_for(namespace: &str, metrics_port: u16) -> OperatorConfig {
    OperatorConfig {
        watch_namespaces: vec![namespace.to_string()],
        log_format: LogFormat::Text,
        metrics_address: SocketAddr::from(([127, 0, 0, 1], metrics_port)),
        leader_elect: false,
        leader_election_namespace: None,
        identity: Some("proof-test".into()),
        pod_namespace: None,
        api_qps: 20,
        api_burst: 30,
        max_concurrent_reconciles: 10,
    }
}

/// Deletes the Proof `demo`, waits until it is gone, and creates it again: another object under
/// the same name.
async fn delete_and_create_again(proofs: &Api<Proof>) -> Proof {
    proofs
        .delete("demo", &DeleteParams::default())
        .await
        .expect("delete Proof");
    wait::until("the Proof to be gone", Duration::from_secs(30), || async {
        match proofs.get_opt("demo").await.map_err(|e| e.to_string())? {
            None => Ok(()),
            Some(proof) => Err(format!("still there: {:?}", proof.metadata.deletion_timestamp)),
        }
    })
    .await;
    create_demo(proofs, 2).await
}

/// Creates the Proof `demo` of `replicas`.
async fn create_demo(proofs: &Api<Proof>, replicas: i32) -> Proof {
    proofs
        .create(
            &PostParams::default(),
            &Proof::new("demo", ProofSpec { replicas }),
        )
        .await
        .expect("create Proof")
}

/// A loopback port nothing listens on now, for a runtime's metrics endpoint.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
        .port()
}

#[tokio::test]
async fn proof_controller_owns_recreates_and_reports_ready() {
    quorum_core::telemetry::init(LogFormat::Text);
    let client = admin_client().await;
    install_crd(&client, &Proof::crd()).await;
    let namespace = TestNamespace::create(&client, "proof").await;
    let ns = namespace.name().to_string();

    let metrics_port = free_port();
    let runtime = Runtime::new(OPERATOR, config_for(&ns, metrics_port), client.clone()).with_retry_policy(
        RetryPolicy {
            first: Duration::from_millis(200),
            max: Duration::from_secs(2),
        },
    );
    let shutdown = runtime.shutdown_token();
    let context = runtime.context(());
    let controller = runtime.controller::<Proof, _, _, _, _>(context, reconcile);
    let running = tokio::spawn(runtime.run(vec![controller]));

    let proofs: Api<Proof> = Api::namespaced(client.clone(), &ns);
    let proof = Proof::new("demo", ProofSpec { replicas: 2 });
    let created = proofs
        .create(&PostParams::default(), &proof)
        .await
        .expect("create Proof");
    let uid = created.uid().expect("stored object has a uid");

    let services: Api<Service> = Api::namespaced(client.clone(), &ns);
    let statefulsets: Api<StatefulSet> = Api::namespaced(client.clone(), &ns);
    let owned_by_proof =
        |owners: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
            owners.is_some_and(|refs| {
                refs.iter()
                    .any(|r| r.uid == uid && r.kind == "Proof" && r.controller == Some(true))
            })
        };

    let service = wait::until("the Service", Duration::from_secs(30), || async {
        services
            .get_opt("demo")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("absent".to_string())
    })
    .await;
    assert!(
        owned_by_proof(service.metadata.owner_references.as_ref()),
        "{:?}",
        service.metadata
    );
    assert_eq!(service.labels()["app.kubernetes.io/managed-by"], OPERATOR);
    let statefulset = wait::until("the StatefulSet", Duration::from_secs(30), || async {
        statefulsets
            .get_opt("demo")
            .await
            .map_err(|e| e.to_string())?
            .ok_or("absent".to_string())
    })
    .await;
    assert!(owned_by_proof(statefulset.metadata.owner_references.as_ref()));

    // A deleted child is recreated: the owned-object watch wakes the controller.
    let old_uid = service.uid();
    services
        .delete("demo", &DeleteParams::default())
        .await
        .expect("delete Service");
    wait::until("the Service to be recreated", Duration::from_secs(30), || async {
        match services.get_opt("demo").await.map_err(|e| e.to_string())? {
            Some(s) if s.uid() != old_uid => Ok(()),
            other => Err(format!("{:?}", other.map(|s| s.uid()))),
        }
    })
    .await;

    // KWOK marks the pods Running and Ready; the StatefulSet controller counts them; the
    // controller reports Ready.
    let status = wait::until("Ready=True on the Proof", Duration::from_secs(90), || async {
        let proof = proofs.get("demo").await.map_err(|e| e.to_string())?;
        let status = proof.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        if ready {
            Ok(status)
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
    assert_eq!(status.ready_replicas, 2);
    let ready = status.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(ready.reason, "AllPodsReady");
    assert_eq!(ready.observed_generation, created.metadata.generation);

    // Every reconcile was counted and timed.
    let metrics = reqwest::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let reconciles: u64 = metrics
        .lines()
        .find_map(|line| line.strip_prefix(r#"quorum_reconcile_total{controller="proofs"} "#))
        .unwrap_or_else(|| panic!("no reconcile counter in {metrics}"))
        .parse()
        .unwrap();
    assert!(reconciles >= 2, "{metrics}");
    assert!(metrics.contains(r#"quorum_reconcile_duration_seconds_count{controller="proofs"}"#));

    shutdown.cancel();
    running
        .await
        .expect("runtime task")
        .expect("runtime ends cleanly on shutdown");
    namespace.delete().await;
}

/// A pass that began before its object was deleted and created again under its name ends
/// without writing anything into the new object: neither its status nor its conditions, and the
/// object it reads as current is gone, not the new one. A write for the same object at a
/// version others have moved on from still lands.
#[tokio::test]
async fn a_status_write_for_a_deleted_object_never_lands_on_one_created_under_its_name() {
    use quorum_core::status::{StatusWriter, latest, update_conditions};

    let client = admin_client().await;
    install_crd(&client, &Proof::crd()).await;
    let namespace = TestNamespace::create(&client, "proof-status").await;
    let proofs: Api<Proof> = Api::namespaced(client.clone(), namespace.name());
    let deleted = create_demo(&proofs, 1).await;
    let created = delete_and_create_again(&proofs).await;

    let stale = ProofStatus {
        ready_replicas: 7,
        conditions: Vec::new(),
    };
    let written = patch_status(&client, &deleted, None, &stale).await;
    assert!(written.is_err(), "{written:?}");
    let mut writer = StatusWriter::new(&client, &deleted, None);
    let written = writer.write(&stale).await;
    assert!(written.is_err(), "{written:?}");
    let updated = update_conditions(&client, &deleted, |_| {
        vec![ConditionUpdate::new(
            ConditionType::Ready,
            true,
            "Stale",
            "from a deleted object's pass",
        )]
    })
    .await;
    assert!(matches!(updated, Ok(false)), "{updated:?}");
    let read = latest(&client, &deleted).await.expect("read");
    assert!(
        read.is_none(),
        "the new object was read as the deleted one's: {read:?}"
    );
    let stored = proofs.get("demo").await.expect("read Proof");
    assert_eq!(stored.uid(), created.uid());
    assert_eq!(
        stored.status, None,
        "a deleted object's pass wrote into the new one"
    );

    // Another writer moves the object on; a write at the version before still lands.
    let mut others = ProofStatus::default();
    others.conditions.push(Condition {
        type_: "Other".into(),
        status: "True".into(),
        reason: "Other".into(),
        message: String::new(),
        last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            Timestamp::from_second(Timestamp::now().as_second()).expect("now"),
        ),
        observed_generation: None,
    });
    proofs
        .patch_status(
            "demo",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({ "status": others })),
        )
        .await
        .expect("another writer");
    let wanted = ProofStatus {
        ready_replicas: 2,
        conditions: others.conditions.clone(),
    };
    let written = patch_status(&client, &created, Some(&others), &wanted).await;
    assert!(matches!(written, Ok(true)), "{written:?}");
    let stored = proofs.get("demo").await.expect("read Proof");
    assert_eq!(stored.status, Some(wanted));
}

/// What a cluster controller keeps for a cluster (by `namespace/name`) is forgotten before the
/// first pass of a cluster created again under its name, even when the deleted one's pass was
/// still running through the deletion and the re-creation, so no pass for the new object ever
/// found the old one gone.
#[tokio::test]
async fn a_cluster_created_again_under_its_name_inherits_nothing_kept_for_the_deleted_one() {
    use quorum_core::runner::ForgetsClusters;
    use tokio::sync::{Mutex, Notify};

    #[derive(Default)]
    struct Kept {
        forgotten: Mutex<Vec<String>>,
        /// Each pass's object uid, and how many times a cluster had been forgotten before it.
        passes: Mutex<Vec<(String, usize)>>,
        release_first: Notify,
    }
    impl ForgetsClusters for Kept {
        fn forget_cluster<'a>(&'a self, key: &'a str) -> futures::future::BoxFuture<'a, ()> {
            Box::pin(async move { self.forgotten.lock().await.push(key.to_string()) })
        }
    }

    let client = admin_client().await;
    install_crd(&client, &Proof::crd()).await;
    let namespace = TestNamespace::create(&client, "proof-kept").await;
    let ns = namespace.name().to_string();
    let metrics_port = free_port();
    let runtime = Runtime::new(OPERATOR, config_for(&ns, metrics_port), client.clone());
    let shutdown = runtime.shutdown_token();
    let context = runtime.context(Kept::default());
    let first_uid = Arc::new(std::sync::Mutex::new(None::<String>));
    let held = first_uid.clone();
    let controller = runtime.cluster_controller::<Proof, _, quorum_core::Error, _, _>(
        context.clone(),
        move |proof: Arc<Proof>, context: Arc<Context<Kept>>| {
            let held = held.clone();
            async move {
                let uid = proof.uid().unwrap_or_default();
                let forgotten = context.state.forgotten.lock().await.len();
                context.state.passes.lock().await.push((uid.clone(), forgotten));
                let first = held.lock().unwrap().get_or_insert_with(|| uid.clone()).clone();
                if first == uid {
                    // The deleted cluster's pass, still running while it is deleted and created again.
                    context.state.release_first.notified().await;
                }
                Ok(Action::await_change())
            }
        },
        "proof",
        None,
    );
    let running = tokio::spawn(runtime.run(vec![controller]));

    let proofs: Api<Proof> = Api::namespaced(client.clone(), &ns);
    let deleted = create_demo(&proofs, 1).await;
    wait::until("the first pass", Duration::from_secs(30), || async {
        let passes = context.state.passes.lock().await;
        if passes.iter().any(|(uid, _)| Some(uid) == deleted.uid().as_ref()) {
            Ok(())
        } else {
            Err(format!("{passes:?}"))
        }
    })
    .await;
    let created = delete_and_create_again(&proofs).await;
    let new_uid = created.uid().expect("a uid");
    // The watch holds the new object before the first pass ends: the next pass is the new one's.
    wait::until(
        "the watch to deliver the new Proof",
        Duration::from_secs(30),
        || async {
            let stored = context.cache.get::<Proof>(&ns, "demo");
            match stored {
                Some(stored) if stored.uid().as_deref() == Some(new_uid.as_str()) => Ok(()),
                other => Err(format!("{:?}", other.map(|p| p.uid()))),
            }
        },
    )
    .await;
    context.state.release_first.notify_one();
    let forgotten_before = wait::until("the new Proof's first pass", Duration::from_secs(30), || async {
        let passes = context.state.passes.lock().await;
        passes
            .iter()
            .find(|(uid, _)| *uid == new_uid)
            .map(|(_, forgotten)| *forgotten)
            .ok_or(format!("{passes:?}"))
    })
    .await;
    assert!(
        forgotten_before >= 1,
        "the new cluster's first pass ran with what was kept for the deleted one"
    );
    assert_eq!(*context.state.forgotten.lock().await, vec![format!("{ns}/demo")]);
    shutdown.cancel();
    let _ = running.await;
}
