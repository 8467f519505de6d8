//! RDB snapshots over the replication protocol, as `redis-cli --rdb` takes them, and placing
//! one where a server loads it at start (the restore).
//!
//! The snapshot connects as a replica would: `AUTH`, `REPLCONF rdb-only 1` (7.0 and newer: no
//! replication stream follows the snapshot), `SYNC`. The server answers with newlines while it
//! prepares the snapshot (keep-alives), then either `$<length>\r\n` and that many bytes (the
//! snapshot was written to disk first) or `$EOF:<40-byte mark>\r\n`, the bytes, and the mark
//! again (diskless: streamed straight from the forked child). Both are handled.

use std::{path::Path, time::Duration};

use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use tokio::{
    io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, DuplexStream},
    net::TcpStream,
};

use super::{
    AdminError, RedisAdmin,
    rdb::{self, RdbContent, RdbError},
};

/// Every RDB file starts with `REDIS` and a four-digit format version.
pub const RDB_MAGIC: &[u8] = b"REDIS";

/// The length of the end mark of a diskless transfer.
const EOF_MARK_LENGTH: usize = 40;

/// What a snapshot was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotInfo {
    pub size: u64,
    /// SHA-256 of the RDB bytes as written, hex.
    pub sha256: String,
}

/// Why reading the `SYNC` answer failed, before the endpoint is known.
#[derive(Debug)]
enum SyncFailure {
    /// The connection broke or went silent.
    Io(std::io::Error),
    /// The server answered `-...`.
    Refused(String),
    /// The answer is not a snapshot.
    Malformed(String),
    /// Writing to the destination failed.
    Write(std::io::Error),
}

impl SyncFailure {
    fn into_admin(self, endpoint: &str, command: &'static str) -> AdminError {
        let endpoint = endpoint.to_string();
        match self {
            SyncFailure::Io(error) => AdminError::Unreachable {
                endpoint,
                detail: error.to_string(),
            },
            SyncFailure::Refused(message) => AdminError::Refused {
                endpoint,
                command,
                message,
            },
            SyncFailure::Malformed(detail) => AdminError::CorruptSnapshot { endpoint, detail },
            SyncFailure::Write(source) => AdminError::Write { endpoint, source },
        }
    }
}

impl RedisAdmin {
    /// Streams an RDB snapshot of this server into `out` over a connection of its own, and
    /// returns its size and SHA-256. `idle_timeout` bounds every wait for the server (it sends
    /// a keep-alive newline about every second while it prepares the snapshot).
    ///
    /// # Errors
    /// [`AdminError::Refused`] when the server refuses `AUTH` or `SYNC`;
    /// [`AdminError::CorruptSnapshot`] when the answer is not a whole RDB file;
    /// [`AdminError::Write`] when `out` fails; [`AdminError::Unreachable`] otherwise.
    pub async fn snapshot<W: AsyncWrite + Unpin>(
        &self,
        out: &mut W,
        idle_timeout: Duration,
    ) -> Result<SnapshotInfo, AdminError> {
        self.snapshot_teeing(out, None, idle_timeout).await
    }

    /// As [`RedisAdmin::snapshot`], and reads what the snapshot holds as it streams
    /// ([`super::rdb`]). The snapshot does not depend on that reading: a snapshot whose
    /// content cannot be read is still taken whole, with the reason in place of its content.
    ///
    /// # Errors
    /// As [`RedisAdmin::snapshot`].
    pub async fn snapshot_with_content<W: AsyncWrite + Unpin>(
        &self,
        out: &mut W,
        idle_timeout: Duration,
    ) -> Result<(SnapshotInfo, Result<RdbContent, RdbError>), AdminError> {
        let (mut tee, reader) = tokio::io::duplex(64 * 1024);
        let take = async move {
            let taken = self.snapshot_teeing(out, Some(&mut tee), idle_timeout).await;
            // Ends the reading of a snapshot cut short.
            drop(tee);
            taken
        };
        let (taken, content) = tokio::join!(take, rdb::content(reader));
        Ok((taken?, content))
    }

