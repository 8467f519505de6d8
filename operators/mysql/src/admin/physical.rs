//! Physical backups of a MariaDB member with `mariadb-backup` (Debian's `mariadb-backup`
//! package): the member's files copied while it serves, as one `xbstream` stream, and unpacked
//! and prepared into an empty data directory before a server starts on it.
//!
//! Both run beside the member's files, never over the network alone: `mariadb-backup` reads the
//! data directory and talks to the running server (over TCP) only for its locks and its
//! position. No Kubernetes here; the caller gives the directories and the stream's other end
//! (the backup sink's upload, or its verified download).
//!
//! The password goes to `mariadb-backup` in an options file of the scratch directory, readable
//! by the owner alone and removed after, never on its command line: `mariadb-backup` records its
//! command line in the backup (`xtrabackup_info`).

use std::{
    future::Future,
    io,
    path::{Path, PathBuf},
    process::Stdio,
};

use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use tokio::{
    io::{AsyncReadExt, AsyncWrite, AsyncWriteExt},
    process::{ChildStdin, Command},
};

use super::{
    Credentials,
    gtid::{GtidParseError, GtidPosition},
};
use crate::crd::Flavor;

/// The program that copies and prepares.
pub const BACKUP_PROGRAM: &str = "mariadb-backup";
/// The program that unpacks an `xbstream`.
pub const UNPACK_PROGRAM: &str = "mbstream";
/// Where, inside the data directory being restored, the stream is unpacked and prepared before
/// its files are moved into place (one file system, so the moves are renames).
pub const STAGING: &str = ".quorum-restore";
/// The file of a backup that holds the binary log position and GTID it is consistent with.
const POSITION_FILE: &str = "xtrabackup_binlog_info";
/// The copy's read size.
const COPY_BUFFER: usize = 64 * 1024;
/// How much of a program's own log an error quotes.
const LOG_TAIL_LINES: usize = 15;

/// What a physical backup needs: the member's server, its files, and a scratch directory.
#[derive(Clone, Debug)]
pub struct PhysicalSource {
    /// The server the files belong to, for `mariadb-backup`'s locks and position.
    pub host: String,
    pub port: u16,
    pub credentials: Credentials,
    /// The server's data directory, as mounted here.
    pub data_dir: PathBuf,
    /// A writable directory of this process's own (the options file, `mariadb-backup`'s
    /// temporary files and its copy of the backup's metadata).
    pub scratch: PathBuf,
}

/// What a physical backup streamed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhysicalBackupInfo {
    /// The GTID position the copy is consistent with.
    pub position: GtidPosition,
    pub bytes: u64,
    /// SHA-256 of the whole stream as written, hex: what the sink stored must match it.
    pub sha256: String,
}

#[derive(Debug, thiserror::Error)]
pub enum PhysicalError {
    #[error("starting {program}: {source} (is Debian's mariadb-backup package installed?)")]
    Spawn {
        program: &'static str,
        source: io::Error,
    },
    #[error("{program} failed ({status}); its last lines:\n{log}")]
    Failed {
        program: &'static str,
        status: String,
        log: String,
    },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("writing the backup stream: {0}")]
    Write(io::Error),
    #[error("the backup names no GTID position ({0})")]
    NoPosition(String),
    #[error("the backup's GTID position cannot be read: {0}")]
    Position(#[from] GtidParseError),
    #[error(
        "the data directory {dir} is not empty (it holds {entry}): a physical restore fills only an \
         empty one, and never replaces a member's data"
    )]
    NotEmpty { dir: PathBuf, entry: String },
    #[error("fetching the backup: {0}")]
    Fetch(String),
    #[error(
        "the backup holds GTID position {found}, not the {recorded} its backup recorded: another \
         backup's object is stored under its name"
    )]
    PositionMismatch {
        found: GtidPosition,
        recorded: GtidPosition,
    },
}

fn io_error(path: &Path) -> impl FnOnce(io::Error) -> PhysicalError + '_ {
    move |source| PhysicalError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Streams a physical copy of the member's files to `writer` (`mariadb-backup --backup
