//! Connections and command dispatch: the handshake (`hello`), SCRAM authentication, fail
//! points, and the data and user commands. Replica-set commands live in [`super::replset`].

use std::{collections::VecDeque, net::SocketAddr, sync::Arc, sync::atomic::Ordering, time::Duration};

use bson::{Binary, Bson, DateTime, Document, doc, oid::ObjectId, spec::BinarySubtype};
use tokio::net::TcpStream;

use super::{
    CmdError, is_retryable_code, log, query,
    replset::{Cursor, FailCommand, Inner, Node, Role, election_id},
    rules,
    scram::{self, Conversation, Credential, ScramError},
    state::{FCV_ID, OpTime, USERS, VERSION},
    wire,
};

/// Commands an unauthenticated connection may run.
const WITHOUT_AUTH: [&str; 9] = [
    "hello",
    "isMaster",
    "ismaster",
    "ping",
    "buildInfo",
    "buildinfo",
    "saslStart",
    "saslContinue",
    "endSessions",
];

/// Internal commands, between members only.
const INTERNAL: [&str; 5] = [
    "simHeartbeat",
    "simRequestVote",
    "simOplogFetch",
    "simInitialSync",
    "simStepUp",
];

/// One client connection's state.
pub struct Connection {
    pub id: i64,
    pub address: SocketAddr,
    pub user: Option<(String, String)>,
    sasl: Option<Sasl>,
    pub app_name: Option<String>,
}

struct Sasl {
    db: String,
    conversation: Conversation,
    skip_empty_exchange: bool,
    /// The proof was accepted; the client still sends its empty last message.
    awaiting_empty: bool,
}

enum Outcome {
    Reply(Document),
    Close,
}

