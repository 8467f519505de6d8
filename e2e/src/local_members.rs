//! Local members: real database processes standing in for member pods.
//!
//! The local control plane has no container runtime: KWOK marks pods Running but nothing runs.
//! [`LocalMembers`] plays the kubelet's part for the StatefulSets an operator manages: for
//! every pod a StatefulSet asks for, it runs one real process on the loopback address the
//! operator's loopback resolver gives that member ([`quorum_core::naming::loopback_ip`]),
//! configured from the cluster's ConfigMap as the pod's environment would be. A pod deleted and
//! recreated (an upgrade, a wipe) has its process restarted; a volume claim that is replaced
//! takes the data directory with it. The demo and the full-stack tests use it.

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::Arc,
    time::Duration,
};

use k8s_openapi::api::{
    apps::v1::StatefulSet,
    core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret},
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use quorum_core::naming::loopback_ip;
use tokio::{
    process::{Child, Command},
    sync::Mutex,
    task::JoinHandle,
};

/// One member pod, as the launcher sees it.
pub struct MemberPod {
    pub namespace: String,
    pub cluster: String,
    pub ordinal: usize,
    /// The pod's name, which is the member's name.
    pub name: String,
    pub ip: Ipv4Addr,
    pub data_dir: PathBuf,
    /// The cluster's ConfigMap data, as `envFrom` would give it.
    pub config: BTreeMap<String, String>,
    /// Files of the pod's Secret volumes (`secret` and `projected` with Secret sources), keyed
    /// `<volume>/<path>`, as the kubelet would mount them.
    pub secret_files: BTreeMap<String, Vec<u8>>,
    pub pod: Pod,
}

/// How to run one engine's member process.
pub trait MemberLauncher: Send + Sync + 'static {
    /// `app.kubernetes.io/managed-by` of the StatefulSets to back.
    fn managed_by(&self) -> &str;
    /// The ConfigMap a cluster's members read their settings from.
    fn config_map(&self, cluster: &str) -> String;
    /// The command that runs the member.
    fn command(&self, member: &MemberPod) -> Command;

    /// A command to run to completion before the member starts, standing in for the pod's
    /// init containers; the member does not start unless it succeeds.
    fn prepare(&self, _member: &MemberPod) -> Option<Command> {
        None
    }
}

/// Expands `$(NAME)` references as the kubelet does in container arguments.
pub fn expand(text: &str, variables: &BTreeMap<String, String>) -> String {
    let mut expanded = text.to_string();
    for (name, value) in variables {
        expanded = expanded.replace(&format!("$({name})"), value);
    }
    expanded
}

/// Runs etcd members, choosing the binary by the pod's `etcd.quorum.dev/version` label, so a
/// rolling upgrade really changes the running version.
pub struct EtcdLauncher {
    /// Binaries by etcd version (`3.6.16` -> path).
    pub binaries: BTreeMap<String, PathBuf>,
    /// The operator binary and `etcdutl`, to run a pod's `restore` init container.
    pub restore_with: Option<(PathBuf, PathBuf)>,
}

impl EtcdLauncher {
    /// A launcher for the given binaries, without init containers.
    pub fn new(binaries: BTreeMap<String, PathBuf>) -> Self {
        Self {
            binaries,
            restore_with: None,
        }
    }

    fn member_environment(member: &MemberPod) -> BTreeMap<String, String> {
        let ip = member.ip;
        let mut environment = BTreeMap::from([
            ("POD_NAME".to_string(), member.name.clone()),
            ("ETCD_NAME".to_string(), member.name.clone()),
            ("ETCD_DATA_DIR".to_string(), member.data_dir.display().to_string()),
            ("ETCD_LISTEN_CLIENT_URLS".to_string(), format!("http://{ip}:2379")),
            (
                "ETCD_ADVERTISE_CLIENT_URLS".to_string(),
                format!("http://{ip}:2379"),
            ),
            ("ETCD_LISTEN_PEER_URLS".to_string(), format!("http://{ip}:2380")),
            (
                "ETCD_INITIAL_ADVERTISE_PEER_URLS".to_string(),
                format!("http://{ip}:2380"),
            ),
        ]);
        environment.extend(member.config.clone());
        environment
    }
}

impl MemberLauncher for EtcdLauncher {
    fn managed_by(&self) -> &str {
        "quorum-etcd-operator"
    }