/// --stream=xbstream`) and returns the GTID position it is consistent with.
///
/// # Errors
/// [`PhysicalError::Spawn`] without the program; [`PhysicalError::Failed`] with the end of its
/// log when it fails (the server refused the account, the data directory is not the server's);
/// [`PhysicalError::Write`] when `writer` fails. What was written is then incomplete: the
/// caller's upload must not complete.
pub async fn backup_out(
    source: &PhysicalSource,
    mut writer: impl AsyncWrite + Unpin,
) -> Result<PhysicalBackupInfo, PhysicalError> {
    let metadata = source.scratch.join("backup-metadata");
    let temporary = source.scratch.join("backup-tmp");
    for dir in [&metadata, &temporary] {
        tokio::fs::create_dir_all(dir).await.map_err(io_error(dir))?;
    }
    let options = OptionsFile::write(&source.scratch, &source.credentials).await?;
    // Servers with TLS may refuse any other connection; the CA is the operator's own.
    let tls = match &source.credentials.server_ca {
        Some(ca) => {
            let path = source.scratch.join("server-ca.pem");
            tokio::fs::write(&path, ca).await.map_err(io_error(&path))?;
            vec!["--ssl".to_string(), format!("--ssl-ca={}", path.display())]
        }
        None => Vec::new(),
    };
    let log_path = source.scratch.join("mariadb-backup.log");
    let log = std::fs::File::create(&log_path).map_err(io_error(&log_path))?;
    let mut child = Command::new(BACKUP_PROGRAM)
        .arg(options.argument())
        .args([
            "--backup".to_string(),
            "--stream=xbstream".to_string(),
            format!("--host={}", source.host),
            format!("--port={}", source.port),
            format!("--user={}", source.credentials.user),
            format!("--datadir={}", source.data_dir.display()),
            format!("--target-dir={}", temporary.display()),
            format!("--tmpdir={}", temporary.display()),
            format!("--extra-lsndir={}", metadata.display()),
        ])
        .args(tls)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| PhysicalError::Spawn {
            program: BACKUP_PROGRAM,
            source,
        })?;
    let mut stdout = child.stdout.take().expect("piped stdout");
    let mut hash = Sha256::new();
    let mut bytes = 0_u64;
    let mut buffer = vec![0_u8; COPY_BUFFER];
    loop {
        let read = match stdout.read(&mut buffer).await {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) => {
                let _ = child.kill().await;
                return Err(io_error(&log_path)(error));
            }
        };
        if let Err(error) = writer.write_all(&buffer[..read]).await {
            let _ = child.kill().await;
            return Err(PhysicalError::Write(error));
        }
        hash.update(&buffer[..read]);
        bytes += read as u64;
    }
    writer.flush().await.map_err(PhysicalError::Write)?;
    let status = child.wait().await.map_err(io_error(&log_path))?;
    drop(options);
    if !status.success() {
        return Err(PhysicalError::Failed {
            program: BACKUP_PROGRAM,
            status: status.to_string(),
            log: log_tail(&log_path),
        });
    }
    let info_path = metadata.join("xtrabackup_info");
    let info = tokio::fs::read_to_string(&info_path)
        .await
        .map_err(io_error(&info_path))?;
    Ok(PhysicalBackupInfo {
        position: position_in_info(&info)?,
        bytes,
        sha256: hex::encode(hash.finalize()),
    })
}

/// Unpacks a physical backup into the empty data directory `data_dir` and prepares it, so that
/// a server started on it holds exactly the backup's transactions; returns its GTID position,
/// which the server then adopts ([`super::MySqlAdmin::adopt_position`]) since the binary log is
/// not part of the copy.
///
/// `fetch` writes the stream into the unpacker's input and fails unless every byte arrived and
/// matched what the backup recorded (the sink's verified download): nothing is moved into the
/// data directory before it has succeeded and the position is the `recorded` one.
///
/// # Errors
/// [`PhysicalError::NotEmpty`] before anything is read when the data directory holds anything
/// but `lost+found` and an earlier attempt's staging directory (which is removed);
/// [`PhysicalError::Fetch`] and [`PhysicalError::PositionMismatch`]; [`PhysicalError::Failed`]
/// when unpacking or preparing fails. The data directory then holds nothing of the backup.
pub async fn restore_in<F, Fut, E>(
    data_dir: &Path,
    recorded: &GtidPosition,
    fetch: F,
) -> Result<GtidPosition, PhysicalError>
where
    F: FnOnce(ChildStdin) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let staging = data_dir.join(STAGING);
    ensure_empty(data_dir).await?;
    if tokio::fs::try_exists(&staging).await.unwrap_or(false) {
        tokio::fs::remove_dir_all(&staging)
            .await
            .map_err(io_error(&staging))?;
    }
    tokio::fs::create_dir_all(&staging)
        .await
        .map_err(io_error(&staging))?;
    let restored = unpack_and_prepare(&staging, recorded, fetch).await;
    let position = match restored {
        Ok(position) => position,
        Err(error) => {
            let _ = tokio::fs::remove_dir_all(&staging).await;
            return Err(error);
        }
    };
    move_into_place(&staging, data_dir).await?;
    Ok(position)
}

