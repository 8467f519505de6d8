//! Real `redis-server` and `redis-sentinel` processes on distinct loopback addresses, for
//! testing the Redis admin layer.
//!
//! Each server listens on its own `127.X.Y.Z:6379`, as pods would on their own IPs, and each
//! Sentinel on its own `127.X.Y.Z:26379`. Every process gets a config file in its own
//! directory: the password (`requirepass`, `masterauth`, `sentinel-pass`) is only in that file,
//! never on a command line. Nothing persists data on its own (`save ""`, `appendonly no`): a
//! server restarted after a kill comes back empty, except for a `dump.rdb` placed in its
//! directory and, in cluster mode, its `nodes.conf` (its node id, epochs and view of the
//! cluster). Processes are killed when the set is dropped.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    process::{Child, Command},
};

/// The port every server listens on.
pub const SERVER_PORT: u16 = 6379;
/// The port every Sentinel listens on.
pub const SENTINEL_PORT: u16 = 26379;

/// Standalone servers (replication, Sentinel) or cluster nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Standalone,
    Cluster,
}

/// One process: a server or a Sentinel.
pub struct RedisProcess {
    pub name: String,
    pub ip: Ipv4Addr,
    pub port: u16,
    /// Its working directory: config file, `dump.rdb`, `nodes.conf`.
    pub dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

impl RedisProcess {
    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.ip), self.port)
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }

    /// The last `lines` lines of its log, for failure messages.
    pub fn log_tail(&self, lines: usize) -> String {
        log_tail(&self.log, lines)
    }

    /// Kills the process (SIGKILL), as a crashed pod would stop.
    pub async fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill().await;
        }
    }
}

impl Drop for RedisProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Servers and Sentinels in one scratch directory, on one `127.X.Y.0/24` block: server `i`
/// starts on `127.X.Y.(i+1)`, Sentinel `j` on `127.X.Y.(200+j)`.
pub struct RedisProcesses {
    pub dir: PathBuf,
    block: [u8; 3],
    mode: Mode,
    password: String,
    pub servers: Vec<RedisProcess>,
    pub sentinels: Vec<RedisProcess>,
}

impl RedisProcesses {
    /// A fresh block of loopback addresses, a scratch directory and a random password; no
    /// process yet.
    pub fn new(mode: Mode) -> Self {
        let block = [127, rand::random_range(1..=250), rand::random_range(1..=250)];
        let dir = std::env::temp_dir().join(format!(
            "quorum-redis-{}-{}-{}",
            block[1],
            block[2],
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let password = format!("pw-{:016x}", rand::random::<u64>());
        Self {
            dir,
            block,
            mode,
            password,
            servers: Vec::new(),
            sentinels: Vec::new(),
        }
    }

    /// Starts `count` servers and waits until each answers `PING`.
    pub async fn start(mode: Mode, count: usize) -> Self {
        let mut processes = Self::new(mode);
        for _ in 0..count {
            processes.add_server().await;
        }
        processes
    }

    /// The password of every server and Sentinel (the default user's `requirepass`).
    pub fn password(&self) -> &str {
        &self.password
    }

    /// The address `127.X.Y.host` of this set's block.
    pub fn ip(&self, host: u8) -> Ipv4Addr {
        Ipv4Addr::new(self.block[0], self.block[1], self.block[2], host)
    }

    /// The address of server `index` now.
    pub fn address(&self, index: usize) -> SocketAddr {
        self.servers[index].address()
    }

    /// Every server's address, in index order.
    pub fn addresses(&self) -> Vec<SocketAddr> {
        self.servers.iter().map(RedisProcess::address).collect()
    }

    /// The working directory the next (or an existing) server `index` uses: a `dump.rdb`
    /// placed here before [`RedisProcesses::add_server`] starts it is loaded at start.
    pub fn server_dir(&self, index: usize) -> PathBuf {
        self.dir.join(format!("server-{index}"))
    }

    /// Starts the next server (index `servers.len()`, on `127.X.Y.(index+1)`), waits until it
    /// answers `PING`, and returns its index.
    pub async fn add_server(&mut self) -> usize {
        let index = self.servers.len();
        let process = self.spawn_server(index, self.ip(index as u8 + 1));
        self.servers.push(process);
        self.wait_ready(index).await;
        index
    }

    /// Kills server `index` (SIGKILL).
    pub async fn kill(&mut self, index: usize) {
        self.servers[index].kill().await;
    }

    /// Starts server `index` again on its address, with its directory and config file as they
    /// are (killing it first if it still runs), and waits until it answers.
    pub async fn restart(&mut self, index: usize) {
        let ip = self.servers[index].ip;
        self.restart_on(index, ip).await;
    }

    /// Starts server `index` again on another address, keeping its directory (`nodes.conf`,
    /// `dump.rdb`), as a pod rescheduled with its volume gets a new IP.
    pub async fn restart_on(&mut self, index: usize, ip: Ipv4Addr) {
        self.servers[index].kill().await;
        self.servers[index] = self.spawn_server(index, ip);
        self.wait_ready(index).await;
    }

    fn spawn_server(&self, index: usize, ip: Ipv4Addr) -> RedisProcess {
        let name = format!("server-{index}");
        let dir = self.server_dir(index);
        std::fs::create_dir_all(&dir).expect("server directory");
        let mut config = format!(
            "bind {ip}\nport {SERVER_PORT}\nprotected-mode no\ndir {dir}\ndbfilename dump.rdb\n\
             appendonly no\nsave \"\"\nrequirepass {password}\nmasterauth {password}\n\
             replica-announce-ip {ip}\nrepl-diskless-sync-delay 0\nlogfile \"\"\n",
            dir = dir.display(),
            password = self.password,
        );
        if self.mode == Mode::Cluster {
            config.push_str(&format!(
                "cluster-enabled yes\ncluster-config-file nodes.conf\ncluster-node-timeout 2000\n\
                 cluster-announce-ip {ip}\n"
            ));
        }
        self.spawn("redis-server", &name, ip, SERVER_PORT, dir, &config)
    }

    /// Writes `config` to the process's own config file and starts `binary` on it.
    fn spawn(
        &self,
        binary: &str,
        name: &str,
        ip: Ipv4Addr,
        port: u16,
        dir: PathBuf,
        config: &str,
    ) -> RedisProcess {
        let config_file = dir.join(format!("{name}.conf"));
        std::fs::write(&config_file, config).expect("config file");
        let log = self.dir.join(format!("{name}.log"));
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let child = Command::new(binary)
            .arg(&config_file)
            .current_dir(&dir)
            .stdout(Stdio::from(log_file.try_clone().expect("log file")))
            .stderr(Stdio::from(log_file))
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("start {binary}: {e}"));
        RedisProcess {
            name: name.to_string(),
            ip,
            port,
            dir,
            log,
            child: Some(child),
        }
    }

    async fn wait_ready(&self, index: usize) {
        wait_for_pong(&self.servers[index], &self.password).await;
    }
}

/// Sentinels.
impl RedisProcesses {
    /// Starts `count` Sentinels (monitoring nothing yet: the test tells them what to monitor)
    /// and waits until each answers `PING`.
    pub async fn start_sentinels(&mut self, count: usize) {
        for _ in 0..count {
            let index = self.sentinels.len();
            let ip = self.ip(200 + index as u8);
            let name = format!("sentinel-{index}");
            let dir = self.dir.join(&name);
            std::fs::create_dir_all(&dir).expect("sentinel directory");
            // Sentinel rewrites this file with what it learns, so it lives in its own directory.
            let config = format!(
                "bind {ip}\nport {SENTINEL_PORT}\nprotected-mode no\ndir {dir}\nrequirepass {password}\n\
                 sentinel sentinel-pass {password}\nsentinel announce-ip {ip}\nlogfile \"\"\n",
                dir = dir.display(),
                password = self.password,
            );
            let process = self.spawn("redis-sentinel", &name, ip, SENTINEL_PORT, dir, &config);
            self.sentinels.push(process);
            wait_for_pong(&self.sentinels[index], &self.password).await;
        }
    }