    async fn snapshot_teeing<W: AsyncWrite + Unpin>(
        &self,
        out: &mut W,
        tee: Option<&mut DuplexStream>,
        idle_timeout: Duration,
    ) -> Result<SnapshotInfo, AdminError> {
        let endpoint = self.endpoint().to_string();
        let unreachable = |error: std::io::Error| SyncFailure::Io(error).into_admin(&endpoint, "SYNC");
        let stream = tokio::time::timeout(idle_timeout, TcpStream::connect(self.address()))
            .await
            .map_err(|elapsed| unreachable(elapsed.into()))?
            .map_err(unreachable)?;
        let mut connection = BufReader::new(stream);
        if let Some(credentials) = self.credentials() {
            let mut auth = vec!["AUTH".as_bytes()];
            if let Some(username) = &credentials.username {
                auth.push(username.as_bytes());
            }
            auth.push(credentials.password.expose_secret().as_bytes());
            request(&mut connection, &auth, idle_timeout)
                .await
                .map_err(|failure| failure.into_admin(&endpoint, "AUTH"))?;
        }
        // Older servers refuse rdb-only; they then stream replication after the snapshot,
        // which is never read: the connection is closed once the snapshot is in.
        match request(&mut connection, &[b"REPLCONF", b"rdb-only", b"1"], idle_timeout).await {
            Ok(()) | Err(SyncFailure::Refused(_)) => {}
            Err(failure) => return Err(failure.into_admin(&endpoint, "REPLCONF")),
        }
        send(&mut connection, &[b"SYNC"], idle_timeout)
            .await
            .map_err(|failure| failure.into_admin(&endpoint, "SYNC"))?;
        read_rdb_payload(&mut connection, out, tee, idle_timeout)
            .await
            .map_err(|failure| failure.into_admin(&endpoint, "SYNC"))
    }
}

/// Writes `arguments` as one RESP command.
async fn send<S: AsyncWrite + Unpin>(
    connection: &mut S,
    arguments: &[&[u8]],
    timeout: Duration,
) -> Result<(), SyncFailure> {
    let mut bytes = format!("*{}\r\n", arguments.len()).into_bytes();
    for argument in arguments {
        bytes.extend_from_slice(format!("${}\r\n", argument.len()).as_bytes());
        bytes.extend_from_slice(argument);
        bytes.extend_from_slice(b"\r\n");
    }
    within(timeout, connection.write_all(&bytes)).await
}

/// Sends a command whose answer is a status line: `+...` is success, `-...` a refusal.
async fn request<S: AsyncBufRead + AsyncWrite + Unpin>(
    connection: &mut S,
    arguments: &[&[u8]],
    timeout: Duration,
) -> Result<(), SyncFailure> {
    send(connection, arguments, timeout).await?;
    let line = read_line(connection, timeout).await?;
    match line.strip_prefix('-') {
        Some(message) => Err(SyncFailure::Refused(message.to_string())),
        None if line.starts_with('+') => Ok(()),
        None => Err(SyncFailure::Malformed(format!("unexpected answer {line:?}"))),
    }
}

async fn within<T>(
    timeout: Duration,
    operation: impl Future<Output = std::io::Result<T>>,
) -> Result<T, SyncFailure> {
    tokio::time::timeout(timeout, operation)
        .await
        .map_err(|elapsed| SyncFailure::Io(elapsed.into()))?
        .map_err(SyncFailure::Io)
}

