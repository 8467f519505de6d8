//! The local control plane, as the integration tests see it.

use std::path::PathBuf;

use k8s_openapi::{
    api::{
        core::v1::{Namespace, ServiceAccount},
        rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::ObjectMeta,
};
use kube::{
    Api, Client, Config,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};

/// Where `e2e/cluster.sh` writes the kubeconfig, unless `QUORUM_KUBECONFIG` says otherwise.
pub fn kubeconfig_path() -> PathBuf {
    if let Some(path) = std::env::var_os("QUORUM_KUBECONFIG") {
        return PathBuf::from(path);
    }
    let base = std::env::var_os("QUORUM_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("QUORUM_CACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| {
                    PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/quorum")
                });
            cache.join("cluster")
        });
    base.join("kubeconfig")
}

/// A client for the local control plane, as its admin.
///
/// # Panics
/// When the control plane is not running: integration tests must fail loudly rather than
/// pass without having run. Start it with `e2e/cluster.sh start`.
pub async fn admin_client() -> Client {
    admin_client_from(&kubeconfig_path()).await
}

const START_HINT: &str =
    "start the local control plane with `e2e/cluster.sh start` (the test command does this)";

async fn admin_client_from(path: &std::path::Path) -> Client {
    let client = Client::try_from(admin_config(path).await).expect("client from kubeconfig");
    if let Err(error) = client.apiserver_version().await {
        panic!("the local control plane does not answer: {error}; {START_HINT}");
    }
    client
}

/// The admin kubeconfig at `path`, read as a client configuration.
async fn admin_config(path: &std::path::Path) -> Config {
    quorum_core::install_crypto_provider();
    let kubeconfig = Kubeconfig::read_from(path).unwrap_or_else(|error| {
        panic!(
            "no local control plane: cannot read {}: {error}; {START_HINT}",
            path.display()
        )
    });
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|error| panic!("bad kubeconfig {}: {error}", path.display()))
}

/// Every request a client sent: method and path (with query), in order.
#[derive(Clone, Default)]
pub struct RequestLog(std::sync::Arc<std::sync::Mutex<Vec<(http::Method, String)>>>);

impl RequestLog {
    /// The requests sent so far.
    pub fn sent(&self) -> Vec<(http::Method, String)> {
        self.0.lock().expect("request log").clone()
    }

    /// The single reads: GETs of one object and lists, not the watches (which stay open, and
    /// are what a cache is filled from), nor the paged list a watcher makes to fill its cache
    /// anew when its watch broke (a loaded API server ends watches early): one whose next
    /// request on the same collection, if any yet, is the watch it resumes.
    pub fn reads(&self) -> Vec<(http::Method, String)> {
        let sent = self.sent();
        sent.iter()
            .enumerate()
            .filter(|(at, (method, target))| {
                method == http::Method::GET && !is_watch(target) && !fills_a_cache(target, &sent[at + 1..])
            })
            .map(|(_, request)| request.clone())
            .collect()
    }

    /// The requests other than reads (`GET`, and the watches and lists that are GETs too).
    pub fn writes(&self) -> Vec<(http::Method, String)> {
        self.sent()
            .into_iter()
            .filter(|(method, _)| method != http::Method::GET)
            .collect()
    }
}

fn is_watch(target: &str) -> bool {
    target.contains("watch=true")
}

/// Whether `target` is a watcher's paged list (kube's watcher lists in pages; no pass does) whose
/// next request on the same collection among `later`, if any, is a watch.
fn fills_a_cache(target: &str, later: &[(http::Method, String)]) -> bool {
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let paged = query.split('&').any(|parameter| parameter.starts_with("limit="));
    paged
        && later
            .iter()
            .find(|(_, next)| next.split('?').next() == Some(path))
            .is_none_or(|(_, next)| is_watch(next))
}

/// An admin client that records every request it sends, so a test counts what one component
/// (an operator given this client) asked of the API server, whatever else runs beside it.
pub async fn recording_admin_client() -> (Client, RequestLog) {
    let config = admin_config(&kubeconfig_path()).await;
    let log = RequestLog::default();
    let recorder = log.clone();
    let client = kube::client::ClientBuilder::try_from(config)
        .expect("client from kubeconfig")
        .with_layer(&tower::util::MapRequestLayer::new(
            move |request: http::Request<kube::client::Body>| {
                let target = request
                    .uri()
                    .path_and_query()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                recorder
                    .0
                    .lock()
                    .expect("request log")
                    .push((request.method().clone(), target));
                request
            },
        ))
        .build();
    (client, log)
}

/// A client that authenticates as the ServiceAccount `namespace/name` with a fresh token, as
/// an operator pod running under that account would: what RBAC allows it is all it can do.
///
/// # Panics
/// When the token cannot be issued.
pub async fn service_account_client(admin: &Client, namespace: &str, name: &str) -> Client {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(admin.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let issued = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|error| panic!("token for {namespace}/{name}: {error}"));
    let token = issued.status.expect("an issued token").token;
    let path = kubeconfig_path();
    let kubeconfig = Kubeconfig::read_from(&path).expect("kubeconfig");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config");
    config.auth_info = kube::config::AuthInfo {
        token: Some(secrecy::SecretString::from(token)),
        ..kube::config::AuthInfo::default()
    };
    Client::try_from(config).expect("client")
}