    fn config_map(&self, cluster: &str) -> String {
        format!("{cluster}-config")
    }

    fn command(&self, member: &MemberPod) -> Command {
        let version = member
            .pod
            .labels()
            .get("etcd.quorum.dev/version")
            .cloned()
            .unwrap_or_default();
        let binary = self
            .binaries
            .get(&version)
            .or_else(|| self.binaries.values().next_back())
            .cloned()
            .unwrap_or_else(crate::tools::etcd_binary);
        let mut command = Command::new(binary);
        command
            .env_clear()
            .envs(Self::member_environment(member))
            .env_remove("POD_NAME")
            .env("ETCD_STRICT_RECONFIG_CHECK", "true")
            .env("ETCD_UNSAFE_NO_FSYNC", "true")
            // etcd's own defaults, as the pods run: a killed leader is replaced after one to two
            // seconds, time enough on a loaded machine for the pass its broken watch wakes to see
            // the loss before the new leader.
            .env("ETCD_HEARTBEAT_INTERVAL", "100")
            .env("ETCD_ELECTION_TIMEOUT", "1000")
            .env("ETCD_LOG_LEVEL", "warn");
        command
    }

    /// The pod's `restore` init container, run with the operator binary: its arguments with
    /// `$(VAR)` expanded from the member's environment, the data directory mapped to the local
    /// one, and the local `etcdutl`.
    fn prepare(&self, member: &MemberPod) -> Option<Command> {
        let (operator, etcdutl) = self.restore_with.as_ref()?;
        let init = member
            .pod
            .spec
            .as_ref()?
            .init_containers
            .as_ref()?
            .iter()
            .find(|c| c.name == "restore")?;
        let environment = Self::member_environment(member);
        let mut command = Command::new(operator);
        for argument in init.args.clone().unwrap_or_default() {
            if argument.starts_with("--data-dir=") {
                command.arg(format!("--data-dir={}", member.data_dir.display()));
            } else {
                command.arg(expand(&argument, &environment));
            }
        }
        command.arg(format!("--etcdutl={}", etcdutl.display()));
        command.env_clear();
        Some(command)
    }
}

struct Running {
    child: Child,
    pod_uid: String,
}

/// The running stand-in. Dropping it stops every process it started and, when it created the
/// state directory itself under the system's temporary directory (as tests do), removes it,
/// unless the test is failing: then the data and logs stay for a human to read. A directory
/// that existed before, or one named elsewhere (the demos' `--state`), is left alone.
pub struct LocalMembers {
    task: JoinHandle<()>,
    processes: Arc<Mutex<BTreeMap<(String, String), Running>>>,
    state: PathBuf,
    remove_state: bool,
}

