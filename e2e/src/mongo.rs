//! MongoDB replica-set members on distinct loopback addresses, for testing the MongoDB admin
//! layer.
//!
//! Members run the replica-set **simulator** (`mongo-sim`, see [`crate::mongo_sim`]) by
//! default: MongoDB's server cannot be installed on the test machines. When `QUORUM_MONGOD`
//! names a real `mongod` binary, that runs instead with the same arguments (`--replSet
//! --bind_ip --port --dbpath --keyFile --setParameter enableTestCommands=1`), its root user
//! created as the official image's entrypoint does it ([`bootstrap_root_user`]).
//!
//! Each member `m-<i>` listens on its own `127.A.B.(i+1):27017`, as pods would on their own
//! IPs, with its own dbpath, one shared key file (mode 0600) and the root user given to
//! [`MongoProcesses::start`]. Members start without a replica-set configuration: tests
//! initiate them. Processes are killed when the set is dropped.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::Stdio,
    sync::OnceLock,
    time::{Duration, SystemTime},
};

use bson::doc;
use mongodb::{
    Client,
    options::{ClientOptions, Credential, ServerAddress},
};
use tokio::process::{Child, Command};

/// The port every member listens on, on its own address.
pub const PORT: u16 = 27017;

/// The environment variable naming a real `mongod` to run instead of the simulator.
pub const REAL_MONGOD: &str = "QUORUM_MONGOD";

/// The root user every member is created with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

/// A real `mongod` to run instead of the simulator, from `QUORUM_MONGOD`.
pub fn real_mongod() -> Option<PathBuf> {
    std::env::var_os(REAL_MONGOD)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The `mongo-sim` binary, built from this workspace.
///
/// Integration tests of `quorum-e2e` get it built by cargo; tests of other crates do not, so
/// when the binary next to the running executable's target directory is missing or older than
/// the simulator's sources, this runs `cargo build -p quorum-e2e --bin mongo-sim` into that same
/// target directory first (once per process). `QUORUM_MONGO_SIM` overrides the lookup.
///
/// # Panics
/// When the binary cannot be found or built.
pub fn binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("QUORUM_MONGO_SIM").filter(|v| !v.is_empty()) {
                return PathBuf::from(path);
            }
            let executable = std::env::current_exe().expect("the running executable's path");
            let mut profile_dir = executable.parent().expect("a directory").to_path_buf();
            if profile_dir
                .file_name()
                .is_some_and(|n| n == "deps" || n == "examples")
            {
                profile_dir.pop();
            }
            let candidate = profile_dir.join("mongo-sim");
            if is_fresh(&candidate) {
                return candidate;
            }
            build_simulator(&profile_dir);
            assert!(
                candidate.exists(),
                "{} is missing after building it: run `cargo build -p quorum-e2e --bin mongo-sim`",
                candidate.display()
            );
            candidate
        })
        .clone()
}

fn newest_source(directory: &Path) -> SystemTime {
    let mut newest = SystemTime::UNIX_EPOCH;
    let Ok(entries) = std::fs::read_dir(directory) else {
        return newest;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let modified = if path.is_dir() {
            newest_source(&path)
        } else {
            entry
                .metadata()
                .and_then(|m| m.modified())
                .unwrap_or(SystemTime::UNIX_EPOCH)
        };
        newest = newest.max(modified);
    }
    newest
}

/// Whether `binary` exists and is newer than every source it is built from.
fn is_fresh(binary: &Path) -> bool {
    let Ok(built) = binary.metadata().and_then(|m| m.modified()) else {
        return false;
    };
    let crate_dir = crate::tools::repository_root().join("e2e");
    let sources = newest_source(&crate_dir.join("src")).max(
        crate_dir
            .join("Cargo.toml")
            .metadata()
            .and_then(|m| m.modified())
            .unwrap_or(SystemTime::UNIX_EPOCH),
    );
    built >= sources
}

