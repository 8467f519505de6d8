//! A bounded in-memory pipe between a producer that writes a backup (a database's snapshot or
//! dump stream) and a consumer that stores it (a [`BackupSink`](super::BackupSink) upload),
//! run concurrently so that memory stays bounded however large the backup is.
//!
//! What it guarantees the consumer: the end of the stream is seen only after the producer
//! succeeded. When the producer fails or stalls, the consumer's next read past the buffered
//! bytes is an error, so a consumer that stores what it reads aborts instead of storing a
//! partial or unverified stream.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

/// How much of the stream may sit between the producer and the consumer. Small: the sink
/// buffers its own multipart parts, this only decouples the two.
pub const PIPE_CAPACITY: usize = 256 * 1024;

/// A producer's future: it writes into the pipe it was lent, then returns its verdict on what
/// it wrote (`Ok` with whatever it reports, such as a size and checksum, or its error).
pub type Produce<'w, I, PE> = Pin<Box<dyn Future<Output = Result<I, PE>> + Send + 'w>>;

/// Gives a producer closure the higher-ranked signature [`pipe`] needs (closure signatures
/// are only inferred that way where the bound is in sight):
///
/// ```ignore
/// let produce = producer(move |writer| Box::pin(async move { admin.snapshot(writer).await }));
/// ```
pub fn producer<F, I, PE>(produce: F) -> F
where
    F: for<'w> FnOnce(&'w mut PipeWriter) -> Produce<'w, I, PE>,
{
    produce
}

/// How the pipe between a producer and a consumer failed.
#[derive(Debug, thiserror::Error)]
pub enum PipeError<PE, CE> {
    /// The producer failed (its bytes, if any, were refused by the consumer at the end).
    #[error("{0}")]
    Producer(PE),
    /// The producer wrote nothing for this long while not blocked by the consumer.
    #[error("nothing produced for {0:?}")]
    Stalled(Duration),
    /// The consumer failed on its own.
    #[error("{0}")]
    Consumer(CE),
}

/// Runs `produce` (writing into a pipe) and `consume` (reading it) concurrently, returning the
/// consumer's result and the producer's.
///
/// The consumer sees the end of the stream only after the producer succeeded; when the
/// producer fails, or writes nothing for `stall_timeout` while the consumer waits for data,
/// the consumer's next read past the buffered bytes is an error. A producer blocked on a full
/// pipe (a slow consumer) is not stalled. When the consumer fails first, the producer is
/// dropped (cancelled) and the consumer's error returned.
///
/// # Errors
/// [`PipeError::Producer`] when the producer failed, [`PipeError::Stalled`] when it stalled
/// (either explains a consumer failure, which is then not reported);
/// [`PipeError::Consumer`] when the consumer failed on its own.
pub async fn pipe<P, C, CFut, I, PE, T, CE>(
    produce: P,
    consume: C,
    stall_timeout: Duration,
) -> Result<(T, I), PipeError<PE, CE>>
where
    P: for<'w> FnOnce(&'w mut PipeWriter) -> Produce<'w, I, PE>,
    C: FnOnce(PipeReader) -> CFut,
    CFut: Future<Output = Result<T, CE>>,
{
    let (write_half, read_half) = tokio::io::duplex(PIPE_CAPACITY);
    let state = Arc::new(PipeState::default());
    let mut writer = PipeWriter {
        inner: write_half,
        state: state.clone(),
    };
    let reader = PipeReader {
        inner: read_half,
        state: state.clone(),
    };
    let producing = async {
        let result = tokio::select! {
            result = produce(&mut writer) => result.map_err(ProducerFailure::Failed),
            stalled_for = watch_progress(&state, stall_timeout) => Err(ProducerFailure::Stalled(stalled_for)),
        };
        // The outcome must be known before the reader can see the end of the stream: set it,
        // then close the pipe. Both happen in this poll, so the reader cannot run between.
        state.conclude(result.is_ok());
        drop(writer);
        result
    };
    let consuming = consume(reader);
    tokio::pin!(producing, consuming);
    let mut produced = None;
    let consumed = loop {
        tokio::select! {
            result = &mut producing, if produced.is_none() => produced = Some(result),
            result = &mut consuming => break result,
        }
    };
    let (produced, consumed) = match (produced, consumed) {
        (Some(produced), consumed) => (produced, consumed),
        // The consumer failed first: its error is the cause, and the producer (which would
        // only fail writing into a closed pipe, or wait on its source) is dropped.
        (None, Err(error)) => return Err(PipeError::Consumer(error)),
        // A consumer only sees a clean end after the producer concluded, so this is ready.
        (None, Ok(value)) => (producing.await, Ok(value)),
    };
    match (produced, consumed) {
        (Ok(produced), Ok(value)) => Ok((value, produced)),
        // The producer's failure explains the consumer's (which saw a failed stream).
        (Err(ProducerFailure::Failed(error)), _) => Err(PipeError::Producer(error)),
        (Err(ProducerFailure::Stalled(stalled_for)), _) => Err(PipeError::Stalled(stalled_for)),
        (Ok(_), Err(error)) => Err(PipeError::Consumer(error)),
    }
}