impl LocalMembers {
    /// Starts backing the launcher's StatefulSets in `namespace` (every namespace when
    /// `None`), keeping member data under `state`.
    pub fn start(
        client: Client,
        launcher: impl MemberLauncher,
        state: PathBuf,
        namespace: Option<String>,
    ) -> Self {
        let remove_state = !state.exists() && state.starts_with(std::env::temp_dir());
        let processes: Arc<Mutex<BTreeMap<(String, String), Running>>> = Arc::default();
        let task = {
            let processes = processes.clone();
            let state = state.clone();
            tokio::spawn(async move {
                loop {
                    if let Err(error) =
                        pass(&client, &launcher, &state, namespace.as_deref(), &processes).await
                    {
                        tracing::warn!(%error, "local members pass failed");
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            })
        };
        Self {
            task,
            processes,
            state,
            remove_state,
        }
    }

    /// Names (`namespace/pod`) of the members running now.
    pub async fn running(&self) -> BTreeSet<String> {
        let mut processes = self.processes.lock().await;
        processes
            .iter_mut()
            .filter_map(|(key, running)| matches!(running.child.try_wait(), Ok(None)).then_some(key))
            .map(|(ns, name)| format!("{ns}/{name}"))
            .collect()
    }

    /// Kills one member's process, as a crashed node would stop it; it is not restarted
    /// until its pod is replaced.
    pub async fn kill(&self, namespace: &str, name: &str) {
        if let Some(running) = self
            .processes
            .lock()
            .await
            .get_mut(&(namespace.to_string(), name.to_string()))
        {
            let _ = running.child.kill().await;
        }
    }

    /// Where the member logs are.
    pub fn state_dir(&self) -> &Path {
        &self.state
    }
}

impl Drop for LocalMembers {
    fn drop(&mut self) {
        self.task.abort();
        if let Ok(mut processes) = self.processes.try_lock() {
            for running in processes.values_mut() {
                let _ = running.child.start_kill();
            }
        }
        if self.remove_state && !std::thread::panicking() {
            remove_state(&self.state);
        }
    }
}

/// A killed server may still create a file while the tree is being removed, so a removal
/// that failed is tried again a few times.
fn remove_state(state: &Path) {
    for _ in 0..5 {
        match std::fs::remove_dir_all(state) {
            Ok(()) => return,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(Duration::from_millis(100)),
        }
    }
    tracing::warn!(state = %state.display(), "local members' data left behind");
}

async fn pass(
    client: &Client,
    launcher: &impl MemberLauncher,
    state: &Path,
    namespace: Option<&str>,
    processes: &Mutex<BTreeMap<(String, String), Running>>,
) -> Result<(), kube::Error> {
    let managed =
        ListParams::default().labels(&format!("app.kubernetes.io/managed-by={}", launcher.managed_by()));
    let mut wanted = BTreeSet::new();
    let statefulsets: Api<StatefulSet> = match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    };
    for statefulset in statefulsets.list(&managed).await? {
        let namespace = statefulset.namespace().unwrap_or_default();
        let cluster = statefulset.name_any();
        let configs: Api<ConfigMap> = Api::namespaced(client.clone(), &namespace);
        // The ConfigMap the pods mount as `config` (several StatefulSets may share one), else the
        // one the launcher names after the StatefulSet.
        let config_map = statefulset
            .spec
            .as_ref()
            .and_then(|spec| spec.template.spec.as_ref()?.volumes.as_ref())
            .and_then(|volumes| volumes.iter().find(|volume| volume.name == "config"))
            .and_then(|volume| volume.config_map.as_ref())
            .map_or_else(|| launcher.config_map(&cluster), |source| source.name.clone());
        let Some(config) = configs.get_opt(&config_map).await? else {
            continue;
        };
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &namespace);
        let replicas = statefulset.spec.and_then(|s| s.replicas).unwrap_or(0).max(0) as usize;
        for ordinal in 0..replicas {
            let name = format!("{cluster}-{ordinal}");
            let Some(pod) = pods.get_opt(&name).await? else {
                continue;
            };
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let key = (namespace.clone(), name.clone());
            wanted.insert(key.clone());
            let pod_uid = pod.uid().unwrap_or_default();
            let mut processes = processes.lock().await;
            if processes.get(&key).is_some_and(|r| r.pod_uid == pod_uid) {
                // Same pod: a process that died stays dead, as a crashed container would
                // until its pod is replaced.
                continue;
            }
            if let Some(mut old) = processes.remove(&key) {
                let _ = old.child.kill().await;
            }
            let directory = state.join(&namespace);
            let _ = std::fs::create_dir_all(&directory);
            let data_dir = directory.join(&name);
            // A new claim is a new, empty volume.
            let claim_uid = claims
                .get_opt(&format!("data-{name}"))
                .await?
                .and_then(|c| c.uid())
                .unwrap_or_default();
            let marker = directory.join(format!("{name}.claim"));
            if std::fs::read_to_string(&marker).ok().as_deref() != Some(claim_uid.as_str()) {
                let _ = std::fs::remove_dir_all(&data_dir);
                let _ = std::fs::write(&marker, &claim_uid);
            }
            let secret_files = secret_files(client, &namespace, &pod).await?;
            let member = MemberPod {
                secret_files,
                ip: loopback_ip(&namespace, &cluster, ordinal),
                namespace: namespace.clone(),
                cluster: cluster.clone(),
                ordinal,
                name: name.clone(),
                data_dir,
                config: config.data.clone().unwrap_or_default(),
                pod,
            };
            if let Some(mut prepare) = launcher.prepare(&member) {
                let init_log = match std::fs::File::create(directory.join(format!("{name}.init.log"))) {
                    Ok(log) => Stdio::from(log),
                    Err(_) => Stdio::null(),
                };
                let succeeded = prepare
                    .stdout(Stdio::null())
                    .stderr(init_log)
                    .status()
                    .await
                    .is_ok_and(|status| status.success());
                if !succeeded {
                    // As a failing init container would, keep the member from starting.
                    tracing::warn!(member = %name, "init step failed; see its .init.log");
                    continue;
                }
            }
            let log = match std::fs::File::create(directory.join(format!("{name}.log"))) {
                Ok(log) => Stdio::from(log),
                Err(_) => Stdio::null(),
            };
            let mut command = launcher.command(&member);
            command.stdout(Stdio::null()).stderr(log).kill_on_drop(true);
            match command.spawn() {
                Ok(child) => {
                    tracing::info!(member = %format!("{namespace}/{name}"), ip = %member.ip, "started local member");
                    processes.insert(key, Running { child, pod_uid });
                }
                Err(error) => tracing::warn!(%error, member = %name, "could not start local member"),
            }
        }
    }
    let mut processes = processes.lock().await;
    let gone: Vec<_> = processes
        .keys()
        .filter(|k| !wanted.contains(*k))
        .cloned()
        .collect();
    for key in gone {
        if let Some(mut running) = processes.remove(&key) {
            let _ = running.child.kill().await;
            tracing::info!(member = %format!("{}/{}", key.0, key.1), "stopped local member");
        }
    }
    Ok(())
}

