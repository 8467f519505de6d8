//! Real etcd processes on distinct loopback addresses, for testing the etcd admin layer.
//!
//! Each member listens on its own `127.X.Y.Z` address (client port 2379, peer port 2380), as
//! pods would on their own IPs. Members talk to each other directly; tests may put a
//! [`crate::fault_proxy::FaultProxy`] between the operator and a member's client port.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::PathBuf,
    process::Stdio,
    time::Duration,
};

use tokio::process::{Child, Command};

/// One etcd member process.
pub struct EtcdProcess {
    pub name: String,
    pub ip: Ipv4Addr,
    pub data_dir: PathBuf,
    child: Option<Child>,
}

impl EtcdProcess {
    pub fn client_address(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.ip), 2379)
    }

    pub fn client_url(&self) -> String {
        format!("http://{}", self.client_address())
    }

    pub fn peer_url(&self) -> String {
        format!("http://{}:2380", self.ip)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// Kills the process (SIGKILL), as a crashed node would stop.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

/// A set of etcd processes in one scratch directory, on one `127.X.Y.0/24` block.
pub struct EtcdProcesses {
    pub dir: PathBuf,
    block: [u8; 3],
    pub members: Vec<EtcdProcess>,
}

impl EtcdProcesses {
    /// A fresh block of loopback addresses and a scratch directory; no process yet.
    pub fn new() -> Self {
        let block = [127, rand::random_range(1..=250), rand::random_range(1..=250)];
        let dir = std::env::temp_dir().join(format!(
            "quorum-etcd-{}-{}-{}",
            block[1],
            block[2],
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Self {
            dir,
            block,
            members: Vec::new(),
        }
    }

    /// The loopback address of member number `index`.
    pub fn ip(&self, index: usize) -> Ipv4Addr {
        Ipv4Addr::new(self.block[0], self.block[1], self.block[2], index as u8 + 1)
    }

    pub fn peer_url(&self, index: usize) -> String {
        format!("http://{}:2380", self.ip(index))
    }

    /// Starts `count` members `m-0..m-{count-1}` as a new cluster and waits until all answer.
    pub async fn start_cluster(count: usize) -> Self {
        Self::start_named("m", count).await
    }

    /// Starts `count` members named `<prefix>-<index>` (as a StatefulSet names its pods) as a
    /// new cluster and waits until all answer.
    pub async fn start_named(prefix: &str, count: usize) -> Self {
        let mut processes = Self::new();
        let initial: Vec<String> = (0..count)
            .map(|i| format!("{prefix}-{i}={}", processes.peer_url(i)))
            .collect();
        for index in 0..count {
            processes
                .spawn(&format!("{prefix}-{index}"), index, &initial.join(","), "new")
                .await;
        }
        for index in 0..count {
            processes.wait_healthy(index).await;
        }
        processes
    }

    /// Starts member `name` at address `index` joining an existing cluster whose membership
    /// (after the member was added through the admin API) is `initial_cluster`.
    pub async fn join(&mut self, name: &str, index: usize, initial_cluster: &str) {
        self.spawn(name, index, initial_cluster, "existing").await;
        self.wait_healthy(self.members.len() - 1).await;
    }

    /// Starts a process; `state` is `new` or `existing`.
    pub async fn spawn(&mut self, name: &str, index: usize, initial_cluster: &str, state: &str) {
        self.spawn_process(name, index, initial_cluster, state, None);
    }

    /// Starts a member process, its client port on `https://` with client certificates
    /// required when `tls` is given (peers stay plain HTTP).
    fn spawn_process(
        &mut self,
        name: &str,
        index: usize,
        initial_cluster: &str,
        state: &str,
        tls: Option<&TlsFiles>,
    ) {
        let ip = self.ip(index);
        let data_dir = self.dir.join(name);
        let log = std::fs::File::create(self.dir.join(format!("{name}.log"))).expect("log file");
        let path = |file: &PathBuf| file.to_str().expect("utf-8 path").to_string();
        let client_scheme = if tls.is_some() { "https" } else { "http" };
        let mut args: Vec<String> = [
            "--name",
            name,
            "--data-dir",
            &path(&data_dir),
            "--listen-client-urls",
            &format!("{client_scheme}://{ip}:2379"),
            "--advertise-client-urls",
            &format!("{client_scheme}://{ip}:2379"),
            "--listen-peer-urls",
            &format!("http://{ip}:2380"),
            "--initial-advertise-peer-urls",
            &format!("http://{ip}:2380"),
            "--initial-cluster",
            initial_cluster,
            "--initial-cluster-state",
            state,
            "--initial-cluster-token",
            &self.cluster_token(),
            "--unsafe-no-fsync",
            "--heartbeat-interval",
            "50",
            "--election-timeout",
            "500",
            "--log-level",
            "warn",
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        if let Some(tls) = tls {
            args.extend([
                "--cert-file".to_string(),
                path(&tls.cert),
                "--key-file".to_string(),
                path(&tls.key),
                "--trusted-ca-file".to_string(),
                path(&tls.ca),
                "--client-cert-auth".to_string(),
            ]);
        }
        let child = Command::new(crate::tools::etcd_binary())
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .expect("start etcd");
        let process = EtcdProcess {
            name: name.to_string(),
            ip,
            data_dir,
            child: Some(child),
        };
        match self.members.iter().position(|m| m.name == name) {
            Some(existing) => self.members[existing] = process,
            None => self.members.push(process),
        }
    }

    /// Waits until the member at position `position` in `members` answers `/health`.
    pub async fn wait_healthy(&self, position: usize) {
        let url = format!("{}/health", self.members[position].client_url());
        self.wait_for_health(position, &url, reqwest::Client::new()).await;
    }

    /// Polls `url` with `client` until the member reports itself healthy; fails with its log.
    async fn wait_for_health(&self, position: usize, url: &str, client: reqwest::Client) {
        let member = &self.members[position];
        let log = self.dir.join(format!("{}.log", member.name));
        crate::wait::until(
            &format!("etcd {} healthy", member.name),
            Duration::from_secs(30),
            || async {
                let answer = client.get(url).send().await.map_err(|e| format!("{e:?}"))?;
                let body = answer.text().await.map_err(|e| e.to_string())?;
                if body.contains("\"health\":\"true\"") {
                    Ok(())
                } else {
                    Err(format!(
                        "{body}; log: {}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    ))
                }
            },
        )
        .await;
    }

    pub fn member(&mut self, name: &str) -> &mut EtcdProcess {
        self.members
            .iter_mut()
            .find(|m| m.name == name)
            .unwrap_or_else(|| panic!("no member {name}"))
    }

    /// Client URLs of every running member.
    pub fn client_urls(&self) -> Vec<String> {
        self.members.iter().map(EtcdProcess::client_url).collect()
    }
}

/// Restoring from a snapshot: new members start on data directories prepared beforehand.
impl EtcdProcesses {
    /// The data directory [`EtcdProcesses::spawn`] gives member `name`. A directory placed here
    /// before the member starts (for example by `etcdutl snapshot restore`) is used as is: etcd
    /// then ignores the initial-cluster flags and takes the membership from the data.
    pub fn data_dir(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The `--initial-cluster-token` every member of this set starts with.
    pub fn cluster_token(&self) -> String {
        format!("quorum-test-{}-{}", self.block[1], self.block[2])
    }
}

/// The files of members that serve clients over TLS with client-certificate authentication:
/// the CA that signed the certificates, and the certificate and key each member serves with
/// (and accepts, signed by the same CA, from its clients). The certificate must name every
/// member's address ([`EtcdProcesses::ip`]) and allow both server and client authentication.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    pub ca: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl EtcdProcess {
    /// The client URL of a member started with client TLS.
    pub fn https_client_url(&self) -> String {
        format!("https://{}", self.client_address())
    }
}

/// Members that serve clients on `https://` (`--client-cert-auth`); peers stay on plain HTTP.
impl EtcdProcesses {
    /// Starts `count` members named `<prefix>-<index>` as a new cluster on this set's
    /// addresses, serving clients over TLS with `tls`, and waits until all answer. The set is
    /// made with [`EtcdProcesses::new`] first, so the certificate can name its addresses.
    pub async fn start_named_with_client_tls(&mut self, prefix: &str, count: usize, tls: &TlsFiles) {
        let initial: Vec<String> = (0..count)
            .map(|i| format!("{prefix}-{i}={}", self.peer_url(i)))
            .collect();
        for index in 0..count {
            self.spawn_with_client_tls(
                &format!("{prefix}-{index}"),
                index,
                &initial.join(","),
                "new",
                tls,
            )
            .await;
        }
        for index in 0..count {
            self.wait_healthy_with_client_tls(index, tls).await;
        }
    }

    /// As [`EtcdProcesses::spawn`], with the client port on `https://` and client certificates
    /// required.
    pub async fn spawn_with_client_tls(
        &mut self,
        name: &str,
        index: usize,
        initial_cluster: &str,
        state: &str,
        tls: &TlsFiles,
    ) {
        self.spawn_process(name, index, initial_cluster, state, Some(tls));
    }

    /// Waits until the member at position `position` answers `/health` over TLS, presenting
    /// the certificate in `tls` as its client.
    pub async fn wait_healthy_with_client_tls(&self, position: usize, tls: &TlsFiles) {
        let url = format!("{}/health", self.members[position].https_client_url());
        let read = |file: &PathBuf| std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let mut identity = read(&tls.cert);
        identity.push(b'\n');
        identity.extend(read(&tls.key));
        let client = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&read(&tls.ca)).expect("CA certificate"))
            .identity(reqwest::Identity::from_pem(&identity).expect("client certificate and key"))
            .timeout(Duration::from_secs(2))
            .build()
            .expect("TLS client");
        self.wait_for_health(position, &url, client).await;
    }
}

impl Default for EtcdProcesses {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for EtcdProcesses {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(child) = member.child.as_mut() {
                let _ = child.start_kill();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
