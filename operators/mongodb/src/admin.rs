//! MongoDB's own admin commands through the official driver: the only place the operator
//! speaks to a server. No Kubernetes here.
//!
//! Every client is a direct connection to one member (`directConnection=true`): the operator
//! asks each member about itself and sends reconfigurations to the member that says it is
//! primary, never to whichever member the driver's discovery happens to pick.

use std::time::Duration;

use bson::{Bson, Document, Timestamp, doc};
use mongodb::{
    Client,
    error::ErrorKind,
    options::{AuthMechanism, ClientOptions, Credential, ServerAddress},
};
use secrecy::{ExposeSecret, SecretString};

/// Error codes the operator tells apart.
pub mod codes {
    /// `replSetGetStatus`/`replSetGetConfig` on a member whose set was never initiated.
    pub const NOT_YET_INITIALIZED: i32 = 94;
    /// `replSetInitiate` on a member that already has a configuration.
    pub const ALREADY_INITIALIZED: i32 = 23;
    /// A reconfiguration the set cannot take (stale version, two voting changes at once).
    pub const NEW_CONFIG_INCOMPATIBLE: i32 = 103;
    /// The previous configuration has not reached a majority yet.
    pub const CONFIGURATION_IN_PROGRESS: i32 = 109;
    /// A write or reconfiguration sent to a member that is not primary.
    pub const NOT_WRITABLE_PRIMARY: i32 = 10107;
    /// A step-down with no electable secondary caught up.
    pub const EXCEEDED_TIME_LIMIT: i32 = 262;
    pub const UNAUTHORIZED: i32 = 13;
    pub const AUTHENTICATION_FAILED: i32 = 18;
}

/// The administrator's login.
#[derive(Clone)]
pub struct Credentials {
    pub username: String,
    pub password: SecretString,
}

impl Credentials {
    /// Whether both log in as the same user with the same password.
    pub fn same(&self, other: &Credentials) -> bool {
        self.username == other.username && self.password.expose_secret() == other.password.expose_secret()
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// A failed admin command.
#[derive(Debug, thiserror::Error, Clone)]
pub enum AdminError {
    /// The member answered and refused: the command had no effect.
    #[error("{endpoint} refused: {message} (code {code} {code_name})")]
    Refused {
        endpoint: String,
        code: i32,
        code_name: String,
        message: String,
    },
    /// The member could not be reached or the connection broke: nothing is known about it.
    #[error("{endpoint} unreachable: {detail}")]
    Unreachable { endpoint: String, detail: String },
    /// The member answered something the operator does not understand.
    #[error("{endpoint}: {detail}")]
    Unexpected { endpoint: String, detail: String },
}

impl AdminError {
    pub fn code(&self) -> Option<i32> {
        match self {
            AdminError::Refused { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub fn is_unreachable(&self) -> bool {
        matches!(self, AdminError::Unreachable { .. })
    }

    fn from_driver(endpoint: &str, error: mongodb::error::Error) -> Self {
        let endpoint = endpoint.to_string();
        match *error.kind {
            ErrorKind::Command(command) => AdminError::Refused {
                endpoint,
                code: command.code,
                code_name: command.code_name,
                message: command.message,
            },
            ErrorKind::Authentication { message, .. } => AdminError::Refused {
                endpoint,
                code: codes::AUTHENTICATION_FAILED,
                code_name: "AuthenticationFailed".into(),
                message,
            },
            ErrorKind::Io(io) => AdminError::Unreachable {
                endpoint,
                detail: io.to_string(),
            },
            ErrorKind::ServerSelection { message, .. }
            | ErrorKind::ConnectionPoolCleared { message, .. }
            | ErrorKind::DnsResolve { message, .. } => AdminError::Unreachable {
                endpoint,
                detail: message,
            },
            other => AdminError::Unexpected {
                endpoint,
                detail: other.to_string(),
            },
        }
    }
}

/// What a member says about itself (`hello`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Hello {
    /// The replica set it belongs to; `None` before it was initiated or added.
    pub set_name: Option<String>,
    pub set_version: Option<i64>,
    pub is_writable_primary: bool,
    pub secondary: bool,
    pub arbiter_only: bool,
    /// Its own `host:port` in the configuration.
    pub me: Option<String>,
    /// The primary it knows of.
    pub primary: Option<String>,
    /// The last operation it applied (`lastWrite.opTime`), when it reports one.
    pub last_applied: Option<OpTime>,
}

/// A position in the oplog, ordered as the server orders them: by term, then by time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct OpTime {
    pub term: i64,
    pub time: u32,
    pub increment: u32,
}

impl std::fmt::Display for OpTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "term {} at {}.{}", self.term, self.time, self.increment)
    }
}

