//! Waiting for eventual conditions with a deadline and a useful failure message.

use std::time::Duration;

/// Polls `check` every 200 ms until it returns `Some`, and returns that value.
///
/// # Panics
/// After `timeout`, with `what` and the last value `describe` gave, so a failed test says
/// what it was waiting for and what it saw instead.
pub async fn until<T, F, Fut>(what: &str, timeout: Duration, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    within(what, timeout, check)
        .await
        .unwrap_or_else(|failure| panic!("{failure}"))
}

/// As [`until`], but a timeout is an error (saying what was awaited and what was last seen)
/// for callers that must clean up after a failure rather than panic.
pub async fn within<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(value) => return Ok(value),
            Err(seen) => seen,
        };
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "timed out after {timeout:?} waiting for {what}; last seen: {last}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