/// The files a pod's Secret volumes would hold, keyed `<volume>/<path>`. A missing Secret gives
/// no files (the kubelet would keep the pod waiting; the launcher's script then fails).
async fn secret_files(
    client: &Client,
    namespace: &str,
    pod: &Pod,
) -> Result<BTreeMap<String, Vec<u8>>, kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut files = BTreeMap::new();
    let volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.clone())
        .unwrap_or_default();
    for volume in volumes {
        let mut sources = Vec::new();
        if let Some(secret) = &volume.secret {
            sources.push((
                secret.secret_name.clone().unwrap_or_default(),
                secret.items.clone(),
            ));
        }
        if let Some(projected) = &volume.projected {
            for source in projected.sources.iter().flatten() {
                if let Some(secret) = &source.secret {
                    sources.push((secret.name.clone(), secret.items.clone()));
                }
            }
        }
        for (secret_name, items) in sources {
            let Some(secret) = secrets.get_opt(&secret_name).await? else {
                continue;
            };
            let data = secret.data.unwrap_or_default();
            let paths: Vec<(String, String)> = match items {
                Some(items) => items.into_iter().map(|item| (item.key, item.path)).collect(),
                None => data.keys().map(|key| (key.clone(), key.clone())).collect(),
            };
            for (key, path) in paths {
                if let Some(value) = data.get(&key) {
                    files.insert(format!("{}/{path}", volume.name), value.0.clone());
                }
            }
        }
    }
    Ok(files)
}

/// Runs MySQL-operator members with MariaDB from Debian's packages, through the very `start.sh`
/// the member pods run (from the cluster's ConfigMap), with the pod's paths replaced by
/// directories next to the member's data.
pub struct MariaDbLauncher;

impl MemberLauncher for MariaDbLauncher {
    fn managed_by(&self) -> &str {
        "quorum-mysql-operator"
    }

    fn config_map(&self, cluster: &str) -> String {
        format!("{cluster}-config")
    }

    fn command(&self, member: &MemberPod) -> Command {
        let mut command = PodDirectories::prepare(member).start_command(member);
        command
            .env("REPORT_HOST", member.ip.to_string())
            .env("MYSQLD", "mariadbd")
            // The test machine runs as root, which mariadbd refuses unless told.
            .env("MYSQLD_ARGS", "--user=root")
            .env("INSTALL_DB_ARGS", "--user=root");
        command
    }
}

/// The directories a pod's volumes would give its container, next to the member's data: the
/// ConfigMap's files in `config/`, the Secret volume `credentials` in `credentials/`, and
/// empty `run/` and `tmp/` directories.
struct PodDirectories {
    config: PathBuf,
    credentials: PathBuf,
    run: PathBuf,
    tmp: PathBuf,
}