enum ProducerFailure<PE> {
    Failed(PE),
    Stalled(Duration),
}

/// What the two ends of the pipe share.
#[derive(Default)]
struct PipeState {
    /// Bytes the producer has written.
    written: AtomicU64,
    /// The producer's last write found the pipe full: it waits for the consumer, not the
    /// consumer for it.
    writer_blocked: AtomicBool,
    /// 0 while the producer runs, then [`OUTCOME_SUCCEEDED`] or [`OUTCOME_FAILED`].
    outcome: AtomicU8,
}

const OUTCOME_SUCCEEDED: u8 = 1;
const OUTCOME_FAILED: u8 = 2;

impl PipeState {
    fn conclude(&self, succeeded: bool) {
        let outcome = if succeeded {
            OUTCOME_SUCCEEDED
        } else {
            OUTCOME_FAILED
        };
        self.outcome.store(outcome, Ordering::SeqCst);
    }
}

/// Resolves when the producer has written nothing for `stall_timeout` while not blocked on a
/// full pipe, with how long it was silent. Checked four times per timeout, so it fires within
/// 1.25 times the timeout.
async fn watch_progress(state: &PipeState, stall_timeout: Duration) -> Duration {
    let tick = (stall_timeout / 4).max(Duration::from_millis(1));
    let mut last_written = state.written.load(Ordering::SeqCst);
    let mut last_active = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(tick).await;
        let written = state.written.load(Ordering::SeqCst);
        if written != last_written || state.writer_blocked.load(Ordering::SeqCst) {
            last_written = written;
            last_active = tokio::time::Instant::now();
        } else if last_active.elapsed() >= stall_timeout {
            return last_active.elapsed();
        }
    }
}

/// The producer's end of the pipe: counts progress for the stall watch.
pub struct PipeWriter {
    inner: DuplexStream,
    state: Arc<PipeState>,
}

impl AsyncWrite for PipeWriter {
    fn poll_write(self: Pin<&mut Self>, context: &mut Context<'_>, bytes: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(context, bytes);
        match &poll {
            Poll::Ready(Ok(written)) => {
                this.state.written.fetch_add(*written as u64, Ordering::SeqCst);
                this.state.writer_blocked.store(false, Ordering::SeqCst);
            }
            Poll::Ready(Err(_)) => this.state.writer_blocked.store(false, Ordering::SeqCst),
            Poll::Pending => this.state.writer_blocked.store(true, Ordering::SeqCst),
        }
        poll
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(context)
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(context)
    }
}

/// The consumer's end of the pipe: the end of the stream is an error unless the producer
/// succeeded.
pub struct PipeReader {
    inner: DuplexStream,
    state: Arc<PipeState>,
}

