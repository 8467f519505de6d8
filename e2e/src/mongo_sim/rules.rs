//! The replica set's decision rules, as pure functions: whether a voter grants a vote, what a
//! set of durable optimes commits, and which feature compatibility versions a binary accepts.

use super::{
    CmdError,
    config::{Member, ReplConfig},
    state::OpTime,
};

/// A candidate's `simRequestVote`.
#[derive(Clone, Debug, PartialEq)]
pub struct VoteRequest {
    pub term: i64,
    pub candidate: String,
    pub config_version: i32,
    pub config_term: i64,
    pub last_applied: OpTime,
    pub dry_run: bool,
}

/// What a voter knows when it decides.
#[derive(Clone, Debug, PartialEq)]
pub struct VoterView {
    pub term: i64,
    /// `(term, candidate)` of the vote it cast last.
    pub vote: Option<(i64, String)>,
    pub config: Option<(i32, i64)>,
    pub last_applied: OpTime,
}

fn config_older(candidate: (i32, i64), voter: (i32, i64)) -> bool {
    if candidate.1 == -1 || voter.1 == -1 {
        candidate.0 < voter.0
    } else {
        (candidate.1, candidate.0) < (voter.1, voter.0)
    }
}

/// Grants the vote, or says why not, as the server's voters do: never to an older term, an
/// older configuration or staler data, and once per term (a dry run records nothing).
pub fn decide_vote(voter: &VoterView, request: &VoteRequest) -> Result<(), String> {
    if request.term < voter.term {
        return Err(format!(
            "candidate's term ({}) is lower than mine ({})",
            request.term, voter.term
        ));
    }
    let Some(config) = voter.config else {
        return Err("I have no replica set config".into());
    };
    if config_older((request.config_version, request.config_term), config) {
        return Err(format!(
            "candidate's config with {{version: {}, term: {}}} is older than mine with {{version: {}, term: {}}}",
            request.config_version, request.config_term, config.0, config.1
        ));
    }
    if request.last_applied < voter.last_applied {
        return Err(format!(
            "candidate's data is staler than mine. candidate's last applied OpTime: {:?}, my last applied OpTime: {:?}",
            request.last_applied, voter.last_applied
        ));
    }
    if !request.dry_run
        && let Some((term, candidate)) = &voter.vote
        && *term == request.term
        && candidate != &request.candidate
    {
        return Err(format!(
            "already voted for another candidate ({candidate}) this term ({term})"
        ));
    }
    Ok(())
}

/// Whether the voters among `granted` (hosts, the candidate included) are a majority of the
/// configuration's votes.
pub fn has_majority<'a>(config: &ReplConfig, granted: impl IntoIterator<Item = &'a str>) -> bool {
    let granted: Vec<&str> = granted.into_iter().collect();
    let votes = config
        .voters()
        .filter(|m| granted.iter().any(|g| g.eq_ignore_ascii_case(&m.host)))
        .count();
    votes >= config.majority()
}

/// The newest optime durable on a write majority of data-bearing voters, given each member's
/// durable optime (`None` when unknown).
pub fn majority_optime(config: &ReplConfig, durable: impl Fn(&Member) -> Option<OpTime>) -> OpTime {
    let mut optimes: Vec<OpTime> = config
        .voters()
        .filter(|m| !m.arbiter_only)
        .map(|m| durable(m).unwrap_or(OpTime::NULL))
        .collect();
    optimes.sort_by(|a, b| b.cmp(a));
    let needed = config.write_majority();
    if needed == 0 || optimes.len() < needed {
        return OpTime::NULL;
    }
    optimes[needed - 1]
}

