//! Real MariaDB processes on distinct loopback addresses, for testing the MySQL/MariaDB admin
//! layer.
//!
//! Each member `m-<i>` listens on its own `127.A.B.(i+1):3306`, as pods would on their own IPs,
//! with its own data directory, started as the operator's pods start it: binary log with GTIDs
//! in strict mode, row format, replicated changes logged, read-only until promoted. An init
//! file (not written to the binary log) creates `root@'%'` with [`ROOT_PASSWORD`] and the
//! replication account [`REPLICATION_USER`]. Nothing is replicating at first: tests point
//! members at each other through the admin layer.
//!
//! Uses the Debian MariaDB server (`/usr/sbin/mariadbd`, `mariadb-install-db`, the `mariadb`
//! client); runs as root, so the server gets `--user=root`.

use std::{
    net::{IpAddr, Ipv4Addr, SocketAddr},
    path::{Path, PathBuf},
    process::Stdio,
    time::Duration,
};

use tokio::process::{Child, Command};

/// The password of `root@'%'` on every member.
pub const ROOT_PASSWORD: &str = "quorum-root-Pw1";
/// The replication account on every member, with `REPLICATION SLAVE`.
pub const REPLICATION_USER: &str = "quorum_repl";
pub const REPLICATION_PASSWORD: &str = "quorum-repl-Pw1";
/// Every member's port, on its own address.
pub const PORT: u16 = 3306;

const SERVER: &str = "/usr/sbin/mariadbd";
const INSTALL: &str = "mariadb-install-db";
const CLIENT: &str = "mariadb";

/// One MariaDB member process.
pub struct MariaDbProcess {
    pub name: String,
    pub ip: Ipv4Addr,
    /// The member's own directory: `data/`, the socket, the pid file, `error.log`.
    pub dir: PathBuf,
    child: Option<Child>,
}

impl MariaDbProcess {
    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.ip), PORT)
    }

    pub fn error_log(&self) -> PathBuf {
        self.dir.join("error.log")
    }

    pub fn is_running(&mut self) -> bool {
        matches!(self.child.as_mut().map(|c| c.try_wait()), Some(Ok(None)))
    }
}

impl Drop for MariaDbProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.start_kill();
        }
    }
}

/// A set of MariaDB processes in one scratch directory, on one `127.A.B.0/24` block.
pub struct MariaDbProcesses {
    pub dir: PathBuf,
    block: [u8; 3],
    semi_sync: bool,
    pub members: Vec<MariaDbProcess>,
}