impl AsyncRead for PipeReader {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buffer.filled().len();
        match Pin::new(&mut this.inner).poll_read(context, buffer) {
            Poll::Ready(Ok(())) if buffer.filled().len() == before && buffer.remaining() > 0 => {
                match this.state.outcome.load(Ordering::SeqCst) {
                    OUTCOME_SUCCEEDED => Poll::Ready(Ok(())),
                    OUTCOME_FAILED => Poll::Ready(Err(io::Error::other(
                        "the producer failed; its bytes must not be stored",
                    ))),
                    _ => Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the stream ended without the producer's verdict",
                    ))),
                }
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use sha2::{Digest, Sha256};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::backup::{BackupError, BackupSink, BackupTarget};

    /// What the test producers report about what they wrote, like a snapshot's size and digest.
    #[derive(Debug, PartialEq, Eq)]
    struct Produced {
        size: u64,
        sha256: String,
    }

    /// A test producer's failure.
    #[derive(Debug)]
    enum ProducerError {
        Write(#[expect(dead_code, reason = "read only when a failing test prints it")] io::Error),
        Corrupt,
    }

    fn produced(bytes: &[u8]) -> Produced {
        Produced {
            size: bytes.len() as u64,
            sha256: hex::encode(Sha256::digest(bytes)),
        }
    }

    fn scratch(label: &str) -> PathBuf {
        use std::hash::{BuildHasher, RandomState};
        let suffix = RandomState::new().hash_one(std::time::SystemTime::now());
        let directory = std::env::temp_dir().join(format!(
            "quorum-pipe-unit-{label}-{}-{suffix}",
            std::process::id()
        ));
        std::fs::create_dir_all(&directory).expect("scratch directory");
        directory
    }

    fn filesystem_sink(label: &str) -> (BackupSink, PathBuf) {
        let directory = scratch(label);
        let sink = BackupSink::new(BackupTarget::Filesystem {
            directory: directory.clone(),
        })
        .expect("sink");
        (sink, directory)
    }

    async fn write_in_chunks(writer: &mut PipeWriter, bytes: &[u8]) -> Result<(), ProducerError> {
        for chunk in bytes.chunks(4096) {
            writer.write_all(chunk).await.map_err(ProducerError::Write)?;
        }
        Ok(())
    }

    #[tokio::test]
    async fn a_verified_stream_is_stored_whole() {
        let (sink, directory) = filesystem_sink("whole");
        let content: Vec<u8> = (0..2_000_000u32).map(|i| (i % 251) as u8).collect();
        let expected = produced(&content);
        let produce = producer(|writer| {
            let content = content.clone();
            Box::pin(async move {
                write_in_chunks(writer, &content).await?;
                Ok::<_, ProducerError>(produced(&content))
            })
        });
        let upload = |reader: PipeReader| {
            let sink = sink.clone();
            async move { sink.upload("main/main-1.db", reader).await }
        };
        let (stored, reported) = pipe(produce, upload, Duration::from_secs(5))
            .await
            .expect("stored");
        assert_eq!(reported, expected);
        assert_eq!(
            (stored.size, stored.sha256.as_str()),
            (expected.size, expected.sha256.as_str())
        );
        assert_eq!(
            std::fs::read(directory.join("main/main-1.db")).expect("stored file"),
            content
        );
        std::fs::remove_dir_all(&directory).ok();
    }

    #[tokio::test]
    async fn a_stream_the_producer_rejects_is_not_stored() {
        let (sink, directory) = filesystem_sink("corrupt");
        // All bytes arrive, then the producer's own check fails: the verdict comes last.
        let produce = producer(|writer| {
            Box::pin(async move {
                write_in_chunks(writer, &[7u8; 300_000]).await?;
                Err::<Produced, _>(ProducerError::Corrupt)
            })
        });
        let upload = |reader: PipeReader| {
            let sink = sink.clone();
            async move { sink.upload("main/main-1.db", reader).await }
        };
        let error = pipe(produce, upload, Duration::from_secs(5))
            .await
            .expect_err("corrupt");
        assert!(
            matches!(error, PipeError::Producer(ProducerError::Corrupt)),
            "{error:?}"
        );
        assert!(sink.list().await.expect("list").is_empty(), "no object stored");
        std::fs::remove_dir_all(&directory).ok();
    }

    #[tokio::test]
    async fn a_producer_that_stops_sending_is_given_up_and_nothing_is_stored() {
        let (sink, directory) = filesystem_sink("stalled");
        let produce = producer(|writer| {
            Box::pin(async move {
                write_in_chunks(writer, &[1u8; 10_000]).await?;
                std::future::pending::<()>().await;
                Ok::<_, ProducerError>(produced(&[]))
            })
        });
        let upload = |reader: PipeReader| {
            let sink = sink.clone();
            async move { sink.upload("main/main-1.db", reader).await }
        };
        let started = std::time::Instant::now();
        let error = pipe(produce, upload, Duration::from_millis(200))
            .await
            .expect_err("stalled");
        assert!(matches!(error, PipeError::Stalled(_)), "{error:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert!(sink.list().await.expect("list").is_empty(), "no object stored");
        std::fs::remove_dir_all(&directory).ok();
    }

    #[tokio::test]
    async fn a_slow_consumer_is_not_a_stalled_producer() {
        let content = vec![3u8; 4 * PIPE_CAPACITY];
        let produce = producer(|writer| {
            let content = content.clone();
            Box::pin(async move {
                write_in_chunks(writer, &content).await?;
                Ok::<_, ProducerError>(produced(&content))
            })
        });
        // Reads nothing for 4 stall timeouts: the producer is blocked on a full pipe meanwhile.
        let consume = |mut reader: PipeReader| async move {
            tokio::time::sleep(Duration::from_millis(400)).await;
            let mut read = Vec::new();
            reader.read_to_end(&mut read).await.map(|_| read.len())
        };
        let (read, _) = pipe(produce, consume, Duration::from_millis(100))
            .await
            .expect("a waiting producer is not stalled");
        assert_eq!(read, content.len());
    }

    #[tokio::test]
    async fn a_failing_sink_ends_the_producer() {
        let (sink, directory) = filesystem_sink("invalid-name");
        let produce = producer(|_writer| {
            // A source that would never answer: the sink's failure must not wait for it.
            Box::pin(std::future::pending::<Result<Produced, ProducerError>>())
        });
        let upload = |reader: PipeReader| {
            let sink = sink.clone();
            async move { sink.upload("../escape", reader).await }
        };
        let error = tokio::time::timeout(
            Duration::from_secs(5),
            pipe(produce, upload, Duration::from_secs(60)),
        )
        .await
        .expect("does not wait for the producer")
        .expect_err("invalid name");
        assert!(
            matches!(error, PipeError::Consumer(BackupError::InvalidName { .. })),
            "{error:?}"
        );
        std::fs::remove_dir_all(&directory).ok();
    }
}