/// One member's entry in the replica set configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct ConfigMember {
    pub id: i32,
    pub host: String,
    pub votes: i32,
    pub priority: f64,
    pub hidden: bool,
    pub arbiter_only: bool,
    /// Fields the operator does not manage (tags, delays), kept as the set had them.
    pub other: Document,
}

impl ConfigMember {
    pub fn is_voting(&self) -> bool {
        self.votes > 0
    }

    fn from_document(member: &Document) -> Result<Self, String> {
        let mut other = member.clone();
        for field in ["_id", "host", "votes", "priority", "hidden", "arbiterOnly"] {
            other.remove(field);
        }
        Ok(Self {
            id: number(member, "_id").ok_or("member without _id")? as i32,
            host: member
                .get_str("host")
                .map_err(|_| "member without host")?
                .to_string(),
            votes: number(member, "votes").unwrap_or(1) as i32,
            priority: float(member, "priority").unwrap_or(1.0),
            hidden: member.get_bool("hidden").unwrap_or(false),
            arbiter_only: member.get_bool("arbiterOnly").unwrap_or(false),
            other,
        })
    }

    fn to_document(&self) -> Document {
        let mut member = doc! {
            "_id": self.id,
            "host": &self.host,
            "votes": self.votes,
            "priority": self.priority,
            "hidden": self.hidden,
            "arbiterOnly": self.arbiter_only,
        };
        member.extend(self.other.clone());
        member
    }
}

/// The set's featureCompatibilityVersion: `version`, and while a change of it was cut short
/// (an upgrade or downgrade of it interrupted), the `target` it was moving to. Only a settled
/// one (no `target`) says which releases the data runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FeatureCompatibility {
    pub version: String,
    pub target: Option<String>,
}

impl FeatureCompatibility {
    /// A settled featureCompatibilityVersion.
    pub fn settled(version: &str) -> Self {
        Self {
            version: version.to_string(),
            target: None,
        }
    }

    /// The version, unless a change of it was cut short.
    pub fn settled_version(&self) -> Option<&str> {
        self.target.is_none().then_some(self.version.as_str())
    }

    fn from_document(fcv: &Document) -> Option<Self> {
        Some(Self {
            version: fcv.get_str("version").ok()?.to_string(),
            target: fcv.get_str("targetVersion").ok().map(str::to_string),
        })
    }
}

impl std::fmt::Display for FeatureCompatibility {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.target {
            Some(target) => write!(
                f,
                "{}, moving to {target} (that change was cut short)",
                self.version
            ),
            None => f.write_str(&self.version),
        }
    }
}

/// The replica set configuration (`replSetGetConfig`), with the fields the operator does not
/// manage kept as the set had them.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplConfig {
    pub set_name: String,
    pub version: i64,
    pub members: Vec<ConfigMember>,
    /// `settings`, `protocolVersion`, `replicaSetId` and the like.
    pub other: Document,
}

impl ReplConfig {
    /// The first configuration of a set: version 1, the given members.
    pub fn initial(set_name: &str, members: Vec<ConfigMember>) -> Self {
        Self {
            set_name: set_name.to_string(),
            version: 1,
            members,
            other: doc! { "protocolVersion": 1_i64 },
        }
    }

    pub fn member(&self, host: &str) -> Option<&ConfigMember> {
        self.members.iter().find(|member| member.host == host)
    }

    pub fn voting_members(&self) -> usize {
        self.members.iter().filter(|member| member.is_voting()).count()
    }