impl PodDirectories {
    fn prepare(member: &MemberPod) -> Self {
        let root = member.data_dir.with_extension("pod");
        let directories = Self {
            config: root.join("config"),
            credentials: root.join("credentials"),
            run: root.join("run"),
            // A pod has a /tmp of its own; sharing the machine's would let one member's
            // temporary files meet another's.
            tmp: root.join("tmp"),
        };
        for directory in [
            &directories.config,
            &directories.credentials,
            &directories.run,
            &directories.tmp,
            &member.data_dir,
        ] {
            let _ = std::fs::create_dir_all(directory);
        }
        for (name, content) in &member.config {
            let _ = std::fs::write(directories.config.join(name), content);
        }
        for (path, content) in &member.secret_files {
            if let Some(file) = path.strip_prefix("credentials/") {
                let _ = std::fs::write(directories.credentials.join(file), content);
            }
        }
        directories
    }

    /// `sh start.sh` from the ConfigMap with the pod's paths replaced by these directories.
    fn start_command(&self, member: &MemberPod) -> Command {
        let mut command = Command::new("sh");
        command
            .arg(self.config.join("start.sh"))
            .env("CONFIG_DIR", &self.config)
            .env("CREDENTIALS_DIR", &self.credentials)
            .env("DATA_DIR", &member.data_dir)
            .env("RUN_DIR", &self.run)
            .env("TMPDIR", &self.tmp)
            .env("POD_NAME", &member.name)
            .env("POD_IP", member.ip.to_string())
            .env("POD_INDEX", member.ordinal.to_string());
        command
    }
}

/// Runs Redis-operator pods, data nodes and Sentinels alike, with `redis-server` from Debian's
/// packages, through the very `start.sh` the pods run (from the ConfigMap their `config` volume
/// names; every shard's StatefulSet shares the data nodes' one). A data pod's `restore` init container is run too (see
/// [`RedisLauncher::prepare`]).
pub struct RedisLauncher;

impl MemberLauncher for RedisLauncher {
    fn managed_by(&self) -> &str {
        "quorum-redis-operator"
    }

    fn config_map(&self, statefulset: &str) -> String {
        format!("{statefulset}-config")
    }

    fn command(&self, member: &MemberPod) -> Command {
        let directories = PodDirectories::prepare(member);
        let mut command = directories.start_command(member);
        command.env("REDIS_SERVER", "redis-server");
        command
    }

    /// The pod's `restore` init container. Nothing pulls images here, so its image must name
    /// an executable on this machine (the operator binary a test configures as the operator
    /// image); it runs with the container's arguments, `$(POD_NAME)` expanded and the data
    /// directory mapped to the member's. Any other image fails the step, as an image that
    /// cannot be run would keep the pod from starting.
    fn prepare(&self, member: &MemberPod) -> Option<Command> {
        let init = member
            .pod
            .spec
            .as_ref()?
            .init_containers
            .as_ref()?
            .iter()
            .find(|c| c.name == "restore")?;
        let image = init.image.clone().unwrap_or_default();
        let program = Path::new(&image);
        if !program.is_absolute() || !program.is_file() {
            let mut command = Command::new("sh");
            command.args([
                "-c",
                "echo \"the local launcher cannot run image $0: it is no executable on this machine\" >&2; exit 1",
                &image,
            ]);
            return Some(command);
        }
        let environment = BTreeMap::from([("POD_NAME".to_string(), member.name.clone())]);
        let mut command = Command::new(program);
        for argument in init.args.clone().unwrap_or_default() {
            if argument.starts_with("--data-dir=") {
                command.arg(format!("--data-dir={}", member.data_dir.display()));
            } else {
                command.arg(expand(&argument, &environment));
            }
        }
        command.env_clear();
        Some(command)
    }
}

/// Runs MongoDB-operator pods, data members (`<cluster>`) and arbiters (`<cluster>-arbiter`)
/// alike, with the replica-set simulator (`mongo-sim`), or with the real `mongod` that
/// `QUORUM_MONGOD` names ([`crate::mongo::member_command`]). The set's name comes from the
/// StatefulSet's ConfigMap (`REPLICA_SET_NAME`), the simulated release from the pod's
/// `mongodb.quorum.dev/version` label, else the ConfigMap's `MONGODB_VERSION`, so a rolling
/// upgrade really changes what runs. The root user comes from the `admin-credentials` volume
/// and the key file from the `keyfile` volume, copied into a file only the member may read.
/// A simulated member keeps as many oplog entries as the pod's [`SIM_OPLOG_ENTRIES`]
/// annotation says (a test sets it through `spec.podTemplate`), standing in for a server whose
/// `--oplogSize` is small enough for a test to roll its oplog over.
pub struct MongoLauncher;