fn build_simulator(profile_dir: &Path) {
    let target_dir = profile_dir.parent().expect("a target directory");
    let profile = profile_dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("debug")
        .to_string();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = crate::tools::repository_root().join("Cargo.toml");
    let mut command = std::process::Command::new(cargo);
    command
        .args([
            "build",
            "--quiet",
            "-p",
            "quorum-e2e",
            "--bin",
            "mongo-sim",
            "--manifest-path",
        ])
        .arg(&manifest)
        .env("CARGO_TARGET_DIR", target_dir);
    match profile.as_str() {
        "debug" => {}
        "release" => {
            command.arg("--release");
        }
        other => {
            command.args(["--profile", other]);
        }
    }
    let status = command
        .status()
        .unwrap_or_else(|error| panic!("cannot run cargo to build mongo-sim: {error}"));
    assert!(status.success(), "building mongo-sim failed: {status}");
}

/// What one member runs with.
pub struct MemberSpec<'a> {
    pub set_name: &'a str,
    pub ip: Ipv4Addr,
    pub dbpath: &'a Path,
    pub key_file: Option<&'a Path>,
    /// The simulated release (`7.0`); a real `mongod` is what it is.
    pub version: Option<&'a str>,
    pub credentials: Option<&'a Credentials>,
    /// Oplog entries the simulator keeps, when not its default; a real `mongod` sizes its own.
    pub oplog_entries: Option<usize>,
}

/// The command that runs a member: the simulator, or the real `mongod` of `QUORUM_MONGOD`
/// (whose root user [`bootstrap_root_user`] must have created first).
pub fn member_command(spec: &MemberSpec<'_>) -> Command {
    let real = real_mongod();
    let mut command = Command::new(real.clone().unwrap_or_else(binary));
    command
        .arg("--replSet")
        .arg(spec.set_name)
        .arg("--bind_ip")
        .arg(spec.ip.to_string())
        .arg("--port")
        .arg(PORT.to_string())
        .arg("--dbpath")
        .arg(spec.dbpath);
    if let Some(key_file) = spec.key_file {
        command.arg("--keyFile").arg(key_file);
    }
    // The fewest PBKDF2 rounds the server allows: every client derives the salted password
    // too, and the tests' clients are debug builds.
    command.args([
        "--setParameter",
        "enableTestCommands=1",
        "--setParameter",
        "scramSHA256IterationCount=5000",
    ]);
    if real.is_none() {
        if let Some(version) = spec.version {
            command.args(["--sim-version", version]);
        }
        if let Some(entries) = spec.oplog_entries {
            command.arg("--sim-oplog-entries").arg(entries.to_string());
        }
        // The simulator creates the root user on an empty dbpath, as the image's entrypoint.
        if let Some(credentials) = spec.credentials {
            command
                .env("MONGO_INITDB_ROOT_USERNAME", &credentials.username)
                .env("MONGO_INITDB_ROOT_PASSWORD", &credentials.password);
        }
    }
    command
}

/// Writes a file only its owner may read, as `mongod` requires of a key file.
pub fn write_private_file(path: &Path, contents: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let _ = std::fs::remove_file(path);
    std::fs::write(path, contents)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
}

/// A client of one member, without credentials, for waiting until it answers.
async fn anonymous_client(address: SocketAddr) -> Result<Client, String> {
    let options = ClientOptions::builder()
        .hosts(vec![ServerAddress::Tcp {
            host: address.ip().to_string(),
            port: Some(address.port()),
        }])
        .direct_connection(true)
        .connect_timeout(Duration::from_secs(2))
        .server_selection_timeout(Duration::from_secs(2))
        .build();
    Client::with_options(options).map_err(|e| e.to_string())
}