    /// The same configuration with `members`, one version later.
    pub fn next(&self, members: Vec<ConfigMember>) -> Self {
        Self {
            set_name: self.set_name.clone(),
            version: self.version + 1,
            members,
            other: self.other.clone(),
        }
    }

    pub fn from_document(config: &Document) -> Result<Self, String> {
        let members = config
            .get_array("members")
            .map_err(|_| "configuration without members")?
            .iter()
            .map(|member| match member {
                Bson::Document(member) => ConfigMember::from_document(member),
                _ => Err("a member that is not a document".to_string()),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut other = config.clone();
        // The primary sets the term itself; sending it back would be refused by some versions.
        for field in ["_id", "version", "members", "term"] {
            other.remove(field);
        }
        Ok(Self {
            set_name: config
                .get_str("_id")
                .map_err(|_| "configuration without _id")?
                .to_string(),
            version: number(config, "version").ok_or("configuration without version")?,
            members,
            other,
        })
    }

    pub fn to_document(&self) -> Document {
        let mut config = doc! {
            "_id": &self.set_name,
            "version": self.version,
            "members": self.members.iter().map(|m| Bson::Document(m.to_document())).collect::<Vec<_>>(),
        };
        config.extend(self.other.clone());
        config
    }
}

/// A member's replica set state, as `replSetGetStatus` numbers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemberState {
    Startup,
    Primary,
    Secondary,
    Recovering,
    Startup2,
    Unknown,
    Arbiter,
    Down,
    Rollback,
    Removed,
}

impl MemberState {
    pub fn from_code(code: i64) -> Self {
        match code {
            0 => MemberState::Startup,
            1 => MemberState::Primary,
            2 => MemberState::Secondary,
            3 => MemberState::Recovering,
            5 => MemberState::Startup2,
            7 => MemberState::Arbiter,
            8 => MemberState::Down,
            9 => MemberState::Rollback,
            10 => MemberState::Removed,
            _ => MemberState::Unknown,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            MemberState::Startup => "STARTUP",
            MemberState::Primary => "PRIMARY",
            MemberState::Secondary => "SECONDARY",
            MemberState::Recovering => "RECOVERING",
            MemberState::Startup2 => "STARTUP2",
            MemberState::Unknown => "UNKNOWN",
            MemberState::Arbiter => "ARBITER",
            MemberState::Down => "DOWN",
            MemberState::Rollback => "ROLLBACK",
            MemberState::Removed => "REMOVED",
        }
    }

    /// Serving: a primary, a secondary, or an arbiter ready to vote.
    pub fn is_serving(self) -> bool {
        matches!(
            self,
            MemberState::Primary | MemberState::Secondary | MemberState::Arbiter
        )
    }
}

/// One member as the answering member sees it (`replSetGetStatus`).
#[derive(Clone, Debug, PartialEq)]
pub struct StatusMember {
    pub host: String,
    /// Whether the answering member hears the member's heartbeats.
    pub healthy: bool,
    pub state: MemberState,
    /// The last operation it applied.
    pub optime: Option<Timestamp>,
    pub config_version: Option<i64>,
    /// The answering member's own entry.
    pub is_self: bool,
    /// What the member says of its state: `infoMessage` on the answering member's own entry,
    /// `lastHeartbeatMessage` on the others'. Empty when it says nothing.
    pub message: String,
    /// When the answering member last received a heartbeat from it (`lastHeartbeatRecv`);
    /// `None` on the answering member's own entry and when it never did.
    pub last_heard_from: Option<jiff::Timestamp>,
    /// On a primary's own entry, when it was elected (`electionDate`).
    pub elected_at: Option<jiff::Timestamp>,
}

/// What a member too stale to catch up says of itself (the server's error RS102).
const TOO_STALE_MARKERS: [&str; 2] = ["RS102", "too stale to catch up"];

impl StatusMember {
    /// RECOVERING because its last applied operation is older than any sync source's oplog
    /// still reaches: it cannot catch up, only copy everything again.
    pub fn too_stale(&self) -> bool {
        self.state == MemberState::Recovering
            && TOO_STALE_MARKERS
                .iter()
                .any(|marker| self.message.contains(marker))
    }
}

/// `replSetGetStatus`.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplStatus {
    pub set_name: String,
    pub term: Option<i64>,
    pub members: Vec<StatusMember>,
}