/// One `\r\n`-terminated line, without the terminator; a closed connection is an error.
async fn read_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    timeout: Duration,
) -> Result<String, SyncFailure> {
    let mut line = Vec::new();
    let read = within(timeout, reader.read_until(b'\n', &mut line)).await?;
    if read == 0 {
        return Err(SyncFailure::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(String::from_utf8_lossy(&line)
        .trim_end_matches(['\r', '\n'])
        .to_string())
}

/// How the server delimits the snapshot.
#[derive(Debug, PartialEq, Eq)]
enum PayloadFraming {
    Length(u64),
    EndMark(Vec<u8>),
}

/// Reads the answer to `SYNC` up to the end of the RDB payload, writing the payload to `out`.
/// Every byte is also written to `tee`, when given, while it takes them.
async fn read_rdb_payload<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    reader: &mut R,
    out: &mut W,
    tee: Option<&mut DuplexStream>,
    timeout: Duration,
) -> Result<SnapshotInfo, SyncFailure> {
    let framing = read_framing(reader, timeout).await?;
    let mut sink = HashingSink::new(out, tee);
    match framing {
        PayloadFraming::Length(length) => copy_exactly(reader, &mut sink, length, timeout).await?,
        PayloadFraming::EndMark(mark) => copy_until_mark(reader, &mut sink, &mark, timeout).await?,
    }
    sink.finish().await
}

/// Skips keep-alive newlines, then reads `$<length>` or `$EOF:<mark>`.
async fn read_framing<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    timeout: Duration,
) -> Result<PayloadFraming, SyncFailure> {
    let line = loop {
        let line = read_line(reader, timeout).await?;
        if !line.is_empty() {
            break line;
        }
    };
    if let Some(message) = line.strip_prefix('-') {
        return Err(SyncFailure::Refused(message.to_string()));
    }
    let header = line
        .strip_prefix('$')
        .ok_or_else(|| SyncFailure::Malformed(format!("expected a bulk header, got {line:?}")))?;
    if let Some(mark) = header.strip_prefix("EOF:") {
        if mark.len() != EOF_MARK_LENGTH {
            return Err(SyncFailure::Malformed(format!(
                "end mark of {} bytes",
                mark.len()
            )));
        }
        return Ok(PayloadFraming::EndMark(mark.as_bytes().to_vec()));
    }
    header
        .parse()
        .map(PayloadFraming::Length)
        .map_err(|_| SyncFailure::Malformed(format!("bad bulk length {header:?}")))
}

async fn copy_exactly<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    reader: &mut R,
    sink: &mut HashingSink<'_, W>,
    length: u64,
    timeout: Duration,
) -> Result<(), SyncFailure> {
    let mut remaining = length;
    let mut buffer = vec![0u8; 64 * 1024];
    while remaining > 0 {
        let want = buffer.len().min(usize::try_from(remaining).unwrap_or(usize::MAX));
        let read = within(timeout, reader.read(&mut buffer[..want])).await?;
        if read == 0 {
            return Err(SyncFailure::Malformed(format!(
                "the connection closed {remaining} bytes before the end of the snapshot"
            )));
        }
        sink.write(&buffer[..read]).await?;
        remaining -= read as u64;
    }
    Ok(())
}

/// Copies everything up to the end mark, holding back the last bytes seen until it is clear
/// they are not the mark.
async fn copy_until_mark<R: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    reader: &mut R,
    sink: &mut HashingSink<'_, W>,
    mark: &[u8],
    timeout: Duration,
) -> Result<(), SyncFailure> {
    let mut held: Vec<u8> = Vec::with_capacity(64 * 1024 + mark.len());
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = within(timeout, reader.read(&mut buffer)).await?;
        if read == 0 {
            return Err(SyncFailure::Malformed(
                "the connection closed before the end mark of the snapshot".to_string(),
            ));
        }
        held.extend_from_slice(&buffer[..read]);
        if held.ends_with(mark) {
            held.truncate(held.len() - mark.len());
            return sink.write(&held).await;
        }
        if held.len() > mark.len() {
            let ready = held.len() - mark.len();
            sink.write(&held[..ready]).await?;
            held.drain(..ready);
        }
    }
}

/// Writes to `out` while hashing and counting, and checks the RDB magic at the start; writes
/// to `tee` too until it stops taking them (its reader gave up: the snapshot goes on).
struct HashingSink<'a, W> {
    out: &'a mut W,
    tee: Option<&'a mut DuplexStream>,
    hasher: Sha256,
    size: u64,
    head: Vec<u8>,
}