/// `(major, minor)` of a version such as `7.0` or `7.0.14`.
pub fn version_pair(version: &str) -> Option<(u32, u32)> {
    let mut parts = version.split('.');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// The feature compatibility version a binary can be downgraded to: the release before it.
pub fn previous_release(binary: (u32, u32)) -> (u32, u32) {
    match binary {
        (4, 4) => (4, 2),
        (5, 0) => (4, 4),
        (major, 0) => (major - 1, 0),
        (major, minor) => (major, minor - 1),
    }
}

/// Whether a binary of `binary` can run on data at `fcv`: its own release or the one before.
pub fn binary_accepts_fcv(binary: (u32, u32), fcv: (u32, u32)) -> bool {
    fcv == binary || fcv == previous_release(binary)
}

/// `setFeatureCompatibilityVersion`'s check of the target against every member's binary.
pub fn check_fcv_target(target: &str, members: &[(String, Option<String>)]) -> Result<(), CmdError> {
    let wanted = version_pair(target)
        .filter(|(_, minor)| *minor == 0)
        .ok_or_else(|| {
            CmdError::new(
                2,
                format!("Invalid feature compatibility version value '{target}'"),
            )
        })?;
    for (host, binary) in members {
        let Some(binary) = binary.as_deref().and_then(version_pair) else {
            return Err(CmdError::new(
                2,
                format!(
                    "cannot set the feature compatibility version to {target}: the binary version of member {host} is unknown (not reachable)"
                ),
            ));
        };
        if !binary_accepts_fcv(binary, wanted) {
            return Err(CmdError::new(
                2,
                format!(
                    "cannot set the feature compatibility version to {target}: member {host} runs binary version {}.{}, which supports only {}.{} and {}.{}",
                    binary.0,
                    binary.1,
                    previous_release(binary).0,
                    previous_release(binary).1,
                    binary.0,
                    binary.1
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bson::{Timestamp, doc};

    use super::*;
    use crate::mongo_sim::config::Timing;

    fn optime(t: i64, time: u32) -> OpTime {
        OpTime {
            ts: Timestamp { time, increment: 0 },
            t,
        }
    }

    fn request(term: i64, applied: OpTime) -> VoteRequest {
        VoteRequest {
            term,
            candidate: "a:1".into(),
            config_version: 2,
            config_term: 1,
            last_applied: applied,
            dry_run: false,
        }
    }

    fn voter() -> VoterView {
        VoterView {
            term: 3,
            vote: None,
            config: Some((2, 1)),
            last_applied: optime(3, 10),
        }
    }

    #[test]
    fn votes_go_to_current_up_to_date_candidates_once_per_term() {
        assert!(decide_vote(&voter(), &request(4, optime(3, 10))).is_ok());
        assert!(
            decide_vote(&voter(), &request(2, optime(3, 20))).is_err(),
            "older term"
        );
        assert!(
            decide_vote(&voter(), &request(4, optime(3, 9))).is_err(),
            "staler data"
        );
        assert!(
            decide_vote(&voter(), &request(4, optime(4, 1))).is_ok(),
            "newer term wins over time"
        );
        let mut old_config = request(4, optime(3, 10));
        old_config.config_version = 1;
        assert!(decide_vote(&voter(), &old_config).is_err());
        let voted = VoterView {
            vote: Some((4, "b:1".into())),
            ..voter()
        };
        assert!(
            decide_vote(&voted, &request(4, optime(3, 10))).is_err(),
            "voted for b"
        );
        let dry = VoteRequest {
            dry_run: true,
            ..request(4, optime(3, 10))
        };
        assert!(
            decide_vote(&voted, &dry).is_ok(),
            "a dry run does not spend the vote"
        );
        let arbiter = VoterView {
            last_applied: OpTime::NULL,
            ..voter()
        };
        assert!(decide_vote(&arbiter, &request(4, optime(1, 1))).is_ok());
        let unconfigured = VoterView {
            config: None,
            ..voter()
        };
        assert!(decide_vote(&unconfigured, &request(4, optime(3, 10))).is_err());
    }

    fn config(members: Vec<bson::Document>) -> ReplConfig {
        let timing = Timing {
            election_timeout: Duration::from_secs(1),
            heartbeat_interval: Duration::from_millis(100),
        };
        ReplConfig::parse(&doc! { "_id": "rs", "members": members }, timing).unwrap()
    }

    #[test]
    fn majorities_count_voters_only() {
        let set = config(vec![
            doc! { "_id": 0, "host": "a:1" },
            doc! { "_id": 1, "host": "b:1" },
            doc! { "_id": 2, "host": "c:1" },
            doc! { "_id": 3, "host": "d:1", "votes": 0, "priority": 0 },
        ]);
        assert!(!has_majority(&set, ["a:1", "d:1"]));
        assert!(has_majority(&set, ["a:1", "c:1"]));
    }

    #[test]
    fn commit_point_is_the_write_majority_durable_optime() {
        let set = config(vec![
            doc! { "_id": 0, "host": "a:1" },
            doc! { "_id": 1, "host": "b:1" },
            doc! { "_id": 2, "host": "c:1" },
        ]);
        let durable = |m: &Member| match m.host.as_str() {
            "a:1" => Some(optime(1, 30)),
            "b:1" => Some(optime(1, 20)),
            _ => None,
        };
        assert_eq!(majority_optime(&set, durable), optime(1, 20));

        // With an arbiter, both data-bearing voters must hold the write.
        let psa = config(vec![
            doc! { "_id": 0, "host": "a:1" },
            doc! { "_id": 1, "host": "b:1" },
            doc! { "_id": 2, "host": "c:1", "arbiterOnly": true },
        ]);
        assert_eq!(psa.write_majority(), 2);
        assert_eq!(majority_optime(&psa, durable), optime(1, 20));
        assert_eq!(
            majority_optime(&psa, |m| (m.host == "a:1").then(|| optime(1, 30))),
            OpTime::NULL
        );
    }

    #[test]
    fn feature_compatibility_follows_the_binaries() {
        assert!(binary_accepts_fcv((7, 0), (6, 0)));
        assert!(binary_accepts_fcv((7, 0), (7, 0)));
        assert!(!binary_accepts_fcv((8, 0), (6, 0)));
        assert!(!binary_accepts_fcv((6, 0), (7, 0)));
        assert_eq!(previous_release((5, 0)), (4, 4));
        let members = |versions: &[&str]| -> Vec<(String, Option<String>)> {
            versions
                .iter()
                .enumerate()
                .map(|(i, v)| (format!("h{i}:1"), Some(v.to_string())))
                .collect()
        };
        assert!(check_fcv_target("7.0", &members(&["7.0", "7.0"])).is_ok());
        assert!(
            check_fcv_target("7.0", &members(&["7.0", "6.0"])).is_err(),
            "a 6.0 binary remains"
        );
        assert!(check_fcv_target("6.0", &members(&["7.0", "6.0"])).is_ok());
        assert!(
            check_fcv_target("6.0", &members(&["8.0"])).is_err(),
            "8.0 supports 7.0 and 8.0"
        );
        assert!(check_fcv_target("7.1", &members(&["7.0"])).is_err());
        assert!(check_fcv_target("7.0", &[("h:1".into(), None)]).is_err());
    }
}
