//! A circuit breaker per member endpoint.
//!
//! After `failure_threshold` consecutive failures the breaker opens and calls fail at once,
//! without touching the network, for `cooldown`; then one trial call is let through. An open
//! breaker makes the member `Unknown`, never `Unhealthy`: it records that *we* cannot reach it.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

/// Breaker settings.
#[derive(Clone, Copy, Debug)]
pub struct BreakerSettings {
    pub failure_threshold: u32,
    pub cooldown: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self {
            failure_threshold: 3,
            cooldown: Duration::from_secs(10),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Closed { consecutive_failures: u32 },
    Open { until: Instant },
    HalfOpen,
}

/// Whether a call may go out, as the breaker sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    Allowed,
    /// The breaker is open; it lets a trial through after the given time.
    Refused {
        retry_after: Duration,
    },
}

/// What a recorded outcome did to the breaker, for metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    None,
    Opened,
    Closed,
}

/// One endpoint's breaker.
#[derive(Debug)]
pub struct CircuitBreaker {
    settings: BreakerSettings,
    state: Mutex<State>,
}

impl CircuitBreaker {
    pub fn new(settings: BreakerSettings) -> Self {
        Self {
            settings,
            state: Mutex::new(State::Closed {
                consecutive_failures: 0,
            }),
        }
    }

    /// Asks to send a call at `now`. In the half-open state only one trial is let through
    /// until its outcome is recorded.
    pub fn admit(&self, now: Instant) -> Admission {
        let mut state = self.state.lock().expect("breaker lock");
        match *state {
            State::Closed { .. } => Admission::Allowed,
            State::Open { until } if now >= until => {
                *state = State::HalfOpen;
                Admission::Allowed
            }
            State::Open { until } => Admission::Refused {
                retry_after: until - now,
            },
            State::HalfOpen => Admission::Refused {
                retry_after: self.settings.cooldown,
            },
        }
    }

    pub fn record_success(&self) -> Transition {
        let mut state = self.state.lock().expect("breaker lock");
        let was_open = !matches!(*state, State::Closed { .. });
        *state = State::Closed {
            consecutive_failures: 0,
        };
        if was_open {
            Transition::Closed
        } else {
            Transition::None
        }
    }

    pub fn record_failure(&self, now: Instant) -> Transition {
        let mut state = self.state.lock().expect("breaker lock");
        let open = State::Open {
            until: now + self.settings.cooldown,
        };
        match *state {
            State::Closed { consecutive_failures }
                if consecutive_failures + 1 >= self.settings.failure_threshold =>
            {
                *state = open;
                Transition::Opened
            }
            State::Closed { consecutive_failures } => {
                *state = State::Closed {
                    consecutive_failures: consecutive_failures + 1,
                };
                Transition::None
            }
            State::HalfOpen | State::Open { .. } => {
                *state = open;
                Transition::None
            }
        }
    }

    pub fn is_open(&self) -> bool {
        !matches!(*self.state.lock().expect("breaker lock"), State::Closed { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_then_lets_one_trial_through() {
        let breaker = CircuitBreaker::new(BreakerSettings {
            failure_threshold: 3,
            cooldown: Duration::from_secs(10),
        });
        let t0 = Instant::now();
        assert_eq!(breaker.record_failure(t0), Transition::None);
        assert_eq!(breaker.record_failure(t0), Transition::None);
        assert_eq!(breaker.admit(t0), Admission::Allowed);
        assert_eq!(breaker.record_failure(t0), Transition::Opened);
        assert!(breaker.is_open());
        assert!(matches!(
            breaker.admit(t0 + Duration::from_secs(5)),
            Admission::Refused { .. }
        ));

        let after = t0 + Duration::from_secs(11);
        assert_eq!(breaker.admit(after), Admission::Allowed, "the trial call");
        assert!(
            matches!(breaker.admit(after), Admission::Refused { .. }),
            "only one trial"
        );
        assert_eq!(
            breaker.record_failure(after),
            Transition::None,
            "a failed trial reopens"
        );
        assert!(matches!(
            breaker.admit(after + Duration::from_secs(1)),
            Admission::Refused { .. }
        ));

        let later = after + Duration::from_secs(11);
        assert_eq!(breaker.admit(later), Admission::Allowed);
        assert_eq!(breaker.record_success(), Transition::Closed);
        assert!(!breaker.is_open());
    }

    #[test]
    fn a_success_resets_the_failure_count() {
        let breaker = CircuitBreaker::new(BreakerSettings::default());
        let now = Instant::now();
        breaker.record_failure(now);
        breaker.record_failure(now);
        breaker.record_success();
        breaker.record_failure(now);
        breaker.record_failure(now);
        assert!(!breaker.is_open());
    }
}
