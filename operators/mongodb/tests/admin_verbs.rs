//! The operator's admin layer (`mongodb_operator::admin`, through the official driver) against
//! members on loopback: the replica-set simulator (`mongo-sim`, MongoDB's wire protocol and
//! replica-set rules), or real `mongod` processes when `QUORUM_MONGOD` names the binary.

use std::time::Duration;

use mongodb_operator::admin::{ConfigMember, Credentials, MemberState, MongoAdmin, ReplConfig, codes};
use quorum_e2e::{mongo, wait};
use secrecy::SecretString;

const SET: &str = "verbs";

async fn members(count: usize) -> mongo::MongoProcesses {
    mongo::MongoProcesses::start(
        SET,
        count,
        mongo::Credentials {
            username: "root".into(),
            password: "admin-verbs-password".into(),
        },
    )
    .await
}

fn admin(processes: &mongo::MongoProcesses, index: usize) -> MongoAdmin {
    let credentials = Credentials {
        username: processes.credentials().username.clone(),
        password: SecretString::from(processes.credentials().password.clone()),
    };
    MongoAdmin::connect(&processes.host(index), Some(&credentials), Duration::from_secs(5)).expect("a client")
}

fn member(processes: &mongo::MongoProcesses, index: usize, votes: i32) -> ConfigMember {
    ConfigMember {
        id: index as i32,
        host: processes.host(index),
        votes,
        priority: f64::from(votes),
        hidden: false,
        arbiter_only: false,
        other: Default::default(),
    }
}