impl MariaDbProcesses {
    /// A fresh block of loopback addresses and a scratch directory; no process yet. Tests in
    /// one binary run in parallel, so the block is random.
    pub fn new() -> Self {
        let block = [127, rand::random_range(1..=250), rand::random_range(1..=250)];
        let dir = std::env::temp_dir().join(format!(
            "quorum-mariadb-{}-{}-{}",
            block[1],
            block[2],
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Self {
            dir,
            block,
            semi_sync: false,
            members: Vec::new(),
        }
    }

    /// Members started from now on come up with semi-synchronous replication on both sides
    /// (wait point `AFTER_SYNC`, a timeout long enough that a test never sees the fallback).
    pub fn with_semi_sync(mut self, on: bool) -> Self {
        self.semi_sync = on;
        self
    }

    /// Starts `count` members `m-0..m-{count-1}`, each a fresh empty server, and waits until
    /// every one answers over TCP.
    pub async fn start(count: usize) -> Self {
        let mut processes = Self::new();
        processes.start_members(count).await;
        processes
    }

    /// Starts `count` more fresh members after the existing ones; returns their indexes.
    pub async fn start_members(&mut self, count: usize) -> std::ops::Range<usize> {
        let first = self.members.len();
        let installs = (first..first + count).map(|index| {
            let dir = self.member_dir(index);
            async move { install(&dir).await }
        });
        // Every install finishes before any failure is reported, so none is still writing
        // into the scratch directory when it is removed.
        for result in futures::future::join_all(installs).await {
            result.unwrap_or_else(|error| panic!("{error}"));
        }
        for index in first..first + count {
            self.spawn(index);
        }
        for index in first..first + count {
            self.wait_ready(index).await;
        }
        first..first + count
    }

    /// The data directory member `index` runs on, or will: for the next member (index
    /// `members.len()`), fill it and start it with [`MariaDbProcesses::start_member_on_its_data`].
    pub fn data_dir(&self, index: usize) -> PathBuf {
        self.member_dir(index).join("data")
    }

    /// Starts the next member on the data directory placed in [`MariaDbProcesses::data_dir`]
    /// (a restored copy) instead of a fresh one, and waits until it answers; returns its index.
    pub async fn start_member_on_its_data(&mut self) -> usize {
        let index = self.members.len();
        let tmp = self.member_dir(index).join("tmp");
        std::fs::create_dir_all(&tmp).unwrap_or_else(|e| panic!("{}: {e}", tmp.display()));
        self.spawn(index);
        self.wait_ready(index).await;
        index
    }

    /// The loopback address of member `index`.
    pub fn ip(&self, index: usize) -> Ipv4Addr {
        Ipv4Addr::new(self.block[0], self.block[1], self.block[2], index as u8 + 1)
    }

    /// `ip:3306` of member `index`.
    pub fn address(&self, index: usize) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.ip(index)), PORT)
    }

    /// The administrator account on every member: (`root`, [`ROOT_PASSWORD`]).
    pub fn root_credentials(&self) -> (&'static str, &'static str) {
        ("root", ROOT_PASSWORD)
    }

    /// The replication account on every member.
    pub fn replication_credentials(&self) -> (&'static str, &'static str) {
        (REPLICATION_USER, REPLICATION_PASSWORD)
    }

    /// Kills member `index` (SIGKILL), as a crashed node would stop.
    pub async fn kill(&mut self, index: usize) {
        if let Some(mut child) = self.members[index].child.take() {
            let _ = child.kill().await;
        }
    }

    /// Starts member `index` again on its data directory (after [`MariaDbProcesses::kill`])
    /// and waits until it answers.
    pub async fn restart(&mut self, index: usize) {
        self.restart_with(index, &[]).await;
    }

    /// As [`MariaDbProcesses::restart`], with `extra` server options for this start (a member
    /// pod's `my.cnf` may carry options the harness does not give by default, such as
    /// `--init-rpl-role=SLAVE`).
    pub async fn restart_with(&mut self, index: usize, extra: &[&str]) {
        self.kill(index).await;
        self.spawn_with(index, extra);
        self.wait_ready(index).await;
    }

    /// Runs `sql` on member `index` as root with the `mariadb` client and returns its output
    /// (tab-separated, no column names).
    ///
    /// # Panics
    /// When the client fails, with its error and the tail of the member's error log.
    pub async fn sql(&self, index: usize, sql: &str) -> String {
        match self.try_sql(index, sql).await {
            Ok(output) => output,
            Err(error) => panic!("SQL on m-{index} failed: {error}\n{}", self.error_log_tail(index)),
        }
    }

    /// As [`MariaDbProcesses::sql`], returning the client's error instead of panicking.
    pub async fn try_sql(&self, index: usize, sql: &str) -> Result<String, String> {
        let output = Command::new(CLIENT)
            .args([
                "--no-defaults",
                "--protocol=TCP",
                "--connect-timeout=2",
                "--batch",
                "--skip-column-names",
                "--default-character-set=utf8mb4",
                &format!("--host={}", self.ip(index)),
                &format!("--port={PORT}"),
                "--user=root",
                &format!("--password={ROOT_PASSWORD}"),
                "--execute",
                sql,
            ])
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| format!("running {CLIENT}: {e}"))?;
        if output.status.success() {
            Ok(String::from_utf8_lossy(&output.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).trim().to_string())
        }
    }

    /// The last lines of member `index`'s error log, for failure messages.
    pub fn error_log_tail(&self, index: usize) -> String {
        let path = self.member_dir(index).join("error.log");
        let log = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(30)..].join("\n");
        format!("--- tail of {} ---\n{tail}", path.display())
    }

    fn member_dir(&self, index: usize) -> PathBuf {
        self.dir.join(format!("m-{index}"))
    }

    /// Starts the server of member `index` on its (installed) data directory.
    fn spawn(&mut self, index: usize) {
        self.spawn_with(index, &[]);
    }

    fn spawn_with(&mut self, index: usize, extra: &[&str]) {
        let dir = self.member_dir(index);
        let init_file = dir.join("init.sql");
        std::fs::write(&init_file, init_sql()).expect("init file");
        let path = |name: &str| dir.join(name).to_str().expect("utf-8 path").to_string();
        let mut args: Vec<String> = vec![
            "--no-defaults".to_string(),
            "--user=root".to_string(),
            format!("--datadir={}", path("data")),
            format!("--socket={}", path("mysqld.sock")),
            format!("--pid-file={}", path("mysqld.pid")),
            format!("--log-error={}", path("error.log")),
            format!("--tmpdir={}", path("tmp")),
            format!("--init-file={}", init_file.to_str().expect("utf-8 path")),
            format!("--bind-address={}", self.ip(index)),
            format!("--port={PORT}"),
            format!("--server-id={}", index + 1),
            format!("--log-bin={}", path("data/binlog")),
            "--log-slave-updates".to_string(),
            "--binlog-format=ROW".to_string(),
            "--gtid-strict-mode=ON".to_string(),
            "--read-only=ON".to_string(),
            "--skip-name-resolve".to_string(),
            "--character-set-server=utf8mb4".to_string(),
            "--collation-server=utf8mb4_general_ci".to_string(),
            // Small and fast: a test server holds little and need not survive power loss.
            "--innodb-buffer-pool-size=32M".to_string(),
            "--innodb-log-file-size=4M".to_string(),
            "--innodb-flush-log-at-trx-commit=2".to_string(),
            "--sync-binlog=0".to_string(),
            "--max-connections=50".to_string(),
            // A replica whose source died notices within seconds, not a minute.
            "--slave-net-timeout=5".to_string(),
        ];
        if self.semi_sync {
            args.extend(
                [
                    "--rpl-semi-sync-master-enabled=ON",
                    "--rpl-semi-sync-slave-enabled=ON",
                    "--rpl-semi-sync-master-wait-point=AFTER_SYNC",
                    "--rpl-semi-sync-master-timeout=600000",
                ]
                .map(String::from),
            );
        }
        args.extend(extra.iter().map(|option| option.to_string()));
        let child = Command::new(SERVER)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {SERVER}: {e}"));
        let process = MariaDbProcess {
            name: format!("m-{index}"),
            ip: self.ip(index),
            dir,
            child: Some(child),
        };
        if index < self.members.len() {
            self.members[index] = process;
        } else {
            assert_eq!(index, self.members.len(), "members start in order");
            self.members.push(process);
        }
    }

    /// Waits until member `index` accepts root over TCP (the init file has then run).
    ///
    /// # Panics
    /// When the process exits or does not answer within a minute, with its error log.
    async fn wait_ready(&mut self, index: usize) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            if !self.members[index].is_running() {
                panic!("MariaDB m-{index} exited\n{}", self.error_log_tail(index));
            }
            match self.try_sql(index, "SELECT 1").await {
                Ok(_) => return,
                Err(error) if tokio::time::Instant::now() >= deadline => panic!(
                    "MariaDB m-{index} did not answer within a minute: {error}\n{}",
                    self.error_log_tail(index)
                ),
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
}