/// The pod annotation giving how many oplog entries a simulated member keeps.
pub const SIM_OPLOG_ENTRIES: &str = "mongo-sim.quorum.dev/oplog-entries";

impl MongoLauncher {
    fn credentials(member: &MemberPod) -> Option<crate::mongo::Credentials> {
        let file = |name: &str| {
            member
                .secret_files
                .get(&format!("admin-credentials/{name}"))
                .map(|bytes| String::from_utf8_lossy(bytes).trim().to_string())
        };
        Some(crate::mongo::Credentials {
            username: file("username")?,
            password: file("password")?,
        })
    }
}

impl MemberLauncher for MongoLauncher {
    fn managed_by(&self) -> &str {
        "quorum-mongodb-operator"
    }

    fn config_map(&self, statefulset: &str) -> String {
        format!("{statefulset}-config")
    }

    fn command(&self, member: &MemberPod) -> Command {
        let directories = PodDirectories::prepare(member);
        let root = directories
            .config
            .parent()
            .unwrap_or(&directories.config)
            .to_path_buf();
        let key_file = member.secret_files.get("keyfile/keyfile").and_then(|key| {
            let path = root.join("keyfile").join("keyfile");
            crate::mongo::write_private_file(&path, key).ok().map(|_| path)
        });
        let version = member
            .pod
            .labels()
            .get("mongodb.quorum.dev/version")
            .or_else(|| member.config.get("MONGODB_VERSION"))
            .cloned();
        let set_name = member.config.get("REPLICA_SET_NAME").cloned().unwrap_or_default();
        let credentials = Self::credentials(member);
        let mut command = crate::mongo::member_command(&crate::mongo::MemberSpec {
            set_name: &set_name,
            ip: member.ip,
            dbpath: &member.data_dir,
            key_file: key_file.as_deref(),
            version: version.as_deref(),
            credentials: credentials.as_ref(),
            oplog_entries: member
                .pod
                .annotations()
                .get(SIM_OPLOG_ENTRIES)
                .and_then(|entries| entries.parse().ok()),
        });
        command.env("TMPDIR", &directories.tmp);
        command
    }

    /// For a real `mongod`, the root user is created on an empty dbpath first, as the official
    /// image's entrypoint does ([`crate::mongo::bootstrap_root_user`], run through
    /// `mongo-sim init-root-user`). The simulator needs no such step.
    fn prepare(&self, member: &MemberPod) -> Option<Command> {
        let mongod = crate::mongo::real_mongod()?;
        let credentials = Self::credentials(member).unwrap_or(crate::mongo::Credentials {
            username: String::new(),
            password: String::new(),
        });
        let mut command = Command::new(crate::mongo::binary());
        command
            .arg("init-root-user")
            .arg("--mongod")
            .arg(mongod)
            .arg("--bind_ip")
            .arg(member.ip.to_string())
            .arg("--dbpath")
            .arg(&member.data_dir)
            .env("MONGO_INITDB_ROOT_USERNAME", credentials.username)
            .env("MONGO_INITDB_ROOT_PASSWORD", credentials.password);
        Some(command)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn dropping_the_stand_in_removes_its_members_data() {
        let state = std::env::temp_dir().join(format!("quorum-local-members-drop-{}", std::process::id()));
        quorum_core::install_crypto_provider();
        // No API server answers here: the stand-in's passes fail, which is beside the point.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let members = LocalMembers::start(client.clone(), MariaDbLauncher, state.clone(), Some("ns".into()));
        // What a member's server writes while the stand-in runs.
        std::fs::create_dir_all(state.join("ns").join("main-0")).unwrap();
        std::fs::write(state.join("ns").join("main-0").join("db"), b"data").unwrap();
        drop(members);
        assert!(!state.exists(), "{} is left behind", state.display());

        // A directory that was there before is someone else's: kept.
        let theirs = std::env::temp_dir().join(format!("quorum-local-members-theirs-{}", std::process::id()));
        std::fs::create_dir_all(&theirs).unwrap();
        std::fs::write(theirs.join("notes"), b"keep").unwrap();
        drop(LocalMembers::start(
            client,
            MariaDbLauncher,
            theirs.clone(),
            Some("ns".into()),
        ));
        assert!(
            theirs.join("notes").exists(),
            "a directory the stand-in did not create was removed"
        );
        std::fs::remove_dir_all(&theirs).unwrap();
    }
}
