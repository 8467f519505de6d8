//! Every admin call goes through [`AdminCall::run`]: a circuit breaker, a timeout on each
//! attempt, and retries with jittered backoff for idempotent reads only. A mutation (member
//! add or remove, promote, failover) is sent at most once per call: retrying a request whose
//! reply was lost could apply it twice, so the caller re-observes and decides again instead.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use rand::Rng;

use super::{
    breaker::{Admission, CircuitBreaker, Transition},
    metrics::{AdminMetrics, Outcome},
};

/// Whether a call may be repeated safely.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Idempotency {
    /// A read: retried on failure.
    Read,
    /// A change: sent once.
    Mutation,
}

/// Timeouts and retry budget.
#[derive(Clone, Copy, Debug)]
pub struct CallPolicy {
    /// Bound on each attempt, connection included.
    pub timeout: Duration,
    /// Attempts for reads (mutations always get one).
    pub read_attempts: u32,
    pub backoff_first: Duration,
    pub backoff_max: Duration,
}

impl Default for CallPolicy {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(3),
            read_attempts: 3,
            backoff_first: Duration::from_millis(100),
            backoff_max: Duration::from_secs(2),
        }
    }
}

impl CallPolicy {
    fn backoff(&self, attempt: u32) -> Duration {
        let base = self
            .backoff_first
            .saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1)))
            .min(self.backoff_max);
        // Full jitter in [base/2, base): retries from many reconciles do not synchronise.
        base.mul_f64(rand::rng().random_range(0.5..1.0))
    }
}

/// Why an admin call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError<E> {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("circuit open after repeated failures; next attempt in {0:?}")]
    CircuitOpen(Duration),
    #[error(transparent)]
    Failed(E),
}

impl<E> CallError<E> {
    /// Whether the failure says only that the member could not be reached (timeout, open
    /// circuit), as opposed to an answer refusing the call.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, CallError::Timeout(_) | CallError::CircuitOpen(_))
    }
}

/// The context of one call: which engine and verb (for metrics), which breaker, which policy.
#[derive(Clone)]
pub struct AdminCall<'a> {
    pub engine: &'static str,
    pub verb: &'static str,
    pub idempotency: Idempotency,
    pub policy: CallPolicy,
    pub breaker: &'a Arc<CircuitBreaker>,
    pub metrics: &'a AdminMetrics,
}

impl AdminCall<'_> {
    /// Runs `attempt` under the breaker, the timeout and (for reads) the retry budget.
    pub async fn run<T, E, F, Fut>(&self, mut attempt: F) -> Result<T, CallError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let attempts = match self.idempotency {
            Idempotency::Read => self.policy.read_attempts.max(1),
            Idempotency::Mutation => 1,
        };
        let mut last_error = None;
        for number in 1..=attempts {
            if number > 1 {
                self.metrics.observe_retry(self.engine, self.verb);
                tokio::time::sleep(self.policy.backoff(number - 1)).await;
            }
            if let Admission::Refused { retry_after } = self.breaker.admit(Instant::now()) {
                self.metrics
                    .observe_call(self.engine, self.verb, Outcome::CircuitOpen, 0.0);
                return Err(CallError::CircuitOpen(retry_after));
            }
            let started = Instant::now();
            let result = tokio::time::timeout(self.policy.timeout, attempt()).await;
            let seconds = started.elapsed().as_secs_f64();
            let error = match result {
                Ok(Ok(value)) => {
                    self.metrics
                        .observe_call(self.engine, self.verb, Outcome::Ok, seconds);
                    if self.breaker.record_success() == Transition::Closed {
                        self.metrics.breaker_closed(self.engine);
                    }
                    return Ok(value);
                }
                Ok(Err(error)) => {
                    self.metrics
                        .observe_call(self.engine, self.verb, Outcome::Error, seconds);
                    CallError::Failed(error)
                }
                Err(_) => {
                    self.metrics
                        .observe_call(self.engine, self.verb, Outcome::Timeout, seconds);
                    CallError::Timeout(self.policy.timeout)
                }
            };
            if self.breaker.record_failure(Instant::now()) == Transition::Opened {
                self.metrics.breaker_opened(self.engine);
            }
            last_error = Some(error);
        }
        Err(last_error.expect("at least one attempt"))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;
    use crate::availability::breaker::BreakerSettings;

    fn quick() -> CallPolicy {
        CallPolicy {
            timeout: Duration::from_millis(50),
            read_attempts: 3,
            backoff_first: Duration::from_millis(1),
            backoff_max: Duration::from_millis(2),
        }
    }

    fn breaker(threshold: u32) -> Arc<CircuitBreaker> {
        Arc::new(CircuitBreaker::new(BreakerSettings {
            failure_threshold: threshold,
            cooldown: Duration::from_secs(60),
        }))
    }

    #[tokio::test]
    async fn reads_are_retried_until_they_succeed() {
        let metrics = AdminMetrics::default();
        let breaker = breaker(10);
        let tries = AtomicU32::new(0);
        let call = AdminCall {
            engine: "test",
            verb: "status",
            idempotency: Idempotency::Read,
            policy: quick(),
            breaker: &breaker,
            metrics: &metrics,
        };
        let result: Result<u32, CallError<&str>> = call
            .run(|| async {
                let n = tries.fetch_add(1, Ordering::SeqCst) + 1;
                if n < 3 { Err("flaky") } else { Ok(n) }
            })
            .await;
        assert_eq!(result.unwrap(), 3);
    }

    #[tokio::test]
    async fn mutations_are_sent_once() {
        let metrics = AdminMetrics::default();
        let breaker = breaker(10);
        let tries = AtomicU32::new(0);
        let call = AdminCall {
            engine: "test",
            verb: "remove_member",
            idempotency: Idempotency::Mutation,
            policy: quick(),
            breaker: &breaker,
            metrics: &metrics,
        };
        let result: Result<(), CallError<&str>> = call
            .run(|| async {
                tries.fetch_add(1, Ordering::SeqCst);
                Err("refused")
            })
            .await;
        assert!(matches!(result, Err(CallError::Failed("refused"))));
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_hanging_call_times_out_and_trips_the_breaker() {
        let metrics = AdminMetrics::default();
        let breaker = breaker(2);
        let call = AdminCall {
            engine: "test",
            verb: "status",
            idempotency: Idempotency::Read,
            policy: CallPolicy {
                read_attempts: 2,
                ..quick()
            },
            breaker: &breaker,
            metrics: &metrics,
        };
        let result: Result<(), CallError<&str>> = call.run(futures::future::pending).await;
        assert!(matches!(result, Err(CallError::Timeout(_))));
        assert!(result.unwrap_err().is_unreachable());
        assert!(breaker.is_open());

        // While open, no attempt is made at all.
        let tries = AtomicU32::new(0);
        let result: Result<(), CallError<&str>> = call
            .run(|| async {
                tries.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await;
        assert!(matches!(result, Err(CallError::CircuitOpen(_))));
        assert_eq!(tries.load(Ordering::SeqCst), 0);
    }
}