/// A ServiceAccount bound to exactly the given rules and nothing else: `rules` cluster-wide
/// (a ClusterRole named after the operator and the namespace) and `namespaced_rules` in its
/// own namespace (leader election). [`BoundAccount::client`] acts as it.
pub struct BoundAccount {
    pub client: Client,
    cluster_role: String,
}

impl BoundAccount {
    /// # Panics
    /// When an object cannot be created.
    pub async fn create(
        admin: &Client,
        namespace: &str,
        account: &str,
        operator: &str,
        rules: Vec<PolicyRule>,
        namespaced_rules: Vec<PolicyRule>,
    ) -> Self {
        let post = PostParams::default();
        let named = |name: &str| ObjectMeta {
            name: Some(name.to_string()),
            ..ObjectMeta::default()
        };
        let role_ref = |kind: &str, name: &str| RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: kind.into(),
            name: name.into(),
        };
        let subjects = Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: account.into(),
            namespace: Some(namespace.into()),
            ..Subject::default()
        }]);
        Api::<ServiceAccount>::namespaced(admin.clone(), namespace)
            .create(
                &post,
                &ServiceAccount {
                    metadata: named(account),
                    ..ServiceAccount::default()
                },
            )
            .await
            .unwrap_or_else(|error| panic!("creating ServiceAccount {account}: {error}"));
        let cluster_role = format!("{operator}-{namespace}");
        Api::<ClusterRole>::all(admin.clone())
            .create(
                &post,
                &ClusterRole {
                    metadata: named(&cluster_role),
                    rules: Some(rules),
                    ..ClusterRole::default()
                },
            )
            .await
            .unwrap_or_else(|error| panic!("creating ClusterRole {cluster_role}: {error}"));
        Api::<ClusterRoleBinding>::all(admin.clone())
            .create(
                &post,
                &ClusterRoleBinding {
                    metadata: named(&cluster_role),
                    role_ref: role_ref("ClusterRole", &cluster_role),
                    subjects: subjects.clone(),
                },
            )
            .await
            .unwrap_or_else(|error| panic!("creating ClusterRoleBinding {cluster_role}: {error}"));
        Api::<Role>::namespaced(admin.clone(), namespace)
            .create(
                &post,
                &Role {
                    metadata: named("leader-election"),
                    rules: Some(namespaced_rules),
                },
            )
            .await
            .unwrap_or_else(|error| panic!("creating Role leader-election: {error}"));
        Api::<RoleBinding>::namespaced(admin.clone(), namespace)
            .create(
                &post,
                &RoleBinding {
                    metadata: named("leader-election"),
                    role_ref: role_ref("Role", "leader-election"),
                    subjects,
                },
            )
            .await
            .unwrap_or_else(|error| panic!("creating RoleBinding leader-election: {error}"));
        let client = service_account_client(admin, namespace, account).await;
        Self { client, cluster_role }
    }

    /// Deletes the cluster-wide objects (the namespaced ones go with the namespace).
    ///
    /// # Panics
    /// When one cannot be deleted.
    pub async fn delete(self, admin: &Client) {
        Api::<ClusterRoleBinding>::all(admin.clone())
            .delete(&self.cluster_role, &DeleteParams::default())
            .await
            .expect("delete the ClusterRoleBinding");
        Api::<ClusterRole>::all(admin.clone())
            .delete(&self.cluster_role, &DeleteParams::default())
            .await
            .expect("delete the ClusterRole");
    }
}

/// A namespace that exists for one test.
pub struct TestNamespace {
    client: Client,
    name: String,
    /// A test that fails leaves its namespace's logs and events behind (see
    /// [`crate::diagnostics`]).
    _diagnostics: crate::diagnostics::OnFailure,
}