async fn unpack_and_prepare<F, Fut, E>(
    staging: &Path,
    recorded: &GtidPosition,
    fetch: F,
) -> Result<GtidPosition, PhysicalError>
where
    F: FnOnce(ChildStdin) -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let unpack_log = staging.with_extension("unpack.log");
    let log = std::fs::File::create(&unpack_log).map_err(io_error(&unpack_log))?;
    let mut unpacker = Command::new(UNPACK_PROGRAM)
        .arg("-x")
        .arg("-C")
        .arg(staging)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| PhysicalError::Spawn {
            program: UNPACK_PROGRAM,
            source,
        })?;
    let input = unpacker.stdin.take().expect("piped stdin");
    let fetched = fetch(input).await;
    // An unpacker that refused the stream (its own chunk checksums) stops reading it, and the
    // fetch then fails on a closed pipe: its log says why.
    let status = match fetched {
        Ok(()) => unpacker.wait().await.map_err(io_error(&unpack_log))?,
        Err(error) => match unpacker.try_wait() {
            Ok(Some(status)) if !status.success() => status,
            _ => {
                let _ = unpacker.kill().await;
                let _ = tokio::fs::remove_file(&unpack_log).await;
                return Err(PhysicalError::Fetch(error.to_string()));
            }
        },
    };
    let unpacked_log = log_tail(&unpack_log);
    let _ = tokio::fs::remove_file(&unpack_log).await;
    if !status.success() {
        return Err(PhysicalError::Failed {
            program: UNPACK_PROGRAM,
            status: status.to_string(),
            log: unpacked_log,
        });
    }
    let position_path = staging.join(POSITION_FILE);
    let position_text = tokio::fs::read_to_string(&position_path)
        .await
        .map_err(io_error(&position_path))?;
    let found = position_in_binlog_info(&position_text)?;
    if &found != recorded {
        return Err(PhysicalError::PositionMismatch {
            found,
            recorded: recorded.clone(),
        });
    }
    let prepare_log = staging.with_extension("prepare.log");
    let log = std::fs::File::create(&prepare_log).map_err(io_error(&prepare_log))?;
    let status = Command::new(BACKUP_PROGRAM)
        .arg("--no-defaults")
        .arg("--prepare")
        .arg(format!("--target-dir={}", staging.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .status()
        .await
        .map_err(|source| PhysicalError::Spawn {
            program: BACKUP_PROGRAM,
            source,
        })?;
    let prepared_log = log_tail(&prepare_log);
    let _ = tokio::fs::remove_file(&prepare_log).await;
    if !status.success() {
        return Err(PhysicalError::Failed {
            program: BACKUP_PROGRAM,
            status: status.to_string(),
            log: prepared_log,
        });
    }
    Ok(found)
}

/// Fails unless `dir` holds nothing but `lost+found` (a fresh ext4 volume's) and the staging
/// directory of an earlier attempt.
async fn ensure_empty(dir: &Path) -> Result<(), PhysicalError> {
    tokio::fs::create_dir_all(dir).await.map_err(io_error(dir))?;
    let mut entries = tokio::fs::read_dir(dir).await.map_err(io_error(dir))?;
    while let Some(entry) = entries.next_entry().await.map_err(io_error(dir))? {
        let name = entry.file_name().to_string_lossy().into_owned();
        let ignored = name == "lost+found"
            || name == STAGING
            || name == format!("{STAGING}.unpack.log")
            || name == format!("{STAGING}.prepare.log");
        if !ignored {
            return Err(PhysicalError::NotEmpty {
                dir: dir.to_path_buf(),
                entry: name,
            });
        }
    }
    Ok(())
}

/// Moves every entry of `staging` up into `data_dir` (renames on one file system) but the
/// copied server's replication state, then removes `staging` with that.
async fn move_into_place(staging: &Path, data_dir: &Path) -> Result<(), PhysicalError> {
    let mut entries = tokio::fs::read_dir(staging).await.map_err(io_error(staging))?;
    while let Some(entry) = entries.next_entry().await.map_err(io_error(staging))? {
        if replication_leftover(&entry.file_name().to_string_lossy()) {
            continue;
        }
        let to = data_dir.join(entry.file_name());
        tokio::fs::rename(entry.path(), &to)
            .await
            .map_err(io_error(&to))?;
    }
    tokio::fs::remove_dir_all(staging)
        .await
        .map_err(io_error(staging))
}

/// Whether a file of a copy is the copied server's replication state: where it replicated
/// from and what it had relayed. A restored server is no replica of the copied one's source.
fn replication_leftover(name: &str) -> bool {
    matches!(name, "master.info" | "relay-log.info" | "multi-master.info")
        || name.starts_with("master-")
        || name.starts_with("relay-log-")
        || name.contains("relay-bin")
}

/// The options file that gives `mariadb-backup` the password, removed when dropped.
struct OptionsFile(PathBuf);

impl OptionsFile {
    async fn write(dir: &Path, credentials: &Credentials) -> Result<Self, PhysicalError> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join("mariadb-backup.cnf");
        let text = format!(
            "[client]\npassword=\"{}\"\n",
            credentials
                .password
                .expose_secret()
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
        );
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .map_err(io_error(&path))?;
        std::io::Write::write_all(&mut file, text.as_bytes()).map_err(io_error(&path))?;
        Ok(Self(path))
    }

    /// Must be the program's first argument.
    fn argument(&self) -> String {
        format!("--defaults-extra-file={}", self.0.display())
    }
}