    pub fn sentinel_address(&self, index: usize) -> SocketAddr {
        self.sentinels[index].address()
    }

    /// The logs of every process, for a failing test's message.
    pub fn log_tails(&self, lines: usize) -> String {
        self.servers
            .iter()
            .chain(&self.sentinels)
            .map(|process| {
                format!(
                    "--- {} ({}):\n{}",
                    process.name,
                    process.address(),
                    process.log_tail(lines)
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Polls `process` with `AUTH` and `PING` until it answers `PONG`; panics with its log tail.
async fn wait_for_pong(process: &RedisProcess, password: &str) {
    let address = process.address();
    crate::wait::until(
        &format!("{} on {address} to answer PING", process.name),
        Duration::from_secs(20),
        || async {
            ping(address, password)
                .await
                .map_err(|seen| format!("{seen}; log:\n{}", process.log_tail(30)))
        },
    )
    .await;
}

/// One `AUTH` + `PING` exchange over a raw connection (this crate has no Redis client).
async fn ping(address: SocketAddr, password: &str) -> Result<(), String> {
    let exchange = async {
        let mut stream = TcpStream::connect(address).await.map_err(|e| e.to_string())?;
        let request = format!(
            "*2\r\n$4\r\nAUTH\r\n${}\r\n{password}\r\n*1\r\n$4\r\nPING\r\n",
            password.len()
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        let mut buffer = [0u8; 256];
        loop {
            let read = stream.read(&mut buffer).await.map_err(|e| e.to_string())?;
            if read == 0 {
                return Err(format!("closed after {:?}", String::from_utf8_lossy(&answer)));
            }
            answer.extend_from_slice(&buffer[..read]);
            let text = String::from_utf8_lossy(&answer);
            if text.contains("+PONG") {
                return Ok(());
            }
            if text.contains('-') && text.ends_with("\r\n") {
                // -LOADING while a dump is read, or a refusal: report it, ask again.
                return Err(text.trim().to_string());
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(2), exchange)
        .await
        .map_err(|_| "no answer within 2s".to_string())?
}

impl Drop for RedisProcesses {
    fn drop(&mut self) {
        for process in self.servers.iter_mut().chain(self.sentinels.iter_mut()) {
            if let Some(child) = process.child.as_mut() {
                let _ = child.start_kill();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