impl TestNamespace {
    /// Creates a namespace named `<prefix>-<random>`.
    pub async fn create(client: &Client, prefix: &str) -> Self {
        let name = format!("{prefix}-{:06x}", rand::random::<u32>() & 0xff_ffff);
        let api: Api<Namespace> = Api::all(client.clone());
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        api.create(&PostParams::default(), &namespace)
            .await
            .unwrap_or_else(|error| panic!("creating namespace {name}: {error}"));
        wait_for_default_service_account(client, &name).await;
        Self {
            client: client.clone(),
            _diagnostics: crate::diagnostics::OnFailure::new(&name),
            name,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Deletes the namespace and everything in it. A test that panics before this leaves its
    /// namespace behind for inspection, and its logs and events under
    /// [`crate::diagnostics::diagnostics_root`]; `e2e/cluster.sh stop` removes the namespaces.
    pub async fn delete(self) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let _ = api.delete(&self.name, &DeleteParams::background()).await;
    }
}

/// Pods are refused until the namespace's default ServiceAccount exists.
async fn wait_for_default_service_account(client: &Client, namespace: &str) {
    let api: Api<k8s_openapi::api::core::v1::ServiceAccount> = Api::namespaced(client.clone(), namespace);
    crate::wait::until(
        "the default ServiceAccount",
        std::time::Duration::from_secs(30),
        || async {
            match api.get_opt("default").await {
                Ok(Some(_)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
}

/// Installs (or updates) a CRD with server-side apply and waits until it is established.
pub async fn install_crd(client: &Client, crd: &CustomResourceDefinition) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().expect("a CRD has a name");
    api.patch(
        &name,
        &PatchParams::apply("quorum-e2e").force(),
        &Patch::Apply(crd),
    )
    .await
    .unwrap_or_else(|error| panic!("installing CRD {name}: {error}"));
    crate::wait::until(
        &format!("CRD {name} established"),
        std::time::Duration::from_secs(30),
        || async {
            let crd = api.get(&name).await.map_err(|e| e.to_string())?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                Ok(())
            } else {
                Err("not established".into())
            }
        },
    )
    .await;
}

/// Waits (up to 30 s) until Secret `namespace/name` exists, as one an operator generates, and
/// returns its data as text.
pub async fn generated_secret(
    client: &Client,
    namespace: &str,
    name: &str,
) -> std::collections::BTreeMap<String, String> {
    let secrets: Api<k8s_openapi::api::core::v1::Secret> = Api::namespaced(client.clone(), namespace);
    let secret = crate::wait::until(
        &format!("the generated Secret {namespace}/{name}"),
        std::time::Duration::from_secs(30),
        || async {
            secrets
                .get_opt(name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| "not yet".to_string())
        },
    )
    .await;
    secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| (key, String::from_utf8(value.0).expect("text")))
        .collect()
}

/// Panics unless `operator`'s leader-election Lease in `namespace` has a holder: the operator
/// took it under the RBAC it runs with.
pub async fn assert_lease_held(admin: &Client, namespace: &str, operator: &str) {
    let name = format!("{operator}-leader");
    let lease = Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(admin.clone(), namespace)
        .get(&name)
        .await
        .unwrap_or_else(|error| panic!("the operator's Lease {namespace}/{name}: {error}"));
    assert!(
        lease.spec.and_then(|spec| spec.holder_identity).is_some(),
        "nobody holds {namespace}/{name}"
    );
}

/// Asserts the API server refuses a resource named with `max + 1` characters, with a message
/// naming `metadata.name` and the limit, and accepts (then deletes) one of exactly `max`.
/// `named` builds a valid resource with the given name.
pub async fn assert_names_limited_to<K>(api: &Api<K>, max: usize, named: impl Fn(&str) -> K)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::Serialize + serde::de::DeserializeOwned,
{
    let name = |length: usize| format!("long-{}", "n".repeat(length - 5));
    let too_long = name(max + 1);
    match api
        .create(&kube::api::PostParams::default(), &named(&too_long))
        .await
    {
        Ok(_) => panic!("the API server accepted a {}-character name", max + 1),
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "{status:?}");
            assert!(
                status.message.contains("metadata.name") && status.message.contains(&max.to_string()),
                "{}",
                status.message
            );
        }
        Err(other) => panic!("unexpected error: {other}"),
    }
    let longest = name(max);
    api.create(&kube::api::PostParams::default(), &named(&longest))
        .await
        .unwrap_or_else(|error| panic!("a {max}-character name is refused: {error}"));
    api.delete(&longest, &kube::api::DeleteParams::default())
        .await
        .expect("delete the longest-named resource");
}

#[cfg(test)]
mod tests {
    use super::RequestLog;

    #[test]
    fn a_watchers_list_to_fill_its_cache_again_is_no_read_but_any_other_list_is() {
        let log = RequestLog::default();
        let clusters = "/apis/redis.quorum.dev/v1alpha1/namespaces/n/redisclusters";
        for target in [
            format!("{clusters}/cache"),
            format!("{clusters}?&limit=500"),
            "/api/v1/namespaces/n/pods?&labelSelector=app".to_string(),
            format!("{clusters}?&watch=true&resourceVersion=7"),
            "/api/v1/namespaces/n/pods?&limit=500".to_string(),
            "/api/v1/namespaces/n/pods/cache-0".to_string(),
            "/api/v1/namespaces/n/pods?&limit=500".to_string(),
        ] {
            log.0.lock().unwrap().push((http::Method::GET, target));
        }
        assert_eq!(
            log.reads()
                .into_iter()
                .map(|(_, target)| target)
                .collect::<Vec<_>>(),
            [
                format!("{clusters}/cache"),
                "/api/v1/namespaces/n/pods?&labelSelector=app".to_string(),
                // Followed by a read of the collection rather than its watch.
                "/api/v1/namespaces/n/pods?&limit=500".to_string(),
                "/api/v1/namespaces/n/pods/cache-0".to_string(),
            ]
        );
    }

    #[tokio::test]
    #[should_panic(expected = "no local control plane")]
    async fn a_missing_control_plane_fails_loudly() {
        super::admin_client_from(std::path::Path::new("/nonexistent/kubeconfig")).await;
    }
}