impl ReplStatus {
    pub fn member(&self, host: &str) -> Option<&StatusMember> {
        self.members.iter().find(|member| member.host == host)
    }

    /// The answering member's entry for itself.
    pub fn own(&self) -> Option<&StatusMember> {
        self.members.iter().find(|member| member.is_self)
    }

    fn from_document(status: &Document) -> Result<Self, String> {
        let members = status
            .get_array("members")
            .map_err(|_| "status without members")?
            .iter()
            .filter_map(|member| member.as_document())
            .map(|member| StatusMember {
                host: member.get_str("name").unwrap_or_default().to_string(),
                healthy: float(member, "health").unwrap_or(0.0) > 0.0,
                state: MemberState::from_code(number(member, "state").unwrap_or(6)),
                optime: member
                    .get_document("optime")
                    .ok()
                    .and_then(|optime| optime.get_timestamp("ts").ok()),
                config_version: number(member, "configVersion"),
                is_self: member.get_bool("self").unwrap_or(false),
                message: ["infoMessage", "lastHeartbeatMessage", "errmsg"]
                    .iter()
                    .filter_map(|field| member.get_str(field).ok())
                    .find(|message| !message.is_empty())
                    .unwrap_or_default()
                    .to_string(),
                last_heard_from: date(member, "lastHeartbeatRecv"),
                elected_at: date(member, "electionDate"),
            })
            .collect();
        Ok(Self {
            set_name: status.get_str("set").unwrap_or_default().to_string(),
            term: number(status, "term"),
            members,
        })
    }
}

/// A date field; `None` when absent or the epoch (the server's "never").
fn date(document: &Document, field: &str) -> Option<jiff::Timestamp> {
    let millis = document.get_datetime(field).ok()?.timestamp_millis();
    (millis > 0)
        .then(|| jiff::Timestamp::from_millisecond(millis).ok())
        .flatten()
}

/// An integer field, whichever BSON number type the server used.
fn number(document: &Document, field: &str) -> Option<i64> {
    match document.get(field)? {
        Bson::Int32(value) => Some(i64::from(*value)),
        Bson::Int64(value) => Some(*value),
        Bson::Double(value) => Some(*value as i64),
        _ => None,
    }
}

fn float(document: &Document, field: &str) -> Option<f64> {
    match document.get(field)? {
        Bson::Int32(value) => Some(f64::from(*value)),
        Bson::Int64(value) => Some(*value as f64),
        Bson::Double(value) => Some(*value),
        _ => None,
    }
}

/// A direct connection to one member.
#[derive(Clone)]
pub struct MongoAdmin {
    client: Client,
    endpoint: String,
}