/// Polls `address` with `ping` until it answers.
pub async fn wait_until_answering(address: SocketAddr, timeout: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    let client = anonymous_client(address).await?;
    loop {
        let answer = client.database("admin").run_command(doc! { "ping": 1 }).await;
        match answer {
            Ok(_) => return Ok(()),
            Err(error) if tokio::time::Instant::now() >= deadline => {
                return Err(format!(
                    "{address} did not answer ping within {timeout:?}: {error}"
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Prepares an empty dbpath for a real `mongod` as the official image's entrypoint does: start
/// it standalone on the member's own (loopback) address, create the root user through the
/// localhost exception, shut it down. A dbpath that holds anything is left alone.
///
/// Untested here: no `mongod` binary can be installed on these machines. The simulator does the
/// same itself from `MONGO_INITDB_ROOT_USERNAME`/`MONGO_INITDB_ROOT_PASSWORD`.
pub async fn bootstrap_root_user(
    mongod: &Path,
    ip: Ipv4Addr,
    dbpath: &Path,
    credentials: &Credentials,
) -> Result<(), String> {
    let empty = std::fs::read_dir(dbpath).map_or(true, |mut entries| entries.next().is_none());
    if !empty {
        return Ok(());
    }
    std::fs::create_dir_all(dbpath).map_err(|e| format!("{}: {e}", dbpath.display()))?;
    let mut standalone = Command::new(mongod)
        .arg("--bind_ip")
        .arg(ip.to_string())
        .arg("--port")
        .arg(PORT.to_string())
        .arg("--dbpath")
        .arg(dbpath)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("start {}: {e}", mongod.display()))?;
    let address = SocketAddr::new(IpAddr::V4(ip), PORT);
    wait_until_answering(address, Duration::from_secs(60)).await?;
    let client = anonymous_client(address).await?;
    let admin = client.database("admin");
    admin
        .run_command(doc! {
            "createUser": &credentials.username,
            "pwd": &credentials.password,
            "roles": [{ "role": "root", "db": "admin" }],
        })
        .await
        .map_err(|e| format!("createUser on {address}: {e}"))?;
    // The server closes the connection instead of answering a shutdown.
    let _ = admin.run_command(doc! { "shutdown": 1 }).await;
    match tokio::time::timeout(Duration::from_secs(60), standalone.wait()).await {
        Ok(Ok(status)) if status.success() => Ok(()),
        Ok(Ok(status)) => Err(format!("standalone mongod exited with {status}")),
        Ok(Err(error)) => Err(error.to_string()),
        Err(_) => {
            let _ = standalone.kill().await;
            Err("standalone mongod did not shut down within 60s".into())
        }
    }
}

/// `mongo-sim init-root-user --mongod <path> --bind_ip <ip> --dbpath <dir>`, with the
/// credentials in `MONGO_INITDB_ROOT_USERNAME`/`MONGO_INITDB_ROOT_PASSWORD`: the pod
/// launcher's init step for a real `mongod`. Returns the exit code.
pub async fn init_root_user_main(args: &[String]) -> i32 {
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let (Some(mongod), Some(ip), Some(dbpath)) = (value("--mongod"), value("--bind_ip"), value("--dbpath"))
    else {
        eprintln!("usage: mongo-sim init-root-user --mongod <path> --bind_ip <ip> --dbpath <dir>");
        return 2;
    };
    let Ok(ip) = ip.parse::<Ipv4Addr>() else {
        eprintln!("--bind_ip {ip}: not an IPv4 address");
        return 2;
    };
    let credentials = Credentials {
        username: std::env::var("MONGO_INITDB_ROOT_USERNAME").unwrap_or_default(),
        password: std::env::var("MONGO_INITDB_ROOT_PASSWORD").unwrap_or_default(),
    };
    if credentials.username.is_empty() || credentials.password.is_empty() {
        eprintln!("MONGO_INITDB_ROOT_USERNAME and MONGO_INITDB_ROOT_PASSWORD are required");
        return 2;
    }
    match bootstrap_root_user(Path::new(&mongod), ip, Path::new(&dbpath), &credentials).await {
        Ok(()) => 0,
        Err(error) => {
            eprintln!("init-root-user: {error}");
            1
        }
    }
}

/// One member process.
pub struct MongoProcess {
    pub name: String,
    pub ip: Ipv4Addr,
    /// The member's dbpath.
    pub dbpath: PathBuf,
    /// The simulated release it runs.
    pub version: String,
    log: PathBuf,
    child: Option<Child>,
}

impl MongoProcess {
    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.ip), PORT)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The last `lines` lines of its log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }
}

impl Drop for MongoProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

/// Members of one replica set in one scratch directory, on one `127.A.B.0/24` block.
pub struct MongoProcesses {
    pub dir: PathBuf,
    block: [u8; 3],
    set_name: String,
    credentials: Credentials,
    key_file: PathBuf,
    oplog_entries: Option<usize>,
    pub members: Vec<MongoProcess>,
}

/// The release members run unless told otherwise.
pub const DEFAULT_VERSION: &str = "7.0";

impl MongoProcesses {
    /// Starts `count` members of the set `set_name`, not yet initiated, each with the root user
    /// `credentials`, and waits until each answers `ping`.
    pub async fn start(set_name: &str, count: usize, credentials: Credentials) -> Self {
        Self::start_keeping(set_name, count, credentials, None).await
    }

    /// As [`Self::start`], each simulated member keeping `oplog_entries` oplog entries (its
    /// default when `None`): a test of a member that falls behind every oplog writes a few
    /// thousand documents rather than fifty thousand.
    pub async fn start_keeping(
        set_name: &str,
        count: usize,
        credentials: Credentials,
        oplog_entries: Option<usize>,
    ) -> Self {
        let block = [127, rand::random_range(1..=250), rand::random_range(1..=250)];
        let dir = std::env::temp_dir().join(format!(
            "quorum-mongo-{}-{}-{}",
            block[1],
            block[2],
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let key_file = dir.join("keyfile");
        let key: String = (0..48)
            .map(|_| {
                char::from(
                    b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
                        [rand::random_range(0..62)],
                )
            })
            .collect();
        write_private_file(&key_file, key.as_bytes()).expect("key file");
        let mut processes = Self {
            dir,
            block,
            set_name: set_name.to_string(),
            credentials,
            key_file,
            oplog_entries,
            members: Vec::new(),
        };
        for _ in 0..count {
            let index = processes.members.len();
            let process = processes.spawn(index, DEFAULT_VERSION).await;
            processes.members.push(process);
        }
        for index in 0..count {
            processes.wait_ready(index).await;
        }
        processes
    }

    pub fn set_name(&self) -> &str {
        &self.set_name
    }

    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The key file every member shares.
    pub fn key_file(&self) -> &Path {
        &self.key_file
    }

    /// The loopback address of member `index`.
    pub fn ip(&self, index: usize) -> Ipv4Addr {
        Ipv4Addr::new(self.block[0], self.block[1], self.block[2], index as u8 + 1)
    }

    /// `ip:27017` of member `index`.
    pub fn address(&self, index: usize) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.ip(index)), PORT)
    }

    /// `ip:port` of member `index`, as it appears in a replica-set configuration.
    pub fn host(&self, index: usize) -> String {
        self.address(index).to_string()
    }

    /// Every member's host, in index order.
    pub fn hosts(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.host(i)).collect()
    }

    /// Starts one more member (not in any configuration yet) and returns its index.
    pub async fn add_member(&mut self) -> usize {
        let index = self.members.len();
        let process = self.spawn(index, DEFAULT_VERSION).await;
        self.members.push(process);
        self.wait_ready(index).await;
        index
    }

    /// Kills member `index` (SIGKILL), as a crashed node would stop.
    pub async fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.members[index].child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts member `index` again on its dbpath (killing it first if it still runs) and waits
    /// until it answers.
    pub async fn restart(&mut self, index: usize) {
        let version = self.members[index].version.clone();
        self.restart_with_version(index, &version).await;
    }

    /// As [`MongoProcesses::restart`], running another simulated release (`6.0`, `7.0`,
    /// `8.0`): a rolling upgrade's step. A real `mongod` ignores the version.
    pub async fn restart_with_version(&mut self, index: usize, version: &str) {
        self.kill(index).await;
        self.members[index] = self.spawn(index, version).await;
        self.wait_ready(index).await;
    }

    pub fn is_running(&mut self, index: usize) -> bool {
        self.members[index].is_running()
    }

    async fn spawn(&self, index: usize, version: &str) -> MongoProcess {
        let name = format!("m-{index}");
        let dbpath = self.dir.join(&name);
        let ip = self.ip(index);
        if let Some(mongod) = real_mongod() {
            bootstrap_root_user(&mongod, ip, &dbpath, &self.credentials)
                .await
                .unwrap_or_else(|error| panic!("bootstrap {name}: {error}"));
        }
        std::fs::create_dir_all(&dbpath).expect("dbpath");
        let log = self.dir.join(format!("{name}.log"));
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let child = member_command(&MemberSpec {
            set_name: &self.set_name,
            ip,
            dbpath: &dbpath,
            key_file: Some(&self.key_file),
            version: Some(version),
            credentials: Some(&self.credentials),
            oplog_entries: self.oplog_entries,
        })
        .stdout(Stdio::from(log_file.try_clone().expect("log file")))
        .stderr(Stdio::from(log_file))
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"));
        MongoProcess {
            name,
            ip,
            dbpath,
            version: version.to_string(),
            log,
            child: Some(child),
        }
    }

    async fn wait_ready(&self, index: usize) {
        if let Err(error) = wait_until_answering(self.address(index), Duration::from_secs(30)).await {
            panic!("{error}; log:\n{}", self.members[index].log_tail(30));
        }
    }

    /// The logs of every member, for a failing test's message.
    pub fn log_tails(&self, lines: usize) -> String {
        self.members
            .iter()
            .map(|m| format!("--- {} ({}):\n{}", m.name, m.address(), m.log_tail(lines)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn credential(&self) -> Credential {
        Credential::builder()
            .username(self.credentials.username.clone())
            .password(self.credentials.password.clone())
            .source("admin".to_string())
            .build()
    }

    /// A client that discovers the set from every member (`replicaSet=<name>`), as the root
    /// user.
    pub fn client(&self) -> Client {
        self.client_with_connect_timeout(Duration::from_secs(2))
    }

    /// As [`Self::client`], with the driver's own ten-second connect timeout, which also bounds
    /// its monitors' checks: for a test that keeps the set busy (large batches on a loaded
    /// machine), where a two-second check may time out and clear the connection pool mid-write.
    pub fn patient_client(&self) -> Client {
        self.client_with_connect_timeout(Duration::from_secs(10))
    }

    fn client_with_connect_timeout(&self, connect_timeout: Duration) -> Client {
        let hosts: Vec<ServerAddress> = (0..self.members.len())
            .map(|i| ServerAddress::Tcp {
                host: self.ip(i).to_string(),
                port: Some(PORT),
            })
            .collect();
        let options = ClientOptions::builder()
            .hosts(hosts)
            .repl_set_name(self.set_name.clone())
            .credential(self.credential())
            .heartbeat_freq(Duration::from_millis(500))
            .connect_timeout(connect_timeout)
            .server_selection_timeout(Duration::from_secs(20))
            .build();
        Client::with_options(options).expect("client options")
    }

    /// A client of member `index` alone (`directConnection=true`), as the root user.
    pub fn direct_client(&self, index: usize) -> Client {
        let options = ClientOptions::builder()
            .hosts(vec![ServerAddress::Tcp {
                host: self.ip(index).to_string(),
                port: Some(PORT),
            }])
            .direct_connection(true)
            .credential(self.credential())
            .connect_timeout(Duration::from_secs(2))
            .server_selection_timeout(Duration::from_secs(5))
            .build();
        Client::with_options(options).expect("client options")
    }
}

impl Drop for MongoProcesses {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(child) = member.child.as_mut() {
                let _ = child.start_kill();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
