//! A real S3-compatible server process for testing the backup sink.
//!
//! The server is `gofakes3` (pinned in `e2e/toolchain/versions.env`, built by
//! `e2e/toolchain/build.sh s3`) with its in-memory backend. It speaks the S3 REST protocol,
//! including multipart uploads, over plain HTTP on a loopback port it picks itself, so parallel
//! tests never race for a port. It accepts any credentials; the ones exposed here are what a
//! client must send anyway.

use std::{path::PathBuf, process::Stdio, time::Duration};

use quorum_core::backup::{BackupTarget, S3Target};
use tokio::process::{Child, Command};

/// The access key id every test client sends.
pub const ACCESS_KEY_ID: &str = "quorum-test-access-key";
/// The secret access key every test client sends.
pub const SECRET_ACCESS_KEY: &str = "quorum-test-secret-key";
/// The bucket [`S3Server::start`] creates.
pub const DEFAULT_BUCKET: &str = "quorum-backups";

/// One running S3 server with one bucket; the process is killed on drop.
pub struct S3Server {
    endpoint: String,
    bucket: String,
    dir: PathBuf,
    child: Child,
}

impl S3Server {
    /// Starts a server with the bucket [`DEFAULT_BUCKET`] and waits until it answers.
    ///
    /// # Panics
    /// When the binary is missing or the server does not come up within 30 seconds (the
    /// message carries its log).
    pub async fn start() -> Self {
        Self::start_with_bucket(DEFAULT_BUCKET).await
    }

    /// Starts a server with the (empty) bucket `bucket` and waits until it answers.
    ///
    /// # Panics
    /// As [`S3Server::start`].
    pub async fn start_with_bucket(bucket: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "quorum-s3-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        let log_path = dir.join("gofakes3.log");
        let log = std::fs::File::create(&log_path).expect("log file");
        let child = Command::new(crate::tools::s3_server_binary())
            .args([
                "-backend",
                "memory",
                // Port 0: the kernel picks a free port and the server logs which.
                "-host",
                "127.0.0.1:0",
                "-initialbucket",
                bucket,
                // No per-request log lines; startup lines (the port) are still written.
                "-quiet",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .kill_on_drop(true)
            .spawn()
            .expect("start gofakes3");
        let port: u16 = crate::wait::until("gofakes3 to log its port", Duration::from_secs(30), || async {
            let written = std::fs::read_to_string(&log_path).unwrap_or_default();
            written
                .lines()
                .find_map(|line| {
                    line.split_once("using port: ")
                        .map(|(_, port)| port.trim().to_string())
                })
                .and_then(|port| port.parse().ok())
                .ok_or_else(|| format!("log: {written}"))
        })
        .await;
        let server = Self {
            endpoint: format!("http://127.0.0.1:{port}"),
            bucket: bucket.to_string(),
            dir,
            child,
        };
        let bucket_url = format!("{}/{}", server.endpoint, server.bucket);
        crate::wait::until(
            "gofakes3 to serve the bucket",
            Duration::from_secs(30),
            || async {
                let answer = reqwest::get(&bucket_url)
                    .await
                    .map_err(|error| error.to_string())?;
                if answer.status().is_success() {
                    Ok(())
                } else {
                    Err(format!(
                        "{}; log: {}",
                        answer.status(),
                        std::fs::read_to_string(&log_path).unwrap_or_default()
                    ))
                }
            },
        )
        .await;
        server
    }

    /// The server's base URL, `http://127.0.0.1:PORT` (path-style addressing: the bucket is the
    /// first path segment).
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The bucket created at start.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The access key id to sign with ([`ACCESS_KEY_ID`]).
    pub fn access_key_id(&self) -> &str {
        ACCESS_KEY_ID
    }

    /// The secret access key to sign with ([`SECRET_ACCESS_KEY`]).
    pub fn secret_access_key(&self) -> &str {
        SECRET_ACCESS_KEY
    }

    /// A backup-sink target for this server's bucket under `prefix`, with plain HTTP allowed.
    pub fn backup_target(&self, prefix: Option<&str>) -> BackupTarget {
        BackupTarget::S3(S3Target {
            bucket: self.bucket.clone(),
            prefix: prefix.map(str::to_string),
            endpoint: Some(self.endpoint.clone()),
            region: None,
            access_key_id: ACCESS_KEY_ID.to_string(),
            secret_access_key: SECRET_ACCESS_KEY.to_string(),
            allow_http: true,
        })
    }

    /// How many multipart uploads in the bucket were started and neither completed nor aborted
    /// (S3 `ListMultipartUploads`; the server does not check signatures, so a plain GET does).
    ///
    /// # Panics
    /// When the server does not answer.
    pub async fn unfinished_multipart_uploads(&self) -> usize {
        let body = reqwest::get(format!("{}/{}?uploads", self.endpoint, self.bucket))
            .await
            .expect("list multipart uploads")
            .error_for_status()
            .expect("list multipart uploads")
            .text()
            .await
            .expect("list multipart uploads body");
        body.matches("<Upload>").count()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