pub async fn serve_connection(node: Arc<Node>, mut stream: TcpStream, address: SocketAddr) {
    let _ = stream.set_nodelay(true);
    node.connections.fetch_add(1, Ordering::Relaxed);
    node.total_connections.fetch_add(1, Ordering::Relaxed);
    let mut connection = Connection {
        id: node.connection_ids.fetch_add(1, Ordering::Relaxed),
        address,
        user: None,
        sasl: None,
        app_name: None,
    };
    let mut reply_ids = 1i32;
    while let Ok(request) = wire::read_request(&mut stream).await {
        let wants_reply = request.wants_reply();
        match handle(&node, &mut connection, request.command).await {
            Outcome::Close => break,
            Outcome::Reply(reply) => {
                if wants_reply {
                    reply_ids = reply_ids.wrapping_add(1);
                    if wire::write_message(&mut stream, reply_ids, request.request_id, &reply)
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
    }
    node.connections.fetch_sub(1, Ordering::Relaxed);
}

fn ok(mut document: Document) -> Document {
    document.insert("ok", 1.0);
    document
}

async fn handle(node: &Arc<Node>, connection: &mut Connection, command: Document) -> Outcome {
    let Some(name) = command.keys().next().cloned() else {
        return Outcome::Reply(CmdError::new(59, "no command in the message").to_document());
    };
    let db = command.get_str("$db").unwrap_or("admin").to_string();
    if INTERNAL.contains(&name.as_str()) {
        return internal(node, &name, &command).await;
    }
    if let Some(fail) = triggered_fail_point(node, connection, &name) {
        if let Some(block) = fail.block {
            tokio::time::sleep(block).await;
        }
        if fail.close_connection {
            return Outcome::Close;
        }
        if let Some(code) = fail.code {
            let mut error = CmdError::new(
                code,
                fail.message
                    .clone()
                    .unwrap_or_else(|| "Failing command via 'failCommand' failpoint".to_string()),
            );
            error.labels = fail.labels.clone();
            return Outcome::Reply(error.to_document());
        }
        if let Some(write_concern_error) = fail.write_concern_error {
            let reply = run_checked(node, connection, &name, &db, &command).await;
            return match reply {
                Outcome::Reply(mut reply) => {
                    reply.insert("writeConcernError", write_concern_error);
                    if !fail.labels.is_empty() {
                        reply.insert("errorLabels", fail.labels.clone());
                    }
                    Outcome::Reply(reply)
                }
                close => close,
            };
        }
    }
    run_checked(node, connection, &name, &db, &command).await
}

async fn run_checked(
    node: &Arc<Node>,
    connection: &mut Connection,
    name: &str,
    db: &str,
    command: &Document,
) -> Outcome {
    let needs_auth =
        !WITHOUT_AUTH.contains(&name) && connection.user.is_none() && node.with(|i| i.store.has_users());
    if needs_auth {
        return Outcome::Reply(
            CmdError::new(13, format!("Command {name} requires authentication")).to_document(),
        );
    }
    if name == "shutdown" {
        return match shutdown(node, db, command).await {
            Ok(()) => Outcome::Close,
            Err(error) => Outcome::Reply(error.to_document()),
        };
    }
    match run(node, connection, name, db, command).await {
        Ok(reply) => Outcome::Reply(reply),
        Err(mut error) => {
            let retryable_write = matches!(name, "insert" | "update" | "delete" | "findAndModify")
                && command.contains_key("txnNumber");
            if retryable_write
                && is_retryable_code(error.code)
                && !error.labels.iter().any(|l| l == "RetryableWriteError")
            {
                error.labels.push("RetryableWriteError".into());
            }
            Outcome::Reply(error.to_document())
        }
    }
}

async fn internal(node: &Arc<Node>, name: &str, command: &Document) -> Outcome {
    if let Some(key) = &node.key
        && command.get_str("key").ok() != Some(key.as_str())
    {
        log(
            &node.me,
            format!(
                "refused {name} from {}: cluster key mismatch",
                command.get_str("from").unwrap_or("?")
            ),
        );
        return Outcome::Reply(
            CmdError::new(18, "Authentication failed: cluster key mismatch").to_document(),
        );
    }
    let from = command.get_str("from").unwrap_or_default();
    if !from.is_empty() && node.is_partitioned(from) {
        return Outcome::Close;
    }
    let result = match name {
        "simHeartbeat" => node.on_heartbeat(command),
        "simRequestVote" => node.on_request_vote(command).await,
        "simOplogFetch" => node.on_oplog_fetch(command).await,
        "simInitialSync" => node.on_initial_sync(),
        "simStepUp" => node.repl_set_step_up(),
        _ => Err(CmdError::new(59, format!("no such command: '{name}'"))),
    };
    Outcome::Reply(result.unwrap_or_else(|e| e.to_document()))
}

fn triggered_fail_point(node: &Node, connection: &Connection, name: &str) -> Option<FailCommand> {
    if name == "configureFailPoint" {
        return None;
    }
    node.with(|inner| {
        let fail = inner.fail_command.as_mut()?;
        if !fail.commands.iter().any(|c| c == name) {
            return None;
        }
        if let Some(app) = &fail.app_name
            && connection.app_name.as_ref() != Some(app)
        {
            return None;
        }
        let triggered = fail.clone();
        if let Some(remaining) = fail.remaining.as_mut() {
            *remaining = remaining.saturating_sub(1);
            if *remaining == 0 {
                inner.fail_command = None;
            }
        }
        Some(triggered)
    })
}

fn admin_only(name: &str, db: &str) -> Result<(), CmdError> {
    if db == "admin" {
        Ok(())
    } else {
        Err(CmdError::new(
            13,
            format!("{name} may only be run against the admin database."),
        ))
    }
}

fn string_arg<'a>(command: &'a Document, name: &str) -> Result<&'a str, CmdError> {
    command
        .get_str(name)
        .map_err(|_| CmdError::new(2, format!("the {name} field must be a string")))
}

fn number(value: Option<&Bson>) -> Option<i64> {
    match value? {
        Bson::Int32(v) => Some(*v as i64),
        Bson::Int64(v) => Some(*v),
        Bson::Double(v) => Some(*v as i64),
        _ => None,
    }
}

async fn run(
    node: &Arc<Node>,
    connection: &mut Connection,
    name: &str,
    db: &str,
    command: &Document,
) -> Result<Document, CmdError> {
    match name {
        "hello" | "isMaster" | "ismaster" => Ok(hello(node, connection, command, name != "hello")),
        "ping" => Ok(ok(doc! {})),
        "buildInfo" | "buildinfo" => Ok(build_info(node)),
        "saslStart" => sasl_start(node, connection, db, command),
        "saslContinue" => sasl_continue(node, connection, command),
        "logout" => {
            connection.user = None;
            Ok(ok(doc! {}))
        }
        "endSessions" | "killAllSessions" | "killSessions" | "refreshSessions" => Ok(ok(doc! {})),
        "startSession" => Ok(ok(doc! {
            "id": { "id": Binary { subtype: BinarySubtype::Uuid, bytes: rand::random::<[u8; 16]>().to_vec() } },
            "timeoutMinutes": 30,
        })),
        "connectionStatus" => Ok(ok(doc! {
            "authInfo": {
                "authenticatedUsers": connection.user.iter().map(|(db, user)| Bson::Document(doc! { "user": user, "db": db })).collect::<Vec<_>>(),
                "authenticatedUserRoles": [],
            },
        })),
        "whatsmyuri" => Ok(ok(doc! { "you": connection.address.to_string() })),
        "getCmdLineOpts" => Ok(command_line(node)),
        "serverStatus" => Ok(server_status(node)),
        "replSetInitiate" => {
            admin_only(name, db)?;
            node.repl_set_initiate(command).await
        }
        "replSetGetConfig" => {
            admin_only(name, db)?;
            node.repl_set_get_config()
        }
        "replSetGetStatus" => {
            admin_only(name, db)?;
            node.repl_set_get_status()
        }
        "replSetReconfig" => {
            admin_only(name, db)?;
            node.repl_set_reconfig(command).await
        }
        "replSetStepDown" => {
            admin_only(name, db)?;
            node.repl_set_step_down(command).await
        }
        "replSetStepUp" => {
            admin_only(name, db)?;
            node.repl_set_step_up()
        }
        "replSetFreeze" => {
            admin_only(name, db)?;
            node.repl_set_freeze(command)
        }
        "listDatabases" => {
            admin_only(name, db)?;
            list_databases(node, command)
        }
        "listCollections" => list_collections(node, db, command),
        "listIndexes" => list_indexes(node, db, command),
        "find" => find(node, db, command),
        "getMore" => get_more(node, db, command),
        "killCursors" => kill_cursors(node, command),
        "count" => count(node, db, command),
        "aggregate" => aggregate(node, db, command),
        "insert" => insert(node, db, command).await,
        "applyOps" => {
            admin_only(name, db)?;
            apply_ops(node, command).await
        }
        "delete" => delete(node, db, command).await,
        "update" => update(node, db, command).await,
        "create" => create(node, db, command).await,
        "drop" => drop_collection(node, db, command).await,
        "dropDatabase" => drop_database(node, db, command).await,
        "createIndexes" => create_indexes(node, db, command).await,
        "dropIndexes" => drop_indexes(node, db, command).await,
        "createUser" => create_user(node, db, command).await,
        "updateUser" => update_user(node, db, command).await,
        "dropUser" => drop_user(node, db, command).await,
        "usersInfo" => users_info(node, db, command),
        "getParameter" => {
            admin_only(name, db)?;
            get_parameter(node, command)
        }
        "setFeatureCompatibilityVersion" => {
            admin_only(name, db)?;
            set_fcv(node, command).await
        }
        "configureFailPoint" => {
            admin_only(name, db)?;
            configure_fail_point(node, command)
        }
        "simPartition" => {
            admin_only(name, db)?;
            partition(node, command)
        }
        other => Err(CmdError::new(59, format!("no such command: '{other}'"))),
    }
}

/// The handshake reply, as a replica-set member gives it. No `topologyVersion`: clients poll.
fn hello(node: &Node, connection: &mut Connection, command: &Document, legacy: bool) -> Document {
    if connection.app_name.is_none()
        && let Ok(name) = command
            .get_document("client")
            .and_then(|c| c.get_document("application"))
            .and_then(|a| a.get_str("name"))
    {
        connection.app_name = Some(name.to_string());
    }
    let writable = if legacy { "ismaster" } else { "isWritablePrimary" };
    let mut reply = Document::new();
    if command.get_bool("helloOk").unwrap_or(false) {
        reply.insert("helloOk", true);
    }
    node.with(|inner| {
        let config = inner.config.as_ref();
        let member = config.and_then(|c| node.my_member(c));
        match (config, member) {
            (Some(config), Some(member)) if inner.role != Role::Removed => {
                let primary = inner.role == Role::Primary;
                let listed = |wanted: fn(&super::config::Member) -> bool| -> Vec<String> {
                    config
                        .members
                        .iter()
                        .filter(|m| wanted(m))
                        .map(|m| m.host.clone())
                        .collect()
                };
                let hosts = listed(|m| !m.hidden && !m.arbiter_only && m.priority > 0.0);
                let passives = listed(|m| !m.hidden && !m.arbiter_only && m.priority == 0.0);
                let arbiters = listed(|m| m.arbiter_only);
                reply.insert("hosts", hosts);
                if !passives.is_empty() {
                    reply.insert("passives", passives);
                }
                if !arbiters.is_empty() {
                    reply.insert("arbiters", arbiters);
                }
                reply.insert("setName", &config.name);
                reply.insert("setVersion", config.version);
                reply.insert(writable, primary);
                reply.insert("secondary", inner.role == Role::Secondary);
                if primary {
                    reply.insert("primary", &member.host);
                } else if let Some(known) = &inner.primary {
                    reply.insert("primary", known.clone());
                }
                reply.insert("me", &member.host);
                if inner.role == Role::Arbiter {
                    reply.insert("arbiterOnly", true);
                }
                if member.hidden {
                    reply.insert("hidden", true);
                }
                if member.priority == 0.0 && !member.arbiter_only {
                    reply.insert("passive", true);
                }
                if !member.tags.is_empty() {
                    reply.insert("tags", member.tags.clone());
                }
                if primary {
                    reply.insert("electionId", election_id(inner.store.term));
                }
                let last = inner.store.oplog.last();
                let last_date = last.map(|e| e.wall).unwrap_or(DateTime::from_millis(0));
                reply.insert(
                    "lastWrite",
                    doc! {
                        "opTime": inner.applied().to_document(),
                        "lastWriteDate": last_date,
                        "majorityOpTime": inner.commit_point.to_document(),
                        "majorityWriteDate": inner.commit_point.date(),
                    },
                );
            }
            _ => {
                reply.insert(writable, false);
                reply.insert("secondary", false);
                reply.insert("isreplicaset", true);
                reply.insert("info", "Does not have a valid replica set config");
            }
        }
    });
    reply.extend(doc! {
        "maxBsonObjectSize": 16_777_216,
        "maxMessageSizeBytes": wire::MAX_MESSAGE_SIZE as i32,
        "maxWriteBatchSize": 100_000,
        "localTime": DateTime::now(),
        "logicalSessionTimeoutMinutes": 30,
        "connectionId": connection.id as i32,
        "minWireVersion": 0,
        "maxWireVersion": node.binary.max_wire_version,
        "readOnly": false,
    });
    if command.contains_key("saslSupportedMechs") {
        reply.insert("saslSupportedMechs", vec![scram::MECHANISM]);
    }
    if let Ok(speculative) = command.get_document("speculativeAuthenticate") {
        let db = speculative.get_str("db").unwrap_or("admin").to_string();
        if let Ok(mut first) = sasl_start(node, connection, &db, speculative) {
            first.remove("ok");
            reply.insert("speculativeAuthenticate", first);
        }
    }
    reply.insert("ok", 1.0);
    reply
}

fn build_info(node: &Node) -> Document {
    ok(doc! {
        "version": &node.binary.version,
        "gitVersion": "mongo-sim",
        "versionArray": node.binary.version_array(),
        "bits": 64,
        "debug": false,
        "maxBsonObjectSize": 16_777_216,
        "storageEngines": ["mongo-sim"],
        "modules": [],
        "javascriptEngine": "none",
        "openssl": { "running": "disabled" },
    })
}

fn command_line(node: &Node) -> Document {
    let options = &node.options;
    let mut security = Document::new();
    if let Some(key_file) = &options.key_file {
        security.insert("keyFile", key_file.display().to_string());
        security.insert("authorization", "enabled");
    }
    ok(doc! {
        "argv": std::iter::once("mongo-sim".to_string()).chain(options.argv.iter().cloned()).collect::<Vec<_>>(),
        "parsed": {
            "net": { "bindIp": &options.bind_ip, "port": options.port as i32 },
            "replication": { "replSet": &options.repl_set },
            "storage": { "dbPath": options.dbpath.display().to_string() },
            "security": security,
        },
    })
}

fn server_status(node: &Node) -> Document {
    let uptime = node.started.elapsed();
    let repl = node.with(|inner| {
        let mut repl = doc! {
            "setName": &node.options.repl_set,
            "isWritablePrimary": inner.role == Role::Primary,
            "secondary": inner.role == Role::Secondary,
            "me": &node.me,
        };
        if let Some(primary) = &inner.primary {
            repl.insert("primary", primary.clone());
        }
        if let Some(config) = &inner.config {
            repl.insert("setVersion", config.version);
            repl.insert(
                "hosts",
                config.members.iter().map(|m| m.host.clone()).collect::<Vec<_>>(),
            );
        }
        repl
    });
    ok(doc! {
        "host": &node.me,
        "version": &node.binary.version,
        "process": "mongod",
        "pid": std::process::id() as i64,
        "uptime": uptime.as_secs_f64(),
        "uptimeMillis": uptime.as_millis() as i64,
        "uptimeEstimate": uptime.as_secs() as i64,
        "localTime": DateTime::now(),
        "connections": {
            "current": node.connections.load(Ordering::Relaxed) as i32,
            "available": 1_000_000 - node.connections.load(Ordering::Relaxed) as i32,
            "totalCreated": node.total_connections.load(Ordering::Relaxed) as i64,
        },
        "repl": repl,
        "storageEngine": { "name": "mongo-sim", "persistent": true },
    })
}

// Authentication.

fn binary_payload(command: &Document) -> Result<Vec<u8>, CmdError> {
    match command.get("payload") {
        Some(Bson::Binary(binary)) => Ok(binary.bytes.clone()),
        Some(Bson::String(text)) => Ok(text.clone().into_bytes()),
        _ => Err(CmdError::new(2, "payload must be BinData")),
    }
}

fn payload(bytes: Vec<u8>) -> Binary {
    Binary {
        subtype: BinarySubtype::Generic,
        bytes,
    }
}

fn auth_failed(node: &Node, user: &str, db: &str, why: &str) -> CmdError {
    log(&node.me, format!("Authentication failed for {user}@{db}: {why}"));
    CmdError::new(18, "Authentication failed.")
}

fn sasl_start(
    node: &Node,
    connection: &mut Connection,
    db: &str,
    command: &Document,
) -> Result<Document, CmdError> {
    let mechanism = command.get_str("mechanism").unwrap_or_default();
    if mechanism != scram::MECHANISM {
        return Err(CmdError::new(
            334,
            format!("Received authentication for mechanism {mechanism} which is unknown or not enabled"),
        ));
    }
    let first = binary_payload(command)?;
    let user = scram::client_first_user(&first).map_err(|e| CmdError::new(2, format!("{e:?}")))?;
    let credential = node.with(|inner| {
        inner
            .store
            .user(db, &user)
            .and_then(|u| u.get_document("credentials").ok())
            .and_then(|c| c.get_document(scram::MECHANISM).ok())
            .and_then(Credential::from_document)
    });
    let Some(credential) = credential else {
        return Err(auth_failed(node, &user, db, "no such user"));
    };
    let (conversation, server_first) = Conversation::start(&first, credential).map_err(|e| match e {
        ScramError::Malformed(message) => CmdError::new(2, message),
        ScramError::AuthenticationFailed => CmdError::new(18, "Authentication failed."),
    })?;
    let skip_empty_exchange = command
        .get_document("options")
        .and_then(|o| o.get_bool("skipEmptyExchange"))
        .unwrap_or(false);
    connection.sasl = Some(Sasl {
        db: db.to_string(),
        conversation,
        skip_empty_exchange,
        awaiting_empty: false,
    });
    Ok(ok(
        doc! { "conversationId": 1, "done": false, "payload": payload(server_first) },
    ))
}

fn sasl_continue(node: &Node, connection: &mut Connection, command: &Document) -> Result<Document, CmdError> {
    let Some(mut sasl) = connection.sasl.take() else {
        return Err(CmdError::new(17, "No SASL session state found"));
    };
    let conversation_id = command.get("conversationId").cloned().unwrap_or(Bson::Int32(1));
    if sasl.awaiting_empty {
        connection.user = Some((sasl.db.clone(), sasl.conversation.username.clone()));
        return Ok(ok(
            doc! { "conversationId": conversation_id, "done": true, "payload": payload(Vec::new()) },
        ));
    }
    let client_final = binary_payload(command)?;
    match sasl.conversation.finish(&client_final) {
        Ok(server_final) => {
            let done = sasl.skip_empty_exchange;
            if done {
                connection.user = Some((sasl.db.clone(), sasl.conversation.username.clone()));
            } else {
                sasl.awaiting_empty = true;
                connection.sasl = Some(sasl);
            }
            Ok(ok(
                doc! { "conversationId": conversation_id, "done": done, "payload": payload(server_final) },
            ))
        }
        Err(ScramError::Malformed(message)) => Err(CmdError::new(2, message)),
        Err(ScramError::AuthenticationFailed) => {
            log(
                &node.me,
                format!(
                    "Authentication failed for {}@{}: wrong proof",
                    sasl.conversation.username, sasl.db
                ),
            );
            Err(CmdError::new(18, "Authentication failed."))
        }
    }
}

/// A user document as `admin.system.users` holds it: a SCRAM-SHA-256 credential, never the
/// password.
pub fn user_document(db: &str, name: &str, credential: &Credential, roles: Vec<Bson>) -> Document {
    doc! {
        "_id": format!("{db}.{name}"),
        "userId": Binary { subtype: BinarySubtype::Uuid, bytes: rand::random::<[u8; 16]>().to_vec() },
        "user": name,
        "db": db,
        "credentials": { scram::MECHANISM: credential.to_document() },
        "roles": normalize_roles(db, roles),
    }
}

/// Roles given by name belong to the user's database.
fn normalize_roles(db: &str, roles: Vec<Bson>) -> Vec<Bson> {
    roles
        .into_iter()
        .map(|role| match role {
            Bson::String(role) => Bson::Document(doc! { "role": role, "db": db }),
            other => other,
        })
        .collect()
}

// Reads.

fn secondary_ok(command: &Document) -> bool {
    command
        .get_document("$readPreference")
        .ok()
        .and_then(|p| p.get_str("mode").ok())
        .is_some_and(|mode| mode != "primary")
}

/// Reads need the primary, or a secondary when the read preference allows it; the `local`
/// database is readable anywhere.
fn check_readable(inner: &Inner, command: &Document, db: &str) -> Result<(), CmdError> {
    if db == "local" {
        return Ok(());
    }
    match inner.role {
        Role::Primary => Ok(()),
        Role::Secondary if secondary_ok(command) => Ok(()),
        _ if secondary_ok(command) => Err(CmdError::new(13436, "node is not in primary or recovering state")),
        _ => Err(CmdError::new(13435, "not primary and secondaryOk=false")),
    }
}

fn check_writable(inner: &Inner, db: &str) -> Result<(), CmdError> {
    if db == "local" {
        return Err(CmdError::new(
            20,
            "writes to the local database are not simulated",
        ));
    }
    if inner.role != Role::Primary {
        return Err(CmdError::not_primary());
    }
    Ok(())
}

/// The documents of a collection (the oplog for `local.oplog.rs`).
fn documents(inner: &Inner, db: &str, collection: &str) -> Vec<Document> {
    if db == "local" && collection == "oplog.rs" {
        return inner
            .store
            .oplog
            .iter()
            .filter_map(|e| bson::to_document(e).ok())
            .collect();
    }
    inner
        .store
        .collection(db, collection)
        .map(|c| c.documents.clone())
        .unwrap_or_default()
}

fn cursor_reply(
    node: &Node,
    ns: String,
    documents: Vec<Document>,
    batch_size: Option<i64>,
    single_batch: bool,
) -> Document {
    let mut remaining: VecDeque<Document> = documents.into();
    let take = batch_size.filter(|b| *b > 0).map_or(101, |b| b as usize);
    let batch: Vec<Bson> = (0..take)
        .map_while(|_| remaining.pop_front())
        .map(Bson::Document)
        .collect();
    let id = if remaining.is_empty() || single_batch {
        0i64
    } else {
        let id = rand::random_range(1..i64::MAX);
        node.with(|inner| {
            inner.cursors.insert(
                id,
                Cursor {
                    ns: ns.clone(),
                    documents: remaining,
                },
            )
        });
        id
    };
    ok(doc! { "cursor": { "id": id, "ns": ns, "firstBatch": batch } })
}

fn filter_documents(documents: Vec<Document>, filter: &Document) -> Result<Vec<Document>, CmdError> {
    let mut kept = Vec::new();
    for document in documents {
        if query::matches(&document, filter)? {
            kept.push(document);
        }
    }
    Ok(kept)
}

fn list_databases(node: &Node, command: &Document) -> Result<Document, CmdError> {
    let (sizes, oplog) = node.with(|inner| {
        check_readable(inner, command, "admin")?;
        let oplog: i64 = inner
            .store
            .oplog
            .iter()
            .map(|e| bson::to_vec(e).map(|b| b.len() as i64).unwrap_or(0))
            .sum();
        Ok::<_, CmdError>((inner.store.database_sizes(), oplog))
    })?;
    let name_only = command.get_bool("nameOnly").unwrap_or(false);
    let mut entries: Vec<(String, i64)> = sizes;
    entries.push(("config".into(), 12_288));
    entries.push(("local".into(), oplog + 4096));
    entries.sort();
    let filter = command.get_document("filter").cloned().unwrap_or_default();
    let mut databases = Vec::new();
    let mut total = 0i64;
    for (name, size) in entries {
        let entry = if name_only {
            doc! { "name": &name }
        } else {
            doc! { "name": &name, "sizeOnDisk": size, "empty": false }
        };
        if query::matches(&entry, &filter)? {
            total += size;
            databases.push(Bson::Document(entry));
        }
    }
    if name_only {
        Ok(ok(doc! { "databases": databases }))
    } else {
        Ok(ok(
            doc! { "databases": databases, "totalSize": total, "totalSizeMb": total / (1024 * 1024) },
        ))
    }
}

fn id_index() -> Document {
    doc! { "v": 2, "key": { "_id": 1 }, "name": "_id_" }
}

fn list_collections(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let name_only = command.get_bool("nameOnly").unwrap_or(false);
    let entries = node.with(|inner| {
        check_readable(inner, command, db)?;
        let mut entries = Vec::new();
        if db == "local" {
            entries.push(("oplog.rs".to_string(), doc! { "capped": true }));
        }
        if let Some(collections) = inner.store.databases.get(db) {
            for (name, collection) in collections {
                entries.push((name.clone(), collection.options.clone()));
            }
        }
        Ok::<_, CmdError>(entries)
    })?;
    let documents = entries
        .into_iter()
        .map(|(name, options)| {
            if name_only {
                doc! { "name": name, "type": "collection" }
            } else {
                doc! {
                    "name": name,
                    "type": "collection",
                    "options": options,
                    "info": { "readOnly": false },
                    "idIndex": id_index(),
                }
            }
        })
        .collect();
    let filter = command.get_document("filter").cloned().unwrap_or_default();
    let documents = filter_documents(documents, &filter)?;
    let batch = command
        .get_document("cursor")
        .ok()
        .and_then(|c| number(c.get("batchSize")));
    Ok(cursor_reply(
        node,
        format!("{db}.$cmd.listCollections"),
        documents,
        batch,
        false,
    ))
}

fn list_indexes(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let collection = string_arg(command, "listIndexes")?;
    let indexes = node.with(|inner| {
        check_readable(inner, command, db)?;
        let found = inner
            .store
            .collection(db, collection)
            .ok_or_else(|| CmdError::new(26, format!("ns does not exist: {db}.{collection}")))?;
        Ok::<_, CmdError>(
            std::iter::once(id_index())
                .chain(found.indexes.iter().cloned())
                .collect::<Vec<_>>(),
        )
    })?;
    let batch = command
        .get_document("cursor")
        .ok()
        .and_then(|c| number(c.get("batchSize")));
    Ok(cursor_reply(
        node,
        format!("{db}.{collection}"),
        indexes,
        batch,
        false,
    ))
}

fn find(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let collection = string_arg(command, "find")?;
    let filter = command.get_document("filter").cloned().unwrap_or_default();
    let mut found = node.with(|inner| {
        check_readable(inner, command, db)?;
        filter_documents(documents(inner, db, collection), &filter)
    })?;
    if let Ok(sort) = command.get_document("sort") {
        query::sort(&mut found, sort)?;
    }
    let skip = number(command.get("skip")).unwrap_or(0).max(0) as usize;
    let limit = number(command.get("limit")).unwrap_or(0);
    let mut single_batch = command.get_bool("singleBatch").unwrap_or(false) || limit < 0;
    let mut found: Vec<Document> = found.into_iter().skip(skip).collect();
    if limit != 0 {
        found.truncate(limit.unsigned_abs() as usize);
    }
    if let Ok(projection) = command.get_document("projection") {
        found = found
            .iter()
            .map(|d| query::project(d, projection))
            .collect::<Result<_, _>>()?;
    }
    let mut batch = number(command.get("batchSize"));
    if limit != 0 && batch.is_none_or(|b| b == 0 || b >= limit.abs()) {
        batch = Some(limit.abs());
        single_batch = true;
    }
    Ok(cursor_reply(
        node,
        format!("{db}.{collection}"),
        found,
        batch,
        single_batch,
    ))
}

fn get_more(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let id = number(command.get("getMore")).ok_or_else(|| CmdError::new(2, "getMore needs a cursor id"))?;
    let collection = string_arg(command, "collection")?;
    let batch = number(command.get("batchSize"))
        .filter(|b| *b > 0)
        .map(|b| b as usize);
    let ns = format!("{db}.{collection}");
    node.with(|inner| {
        let cursor = inner
            .cursors
            .get_mut(&id)
            .filter(|c| c.ns == ns || c.ns.starts_with(&format!("{db}.$cmd")))
            .ok_or_else(|| CmdError::new(43, format!("cursor id {id} not found")))?;
        let take = batch.unwrap_or(usize::MAX);
        let next: Vec<Bson> = (0..take)
            .map_while(|_| cursor.documents.pop_front())
            .map(Bson::Document)
            .collect();
        let cursor_ns = cursor.ns.clone();
        let exhausted = cursor.documents.is_empty();
        if exhausted {
            inner.cursors.remove(&id);
        }
        Ok(ok(
            doc! { "cursor": { "id": if exhausted { 0 } else { id }, "ns": cursor_ns, "nextBatch": next } },
        ))
    })
}

fn kill_cursors(node: &Node, command: &Document) -> Result<Document, CmdError> {
    let ids: Vec<i64> = command
        .get_array("cursors")
        .map(|ids| ids.iter().filter_map(|id| number(Some(id))).collect())
        .unwrap_or_default();
    let (killed, missing): (Vec<i64>, Vec<i64>) =
        node.with(|inner| ids.into_iter().partition(|id| inner.cursors.remove(id).is_some()));
    Ok(ok(doc! {
        "cursorsKilled": killed,
        "cursorsNotFound": missing,
        "cursorsAlive": [],
        "cursorsUnknown": [],
    }))
}

fn count(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let collection = string_arg(command, "count")?;
    let filter = command.get_document("query").cloned().unwrap_or_default();
    let found = node.with(|inner| {
        check_readable(inner, command, db)?;
        filter_documents(documents(inner, db, collection), &filter)
    })?;
    let skip = number(command.get("skip")).unwrap_or(0).max(0) as usize;
    let mut n = found.len().saturating_sub(skip);
    if let Some(limit) = number(command.get("limit")).filter(|l| *l != 0) {
        n = n.min(limit.unsigned_abs() as usize);
    }
    Ok(ok(doc! { "n": n as i32 }))
}

fn aggregate(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let collection = match command.get("aggregate") {
        Some(Bson::String(name)) => Some(name.clone()),
        _ => None,
    };
    let pipeline = command
        .get_array("pipeline")
        .map_err(|_| CmdError::new(2, "'pipeline' option must be specified as an array"))?;
    let input = node.with(|inner| {
        check_readable(inner, command, db)?;
        Ok::<_, CmdError>(
            collection
                .as_deref()
                .map(|c| documents(inner, db, c))
                .unwrap_or_default(),
        )
    })?;
    let output = query::aggregate(input, pipeline)?;
    let batch = command
        .get_document("cursor")
        .ok()
        .and_then(|c| number(c.get("batchSize")));
    let ns = format!("{db}.{}", collection.as_deref().unwrap_or("$cmd.aggregate"));
    Ok(cursor_reply(node, ns, output, batch, false))
}

// Writes.

fn session_of(command: &Document) -> Option<(String, i64)> {
    let lsid = command.get_document("lsid").ok()?;
    let id = match lsid.get("id")? {
        Bson::Binary(binary) => hex::encode(&binary.bytes),
        other => other.to_string(),
    };
    Some((id, number(command.get("txnNumber"))?))
}

/// The default write concern a set without one gets: majority, except where arbiters leave
/// too few data-bearing voters for it, as the server computes it.
fn default_is_majority(inner: &Inner) -> bool {
    let Some(config) = &inner.config else {
        return false;
    };
    let arbiters = config.members.iter().filter(|m| m.arbiter_only).count();
    let data_voters = config.voters().filter(|m| !m.arbiter_only).count();
    !(arbiters > 0 && data_voters <= config.majority())
}

/// Waits for the command's write concern on `optime`; returns the `writeConcernError` when
/// it is not met in time.
async fn await_write_concern(
    node: &Node,
    command: &Document,
    optime: Option<OpTime>,
) -> Result<Option<Document>, CmdError> {
    let Some(optime) = optime else {
        return Ok(None);
    };
    let concern = command.get_document("writeConcern").cloned().unwrap_or_default();
    let w = match concern.get("w") {
        Some(Bson::String(mode)) if mode == "majority" => None,
        Some(Bson::String(mode)) => {
            return Err(CmdError::new(
                79,
                format!("Unrecognized write concern mode: {mode}"),
            ));
        }
        Some(other) => match number(Some(other)) {
            Some(n) => Some(n.max(0) as usize),
            None => return Err(CmdError::new(2, "w has to be a number or a string")),
        },
        None if node.with(|inner| default_is_majority(inner)) => None,
        None => Some(1),
    };
    if w.is_some_and(|w| w <= 1) {
        return Ok(None);
    }
    let timeout_ms = number(concern.get("wtimeout")).unwrap_or(0);
    let timeout = if timeout_ms > 0 {
        Duration::from_millis(timeout_ms as u64)
    } else {
        Duration::from_secs(24 * 3600)
    };
    // Only the primary that wrote the entry, still primary in the term it wrote it in, can
    // say it is replicated: once it steps down its commit point may come from a history that
    // rolls the entry back, so the wait ends with an error instead, as on the server.
    let leading = |inner: &Inner| inner.role == Role::Primary && inner.store.term == optime.t;
    let met = |inner: &Inner| {
        leading(inner)
            && match w {
                None => inner.commit_point >= optime,
                Some(count) => {
                    let others = inner.peers.values().filter(|p| p.durable >= optime).count();
                    usize::from(inner.durable >= optime) + others >= count
                }
            }
    };
    node.wait_for(timeout, |inner| met(inner) || !leading(inner))
        .await;
    let (met_now, still_leading) = node.with(|inner| (met(inner), leading(inner)));
    if met_now {
        return Ok(None);
    }
    if !still_leading {
        return Ok(Some(doc! {
            "code": 189,
            "codeName": "PrimarySteppedDown",
            "errmsg": "Primary stepped down while waiting for replication",
        }));
    }
    Ok(Some(doc! {
        "code": 64,
        "codeName": "WriteConcernFailed",
        "errmsg": "waiting for replication timed out",
        "errInfo": { "wtimeout": true, "writeConcern": concern },
    }))
}

fn write_reply(n: usize, errors: Vec<Bson>, concern_error: Option<Document>, command: &Document) -> Document {
    let mut reply = doc! { "n": n as i32 };
    if !errors.is_empty() {
        reply.insert("writeErrors", errors);
    }
    if let Some(concern_error) = concern_error {
        let retryable = concern_error.get_i32("code").is_ok_and(is_retryable_code);
        reply.insert("writeConcernError", concern_error);
        if retryable && command.contains_key("txnNumber") {
            reply.insert("errorLabels", vec!["RetryableWriteError"]);
        }
    }
    ok(reply)
}

fn duplicate(db: &str, collection: &str, index: usize, id: &Bson) -> Bson {
    Bson::Document(doc! {
        "index": index as i32,
        "code": 11000,
        "errmsg": format!("E11000 duplicate key error collection: {db}.{collection} index: _id_ dup key: {{ _id: {id} }}"),
        "keyPattern": { "_id": 1 },
        "keyValue": { "_id": id.clone() },
    })
}

fn documents_arg(command: &Document, name: &str) -> Result<Vec<Document>, CmdError> {
    command
        .get_array(name)
        .map_err(|_| CmdError::new(2, format!("the {name} field must be an array")))?
        .iter()
        .map(|d| {
            d.as_document()
                .cloned()
                .ok_or_else(|| CmdError::new(2, format!("{name} entries must be objects")))
        })
        .collect()
}

async fn insert(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let collection = string_arg(command, "insert")?.to_string();
    let documents = documents_arg(command, "documents")?;
    let ordered = command.get_bool("ordered").unwrap_or(true);
    let session = session_of(command);
    let ns = format!("{db}.{collection}");
    let (n, errors, last) = node.with(|inner| {
        check_writable(inner, db)?;
        if let Some((lsid, txn)) = &session
            && inner.store.sessions.get(lsid).is_some_and(|seen| seen >= txn)
        {
            // A retried write that already happened: answer as the first attempt did.
            return Ok((documents.len(), Vec::new(), Some(inner.applied())));
        }
        let mut n = 0;
        let mut errors = Vec::new();
        let mut last = None;
        for (index, mut document) in documents.into_iter().enumerate() {
            if !document.contains_key("_id") {
                let mut with_id = doc! { "_id": ObjectId::new() };
                with_id.extend(document);
                document = with_id;
            }
            let id = document.get("_id").cloned().unwrap_or(Bson::Null);
            let exists = inner
                .store
                .collection(db, &collection)
                .is_some_and(|c| c.contains_id(&id));
            if exists {
                errors.push(duplicate(db, &collection, index, &id));
                if ordered {
                    break;
                }
                continue;
            }
            match inner.write("i", &ns, document, None, session.clone()) {
                Ok(optime) => {
                    n += 1;
                    last = Some(optime);
                }
                Err(error) => return Err(CmdError::new(1, error)),
            }
        }
        Ok((n, errors, last))
    })?;
    let concern_error = await_write_concern(node, command, last).await?;
    Ok(write_reply(n, errors, concern_error, command))
}

/// `applyOps`: oplog entries (only `op`, `ns`, `o` and `o2` are read) applied the way oplog
/// application applies them, so that replaying entries a snapshot already holds changes nothing:
/// an insert of an `_id` that exists replaces the document, an update is an upsert of the
/// post-image, a delete of a missing `_id` and a no-op entry do nothing. Each is written to
/// this member's oplog with its own timestamp, so it replicates.
async fn apply_ops(node: &Node, command: &Document) -> Result<Document, CmdError> {
    let entries = documents_arg(command, "applyOps")?;
    let (applied, last) = node.with(|inner| {
        if inner.role != Role::Primary {
            return Err(CmdError::not_primary());
        }
        let mut last = None;
        for (index, entry) in entries.iter().enumerate() {
            let field = |name: &str| {
                entry
                    .get_str(name)
                    .map_err(|_| CmdError::new(2, format!("applyOps entry {index}: {name} must be a string")))
            };
            let op = field("op")?;
            if op == "n" {
                continue;
            }
            let ns = field("ns")?;
            let (db, collection) = ns.split_once('.').ok_or_else(|| {
                CmdError::new(73, format!("applyOps entry {index}: invalid namespace {ns}"))
            })?;
            check_writable(inner, db)?;
            let o = entry
                .get_document("o")
                .map_err(|_| CmdError::new(2, format!("applyOps entry {index}: o must be a document")))?
                .clone();
            let existing = |id: &Bson| {
                inner
                    .store
                    .collection(db, collection)
                    .is_some_and(|c| c.contains_id(id))
            };
            let (op, o2) = match op {
                "i" => {
                    let id = o.get("_id").cloned().unwrap_or(Bson::Null);
                    match existing(&id) {
                        true => ("u", Some(doc! { "_id": id })),
                        false => ("i", None),
                    }
                }
                "u" => ("u", entry.get_document("o2").ok().cloned()),
                "d" if !existing(o.get("_id").unwrap_or(&Bson::Null)) => continue,
                "d" => ("d", None),
                "c" => ("c", None),
                other => {
                    return Err(CmdError::new(
                        2,
                        format!("applyOps entry {index}: unknown op {other}"),
                    ));
                }
            };
            last = Some(
                inner
                    .write(op, ns, o, o2, None)
                    .map_err(|e| CmdError::new(1, e))?,
            );
        }
        Ok::<_, CmdError>((entries.len(), last))
    })?;
    let concern_error = await_write_concern(node, command, last).await?;
    let mut reply = doc! { "applied": applied as i32, "results": vec![Bson::Boolean(true); applied] };
    if let Some(concern_error) = concern_error {
        reply.insert("writeConcernError", concern_error);
    }
    Ok(ok(reply))
}

async fn delete(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let collection = string_arg(command, "delete")?.to_string();
    let deletes = documents_arg(command, "deletes")?;
    let session = session_of(command);
    let ns = format!("{db}.{collection}");
    let (n, last) = node.with(|inner| {
        check_writable(inner, db)?;
        if let Some((lsid, txn)) = &session
            && inner.store.sessions.get(lsid).is_some_and(|seen| seen >= txn)
        {
            return Ok((0, Some(inner.applied())));
        }
        let mut n = 0;
        let mut last = None;
        for delete in deletes {
            let filter = delete.get_document("q").cloned().unwrap_or_default();
            let limit = number(delete.get("limit")).unwrap_or(0);
            let mut matched = filter_documents(documents(inner, db, &collection), &filter)?;
            if limit == 1 {
                matched.truncate(1);
            }
            for document in matched {
                let id = document.get("_id").cloned().unwrap_or(Bson::Null);
                last = Some(
                    inner
                        .write("d", &ns, doc! { "_id": id }, None, session.clone())
                        .map_err(|e| CmdError::new(1, e))?,
                );
                n += 1;
            }
        }
        Ok::<_, CmdError>((n, last))
    })?;
    let concern_error = await_write_concern(node, command, last).await?;
    Ok(write_reply(n, Vec::new(), concern_error, command))
}

/// Applies an update document: a replacement, or `$set`, `$unset` and `$inc` on top-level
/// fields.
fn updated(original: &Document, update: &Document) -> Result<Document, CmdError> {
    let id = original.get("_id").cloned();
    if !update.keys().any(|k| k.starts_with('$')) {
        let mut replacement = Document::new();
        if let Some(id) = id {
            replacement.insert("_id", id);
        }
        for (key, value) in update {
            if key != "_id" {
                replacement.insert(key.clone(), value.clone());
            }
        }
        return Ok(replacement);
    }
    let mut result = original.clone();
    for (operator, fields) in update {
        let fields = fields.as_document().ok_or_else(|| {
            CmdError::new(
                9,
                format!("Modifiers operate on fields but we found another type instead: {operator}"),
            )
        })?;
        for (field, value) in fields {
            if field.contains('.') {
                return Err(CmdError::new(2, "dotted update paths are not simulated"));
            }
            if field == "_id" {
                return Err(CmdError::new(
                    66,
                    "Performing an update on the path '_id' would modify the immutable field '_id'",
                ));
            }
            match operator.as_str() {
                "$set" => {
                    result.insert(field.clone(), value.clone());
                }
                "$unset" => {
                    result.remove(field);
                }
                "$inc" => {
                    if !matches!(value, Bson::Int32(_) | Bson::Int64(_) | Bson::Double(_)) {
                        return Err(CmdError::new(14, "Cannot increment with non-numeric argument"));
                    }
                    let current = result.get(field).cloned().unwrap_or(Bson::Int32(0));
                    result.insert(field.clone(), query::add(&current, value));
                }
                other => return Err(CmdError::new(9, format!("Unknown modifier: {other}"))),
            }
        }
    }
    Ok(result)
}

async fn update(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let collection = string_arg(command, "update")?.to_string();
    let updates = documents_arg(command, "updates")?;
    let session = session_of(command);
    let ns = format!("{db}.{collection}");
    let (n, modified, upserted, last) = node.with(|inner| {
        check_writable(inner, db)?;
        let mut n = 0;
        let mut modified = 0;
        let mut upserted = Vec::new();
        let mut last = None;
        for (index, entry) in updates.into_iter().enumerate() {
            let filter = entry.get_document("q").cloned().unwrap_or_default();
            let change = entry
                .get_document("u")
                .map_err(|_| CmdError::new(2, "pipeline updates are not simulated"))?
                .clone();
            let multi = entry.get_bool("multi").unwrap_or(false);
            let mut matched = filter_documents(documents(inner, db, &collection), &filter)?;
            if !multi {
                matched.truncate(1);
            }
            if matched.is_empty() && entry.get_bool("upsert").unwrap_or(false) {
                let mut base = Document::new();
                for (key, value) in &filter {
                    if !key.starts_with('$')
                        && !matches!(value, Bson::Document(d) if d.keys().any(|k| k.starts_with('$')))
                    {
                        base.insert(key.clone(), value.clone());
                    }
                }
                let mut document = updated(&base, &change)?;
                if !document.contains_key("_id") {
                    let mut with_id =
                        doc! { "_id": base.get("_id").cloned().unwrap_or(Bson::ObjectId(ObjectId::new())) };
                    with_id.extend(document);
                    document = with_id;
                }
                let id = document.get("_id").cloned().unwrap_or(Bson::Null);
                last = Some(
                    inner
                        .write("i", &ns, document, None, session.clone())
                        .map_err(|e| CmdError::new(1, e))?,
                );
                upserted.push(Bson::Document(doc! { "index": index as i32, "_id": id }));
                n += 1;
                continue;
            }
            for original in matched {
                n += 1;
                let new = updated(&original, &change)?;
                if new == original {
                    continue;
                }
                let id = original.get("_id").cloned().unwrap_or(Bson::Null);
                last = Some(
                    inner
                        .write("u", &ns, new, Some(doc! { "_id": id }), session.clone())
                        .map_err(|e| CmdError::new(1, e))?,
                );
                modified += 1;
            }
        }
        Ok::<_, CmdError>((n, modified, upserted, last))
    })?;
    let concern_error = await_write_concern(node, command, last).await?;
    let mut reply = write_reply(n, Vec::new(), concern_error, command);
    reply.insert("nModified", modified);
    if !upserted.is_empty() {
        reply.insert("upserted", upserted);
    }
    Ok(reply)
}

/// Writes one command entry (`create`, `drop`, ...) on the primary and waits for its write
/// concern.
async fn command_entry(
    node: &Node,
    db: &str,
    command: &Document,
    entry: Document,
) -> Result<Option<Document>, CmdError> {
    let optime = node.with(|inner| {
        check_writable(inner, db)?;
        inner
            .write("c", &format!("{db}.$cmd"), entry, None, None)
            .map_err(|e| CmdError::new(1, e))
    })?;
    await_write_concern(node, command, Some(optime)).await
}

fn with_concern_error(mut reply: Document, concern_error: Option<Document>) -> Document {
    if let Some(concern_error) = concern_error {
        reply.insert("writeConcernError", concern_error);
    }
    ok(reply)
}

async fn create(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let collection = string_arg(command, "create")?.to_string();
    let exists = node.with(|inner| {
        check_writable(inner, db)?;
        Ok::<_, CmdError>(inner.store.collection(db, &collection).is_some())
    })?;
    if exists {
        return Err(CmdError::new(
            48,
            format!("Collection {db}.{collection} already exists."),
        ));
    }
    let mut entry = doc! { "create": &collection };
    for (key, value) in command {
        if !key.starts_with('$') && !matches!(key.as_str(), "create" | "lsid" | "writeConcern" | "txnNumber")
        {
            entry.insert(key.clone(), value.clone());
        }
    }
    let concern_error = command_entry(node, db, command, entry).await?;
    Ok(with_concern_error(doc! {}, concern_error))
}

async fn drop_collection(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let collection = string_arg(command, "drop")?.to_string();
    let indexes = node.with(|inner| {
        check_writable(inner, db)?;
        Ok::<_, CmdError>(
            inner
                .store
                .collection(db, &collection)
                .map(|c| c.indexes.len() + 1),
        )
    })?;
    let Some(indexes) = indexes else {
        // Dropping what does not exist succeeds, as it does since 7.0.
        return Ok(ok(doc! {}));
    };
    let concern_error = command_entry(node, db, command, doc! { "drop": &collection }).await?;
    Ok(with_concern_error(
        doc! { "nIndexesWas": indexes as i32, "ns": format!("{db}.{collection}") },
        concern_error,
    ))
}

async fn drop_database(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    if matches!(db, "admin" | "config" | "local") {
        return Err(CmdError::new(
            20,
            format!("Dropping the '{db}' database is prohibited."),
        ));
    }
    let exists = node.with(|inner| {
        check_writable(inner, db)?;
        Ok::<_, CmdError>(inner.store.databases.contains_key(db))
    })?;
    if !exists {
        return Ok(ok(doc! {}));
    }
    let concern_error = command_entry(node, db, command, doc! { "dropDatabase": 1 }).await?;
    Ok(with_concern_error(doc! { "dropped": db }, concern_error))
}

async fn create_indexes(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let collection = string_arg(command, "createIndexes")?.to_string();
    let specs = documents_arg(command, "indexes")?;
    let ns = format!("{db}.$cmd");
    let (before, after, created, last) = node.with(|inner| {
        check_writable(inner, db)?;
        let existing = inner.store.collection(db, &collection);
        let created = existing.is_none();
        let before = existing.map_or(1, |c| c.indexes.len() + 1);
        let mut last = None;
        if created {
            last = Some(
                inner
                    .write("c", &ns, doc! { "create": &collection }, None, None)
                    .map_err(|e| CmdError::new(1, e))?,
            );
        }
        for spec in specs {
            let name = spec
                .get_str("name")
                .map_err(|_| CmdError::new(9, "Error in specification: the name field must be a string"))?
                .to_string();
            if !spec.contains_key("key") {
                return Err(CmdError::new(
                    9,
                    "Error in specification: the key field is required",
                ));
            }
            let known = name == "_id_"
                || inner.store.collection(db, &collection).is_some_and(|c| {
                    c.indexes
                        .iter()
                        .any(|i| i.get_str("name").ok() == Some(name.as_str()))
                });
            if !known {
                let mut stored = doc! { "v": 2 };
                stored.extend(spec);
                last = Some(
                    inner
                        .write(
                            "c",
                            &ns,
                            {
                                // As the server logs it: the specification beside the name.
                                let mut entry = doc! { "createIndexes": &collection };
                                entry.extend(stored);
                                entry
                            },
                            None,
                            None,
                        )
                        .map_err(|e| CmdError::new(1, e))?,
                );
            }
        }
        let after = inner
            .store
            .collection(db, &collection)
            .map_or(1, |c| c.indexes.len() + 1);
        Ok::<_, CmdError>((before, after, created, last))
    })?;
    let concern_error = await_write_concern(node, command, last).await?;
    Ok(with_concern_error(
        doc! {
            "numIndexesBefore": before as i32,
            "numIndexesAfter": after as i32,
            "createdCollectionAutomatically": created,
        },
        concern_error,
    ))
}

async fn drop_indexes(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let collection = string_arg(command, "dropIndexes")?.to_string();
    let index = match command.get("index") {
        Some(Bson::String(name)) => name.clone(),
        _ => {
            return Err(CmdError::new(
                2,
                "only dropping indexes by name or \"*\" is simulated",
            ));
        }
    };
    if index == "_id_" {
        return Err(CmdError::new(72, "cannot drop _id index"));
    }
    let count = node.with(|inner| {
        check_writable(inner, db)?;
        let found = inner
            .store
            .collection(db, &collection)
            .ok_or_else(|| CmdError::new(26, format!("ns not found {db}.{collection}")))?;
        if index != "*"
            && !found
                .indexes
                .iter()
                .any(|i| i.get_str("name").ok() == Some(index.as_str()))
        {
            return Err(CmdError::new(27, format!("index not found with name [{index}]")));
        }
        Ok(found.indexes.len() + 1)
    })?;
    let concern_error = command_entry(
        node,
        db,
        command,
        doc! { "dropIndexes": &collection, "index": &index },
    )
    .await?;
    Ok(with_concern_error(
        doc! { "nIndexesWas": count as i32 },
        concern_error,
    ))
}

// Users.

fn roles_arg(command: &Document) -> Result<Vec<Bson>, CmdError> {
    Ok(command
        .get_array("roles")
        .map_err(|_| CmdError::new(2, "\"roles\" field must be an array"))?
        .clone())
}

async fn create_user(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let name = string_arg(command, "createUser")?.to_string();
    let password = string_arg(command, "pwd")?.to_string();
    if let Ok(mechanisms) = command.get_array("mechanisms")
        && !mechanisms.iter().any(|m| m.as_str() == Some(scram::MECHANISM))
    {
        return Err(CmdError::new(2, "only SCRAM-SHA-256 credentials are simulated"));
    }
    let credential =
        Credential::generate(&password, node.options.scram_iterations).map_err(|e| CmdError::new(2, e))?;
    let user = user_document(db, &name, &credential, roles_arg(command)?);
    let optime = node.with(|inner| {
        check_writable(inner, db)?;
        if inner.store.user(db, &name).is_some() {
            return Err(CmdError::new(
                51003,
                format!("User \"{name}@{db}\" already exists"),
            ));
        }
        inner
            .write("i", &format!("{}.{}", USERS.0, USERS.1), user, None, None)
            .map_err(|e| CmdError::new(1, e))
    })?;
    let concern_error = await_write_concern(node, command, Some(optime)).await?;
    Ok(with_concern_error(doc! {}, concern_error))
}

async fn update_user(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let name = string_arg(command, "updateUser")?.to_string();
    let optime = node.with(|inner| {
        check_writable(inner, db)?;
        let mut user =
            inner.store.user(db, &name).cloned().ok_or_else(|| {
                CmdError::new(11, format!("Could not find user \"{name}\" for db \"{db}\""))
            })?;
        if let Ok(password) = command.get_str("pwd") {
            let credential = Credential::generate(password, node.options.scram_iterations)
                .map_err(|e| CmdError::new(2, e))?;
            user.insert("credentials", doc! { scram::MECHANISM: credential.to_document() });
        }
        if command.contains_key("roles") {
            user.insert("roles", normalize_roles(db, roles_arg(command)?));
        }
        let id = user.get("_id").cloned().unwrap_or(Bson::Null);
        inner
            .write(
                "u",
                &format!("{}.{}", USERS.0, USERS.1),
                user,
                Some(doc! { "_id": id }),
                None,
            )
            .map_err(|e| CmdError::new(1, e))
    })?;
    let concern_error = await_write_concern(node, command, Some(optime)).await?;
    Ok(with_concern_error(doc! {}, concern_error))
}

async fn drop_user(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let name = string_arg(command, "dropUser")?.to_string();
    let optime = node.with(|inner| {
        check_writable(inner, db)?;
        if inner.store.user(db, &name).is_none() {
            return Err(CmdError::new(11, format!("User '{name}@{db}' not found")));
        }
        inner
            .write(
                "d",
                &format!("{}.{}", USERS.0, USERS.1),
                doc! { "_id": format!("{db}.{name}") },
                None,
                None,
            )
            .map_err(|e| CmdError::new(1, e))
    })?;
    let concern_error = await_write_concern(node, command, Some(optime)).await?;
    Ok(with_concern_error(doc! {}, concern_error))
}

fn users_info(node: &Node, db: &str, command: &Document) -> Result<Document, CmdError> {
    let wanted: Option<(String, String)> = match command.get("usersInfo") {
        Some(Bson::String(name)) => Some((db.to_string(), name.clone())),
        Some(Bson::Document(user)) => Some((
            user.get_str("db").unwrap_or(db).to_string(),
            user.get_str("user").unwrap_or_default().to_string(),
        )),
        _ => None,
    };
    let users = node.with(|inner| {
        inner
            .store
            .collection(USERS.0, USERS.1)
            .map(|c| c.documents.clone())
            .unwrap_or_default()
    });
    let users: Vec<Bson> = users
        .into_iter()
        .filter(|u| match &wanted {
            Some((wanted_db, wanted_user)) => {
                u.get_str("db").ok() == Some(wanted_db.as_str())
                    && u.get_str("user").ok() == Some(wanted_user.as_str())
            }
            None => u.get_str("db").ok() == Some(db),
        })
        .map(|mut u| {
            u.remove("credentials");
            u.insert("mechanisms", vec![scram::MECHANISM]);
            Bson::Document(u)
        })
        .collect();
    Ok(ok(doc! { "users": users }))
}

// Administration and faults.

fn get_parameter(node: &Node, command: &Document) -> Result<Document, CmdError> {
    let all = command.get_str("getParameter").ok() == Some("*");
    let fcv = node
        .with(|inner| inner.store.fcv())
        .unwrap_or_else(|| node.binary.release.clone());
    let mut reply = Document::new();
    for key in command.keys() {
        if key == "getParameter" || key.starts_with('$') || matches!(key.as_str(), "lsid" | "txnNumber") {
            continue;
        }
        if key != "featureCompatibilityVersion" {
            return Err(CmdError::new(72, "no option found to get"));
        }
    }
    if all || command.contains_key("featureCompatibilityVersion") {
        reply.insert("featureCompatibilityVersion", doc! { "version": fcv });
    }
    if reply.is_empty() {
        return Err(CmdError::new(72, "no option found to get"));
    }
    Ok(ok(reply))
}

async fn set_fcv(node: &Node, command: &Document) -> Result<Document, CmdError> {
    let target = string_arg(command, "setFeatureCompatibilityVersion")?.to_string();
    let binary = rules::version_pair(&node.binary.release).unwrap_or((0, 0));
    if binary >= (7, 0) && !command.get_bool("confirm").unwrap_or(false) {
        return Err(CmdError::new(
            7369100,
            "Once you have upgraded or downgraded the feature compatibility version, you will not be able to go back without support assistance. Please re-run this command with 'confirm: true' to acknowledge this and continue.",
        ));
    }
    let optime = node.with(|inner| {
        if inner.role != Role::Primary {
            return Err(CmdError::not_primary());
        }
        let config = inner.config.as_ref().ok_or_else(CmdError::not_primary)?;
        let members: Vec<(String, Option<String>)> = config
            .members
            .iter()
            .map(|m| {
                let version = if node.is_me(&m.host) {
                    Some(node.binary.release.clone())
                } else {
                    inner.peer_view(&m.host).and_then(|p| p.binary.clone())
                };
                (m.host.clone(), version)
            })
            .collect();
        rules::check_fcv_target(&target, &members)?;
        if inner.store.fcv().as_deref() == Some(target.as_str()) {
            return Ok(None);
        }
        let ns = format!("{}.{}", VERSION.0, VERSION.1);
        inner
            .write(
                "u",
                &ns,
                doc! { "_id": FCV_ID, "version": &target },
                Some(doc! { "_id": FCV_ID }),
                None,
            )
            .map(Some)
            .map_err(|e| CmdError::new(1, e))
    })?;
    let Some(optime) = optime else {
        return Ok(ok(doc! {}));
    };
    log(&node.me, format!("feature compatibility version set to {target}"));
    let mut majority = command.clone();
    majority.insert("writeConcern", doc! { "w": "majority", "wtimeout": 60_000 });
    let concern_error = await_write_concern(node, &majority, Some(optime)).await?;
    Ok(with_concern_error(doc! {}, concern_error))
}

fn configure_fail_point(node: &Node, command: &Document) -> Result<Document, CmdError> {
    let name = string_arg(command, "configureFailPoint")?.to_string();
    let mode = command.get("mode").cloned().unwrap_or(Bson::String("off".into()));
    let remaining = match &mode {
        Bson::String(mode) if mode == "off" => Some(0),
        Bson::String(mode) if mode == "alwaysOn" => None,
        Bson::Document(mode) if mode.contains_key("times") => {
            Some(number(mode.get("times")).unwrap_or(0).max(0) as u64)
        }
        other => return Err(CmdError::new(2, format!("unsupported fail point mode {other}"))),
    };
    let data = command.get_document("data").cloned().unwrap_or_default();
    match name.as_str() {
        "failCommand" => {
            let fail = FailCommand {
                remaining,
                commands: data
                    .get_array("failCommands")
                    .map(|c| c.iter().filter_map(|n| n.as_str().map(str::to_string)).collect())
                    .unwrap_or_default(),
                code: number(data.get("errorCode")).map(|c| c as i32),
                message: data.get_str("errorMessage").ok().map(str::to_string),
                close_connection: data.get_bool("closeConnection").unwrap_or(false),
                block: data.get_bool("blockConnection").unwrap_or(false).then(|| {
                    Duration::from_millis(number(data.get("blockTimeMS")).unwrap_or(0).max(0) as u64)
                }),
                app_name: data.get_str("appName").ok().map(str::to_string),
                labels: data
                    .get_array("errorLabels")
                    .map(|l| l.iter().filter_map(|n| n.as_str().map(str::to_string)).collect())
                    .unwrap_or_default(),
                write_concern_error: data.get_document("writeConcernError").ok().cloned(),
            };
            node.with(|inner| inner.fail_command = (remaining != Some(0)).then_some(fail));
        }
        "stopReplProducer" | "rsSyncApplyStop" => {
            node.with(|inner| inner.stop_replication = remaining != Some(0));
        }
        other => return Err(CmdError::new(2, format!("No failpoint named {other}"))),
    }
    log(&node.me, format!("fail point {name} set to {mode}"));
    Ok(ok(doc! { "count": 0 }))
}

fn partition(node: &Node, command: &Document) -> Result<Document, CmdError> {
    let hosts: Vec<String> = command
        .get_array("simPartition")
        .map_err(|_| CmdError::new(2, "simPartition takes an array of host:port"))?
        .iter()
        .map(|h| {
            h.as_str()
                .map(|h| super::config::normalize_host(h).to_ascii_lowercase())
                .ok_or_else(|| CmdError::new(2, "simPartition takes an array of host:port"))
        })
        .collect::<Result<_, _>>()?;
    for host in &hosts {
        node.peers_client.forget(host);
    }
    log(&node.me, format!("partitioned from [{}]", hosts.join(", ")));
    node.with(|inner| inner.partitioned = hosts.iter().cloned().collect());
    Ok(ok(doc! { "partitioned": hosts }))
}

async fn shutdown(node: &Arc<Node>, db: &str, command: &Document) -> Result<(), CmdError> {
    admin_only("shutdown", db)?;
    let force = command.get_bool("force").unwrap_or(false);
    let (primary, others) = node.with(|inner| {
        let others = inner
            .config
            .as_ref()
            .is_some_and(|c| c.members.iter().any(|m| m.is_electable() && !node.is_me(&m.host)));
        (inner.role == Role::Primary, others)
    });
    if primary && others && !force {
        let seconds = number(command.get("timeoutSecs")).unwrap_or(10).max(1);
        node.repl_set_step_down(&doc! {
            "replSetStepDown": seconds.max(10) as i32,
            "secondaryCatchUpPeriodSecs": seconds as i32,
        })
        .await?;
    }
    node.request_shutdown(0);
    Ok(())
}