impl Drop for OptionsFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n")
}

/// The GTID of `binlog_pos = filename '…', position '…', GTID of the last change '<gtid>'` in
/// `mariadb-backup`'s `xtrabackup_info`.
fn position_in_info(info: &str) -> Result<GtidPosition, PhysicalError> {
    let line = info
        .lines()
        .find_map(|line| line.strip_prefix("binlog_pos = "))
        .ok_or_else(|| PhysicalError::NoPosition("no binlog_pos in xtrabackup_info".to_string()))?;
    let gtid = line
        .split_once("GTID of the last change '")
        .and_then(|(_, rest)| rest.strip_suffix('\''))
        .ok_or_else(|| PhysicalError::NoPosition(format!("binlog_pos = {line}")))?;
    Ok(GtidPosition::parse(Flavor::MariaDB, gtid)?)
}

/// The GTID (third field) of `xtrabackup_binlog_info`: `<file>\t<offset>\t<gtid>`.
fn position_in_binlog_info(text: &str) -> Result<GtidPosition, PhysicalError> {
    let line = text.lines().next().unwrap_or_default();
    let gtid = line
        .split('\t')
        .nth(2)
        .ok_or_else(|| PhysicalError::NoPosition(format!("{POSITION_FILE} reads {line:?}")))?;
    Ok(GtidPosition::parse(Flavor::MariaDB, gtid.trim())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_copied_servers_replication_state_is_left_out() {
        for name in [
            "master.info",
            "relay-log.info",
            "multi-master.info",
            "mysqld-relay-bin.000002",
            "shop-1-relay-bin.index",
        ] {
            assert!(replication_leftover(name), "{name}");
        }
        for name in [
            "ibdata1",
            "mysql",
            "shop",
            "ib_logfile0",
            "aria_log.00000001",
            "xtrabackup_binlog_info",
        ] {
            assert!(!replication_leftover(name), "{name}");
        }
    }

    #[test]
    fn the_position_is_read_from_either_file_mariadb_backup_writes() {
        let info = "tool_name = mariadb-backup\n\
                    binlog_pos = filename 'binlog.000001', position '7834', GTID of the last change '0-1-3,1-2-9'\n\
                    innodb_from_lsn = 0\n";
        let expected = GtidPosition::parse(Flavor::MariaDB, "0-1-3,1-2-9").unwrap();
        assert_eq!(position_in_info(info).unwrap(), expected);
        assert_eq!(
            position_in_binlog_info("binlog.000001\t7834\t0-1-3,1-2-9\n").unwrap(),
            expected
        );
        assert!(matches!(
            position_in_info("tool_name = mariadb-backup\n"),
            Err(PhysicalError::NoPosition(_))
        ));
        assert!(matches!(
            position_in_binlog_info("binlog.000001\t7834\n"),
            Err(PhysicalError::NoPosition(_))
        ));
    }
}