impl MongoAdmin {
    /// A client for the member at `address` (`host:port`). The driver connects lazily: an
    /// unreachable member shows up on the first command, as `Unreachable`.
    pub fn connect(
        address: &str,
        credentials: Option<&Credentials>,
        timeout: Duration,
    ) -> Result<Self, AdminError> {
        let unexpected = |detail: String| AdminError::Unexpected {
            endpoint: address.to_string(),
            detail,
        };
        let host = ServerAddress::parse(address).map_err(|e| unexpected(e.to_string()))?;
        let mut options = ClientOptions::builder()
            .hosts(vec![host])
            .direct_connection(true)
            .app_name("quorum-mongodb-operator".to_string())
            .connect_timeout(timeout)
            .server_selection_timeout(timeout)
            .retry_reads(false)
            .retry_writes(false)
            .build();
        options.credential = credentials.map(|credentials| {
            Credential::builder()
                .username(credentials.username.clone())
                .password(credentials.password.expose_secret().to_string())
                .source("admin".to_string())
                .mechanism(AuthMechanism::ScramSha256)
                .build()
        });
        let client = Client::with_options(options).map_err(|e| unexpected(e.to_string()))?;
        Ok(Self {
            client,
            endpoint: address.to_string(),
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The driver's client, for the backup archive's reads and writes.
    pub fn client(&self) -> &Client {
        &self.client
    }

    async fn command(&self, command: Document) -> Result<Document, AdminError> {
        self.client
            .database("admin")
            .run_command(command)
            .await
            .map_err(|error| AdminError::from_driver(&self.endpoint, error))
    }

    pub async fn ping(&self) -> Result<(), AdminError> {
        self.command(doc! { "ping": 1 }).await.map(|_| ())
    }

    pub async fn hello(&self) -> Result<Hello, AdminError> {
        let reply = self.command(doc! { "hello": 1 }).await?;
        Ok(Hello {
            set_name: reply.get_str("setName").ok().map(str::to_string),
            set_version: number(&reply, "setVersion"),
            is_writable_primary: reply
                .get_bool("isWritablePrimary")
                .or_else(|_| reply.get_bool("ismaster"))
                .unwrap_or(false),
            secondary: reply.get_bool("secondary").unwrap_or(false),
            arbiter_only: reply.get_bool("arbiterOnly").unwrap_or(false),
            me: reply.get_str("me").ok().map(str::to_string),
            primary: reply.get_str("primary").ok().map(str::to_string),
            last_applied: reply
                .get_document("lastWrite")
                .and_then(|last| last.get_document("opTime"))
                .ok()
                .and_then(|optime| {
                    let ts = optime.get_timestamp("ts").ok()?;
                    Some(OpTime {
                        term: number(optime, "t").unwrap_or(-1),
                        time: ts.time,
                        increment: ts.increment,
                    })
                }),
        })
    }

    /// The server's version (`7.0.14`).
    pub async fn server_version(&self) -> Result<String, AdminError> {
        let reply = self.command(doc! { "buildInfo": 1 }).await?;
        reply
            .get_str("version")
            .map(str::to_string)
            .map_err(|_| AdminError::Unexpected {
                endpoint: self.endpoint.clone(),
                detail: "buildInfo without version".into(),
            })
    }

    /// `replSetGetStatus`; `None` when the member was never initiated or added.
    pub async fn status(&self) -> Result<Option<ReplStatus>, AdminError> {
        match self.command(doc! { "replSetGetStatus": 1 }).await {
            Ok(reply) => ReplStatus::from_document(&reply)
                .map(Some)
                .map_err(|detail| self.unexpected(detail)),
            Err(error) if error.code() == Some(codes::NOT_YET_INITIALIZED) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// `replSetGetConfig`; `None` when the member was never initiated or added.
    pub async fn config(&self) -> Result<Option<ReplConfig>, AdminError> {
        match self.command(doc! { "replSetGetConfig": 1 }).await {
            Ok(reply) => {
                let config = reply
                    .get_document("config")
                    .map_err(|_| self.unexpected("replSetGetConfig without config".into()))?;
                ReplConfig::from_document(config)
                    .map(Some)
                    .map_err(|detail| self.unexpected(detail))
            }
            Err(error) if error.code() == Some(codes::NOT_YET_INITIALIZED) => Ok(None),
            Err(error) => Err(error),
        }
    }

    pub async fn initiate(&self, config: &ReplConfig) -> Result<(), AdminError> {
        self.command(doc! { "replSetInitiate": config.to_document() })
            .await
            .map(|_| ())
    }

    /// `replSetReconfig` without `force`: the set itself refuses what is unsafe (two voting
    /// changes, a stale version, a configuration not yet on a majority).
    pub async fn reconfig(&self, config: &ReplConfig) -> Result<(), AdminError> {
        self.command(doc! { "replSetReconfig": config.to_document() })
            .await
            .map(|_| ())
    }

    /// `replSetReconfig` with `force`, on a member that is not primary: how a set that lost its
    /// majority for good is given a configuration of the members left. Only ever on a person's
    /// request ([`quorum_core::recovery`]).
    pub async fn force_reconfig(&self, config: &ReplConfig) -> Result<(), AdminError> {
        self.command(doc! { "replSetReconfig": config.to_document(), "force": true })
            .await
            .map(|_| ())
    }

    /// `replSetStepDown`: the primary hands over to a caught-up secondary and stays out of
    /// elections for `seconds`.
    pub async fn step_down(&self, seconds: u32, catch_up_seconds: u32) -> Result<(), AdminError> {
        let command = doc! {
            "replSetStepDown": i64::from(seconds),
            "secondaryCatchUpPeriodSecs": i64::from(catch_up_seconds),
        };
        match self.command(command).await {
            Ok(_) => Ok(()),
            // Older servers close every connection on stepping down, so the reply is lost;
            // the next observation tells whether it stepped down.
            Err(error) if error.is_unreachable() => Ok(()),
            Err(error) => Err(error),
        }
    }

    pub async fn feature_compatibility_version(&self) -> Result<FeatureCompatibility, AdminError> {
        let reply = self
            .command(doc! { "getParameter": 1, "featureCompatibilityVersion": 1 })
            .await?;
        reply
            .get_document("featureCompatibilityVersion")
            .ok()
            .and_then(FeatureCompatibility::from_document)
            .ok_or_else(|| self.unexpected("getParameter without featureCompatibilityVersion".into()))
    }

    pub async fn set_feature_compatibility_version(&self, release: &str) -> Result<(), AdminError> {
        self.command(doc! { "setFeatureCompatibilityVersion": release, "confirm": true })
            .await
            .map(|_| ())
    }

    fn unexpected(&self, detail: String) -> AdminError {
        AdminError::Unexpected {
            endpoint: self.endpoint.clone(),
            detail,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As `getParameter` answers it: settled, or a change cut short on its way to `targetVersion`.
    #[test]
    fn a_feature_compatibility_version_cut_short_is_not_settled() {
        let settled = FeatureCompatibility::from_document(&doc! { "version": "7.0" }).unwrap();
        assert_eq!(settled.settled_version(), Some("7.0"));
        assert_eq!(settled.to_string(), "7.0");
        let cut_short =
            FeatureCompatibility::from_document(&doc! { "version": "6.0", "targetVersion": "7.0" }).unwrap();
        assert_eq!(cut_short.settled_version(), None);
        assert_eq!(cut_short.target.as_deref(), Some("7.0"));
    }

    fn member(id: i32, host: &str, votes: i32) -> ConfigMember {
        ConfigMember {
            id,
            host: host.into(),
            votes,
            priority: f64::from(votes),
            hidden: false,
            arbiter_only: false,
            other: Document::new(),
        }
    }

    #[test]
    fn a_configuration_round_trips_and_keeps_what_the_operator_does_not_manage() {
        let from_server = doc! {
            "_id": "rs0",
            "version": 4,
            "term": 7_i64,
            "protocolVersion": 1_i64,
            "members": [
                { "_id": 0, "host": "a:27017", "votes": 1, "priority": 1.0, "tags": { "zone": "a" } },
                { "_id": 1, "host": "b:27017", "votes": 0, "priority": 0.0, "hidden": true, "secondaryDelaySecs": 0_i64 },
            ],
            "settings": { "electionTimeoutMillis": 10000 },
        };
        let config = ReplConfig::from_document(&from_server).unwrap();
        assert_eq!(config.version, 4);
        assert_eq!(config.voting_members(), 1);
        assert!(config.member("b:27017").unwrap().hidden);

        let next = config.next(config.members.clone()).to_document();
        assert_eq!(next.get_i64("version").unwrap(), 5);
        assert!(next.get("term").is_none(), "the primary sets the term");
        assert_eq!(
            next.get_document("settings").unwrap(),
            &doc! { "electionTimeoutMillis": 10000 }
        );
        let members = next.get_array("members").unwrap();
        let first = members[0].as_document().unwrap();
        assert_eq!(first.get_document("tags").unwrap(), &doc! { "zone": "a" });
    }

    #[test]
    fn an_initial_configuration_is_version_one() {
        let config = ReplConfig::initial("rs0", vec![member(0, "a:27017", 1)]);
        let document = config.to_document();
        assert_eq!(document.get_i64("version").unwrap(), 1);
        assert_eq!(document.get_str("_id").unwrap(), "rs0");
    }

    #[test]
    fn credentials_never_print_the_password() {
        let credentials = Credentials {
            username: "admin".into(),
            password: SecretString::from("hunter2"),
        };
        assert!(!format!("{credentials:?}").contains("hunter2"));
    }
}