impl<'a, W: AsyncWrite + Unpin> HashingSink<'a, W> {
    fn new(out: &'a mut W, tee: Option<&'a mut DuplexStream>) -> Self {
        Self {
            out,
            tee,
            hasher: Sha256::new(),
            size: 0,
            head: Vec::new(),
        }
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), SyncFailure> {
        if self.head.len() < RDB_MAGIC.len() {
            let take = (RDB_MAGIC.len() - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
        }
        self.hasher.update(bytes);
        self.size += bytes.len() as u64;
        self.out.write_all(bytes).await.map_err(SyncFailure::Write)?;
        if let Some(tee) = self.tee.as_mut()
            && tee.write_all(bytes).await.is_err()
        {
            self.tee = None;
        }
        Ok(())
    }

    async fn finish(self) -> Result<SnapshotInfo, SyncFailure> {
        if self.head != RDB_MAGIC {
            return Err(SyncFailure::Malformed(format!(
                "does not start with the RDB magic: {:?}",
                String::from_utf8_lossy(&self.head)
            )));
        }
        self.out.flush().await.map_err(SyncFailure::Write)?;
        Ok(SnapshotInfo {
            size: self.size,
            sha256: hex::encode(self.hasher.finalize()),
        })
    }
}

/// Why a snapshot could not be placed for a restore.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("snapshot SHA-256 is {actual}, {expected} was recorded")]
    ChecksumMismatch { expected: String, actual: String },
    #[error("not an RDB file: it does not start with REDIS")]
    NotRdb,
}

/// The file name a server loads its data from at start (`dbfilename`, default).
pub const DUMP_FILE: &str = "dump.rdb";

/// Writes the snapshot from `source` as `data_dir/dump.rdb`, for a server that has not started
/// yet, and only when its SHA-256 is `expected_sha256` and it is an RDB file. Written to a
/// temporary file, synced and renamed, so the server never loads a partial or unverified file.
///
/// # Errors
/// [`RestoreError::ChecksumMismatch`] or [`RestoreError::NotRdb`] (nothing is placed);
/// [`RestoreError::Io`] naming the file.
pub async fn place_snapshot<R: tokio::io::AsyncRead + Unpin>(
    source: &mut R,
    data_dir: &Path,
    expected_sha256: &str,
) -> Result<SnapshotInfo, RestoreError> {
    let partial = data_dir.join(format!("{DUMP_FILE}.partial"));
    let result = write_verified(source, &partial, expected_sha256).await;
    match result {
        Ok(info) => {
            let target = data_dir.join(DUMP_FILE);
            let io_error = |source| RestoreError::Io {
                path: target.display().to_string(),
                source,
            };
            tokio::fs::rename(&partial, &target).await.map_err(io_error)?;
            // The rename is durable only once the directory is synced.
            tokio::fs::File::open(data_dir)
                .await
                .map_err(io_error)?
                .sync_all()
                .await
                .map_err(io_error)?;
            Ok(info)
        }
        Err(error) => {
            let _ = tokio::fs::remove_file(&partial).await;
            Err(error)
        }
    }
}