/// Accounts every member starts with (root's password set again, for a member started on a
/// copy of another server's files), written to no binary log (they are not transactions to
/// replicate). `mariadb-install-db` also makes password-less `root` accounts for
/// 127.0.0.1, ::1 and the host name, which a TCP login from a loopback address would match
/// before `root@'%'`: they go.
fn init_sql() -> String {
    format!(
        "SET sql_log_bin = 0;\n\
         DELETE FROM mysql.global_priv WHERE User = 'root' AND Host NOT IN ('localhost', '%');\n\
         DELETE FROM mysql.global_priv WHERE User = '';\n\
         FLUSH PRIVILEGES;\n\
         CREATE USER IF NOT EXISTS 'root'@'%' IDENTIFIED BY '{ROOT_PASSWORD}';\n\
         ALTER USER 'root'@'%' IDENTIFIED BY '{ROOT_PASSWORD}';\n\
         GRANT ALL PRIVILEGES ON *.* TO 'root'@'%' WITH GRANT OPTION;\n\
         CREATE USER IF NOT EXISTS '{REPLICATION_USER}'@'%' IDENTIFIED BY '{REPLICATION_PASSWORD}';\n\
         GRANT REPLICATION SLAVE ON *.* TO '{REPLICATION_USER}'@'%';\n\
         SET sql_log_bin = 1;\n"
    )
}

/// Creates an empty data directory under `dir` (`dir/data`), with small InnoDB files.
async fn install(dir: &Path) -> Result<(), String> {
    // Temporary files in the member's own directory: concurrent installs in the shared /tmp
    // have been seen to trip over each other's.
    std::fs::create_dir_all(dir.join("tmp")).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = |name: &str| dir.join(name).to_str().expect("utf-8 path").to_string();
    let log = std::fs::File::create(dir.join("install.log")).map_err(|e| format!("install log: {e}"))?;
    let status = Command::new(INSTALL)
        .args([
            "--no-defaults",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            "--user=root",
            &format!("--datadir={}", path("data")),
            &format!("--tmpdir={}", path("tmp")),
            "--innodb-log-file-size=4M",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::from(
            log.try_clone().map_err(|e| format!("install log: {e}"))?,
        ))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|e| format!("running {INSTALL}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "{INSTALL} failed: {}",
            std::fs::read_to_string(dir.join("install.log")).unwrap_or_default()
        ))
    }
}

impl Default for MariaDbProcesses {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for MariaDbProcesses {
    fn drop(&mut self) {
        for member in &mut self.members {
            if let Some(child) = member.child.as_mut() {
                let _ = child.start_kill();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