async fn until_primary(admin: &MongoAdmin) {
    wait::until("a primary", Duration::from_secs(30), || async {
        match admin.hello().await {
            Ok(hello) if hello.is_writable_primary => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// A reconfiguration right after an election: the new primary takes one only once the entry
/// that opens its term is committed (`ConfigurationInProgress` until then), as the operator's
/// next pass would find.
async fn reconfig_once_the_term_is_committed(primary: &MongoAdmin, config: &ReplConfig) {
    wait::until(
        "a reconfiguration the primary takes",
        Duration::from_secs(30),
        || async {
            match primary.reconfig(config).await {
                Ok(()) => Ok(()),
                Err(error) if error.code() == Some(codes::CONFIGURATION_IN_PROGRESS) => {
                    Err(error.to_string())
                }
                Err(error) => panic!("reconfiguration refused: {error}"),
            }
        },
    )
    .await;
}

async fn until_state(primary: &MongoAdmin, host: &str, state: MemberState) {
    wait::until(&format!("{host} {state:?}"), Duration::from_secs(30), || async {
        let status = primary
            .status()
            .await
            .map_err(|e| e.to_string())?
            .ok_or("no status")?;
        match status.member(host) {
            Some(member) if member.state == state => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

async fn config(admin: &MongoAdmin) -> ReplConfig {
    admin
        .config()
        .await
        .expect("replSetGetConfig")
        .expect("a configuration")
}

/// Waits until every member of the configuration holds its version, as the set requires before
/// the next reconfiguration.
async fn until_committed(primary: &MongoAdmin, version: i64) {
    wait::until(
        "the configuration on every member",
        Duration::from_secs(30),
        || async {
            let status = primary
                .status()
                .await
                .map_err(|e| e.to_string())?
                .ok_or("no status")?;
            if status.members.iter().all(|m| m.config_version == Some(version)) {
                Ok(())
            } else {
                Err(format!("{status:?}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn initiate_once_add_without_a_vote_promote_and_remove() {
    let processes = members(3).await;
    let first = admin(&processes, 0);
    assert!(first.status().await.unwrap().is_none(), "not initiated yet");
    assert_eq!(first.hello().await.unwrap().set_name, None);

    let initial = ReplConfig::initial(SET, vec![member(&processes, 0, 1)]);
    first.initiate(&initial).await.expect("replSetInitiate");
    until_primary(&first).await;
    let again = first.initiate(&initial).await.expect_err("a second initiate");
    assert_eq!(again.code(), Some(codes::ALREADY_INITIALIZED), "{again}");

    // Added without a vote, then promoted once SECONDARY.
    let current = config(&first).await;
    let added = current.next(vec![member(&processes, 0, 1), member(&processes, 1, 0)]);
    reconfig_once_the_term_is_committed(&first, &added).await;
    until_state(&first, &processes.host(1), MemberState::Secondary).await;
    until_committed(&first, added.version).await;
    let promoted = added.next(vec![member(&processes, 0, 1), member(&processes, 1, 1)]);
    first.reconfig(&promoted).await.expect("promoting member 1");
    until_committed(&first, promoted.version).await;
    assert_eq!(config(&first).await.voting_members(), 2);

    // Member 2 joins and leaves: added, promoted, demoted, removed, one voting change each.
    let with_two = promoted.next(vec![
        member(&processes, 0, 1),
        member(&processes, 1, 1),
        member(&processes, 2, 0),
    ]);
    first.reconfig(&with_two).await.expect("adding member 2");
    until_state(&first, &processes.host(2), MemberState::Secondary).await;
    until_committed(&first, with_two.version).await;
    let three_voters = with_two.next(vec![
        member(&processes, 0, 1),
        member(&processes, 1, 1),
        member(&processes, 2, 1),
    ]);
    first.reconfig(&three_voters).await.expect("promoting member 2");
    until_committed(&first, three_voters.version).await;
    assert_eq!(config(&first).await.voting_members(), 3);
    let demoted = three_voters.next(vec![
        member(&processes, 0, 1),
        member(&processes, 1, 1),
        member(&processes, 2, 0),
    ]);
    first.reconfig(&demoted).await.expect("demoting member 2");
    until_committed(&first, demoted.version).await;
    assert_eq!(config(&first).await.voting_members(), 2);
    let removed = demoted.next(vec![member(&processes, 0, 1), member(&processes, 1, 1)]);
    first.reconfig(&removed).await.expect("removing member 2");
    let now = config(&first).await;
    assert_eq!(now.members.len(), 2);
    assert!(now.member(&processes.host(2)).is_none());
    assert_eq!(now.version, removed.version);
}

#[tokio::test]
async fn the_set_refuses_unsafe_reconfigurations_and_keeps_its_configuration() {
    let processes = members(3).await;
    let first = admin(&processes, 0);
    first
        .initiate(&ReplConfig::initial(SET, vec![member(&processes, 0, 1)]))
        .await
        .expect("replSetInitiate");
    until_primary(&first).await;
    let current = config(&first).await;

    // Two voting members at once.
    let two_voters = current.next(vec![
        member(&processes, 0, 1),
        member(&processes, 1, 1),
        member(&processes, 2, 1),
    ]);
    let refused = first.reconfig(&two_voters).await.expect_err("two voting changes");
    assert_eq!(refused.code(), Some(codes::NEW_CONFIG_INCOMPATIBLE), "{refused}");
    assert_eq!(config(&first).await, current, "the configuration is as it was");

    // A version that is not newer.
    let mut stale = current.next(vec![member(&processes, 0, 1), member(&processes, 1, 0)]);
    stale.version = current.version;
    let refused = first.reconfig(&stale).await.expect_err("a stale version");
    assert_eq!(refused.code(), Some(codes::NEW_CONFIG_INCOMPATIBLE), "{refused}");
    assert_eq!(config(&first).await, current);

    // Sent to a member that is not primary.
    let added = current.next(vec![member(&processes, 0, 1), member(&processes, 1, 0)]);
    reconfig_once_the_term_is_committed(&first, &added).await;
    until_state(&first, &processes.host(1), MemberState::Secondary).await;
    let second = admin(&processes, 1);
    let refused = second
        .reconfig(&added.next(added.members.clone()))
        .await
        .expect_err("a reconfiguration on a secondary");
    assert_eq!(refused.code(), Some(codes::NOT_WRITABLE_PRIMARY), "{refused}");

    // A feature compatibility version no member runs.
    assert_eq!(
        first.feature_compatibility_version().await.unwrap().to_string(),
        "7.0"
    );
    let refused = first
        .set_feature_compatibility_version("8.0")
        .await
        .expect_err("raising compatibility beyond the binaries");
    assert!(refused.code().is_some(), "{refused}");
    assert_eq!(
        first.feature_compatibility_version().await.unwrap().to_string(),
        "7.0"
    );
}

#[tokio::test]
async fn step_down_hands_over_to_a_caught_up_secondary() {
    let processes = members(3).await;
    let first = admin(&processes, 0);
    first
        .initiate(&ReplConfig::initial(SET, vec![member(&processes, 0, 1)]))
        .await
        .expect("replSetInitiate");
    until_primary(&first).await;
    // Alone, there is nobody to hand over to.
    let refused = first.step_down(60, 1).await.expect_err("no electable secondary");
    assert_eq!(refused.code(), Some(codes::EXCEEDED_TIME_LIMIT), "{refused}");
    assert!(first.hello().await.unwrap().is_writable_primary, "still primary");

    let mut current = config(&first).await;
    for index in 1..3 {
        let mut members = current.members.clone();
        members.push(member(&processes, index, 0));
        let added = current.next(members);
        reconfig_once_the_term_is_committed(&first, &added).await;
        until_state(&first, &processes.host(index), MemberState::Secondary).await;
        until_committed(&first, added.version).await;
        let promoted = added.next(
            added
                .members
                .iter()
                .map(|m| ConfigMember {
                    votes: 1,
                    priority: 1.0,
                    ..m.clone()
                })
                .collect(),
        );
        first.reconfig(&promoted).await.expect("promoting");
        until_committed(&first, promoted.version).await;
        current = promoted;
    }

    first.step_down(60, 10).await.expect("replSetStepDown");
    assert!(!first.hello().await.unwrap().is_writable_primary);
    wait::until("another primary", Duration::from_secs(30), || async {
        for index in 1..3 {
            if admin(&processes, index)
                .hello()
                .await
                .is_ok_and(|h| h.is_writable_primary)
            {
                return Ok(index);
            }
        }
        Err("none yet".to_string())
    })
    .await;
}