async fn write_verified<R: tokio::io::AsyncRead + Unpin>(
    source: &mut R,
    path: &Path,
    expected_sha256: &str,
) -> Result<SnapshotInfo, RestoreError> {
    let io_error = |source| RestoreError::Io {
        path: path.display().to_string(),
        source,
    };
    let mut file = tokio::fs::File::create(path).await.map_err(io_error)?;
    let mut hasher = Sha256::new();
    let mut head = Vec::new();
    let mut size = 0u64;
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = source.read(&mut buffer).await.map_err(io_error)?;
        if read == 0 {
            break;
        }
        let chunk = &buffer[..read];
        if head.len() < RDB_MAGIC.len() {
            head.extend_from_slice(&chunk[..(RDB_MAGIC.len() - head.len()).min(read)]);
        }
        hasher.update(chunk);
        size += read as u64;
        file.write_all(chunk).await.map_err(io_error)?;
    }
    file.sync_all().await.map_err(io_error)?;
    let actual = hex::encode(hasher.finalize());
    if !actual.eq_ignore_ascii_case(expected_sha256) {
        return Err(RestoreError::ChecksumMismatch {
            expected: expected_sha256.to_string(),
            actual,
        });
    }
    if head != RDB_MAGIC {
        return Err(RestoreError::NotRdb);
    }
    Ok(SnapshotInfo { size, sha256: actual })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RDB: &[u8] = b"REDIS0010\xfa\x09redis-ver\x067.0.15\xff\x01\x02\x03\x04\x05\x06\x07\x08";

    async fn read(answer: &[u8]) -> Result<(SnapshotInfo, Vec<u8>), SyncFailure> {
        let mut reader = answer;
        let mut out = Vec::new();
        let info = read_rdb_payload(&mut reader, &mut out, None, Duration::from_secs(1)).await?;
        Ok((info, out))
    }

    fn sha256(bytes: &[u8]) -> String {
        hex::encode(Sha256::digest(bytes))
    }

    #[tokio::test]
    async fn a_length_framed_payload_after_keep_alives_is_read_exactly() {
        let mut answer = b"\n\n\n".to_vec();
        answer.extend(format!("${}\r\n", RDB.len()).as_bytes());
        answer.extend(RDB);
        answer.extend(b"*1\r\n$4\r\nPING\r\n"); // what follows is not part of the snapshot
        let (info, out) = read(&answer).await.unwrap();
        assert_eq!(out, RDB);
        assert_eq!(info.size, RDB.len() as u64);
        assert_eq!(info.sha256, sha256(RDB));
    }

    #[tokio::test]
    async fn a_diskless_payload_ends_at_its_mark() {
        let mark = "0123456789abcdef0123456789abcdef01234567";
        let mut answer = b"\n".to_vec();
        answer.extend(format!("$EOF:{mark}\r\n").as_bytes());
        answer.extend(RDB);
        answer.extend(mark.as_bytes());
        let (info, out) = read(&answer).await.unwrap();
        assert_eq!(out, RDB);
        assert_eq!(info.sha256, sha256(RDB));
    }

    #[tokio::test]
    async fn truncated_refused_and_foreign_payloads_are_errors() {
        let mut truncated = format!("${}\r\n", RDB.len() + 10).into_bytes();
        truncated.extend(RDB);
        assert!(matches!(read(&truncated).await, Err(SyncFailure::Malformed(_))));
        assert!(matches!(
            read(b"-NOAUTH Authentication required.\r\n").await,
            Err(SyncFailure::Refused(message)) if message.starts_with("NOAUTH")
        ));
        assert!(matches!(
            read(b"$5\r\nHELLO").await,
            Err(SyncFailure::Malformed(_))
        ));
        let mark = "0123456789abcdef0123456789abcdef01234567";
        let unterminated = format!("$EOF:{mark}\r\nREDIS0010");
        assert!(matches!(
            read(unterminated.as_bytes()).await,
            Err(SyncFailure::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn a_snapshot_is_placed_only_when_its_checksum_matches() {
        let dir = std::env::temp_dir().join(format!("quorum-redis-place-{}", std::process::id()));
        tokio::fs::create_dir_all(&dir).await.unwrap();
        let wrong = place_snapshot(&mut &RDB[..], &dir, &sha256(b"other")).await;
        assert!(matches!(wrong, Err(RestoreError::ChecksumMismatch { .. })));
        assert!(!dir.join(DUMP_FILE).exists());
        assert!(!dir.join("dump.rdb.partial").exists());
        let foreign = place_snapshot(&mut &b"HELLO"[..], &dir, &sha256(b"HELLO")).await;
        assert!(matches!(foreign, Err(RestoreError::NotRdb)));
        let placed = place_snapshot(&mut &RDB[..], &dir, &sha256(RDB)).await.unwrap();
        assert_eq!(placed.size, RDB.len() as u64);
        assert_eq!(tokio::fs::read(dir.join(DUMP_FILE)).await.unwrap(), RDB);
        tokio::fs::remove_dir_all(&dir).await.unwrap();
    }
}
