//! The MySQL/MariaDB admin verbs against real MariaDB processes on distinct loopback addresses:
//! a primary and replicas wired together through the verbs under test.

use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use mysql_operator::admin::{
    AdminError, Credentials, IoThread, MySqlAdmin, ReplicationSource, SemiSyncRole,
    binlog::{self, BinlogError, ReplayStop},
    gtid::{GtidPosition, MostAdvancedError, most_advanced},
    snapshot::{self, SnapshotError},
};
use mysql_operator::crd::{Flavor, MySQLCluster};
use mysql_operator::restore::{RestoreError, StoredSnapshot, restore_snapshot};
use quorum_core::backup::{BackupError, BackupSink, BackupTarget, scoped_target};
use quorum_e2e::{
    mariadb::{MariaDbProcesses, PORT, REPLICATION_PASSWORD, REPLICATION_USER, ROOT_PASSWORD},
    wait,
};
use secrecy::SecretString;

const TIMEOUT: Duration = Duration::from_secs(3);
const CONVERGE: Duration = Duration::from_secs(30);

fn admin_as(processes: &MariaDbProcesses, index: usize, user: &str, password: &str) -> MySqlAdmin {
    let credentials = Credentials {
        server_ca: None,
        user: user.to_string(),
        password: SecretString::from(password),
    };
    MySqlAdmin::new(
        Flavor::MariaDB,
        &processes.ip(index).to_string(),
        PORT,
        &credentials,
        TIMEOUT,
    )
}

fn admin(processes: &MariaDbProcesses, index: usize) -> MySqlAdmin {
    admin_as(processes, index, "root", ROOT_PASSWORD)
}

fn source(processes: &MariaDbProcesses, index: usize) -> ReplicationSource {
    ReplicationSource {
        host: processes.ip(index).to_string(),
        port: PORT,
        user: REPLICATION_USER.to_string(),
        password: SecretString::from(REPLICATION_PASSWORD),
        tls: false,
        semi_sync: false,
    }
}

/// `count` members: m-0 a writable primary, the others replicating from it.
async fn replicated(count: usize) -> (MariaDbProcesses, Vec<MySqlAdmin>) {
    let processes = MariaDbProcesses::start(count).await;
    let admins: Vec<MySqlAdmin> = (0..count).map(|i| admin(&processes, i)).collect();
    admins[0].set_read_only(false).await.expect("open the primary");
    for replica in &admins[1..] {
        replica
            .configure_replica(&source(&processes, 0), None)
            .await
            .expect("configure replica");
    }
    (processes, admins)
}

/// Waits until `query` answers `expected` on member `index`.
async fn until_answer(processes: &MariaDbProcesses, index: usize, query: &str, expected: &str) {
    wait::until(
        &format!("m-{index} to answer {expected:?} to {query}"),
        CONVERGE,
        || async {
            let answer = processes.try_sql(index, query).await?;
            if answer.trim() == expected {
                Ok(())
            } else {
                Err(format!("{answer:?}"))
            }
        },
    )
    .await;
}

/// Sends `statement` to member `index` as root from a task of its own, and returns once the
/// commit is waiting for a semi-synchronous acknowledgement; the task ends with the commit.
async fn commit_waiting_for_an_acknowledgement(
    processes: &MariaDbProcesses,
    index: usize,
    statement: &'static str,
) -> tokio::task::JoinHandle<Result<(), mysql_async::Error>> {
    let (user, password) = processes.root_credentials();
    let options = mysql_async::OptsBuilder::default()
        .ip_or_hostname(processes.ip(index).to_string())
        .tcp_port(PORT)
        .user(Some(user))
        .pass(Some(password));
    let commit = tokio::spawn(async move {
        let pool = mysql_async::Pool::new(options);
        let mut connection = pool.get_conn().await?;
        connection.query_drop(statement).await
    });
    until_answer(
        processes,
        index,
        "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
         WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_WAIT_SESSIONS'",
        "1",
    )
    .await;
    commit
}

async fn count_rows(processes: &MariaDbProcesses, index: usize, table: &str) -> u64 {
    let answer = processes
        .sql(index, &format!("SELECT COUNT(*) FROM {table}"))
        .await;
    answer.trim().parse().expect("a count")
}

async fn executed(admin: &MySqlAdmin) -> GtidPosition {
    admin.report().await.expect("report").executed
}

#[tokio::test]
async fn replicas_follow_the_primary_and_report_positions_and_lag() {
    let (processes, admins) = replicated(3).await;
    processes
        .sql(
            0,
            "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY, v TEXT); \
             INSERT INTO app.t VALUES (1, 'one'), (2, 'two')",
        )
        .await;
    for replica in 1..3 {
        until_answer(
            &processes,
            replica,
            "SELECT GROUP_CONCAT(v ORDER BY id) FROM app.t",
            "one,two",
        )
        .await;
    }

    let primary = admins[0].report().await.unwrap();
    assert!(primary.replica.is_none(), "the primary replicates from nothing");
    assert!(!primary.read_only);
    assert_eq!(primary.server_id, 1);
    assert!(primary.version.starts_with("10.11"), "{}", primary.version);
    assert!(!primary.executed.is_empty());
    for replica in &admins[1..] {
        assert!(
            replica
                .wait_for_executed(&primary.executed, CONVERGE)
                .await
                .unwrap()
        );
        let report = replica.report().await.unwrap();
        assert!(report.read_only, "replicas stay read-only");
        let status = report.replica.expect("replica status");
        assert_eq!(status.source_host, processes.ip(0).to_string());
        assert_eq!(status.source_port, PORT);
        assert_eq!(status.io_thread, IoThread::Running);
        assert!(status.sql_running && status.source_connected() && !status.source_lost());
        assert_eq!(status.seconds_behind, Some(0));
        assert_eq!((status.last_io_errno, status.last_sql_errno), (0, 0));
        assert!(status.received.includes(&primary.executed), "{status:?}");
        assert!(report.executed.includes(&primary.executed));
        assert_eq!(report.executed.errant_against(&primary.executed), None);
    }

    // Positions advance with writes, and the replicas catch up to the new one.
    processes.sql(0, "INSERT INTO app.t VALUES (3, 'three')").await;
    let later = executed(&admins[0]).await;
    assert!(later.includes(&primary.executed) && !primary.executed.includes(&later));
    for replica in &admins[1..] {
        assert!(replica.wait_relay_log_applied(CONVERGE).await.unwrap());
        assert!(replica.wait_for_executed(&later, CONVERGE).await.unwrap());
        assert!(executed(replica).await.includes(&later));
    }
    assert_eq!(count_rows(&processes, 2, "app.t").await, 3);
    assert!(
        admins[0].wait_relay_log_applied(TIMEOUT).await.unwrap(),
        "not a replica"
    );

    // A position nobody reached times out rather than succeeding.
    let ahead = GtidPosition::parse(Flavor::MariaDB, "0-1-1000").unwrap();
    let started = Instant::now();
    assert!(
        !admins[1]
            .wait_for_executed(&ahead, Duration::from_millis(500))
            .await
            .unwrap()
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn semi_sync_roles_take_effect_on_the_primary_and_replicas() {
    let (processes, admins) = replicated(2).await;
    let source_role = SemiSyncRole::Source {
        wait_for: 1,
        timeout: Duration::from_secs(5),
    };
    admins[0].set_semi_sync(source_role).await.unwrap();
    admins[1].set_semi_sync(SemiSyncRole::Replica).await.unwrap();
    let primary = admins[0].report().await.unwrap();
    assert!(primary.semi_sync_source_on && !primary.semi_sync_replica_on);
    let replica = admins[1].report().await.unwrap();
    assert!(!replica.semi_sync_source_on && replica.semi_sync_replica_on);
    // The replica's receiving thread was restarted, so it now acknowledges as a semi-sync client.
    until_answer(
        &processes,
        0,
        "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
         WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS'",
        "1",
    )
    .await;
    processes.sql(0, "CREATE DATABASE acked").await;
    let acknowledged = processes
        .sql(0, "SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_yes_tx'")
        .await;
    assert!(!acknowledged.trim().ends_with("\t0"), "{acknowledged}");

    let two = SemiSyncRole::Source {
        wait_for: 2,
        timeout: Duration::from_secs(5),
    };
    assert!(matches!(
        admins[0].set_semi_sync(two).await,
        Err(AdminError::Unsupported(_))
    ));
    admins[1].set_semi_sync(SemiSyncRole::Off).await.unwrap();
    admins[0].set_semi_sync(SemiSyncRole::Off).await.unwrap();
    let off = admins[1].report().await.unwrap();
    assert!(!off.semi_sync_source_on && !off.semi_sync_replica_on);
    assert!(off.replica.is_some_and(|r| r.io_thread != IoThread::Stopped));
}

/// The server's count of a global status variable on member `index`.
async fn status_count(processes: &MariaDbProcesses, index: usize, variable: &str) -> u64 {
    let answer = processes
        .sql(
            index,
            &format!(
                "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = '{variable}'"
            ),
        )
        .await;
    answer
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{variable}: {answer:?}"))
}

/// The primary's only replica killed (as an isolation from every replica looks to it): with the
/// operator's SemiSync source role a commit waits, however long, until a replica has received
/// it; the server never falls back to acknowledging commits no replica holds.
#[tokio::test]
async fn an_isolated_semi_sync_primary_acknowledges_no_commit_until_a_replica_has_it() {
    let (mut processes, admins) = replicated(2).await;
    admins[0]
        .set_semi_sync(mysql_operator::execute::semi_sync_source_role(Some(1)))
        .await
        .unwrap();
    admins[1].set_semi_sync(SemiSyncRole::Replica).await.unwrap();
    until_answer(
        &processes,
        0,
        "SELECT VARIABLE_VALUE FROM information_schema.GLOBAL_STATUS \
         WHERE VARIABLE_NAME = 'RPL_SEMI_SYNC_MASTER_CLIENTS'",
        "1",
    )
    .await;
    processes
        .sql(
            0,
            "CREATE DATABASE fenced; CREATE TABLE fenced.t (id INT PRIMARY KEY)",
        )
        .await;
    assert_eq!(status_count(&processes, 0, "RPL_SEMI_SYNC_MASTER_NO_TX").await, 0);

    processes.kill(1).await;
    let commit =
        commit_waiting_for_an_acknowledgement(&processes, 0, "INSERT INTO fenced.t VALUES (1)").await;
    assert!(!commit.is_finished(), "a commit returned with no replica");

    // The replica back, as after the isolation ends: the commit returns once it has it.
    processes.restart(1).await;
    admins[1].set_semi_sync(SemiSyncRole::Replica).await.unwrap();
    admins[1]
        .configure_replica(&source(&processes, 0), None)
        .await
        .unwrap();
    assert!(
        !commit.is_finished(),
        "the primary acknowledged a commit while no replica could have it"
    );
    // MariaDB asks a returning replica to acknowledge only what is written after it is back:
    // the waiting commit is released by the acknowledgement of the next one.
    processes.sql(0, "INSERT INTO fenced.t VALUES (2)").await;
    commit
        .await
        .unwrap()
        .expect("the commit, acknowledged once the returning replica had it");
    assert_eq!(
        status_count(&processes, 0, "RPL_SEMI_SYNC_MASTER_NO_TX").await,
        0,
        "the primary acknowledged a commit no replica had received"
    );
    assert_eq!(
        status_count(&processes, 0, "RPL_SEMI_SYNC_MASTER_NO_TIMES").await,
        0,
        "the primary fell back to asynchronous commits"
    );
    until_answer(&processes, 1, "SELECT COUNT(*) FROM fenced.t", "2").await;
}

#[tokio::test]
async fn members_started_with_semi_sync_report_both_sides_on() {
    let mut processes = MariaDbProcesses::new().with_semi_sync(true);
    processes.start_members(1).await;
    let report = admin(&processes, 0).report().await.unwrap();
    assert!(report.semi_sync_source_on && report.semi_sync_replica_on);
}

#[tokio::test]
async fn read_only_refuses_application_writes_and_fencing_ends_open_transactions() {
    let processes = MariaDbProcesses::start(1).await;
    let root = admin(&processes, 0);
    root.set_read_only(false).await.unwrap();
    processes
        .sql(
            0,
            "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY); CREATE DATABASE other",
        )
        .await;
    let password = SecretString::from("app-'pass\\word");
    let grants = vec!["ALL PRIVILEGES ON `app`.*".to_string()];
    root.ensure_user("app", "%", &password, &grants).await.unwrap();
    root.ensure_user("app", "%", &password, &grants)
        .await
        .expect("idempotent");

    let options = mysql_async::OptsBuilder::default()
        .ip_or_hostname(processes.ip(0).to_string())
        .tcp_port(PORT)
        .user(Some("app"))
        .pass(Some("app-'pass\\word"))
        .db_name(Some("app"));
    let pool = mysql_async::Pool::new(options);
    let mut app = pool
        .get_conn()
        .await
        .expect("the app account logs in with its password");
    app.query_drop("INSERT INTO t VALUES (1)").await.unwrap();
    let elsewhere = app.query_drop("CREATE TABLE other.x (id INT)").await.unwrap_err();
    assert!(elsewhere.to_string().contains("denied"), "{elsewhere}");

    root.set_read_only(true).await.unwrap();
    assert!(root.report().await.unwrap().read_only);
    let refused = app.query_drop("INSERT INTO t VALUES (2)").await.unwrap_err();
    match refused {
        mysql_async::Error::Server(error) => assert_eq!(error.code, 1290, "{}", error.message),
        other => panic!("expected the server's refusal, got {other}"),
    }
    let rows: Vec<u32> = app.query("SELECT id FROM t").await.unwrap();
    assert_eq!(rows, [1], "reads still work");

    // An open transaction from before the fence must never commit: its connection is ended.
    root.set_read_only(false).await.unwrap();
    app.query_drop("START TRANSACTION").await.unwrap();
    app.query_drop("INSERT INTO t VALUES (3)").await.unwrap();
    root.set_read_only(true).await.unwrap();
    let killed = root.kill_client_connections(&["root"]).await.unwrap();
    assert!(killed >= 1, "the app's connection ended");
    assert!(
        app.query_drop("COMMIT").await.is_err(),
        "the transaction cannot commit"
    );
    assert_eq!(
        processes
            .sql(0, "SELECT GROUP_CONCAT(id) FROM app.t")
            .await
            .trim(),
        "1"
    );
    root.set_read_only(false).await.unwrap();
    assert!(!root.report().await.unwrap().read_only);
    let mut again = pool.get_conn().await.unwrap();
    again
        .query_drop("INSERT INTO t VALUES (4)")
        .await
        .expect("open again");
    drop((app, again));
    pool.disconnect().await.unwrap();
}

#[tokio::test]
async fn promote_a_replica_and_repoint_the_others_and_the_old_primary() {
    let (processes, admins) = replicated(3).await;
    processes
        .sql(
            0,
            "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY); INSERT INTO app.t VALUES (1)",
        )
        .await;
    let before = executed(&admins[0]).await;

    // Switchover: fence the old primary, let m-1 catch up, promote it, repoint the rest.
    admins[0].set_read_only(true).await.unwrap();
    assert!(admins[1].wait_for_executed(&before, CONVERGE).await.unwrap());
    assert!(admins[1].wait_relay_log_applied(CONVERGE).await.unwrap());
    let positions = [
        executed(&admins[0]).await,
        executed(&admins[1]).await,
        executed(&admins[2]).await,
    ];
    assert!(most_advanced(&positions).is_ok());
    admins[1].promote().await.unwrap();
    let promoted = admins[1].report().await.unwrap();
    assert!(promoted.replica.is_none() && !promoted.read_only);
    admins[2]
        .configure_replica(&source(&processes, 1), None)
        .await
        .unwrap();
    // The old primary wrote its transactions itself; it must not fetch them again.
    admins[0]
        .configure_replica(&source(&processes, 1), None)
        .await
        .unwrap();

    processes.sql(1, "INSERT INTO app.t VALUES (2)").await;
    for member in [0, 2] {
        until_answer(
            &processes,
            member,
            "SELECT GROUP_CONCAT(id ORDER BY id) FROM app.t",
            "1,2",
        )
        .await;
        let report = admins[member].report().await.unwrap();
        let status = report.replica.expect("a replica of m-1");
        assert_eq!(status.source_host, processes.ip(1).to_string());
        assert!(status.source_connected() && status.sql_running, "{status:?}");
        assert!(report.read_only);
    }
    let new_primary = executed(&admins[1]).await;
    for member in [0, 2] {
        assert!(
            admins[member]
                .wait_for_executed(&new_primary, CONVERGE)
                .await
                .unwrap()
        );
        assert_eq!(executed(&admins[member]).await.errant_against(&new_primary), None);
    }
}

#[tokio::test]
async fn stop_replication_forgets_the_source() {
    let (processes, admins) = replicated(2).await;
    processes
        .sql(0, "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY)")
        .await;
    until_answer(&processes, 1, "SELECT COUNT(*) FROM app.t", "0").await;

    admins[1].stop_replication().await.unwrap();
    assert!(admins[1].report().await.unwrap().replica.is_none());
    admins[1].stop_replication().await.expect("idempotent");
    processes.sql(0, "INSERT INTO app.t VALUES (1)").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        count_rows(&processes, 1, "app.t").await,
        0,
        "no longer replicating"
    );

    // Configured again, it resumes where it stopped.
    admins[1]
        .configure_replica(&source(&processes, 0), None)
        .await
        .unwrap();
    until_answer(&processes, 1, "SELECT COUNT(*) FROM app.t", "1").await;
}

#[tokio::test]
async fn replication_works_with_a_password_that_needs_escaping() {
    let processes = MariaDbProcesses::start(2).await;
    let admins = [admin(&processes, 0), admin(&processes, 1)];
    admins[0].set_read_only(false).await.unwrap();
    let password = SecretString::from("q'uo\"te\\back\nslash, MASTER_HOST='evil'");
    // The account exists on both (created on the primary, replicated as the first transaction).
    admins[0]
        .ensure_user(
            "odd_repl",
            "%",
            &password,
            &["REPLICATION SLAVE ON *.*".to_string()],
        )
        .await
        .unwrap();
    let odd = ReplicationSource {
        user: "odd_repl".to_string(),
        password,
        ..source(&processes, 0)
    };
    admins[1].configure_replica(&odd, None).await.unwrap();
    processes.sql(0, "CREATE DATABASE quoted").await;
    until_answer(&processes, 1, "SHOW DATABASES LIKE 'quoted'", "quoted").await;
    let status = admins[1].report().await.unwrap().replica.unwrap();
    assert_eq!(
        status.source_host,
        processes.ip(0).to_string(),
        "the host was not injected"
    );
}

/// A primary with varied column types and awkward values, and an application account.
async fn seed_primary(processes: &MariaDbProcesses) {
    processes
        .sql(
            0,
            "CREATE DATABASE app; \
             CREATE TABLE app.kinds (id INT AUTO_INCREMENT PRIMARY KEY, name VARCHAR(100), note TEXT, \
               raw BLOB, amount DECIMAL(12,4), ratio DOUBLE, small FLOAT, at DATETIME(6), day DATE, \
               span TIME, flags BIT(8), doc JSON, twice INT AS (id * 2) VIRTUAL); \
             SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO'; \
             INSERT INTO app.kinds (id, name, note, raw, amount, ratio, small, at, day, span, flags, doc) VALUES \
               (0, 'zero', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL), \
               (1, 'it''s', 'back\\\\slash', X'00FF80', 12.3456, 0.1, 1.5, '2024-02-29 23:59:59.123456', \
                '2024-02-29', '-838:59:59', b'10100101', '{\"a\": [1, \"x\\\\ny\"]}'), \
               (2, 'new\\nline\\r\\0nul', 'üñí 字 \\t tab', X'', -0.0001, 1e300, -3.25, \
                '1970-01-01 00:00:01', '1000-01-01', '00:00:00', b'0', '[]'); \
             CREATE TABLE app.`odd``name` (k VARCHAR(10) PRIMARY KEY) DEFAULT CHARSET=latin1; \
             INSERT INTO app.`odd``name` VALUES ('é'); \
             CREATE VIEW app.v AS SELECT id FROM app.kinds; \
             CREATE VIEW app.a_over_v AS SELECT id FROM app.v WHERE id > 0; \
             CREATE TABLE app.busy (id INT AUTO_INCREMENT PRIMARY KEY, payload VARCHAR(50)); \
             CREATE TABLE app.audit (busy_id INT PRIMARY KEY); \
             CREATE TRIGGER app.busy_audit AFTER INSERT ON app.busy FOR EACH ROW \
               INSERT INTO app.audit VALUES (NEW.id); \
             CREATE PROCEDURE app.count_busy(OUT n INT) SELECT COUNT(*) INTO n FROM app.busy; \
             CREATE FUNCTION app.twice(x INT) RETURNS INT DETERMINISTIC RETURN x * 2; \
             CREATE EVENT app.nightly ON SCHEDULE EVERY 1 DAY DO DELETE FROM app.audit WHERE busy_id < 0; \
             CREATE DATABASE `empty db`; \
             CREATE USER 'reporting'@'10.%' IDENTIFIED BY 'r3p0rt'; \
             GRANT SELECT ON app.* TO 'reporting'@'10.%'",
        )
        .await;
}

/// Inserts into `app.busy` on m-0 until told to stop; returns how many rows it wrote.
fn start_writer(
    processes: &MariaDbProcesses,
) -> (tokio::sync::watch::Sender<bool>, tokio::task::JoinHandle<u64>) {
    let url = format!("mysql://root:{ROOT_PASSWORD}@{}:{PORT}/app", processes.ip(0));
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let writer = tokio::spawn(async move {
        let mut conn = mysql_async::Conn::new(mysql_async::Opts::from_url(&url).unwrap())
            .await
            .expect("writer connects");
        let mut written = 0;
        while !*stopped.borrow_and_update() {
            conn.query_drop(format!("INSERT INTO busy (payload) VALUES ('row {written}')"))
                .await
                .expect("writer inserts");
            written += 1;
        }
        written
    });
    (stop, writer)
}

#[tokio::test]
async fn snapshot_of_a_busy_primary_restores_into_an_empty_server_that_then_converges() {
    let processes = MariaDbProcesses::start(2).await;
    let (primary, fresh) = (admin(&processes, 0), admin(&processes, 1));
    primary.set_read_only(false).await.unwrap();
    seed_primary(&processes).await;
    let (stop, writer) = start_writer(&processes);
    wait::until("the writer to have written", CONVERGE, || async {
        let rows = count_rows(&processes, 0, "app.busy").await;
        if rows > 50 {
            Ok(())
        } else {
            Err(format!("{rows} rows"))
        }
    })
    .await;

    let mut stream = Vec::new();
    let info = snapshot::snapshot_out(&primary, &["root", REPLICATION_USER], &mut stream)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!info.position.is_empty());
    assert_eq!(info.bytes, stream.len() as u64);
    let text = String::from_utf8(stream.clone()).unwrap();
    assert!(
        text.starts_with(&format!(
            "-- quorum-mysql-snapshot v1 flavor=mariadb position={}\n",
            info.position
        )),
        "{}",
        text.lines().next().unwrap_or_default()
    );
    assert!(text.ends_with(&format!("-- end statements={}\n", info.statements)));
    assert!(
        !text.contains(REPLICATION_USER) && !text.contains("'root'"),
        "excluded accounts"
    );
    assert!(info.skipped.is_empty(), "{:?}", info.skipped);

    let restored = snapshot::snapshot_in(&fresh, &stream[..]).await.unwrap();
    assert_eq!(restored, info.position);
    // A snapshot of the restored server finds the rows the snapshot held, and only those, as
    // a restore drill checks.
    assert!(info.content.records > 50, "{:?}", info.content);
    let restored_content = snapshot::snapshot_out(&fresh, &["root", REPLICATION_USER], tokio::io::sink())
        .await
        .unwrap()
        .content;
    assert_eq!(restored_content, info.content);
    let after_restore = fresh.report().await.unwrap();
    assert!(
        after_restore.executed.is_empty(),
        "the restore wrote nothing to the binary log: {}",
        after_restore.executed
    );
    fresh
        .configure_replica(&source(&processes, 0), Some(&restored))
        .await
        .unwrap();
    stop.send(true).unwrap();
    let written = writer.await.unwrap();
    assert!(written > 50);

    let final_position = executed(&primary).await;
    assert!(fresh.wait_for_executed(&final_position, CONVERGE).await.unwrap());
    let caught_up = snapshot::snapshot_out(&fresh, &["root", REPLICATION_USER], tokio::io::sink())
        .await
        .unwrap()
        .content;
    assert!(
        info.content
            .mismatch(&caught_up)
            .is_some_and(|m| m.contains("records where the backup recorded")),
        "the rows written since the snapshot show: {caught_up:?}"
    );
    let replica = fresh.report().await.unwrap();
    assert_eq!(replica.executed.errant_against(&final_position), None);
    assert!(final_position.includes(&replica.executed) && replica.executed.includes(&final_position));
    let status = replica.replica.unwrap();
    assert_eq!(
        (status.last_sql_errno, status.last_io_errno),
        (0, 0),
        "{status:?}"
    );

    // Exactly the primary's rows: no duplicate, no gap, values identical.
    for query in [
        "SELECT COUNT(*), COUNT(DISTINCT id), MIN(id), MAX(id) FROM app.busy",
        "SELECT id, name, note, HEX(raw), amount, ratio, small, at, day, span, HEX(flags), doc, twice \
         FROM app.kinds ORDER BY id",
        "SHOW GRANTS FOR 'reporting'@'10.%'",
        "SHOW DATABASES LIKE 'empty db'",
        "CHECKSUM TABLE app.busy, app.kinds, app.`odd``name`, app.audit",
        // Views (one reading another), routines, triggers and events: every object, not only
        // tables, so a failover to a seeded replica loses none of them.
        "SELECT TABLE_NAME, VIEW_DEFINITION FROM information_schema.VIEWS WHERE TABLE_SCHEMA = 'app' ORDER BY 1",
        "SELECT ROUTINE_NAME, ROUTINE_TYPE, ROUTINE_DEFINITION FROM information_schema.ROUTINES \
         WHERE ROUTINE_SCHEMA = 'app' ORDER BY 1",
        "SELECT TRIGGER_NAME, EVENT_OBJECT_TABLE, ACTION_TIMING, ACTION_STATEMENT FROM information_schema.TRIGGERS \
         WHERE TRIGGER_SCHEMA = 'app' ORDER BY 1",
        "SELECT EVENT_NAME, EVENT_DEFINITION, INTERVAL_VALUE, INTERVAL_FIELD FROM information_schema.EVENTS \
         WHERE EVENT_SCHEMA = 'app' ORDER BY 1",
        "SELECT app.twice(21)",
    ] {
        assert_eq!(
            processes.sql(1, query).await,
            processes.sql(0, query).await,
            "{query}"
        );
    }
    let busy = processes.sql(1, "SELECT COUNT(*), MAX(id) FROM app.busy").await;
    assert_eq!(busy.trim(), format!("{written}\t{written}"));
    // The trigger fired once per row, on the primary: restored after the rows, it fired for
    // none of them on the replica.
    let audited = processes.sql(1, "SELECT COUNT(*) FROM app.audit").await;
    assert_eq!(audited.trim(), written.to_string());
    // The event runs on the primary only.
    let status = processes
        .sql(
            1,
            "SELECT STATUS FROM information_schema.EVENTS WHERE EVENT_NAME = 'nightly'",
        )
        .await;
    assert_eq!(status.trim(), "SLAVESIDE_DISABLED");
}

#[tokio::test]
async fn snapshot_in_refuses_truncated_and_foreign_streams() {
    let processes = MariaDbProcesses::start(2).await;
    let (primary, fresh) = (admin(&processes, 0), admin(&processes, 1));
    primary.set_read_only(false).await.unwrap();
    processes
        .sql(
            0,
            "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY); INSERT INTO app.t VALUES (1)",
        )
        .await;
    let mut stream = Vec::new();
    snapshot::snapshot_out(&primary, &["root", REPLICATION_USER], &mut stream)
        .await
        .unwrap();
    let text = String::from_utf8(stream).unwrap();

    let without_trailer = &text[..text.rfind("-- end").unwrap()];
    let error = snapshot::snapshot_in(&fresh, without_trailer.as_bytes())
        .await
        .unwrap_err();
    assert!(matches!(error, SnapshotError::Format(_)), "{error}");
    assert!(error.to_string().contains("truncated"), "{error}");

    let mysql = text.replacen("flavor=mariadb", "flavor=mysql", 1);
    let error = snapshot::snapshot_in(&fresh, mysql.as_bytes()).await.unwrap_err();
    assert!(
        error.to_string().contains("a mysql snapshot cannot be restored"),
        "{error}"
    );

    let mut lines: Vec<&str> = text.lines().collect();
    let insert = lines.iter().position(|l| l.starts_with("INSERT INTO")).unwrap();
    lines.remove(insert);
    let dropped = lines.join("\n") + "\n";
    let error = snapshot::snapshot_in(&fresh, dropped.as_bytes())
        .await
        .unwrap_err();
    assert!(error.to_string().contains("trailer counts"), "{error}");

    let broken = text.replacen("CREATE TABLE", "CREATE TABLEX", 1);
    let error = snapshot::snapshot_in(&fresh, broken.as_bytes())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            SnapshotError::Restore {
                source: AdminError::Refused { code: 1064, .. },
                ..
            }
        ),
        "{error}"
    );
    assert!(
        !error.to_string().contains("TABLEX"),
        "the statement is not repeated: {error}"
    );
}

#[tokio::test]
async fn refused_statements_leave_replication_as_it_was() {
    let (processes, admins) = replicated(2).await;
    // An account that may look but not act.
    processes
        .sql(
            0,
            "CREATE USER 'watcher'@'%' IDENTIFIED BY 'w4tch'; \
             GRANT SELECT, SLAVE MONITOR, BINLOG MONITOR ON *.* TO 'watcher'@'%'",
        )
        .await;
    let watcher = admin_as(&processes, 1, "watcher", "w4tch");
    until_answer(
        &processes,
        1,
        "SELECT COUNT(*) FROM mysql.user WHERE User = 'watcher'",
        "1",
    )
    .await;
    let report = watcher.report().await.expect("watching is allowed");
    assert!(report.replica.is_some());

    let error = watcher.promote().await.unwrap_err();
    assert!(
        matches!(
            error,
            AdminError::Refused {
                statement: "STOP SLAVE",
                code: 1227,
                ..
            }
        ),
        "{error}"
    );
    let error = watcher
        .configure_replica(&source(&processes, 0), None)
        .await
        .unwrap_err();
    assert!(matches!(error, AdminError::Refused { .. }), "{error}");
    assert!(!error.to_string().contains(REPLICATION_PASSWORD));
    let error = watcher.set_read_only(false).await.unwrap_err();
    assert!(matches!(error, AdminError::Refused { .. }), "{error}");

    let after = admins[1].report().await.unwrap();
    let status = after.replica.expect("still a replica");
    assert!(status.source_connected() && status.sql_running, "{status:?}");
    assert_eq!(status.source_host, processes.ip(0).to_string());
    assert!(after.read_only, "still read-only");
    processes.sql(0, "CREATE DATABASE still_replicating").await;
    until_answer(
        &processes,
        1,
        "SHOW DATABASES LIKE 'still_replicating'",
        "still_replicating",
    )
    .await;

    // A wrong password is refused at login, and the password is not in the error.
    let wrong = admin_as(&processes, 1, "root", "not-the-password");
    let error = wrong.report().await.unwrap_err();
    assert!(matches!(error, AdminError::Refused { code: 1045, .. }), "{error}");
    assert!(!error.to_string().contains("not-the-password"));
}

#[tokio::test]
async fn unreachable_servers_fail_fast() {
    let processes = MariaDbProcesses::new();
    // Nothing listens on this address.
    let nobody = admin(&processes, 200);
    let started = Instant::now();
    let error = nobody.report().await.unwrap_err();
    assert!(error.is_unreachable(), "{error}");
    assert!(started.elapsed() < TIMEOUT, "{:?}", started.elapsed());

    // A listener that accepts and never says a word: the connect timeout decides.
    let listener = tokio::net::TcpListener::bind((processes.ip(201), 0))
        .await
        .unwrap();
    let port = listener.local_addr().unwrap().port();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let credentials = Credentials {
        server_ca: None,
        user: "root".to_string(),
        password: SecretString::from(ROOT_PASSWORD),
    };
    let mute = MySqlAdmin::new(
        Flavor::MariaDB,
        &processes.ip(201).to_string(),
        port,
        &credentials,
        Duration::from_millis(700),
    );
    let started = Instant::now();
    let error = mute.report().await.unwrap_err();
    assert!(error.is_unreachable(), "{error}");
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(700) && elapsed < Duration::from_secs(3),
        "{elapsed:?}"
    );
    silent.abort();
}

#[tokio::test]
async fn a_killed_primary_is_a_lost_source_and_a_restarted_one_is_reachable_again() {
    let (mut processes, admins) = replicated(2).await;
    processes.kill(0).await;
    assert!(admins[0].report().await.unwrap_err().is_unreachable());
    wait::until("the replica to see its source lost", CONVERGE, || async {
        let status = admins[1]
            .report()
            .await
            .map_err(|e| e.to_string())?
            .replica
            .unwrap();
        if status.source_lost() {
            Ok(())
        } else {
            Err(format!("{status:?}"))
        }
    })
    .await;
    processes.restart(0).await;
    wait::until("the old primary to answer again", CONVERGE, || async {
        admins[0].report().await.map(|_| ()).map_err(|e| e.to_string())
    })
    .await;
}

#[tokio::test]
async fn errant_transactions_on_a_replica_are_detected() {
    let (processes, admins) = replicated(2).await;
    processes
        .sql(0, "CREATE DATABASE app; CREATE TABLE app.t (id INT PRIMARY KEY)")
        .await;
    let primary = executed(&admins[0]).await;
    assert!(admins[1].wait_for_executed(&primary, CONVERGE).await.unwrap());
    assert_eq!(executed(&admins[1]).await.errant_against(&primary), None);

    // root can write despite read_only (it has READ ONLY ADMIN), and this write is logged.
    processes.sql(1, "INSERT INTO app.t VALUES (100)").await;
    let replica = executed(&admins[1]).await;
    let errant = replica.errant_against(&primary).expect("an errant transaction");
    assert!(
        errant.to_string().starts_with("0-2-"),
        "written by server 2: {errant}"
    );

    // Once the primary writes again, the positions have diverged: neither can be promoted
    // without losing the other's transaction.
    processes.sql(0, "INSERT INTO app.t VALUES (1)").await;
    let primary = executed(&admins[0]).await;
    let replica = executed(&admins[1]).await;
    assert!(replica.errant_against(&primary).is_some());
    assert_eq!(
        most_advanced(&[primary, replica]),
        Err(MostAdvancedError::Diverged { left: 0, right: 1 })
    );
}

#[tokio::test]
async fn a_stored_snapshot_is_restored_only_when_verified_and_the_restored_member_continues_its_history() {
    let processes = MariaDbProcesses::start(3).await;
    let (source_primary, restored, replica) =
        (admin(&processes, 0), admin(&processes, 1), admin(&processes, 2));
    source_primary.set_read_only(false).await.unwrap();
    processes
        .sql(
            0,
            "CREATE DATABASE shop; CREATE TABLE shop.items (id INT PRIMARY KEY, note VARCHAR(20)); \
             INSERT INTO shop.items VALUES (1, 'item 1'), (2, 'item 2'), (3, 'item 3')",
        )
        .await;

    // Stored as the backup controller stores it: below <namespace>/<cluster> of a directory.
    let directory = processes.dir.join("backups");
    let target = BackupTarget::Filesystem {
        directory: directory.clone(),
    };
    let sink = BackupSink::new(scoped_target(target.clone(), "prod", "source")).unwrap();
    let mut stream = Vec::new();
    let info = snapshot::snapshot_out(&source_primary, &["root", REPLICATION_USER], &mut stream)
        .await
        .unwrap();
    let stored = sink
        .upload("source/source-20260101T000000Z.sql", &stream[..])
        .await
        .unwrap();
    let snapshot = StoredSnapshot::locate(
        "nightly",
        target,
        "prod",
        "source",
        &stored.location,
        &stored.sha256,
        info.position.clone(),
    )
    .unwrap();

    // Bytes that differ from what the backup recorded: complete and well-formed, but refused,
    // and the member's GTID history is left alone.
    let path = std::path::Path::new(&stored.location);
    let tampered = String::from_utf8(stream.clone())
        .unwrap()
        .replacen("'item 2'", "'itex 2'", 1);
    std::fs::write(path, &tampered).unwrap();
    let error = restore_snapshot(&restored, &snapshot).await.unwrap_err();
    assert!(
        matches!(
            &error,
            RestoreError::Fetch {
                source: BackupError::ChecksumMismatch { .. },
                ..
            }
        ),
        "{error}"
    );
    assert!(executed(&restored).await.is_empty());

    // A position other than the backup recorded is refused too.
    std::fs::write(path, &stream).unwrap();
    let elsewhere = StoredSnapshot {
        position: GtidPosition::parse(Flavor::MariaDB, "0-1-1").unwrap(),
        ..snapshot.clone()
    };
    let error = restore_snapshot(&restored, &elsewhere).await.unwrap_err();
    assert!(matches!(error, RestoreError::PositionMismatch { .. }), "{error}");
    assert!(executed(&restored).await.is_empty());

    // The verified snapshot replaces what the refused attempts left, and the member's history
    // is the backup's position.
    let position = restore_snapshot(&restored, &snapshot).await.unwrap();
    assert_eq!(position, info.position);
    assert_eq!(executed(&restored).await, info.position);
    let items = "SELECT id, note FROM shop.items ORDER BY id";
    assert_eq!(processes.sql(1, items).await, processes.sql(0, items).await);

    // Opened, it continues the history: its own next transaction follows the position.
    restored.set_read_only(false).await.unwrap();
    processes
        .sql(1, "INSERT INTO shop.items VALUES (4, 'after restore')")
        .await;
    let continued = executed(&restored).await;
    assert!(
        continued.includes(&info.position) && continued != info.position,
        "{continued}"
    );
    let binlog = processes.sql(1, "SELECT @@GLOBAL.gtid_binlog_pos").await;
    let GtidPosition::MariaDb(before) = &info.position else {
        unreachable!("a MariaDB position")
    };
    let next = before[&0].sequence + 1;
    assert_eq!(binlog.trim(), format!("0-2-{next}"), "server 2's own transaction");

    // A replica copied from it (as a new member is) replicates from there.
    let mut copy = Vec::new();
    let copied = snapshot::snapshot_out(&restored, &["root", REPLICATION_USER], &mut copy)
        .await
        .unwrap();
    snapshot::snapshot_in(&replica, &copy[..]).await.unwrap();
    replica
        .configure_replica(&source(&processes, 1), Some(&copied.position))
        .await
        .unwrap();
    processes
        .sql(1, "INSERT INTO shop.items VALUES (5, 'replicated')")
        .await;
    let primary = executed(&restored).await;
    assert!(replica.wait_for_executed(&primary, CONVERGE).await.unwrap());
    assert_eq!(processes.sql(2, items).await, processes.sql(1, items).await);
}

/// A SemiSync primary crashes while a commit waits for its acknowledgement; a replica had
/// already received that commit, and is promoted. The old primary restarts as the members do
/// (`init_rpl_role = SLAVE` in their `my.cnf`): it discards the commit it never acknowledged,
/// so it holds nothing the new primary lacks (not errant), and when it is pointed at the new
/// primary it takes that commit back from it. Before, pointed as an asynchronous replica, it
/// skipped the commit as its own (same server id) while its GTID position moved past it: equal
/// positions, different rows.
#[tokio::test]
async fn a_crashed_primary_discards_its_unacknowledged_commit_and_takes_it_back_from_the_new_primary() {
    let (mut processes, admins) = replicated(2).await;
    processes
        .sql(
            0,
            "CREATE DATABASE doubt; CREATE TABLE doubt.t (id INT PRIMARY KEY)",
        )
        .await;
    processes.sql(0, "INSERT INTO doubt.t VALUES (1)").await;
    until_answer(&processes, 1, "SELECT COUNT(*) FROM doubt.t", "1").await;
    // The primary waits for an acknowledgement nobody sends: m-1 receives and applies as an
    // asynchronous replica.
    admins[0]
        .set_semi_sync(mysql_operator::execute::semi_sync_source_role(Some(1)))
        .await
        .unwrap();
    let commit = commit_waiting_for_an_acknowledgement(&processes, 0, "INSERT INTO doubt.t VALUES (2)").await;
    until_answer(&processes, 1, "SELECT COUNT(*) FROM doubt.t", "2").await;
    assert!(!commit.is_finished(), "the commit was acknowledged");

    // The primary crashes; the replica that received the commit takes over and writes.
    processes.kill(0).await;
    let _ = commit.await;
    admins[1].stop_replication().await.unwrap();
    admins[1].set_read_only(false).await.unwrap();
    processes.sql(1, "INSERT INTO doubt.t VALUES (3)").await;

    // The old primary restarts as a replica would: the unacknowledged commit is discarded.
    processes.restart_with(0, &["--init-rpl-role=SLAVE"]).await;
    let log = std::fs::read_to_string(processes.members[0].error_log()).unwrap_or_default();
    assert!(
        log.contains("Successfully truncated binlog"),
        "{}",
        processes.error_log_tail(0)
    );
    assert_eq!(count_rows(&processes, 0, "doubt.t").await, 1);
    let old = executed(&admins[0]).await;
    let new = executed(&admins[1]).await;
    assert!(
        new.includes(&old),
        "the old primary holds {old:?}, beyond {new:?}: errant"
    );

    // Pointed at the new primary, it takes its discarded commit back with everything after it.
    admins[0]
        .configure_replica(
            &ReplicationSource {
                semi_sync: true,
                ..source(&processes, 1)
            },
            None,
        )
        .await
        .unwrap();
    until_answer(
        &processes,
        0,
        "SELECT GROUP_CONCAT(id ORDER BY id) FROM doubt.t",
        "1,2,3",
    )
    .await;
    assert_eq!(executed(&admins[0]).await, executed(&admins[1]).await);
}

/// The crash-recovery settings of a semi-synchronous MariaDB member's `my.cnf`, as server
/// options: how a restarted member treats the commits its crash left in doubt, and that it
/// starts with replication stopped.
fn crash_recovery_options_of_a_member_pod() -> Vec<String> {
    let cluster = MySQLCluster::new(
        "outage",
        serde_json::from_value(serde_json::json!({
            "replicas": 2, "flavor": "MariaDB", "version": "10.11.6", "storage": {"size": "1Gi"}
        }))
        .expect("a MySQLCluster spec"),
    );
    // A member pod also starts with replication stopped until the operator configures it;
    // threads the server started by itself at boot raced the test's STOP SLAVE on a loaded
    // machine and hung it.
    const CRASH_RECOVERY: [&str; 4] = [
        "init_rpl_role",
        "innodb_flush_log_at_trx_commit",
        "sync_binlog",
        "skip_slave_start",
    ];
    // The server's defaults first, where the harness trades durability for speed; the
    // member's own settings after them win.
    let server_defaults = ["--innodb-flush-log-at-trx-commit=1", "--sync-binlog=0"].map(String::from);
    let member = mysql_operator::resources::my_cnf(&cluster)
        .lines()
        .filter_map(|line| line.split_once(" = "))
        .filter(|(key, _)| CRASH_RECOVERY.contains(key))
        .map(|(key, value)| format!("--{}={value}", key.replace('_', "-")))
        .collect::<Vec<_>>();
    server_defaults.into_iter().chain(member).collect()
}

/// Every member is killed at once right after the primary acknowledged a commit, and each
/// restarts with a member pod's crash-recovery settings: the acknowledged commit is still on
/// the primary. Before, members recovered as replicas (`init_rpl_role = SLAVE`) with InnoDB's
/// commit record left in memory at commit: the newest acknowledged commit came back only
/// prepared, and recovery discarded it, from every member at once.
#[tokio::test]
async fn a_commit_acknowledged_just_before_every_member_is_killed_survives_on_the_primary() {
    let recovery = crash_recovery_options_of_a_member_pod();
    assert!(
        recovery.contains(&"--init-rpl-role=SLAVE".to_string()),
        "{recovery:?}"
    );
    let as_a_member_pod_starts: Vec<&str> = recovery.iter().map(String::as_str).collect();
    let as_a_member_pod_starts = as_a_member_pod_starts.as_slice();
    let mut processes = MariaDbProcesses::new().with_semi_sync(true);
    processes.start_members(2).await;
    let admins: Vec<MySqlAdmin> = (0..2).map(|i| admin(&processes, i)).collect();
    let (user, password) = processes.root_credentials();
    let options = mysql_async::OptsBuilder::default()
        .ip_or_hostname(processes.ip(0).to_string())
        .tcp_port(PORT)
        .user(Some(user))
        .pass(Some(password));
    let mut next_id = 1u32;
    for round in 0..5 {
        for index in 0..2 {
            processes.restart_with(index, as_a_member_pod_starts).await;
        }
        admins[0].set_read_only(false).await.expect("open the primary");
        // As the operator does, each pass: a server still busy with its crash recovery may let
        // one call go unanswered.
        let replica_of_the_primary = ReplicationSource {
            semi_sync: true,
            ..source(&processes, 0)
        };
        wait::until("the replica configured", Duration::from_secs(120), || async {
            admins[1]
                .configure_replica(&replica_of_the_primary, None)
                .await
                .map_err(|error| format!("{error:?}\n{}", processes.error_log_tail(1)))
        })
        .await;
        if round == 0 {
            processes
                .sql(
                    0,
                    "CREATE DATABASE outage; CREATE TABLE outage.t (id INT PRIMARY KEY)",
                )
                .await;
        }
        let pool = mysql_async::Pool::new(options.clone());
        let mut connection = pool.get_conn().await.expect("connect to the primary");
        let mut acknowledged = 0;
        for _ in 0..100 {
            connection
                .query_drop(format!("INSERT INTO outage.t VALUES ({next_id})"))
                .await
                .expect("insert");
            acknowledged = next_id;
            next_id += 1;
        }
        processes.kill(0).await;
        processes.kill(1).await;
        drop(connection);
        pool.disconnect().await.ok();
        processes.restart_with(0, as_a_member_pod_starts).await;
        let newest = processes.sql(0, "SELECT MAX(id) FROM outage.t").await;
        assert_eq!(
            newest.trim(),
            acknowledged.to_string(),
            "round {round}: the primary came back without acknowledged commits\n{}",
            processes.error_log_tail(0)
        );
    }
}

/// The server's clock, in whole seconds since the epoch.
async fn server_second(processes: &MariaDbProcesses, index: usize) -> i64 {
    let answer = processes.sql(index, "SELECT UNIX_TIMESTAMP()").await;
    answer.trim().parse().expect("a number of seconds")
}

/// Waits for the server's clock to pass `second`: transactions after it carry a later time.
async fn wait_past(processes: &MariaDbProcesses, index: usize, second: i64) {
    wait::until(
        "the server's clock to pass the noted second",
        CONVERGE,
        || async {
            let now = server_second(processes, index).await;
            if now > second {
                Ok(())
            } else {
                Err(format!("{now}"))
            }
        },
    )
    .await;
}

#[tokio::test]
async fn an_archived_binary_log_replays_onto_a_restored_snapshot_up_to_exactly_a_time_or_a_position() {
    let processes = MariaDbProcesses::start(4).await;
    let (primary, restored) = (admin(&processes, 0), admin(&processes, 1));
    primary.set_read_only(false).await.unwrap();
    processes
        .sql(
            0,
            "CREATE DATABASE shop; CREATE TABLE shop.items (id INT PRIMARY KEY, note VARCHAR(40)); \
             INSERT INTO shop.items VALUES (1, 'in the snapshot')",
        )
        .await;
    let mut dump = Vec::new();
    let snapshot = snapshot::snapshot_out(&primary, &["root", REPLICATION_USER], &mut dump)
        .await
        .unwrap();

    // After the snapshot: rows, a change of schema, an update and a delete in one
    // transaction, then the noted point; then more.
    processes
        .sql(
            0,
            "INSERT INTO shop.items VALUES (2, 'before the point'), (3, 'deleted before the point'); \
             CREATE TABLE shop.orders (id INT PRIMARY KEY, item INT, placed DATETIME DEFAULT NOW()); \
             START TRANSACTION; INSERT INTO shop.orders (id, item) VALUES (1, 2); \
             UPDATE shop.items SET note = 'updated before the point' WHERE id = 1; \
             DELETE FROM shop.items WHERE id = 3; COMMIT",
        )
        .await;
    let point = server_second(&processes, 0).await;
    let at_point = executed(&primary).await;
    let items = "SELECT id, note FROM shop.items ORDER BY id";
    let orders = "SELECT id, item, placed FROM shop.orders ORDER BY id";
    let items_at_point = processes.sql(0, items).await;
    let orders_at_point = processes.sql(0, orders).await;
    wait_past(&processes, 0, point).await;
    processes
        .sql(
            0,
            "INSERT INTO shop.items VALUES (4, 'after the point'); DROP TABLE shop.orders; \
             UPDATE shop.items SET note = 'updated after the point' WHERE id = 2",
        )
        .await;

    let mut archive = Vec::new();
    let archived = binlog::archive_binlog(&primary, &snapshot.position, &mut archive)
        .await
        .unwrap();
    assert_eq!(archived.after, snapshot.position);
    assert_eq!(archived.through, executed(&primary).await);
    assert_eq!(
        archived.transactions, 6,
        "two inserts, a table, a transaction, then three"
    );
    assert_eq!(archived.bytes, archive.len() as u64);
    assert!(archived.first_time.unwrap().as_second() <= point);
    assert!(archived.last_time.unwrap().as_second() > point);

    // Restored as a new cluster's first member is, then replayed to the noted second: exactly
    // the rows the primary had then, and its GTID position then.
    snapshot::snapshot_in(&restored, &dump[..]).await.unwrap();
    restored.adopt_position(&snapshot.position).await.unwrap();
    let replayed = binlog::replay_binlog(
        &restored,
        &archive[..],
        &snapshot.position,
        &ReplayStop::Time(jiff::Timestamp::from_second(point).unwrap()),
    )
    .await
    .unwrap();
    assert!(replayed.reached_stop);
    assert_eq!(replayed.applied, 3);
    assert_eq!(replayed.through, at_point);
    assert_eq!(executed(&restored).await, at_point);
    assert_eq!(processes.sql(1, items).await, items_at_point);
    assert_eq!(
        processes.sql(1, orders).await,
        orders_at_point,
        "the time NOW() gave"
    );

    // To a GTID position instead: the same transactions, whatever their times. Replaying again
    // onto a member that holds them applies nothing twice.
    let by_position = admin(&processes, 2);
    snapshot::snapshot_in(&by_position, &dump[..]).await.unwrap();
    by_position.adopt_position(&snapshot.position).await.unwrap();
    let stop = ReplayStop::Position(at_point.clone());
    let replayed = binlog::replay_binlog(&by_position, &archive[..], &snapshot.position, &stop)
        .await
        .unwrap();
    assert_eq!((replayed.applied, replayed.reached_stop), (3, true));
    assert_eq!(processes.sql(2, items).await, items_at_point);
    let again = binlog::replay_binlog(&by_position, &archive[..], &at_point, &stop)
        .await
        .unwrap();
    assert_eq!(again.applied, 0);
    assert_eq!(processes.sql(2, items).await, items_at_point);

    // The whole archive: everything the primary holds, and the restored member then continues
    // its history as its own primary.
    let whole = admin(&processes, 3);
    snapshot::snapshot_in(&whole, &dump[..]).await.unwrap();
    whole.adopt_position(&snapshot.position).await.unwrap();
    let end = ReplayStop::Time(jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1));
    let replayed = binlog::replay_binlog(&whole, &archive[..], &snapshot.position, &end)
        .await
        .unwrap();
    assert!(!replayed.reached_stop, "no transaction past an hour from now");
    assert_eq!(executed(&whole).await, executed(&primary).await);
    assert_eq!(processes.sql(3, items).await, processes.sql(0, items).await);

    // The next piece continues where this one ended; with nothing new it is empty.
    let mut next = Vec::new();
    let empty = binlog::archive_binlog(&primary, &archived.through, &mut next)
        .await
        .unwrap();
    assert_eq!((empty.transactions, empty.through), (0, archived.through.clone()));

    // A changed byte is refused before the transaction that holds it is applied.
    let mut tampered = archive.clone();
    let at = tampered
        .windows(b"after the point".len())
        .position(|window| window == b"after the point")
        .expect("the row's text is in the log");
    tampered[at] ^= 0x20;
    let untouched = admin(&processes, 2);
    let before = executed(&untouched).await;
    let error = binlog::replay_binlog(&untouched, &tampered[..], &at_point, &end)
        .await
        .unwrap_err();
    assert!(matches!(error, BinlogError::Corrupt(_)), "{error}");
    assert_eq!(executed(&untouched).await, before);

    // A position the log no longer holds is a gap, named as such.
    processes.sql(0, "FLUSH BINARY LOGS").await;
    let newest = processes.sql(0, "SHOW BINARY LOGS").await;
    let last = newest
        .lines()
        .last()
        .unwrap()
        .split('\t')
        .next()
        .unwrap()
        .to_string();
    processes.sql(0, &format!("PURGE BINARY LOGS TO '{last}'")).await;
    let error = binlog::archive_binlog(&primary, &snapshot.position, &mut Vec::new())
        .await
        .unwrap_err();
    assert!(matches!(error, BinlogError::Gap { .. }), "{error}");
}

/// One row per transaction, written as root to member `index` until `stop` (at most 20,000
/// rows or a minute): the id of each acknowledged row and the GTID sequence its commit took.
fn physical_writer(
    processes: &MariaDbProcesses,
    index: usize,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    acknowledged: std::sync::Arc<std::sync::Mutex<Vec<(u64, u64)>>>,
) -> tokio::task::JoinHandle<()> {
    let (user, password) = processes.root_credentials();
    let options = mysql_async::OptsBuilder::default()
        .ip_or_hostname(processes.ip(index).to_string())
        .tcp_port(PORT)
        .user(Some(user))
        .pass(Some(password));
    tokio::spawn(async move {
        let pool = mysql_async::Pool::new(options);
        let mut connection = pool.get_conn().await.expect("the writer's connection");
        let deadline = Instant::now() + Duration::from_secs(60);
        for id in 1..=20_000_u64 {
            if stop.load(std::sync::atomic::Ordering::Relaxed) || Instant::now() >= deadline {
                break;
            }
            connection
                .exec_drop("INSERT INTO shop.items VALUES (?, 'physical')", (id,))
                .await
                .expect("a write");
            let gtid: String = connection
                .query_first("SELECT @@last_gtid")
                .await
                .expect("the write's GTID")
                .expect("a GTID");
            let sequence = gtid
                .rsplit('-')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("d-s-n");
            acknowledged.lock().unwrap().push((id, sequence));
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_physical_backup_under_a_writer_restores_exactly_the_transactions_up_to_its_position_and_only_when_verified()
 {
    use mysql_operator::admin::physical::{PhysicalError, PhysicalSource, backup_out, restore_in};
    use quorum_core::backup::{PipeError, pipe, producer};
    use std::sync::{Arc, Mutex, atomic::AtomicBool};

    let mut processes = MariaDbProcesses::start(1).await;
    let primary = admin(&processes, 0);
    primary.set_read_only(false).await.unwrap();
    processes
        .sql(
            0,
            "CREATE DATABASE shop; CREATE TABLE shop.items (id BIGINT PRIMARY KEY, note VARCHAR(20))",
        )
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(Mutex::new(Vec::new()));
    let writer = physical_writer(&processes, 0, stop.clone(), acknowledged.clone());
    let acknowledged_count = || acknowledged.lock().unwrap().len();
    wait::until("the writer's first rows", CONVERGE, || async {
        (acknowledged_count() >= 50)
            .then_some(())
            .ok_or(format!("{} rows", acknowledged_count()))
    })
    .await;

    // Copied while the writer writes, streamed into the sink as a backup Job streams it.
    let target = BackupTarget::Filesystem {
        directory: processes.dir.join("backups"),
    };
    let sink = BackupSink::new(scoped_target(target, "prod", "source")).unwrap();
    let (user, password) = processes.root_credentials();
    let physical = PhysicalSource {
        host: processes.ip(0).to_string(),
        port: PORT,
        credentials: Credentials {
            user: user.to_string(),
            password: SecretString::from(password),
            server_ca: None,
        },
        data_dir: processes.data_dir(0),
        scratch: processes.dir.join("backup-scratch"),
    };
    let produce = producer(move |writer| Box::pin(async move { backup_out(&physical, writer).await }));
    let upload = |reader| async { sink.upload("source/source-physical.xbstream", reader).await };
    let (stored, info) = pipe(produce, upload, Duration::from_secs(30))
        .await
        .map_err(|error: PipeError<PhysicalError, BackupError>| error.to_string())
        .unwrap();
    stored.verify("mariadb-backup", info.bytes, &info.sha256).unwrap();
    let during = acknowledged_count();
    wait::until("rows written after the copy", CONVERGE, || async {
        (acknowledged_count() >= during + 50)
            .then_some(())
            .ok_or(format!("{} rows", acknowledged_count()))
    })
    .await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.await.unwrap();
    let GtidPosition::MariaDb(domains) = &info.position else {
        unreachable!("a MariaDB position")
    };
    let copied_through = domains[&0].sequence;
    let expected: Vec<u64> = acknowledged
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, sequence)| *sequence <= copied_through)
        .map(|(id, _)| *id)
        .collect();
    assert!(
        expected.len() >= 50 && expected.len() < acknowledged_count(),
        "the copy fell between the writer's rows: {} of {}",
        expected.len(),
        acknowledged_count()
    );

    let restore = |data_dir: std::path::PathBuf, recorded: GtidPosition, sha256: String| {
        let sink = &sink;
        let key = stored.key.clone();
        async move {
            restore_in(&data_dir, &recorded, |input| async move {
                sink.download(&key, input, Some(&sha256)).await.map(|_| ())
            })
            .await
        }
    };
    let entries = |dir: std::path::PathBuf| -> Vec<String> {
        std::fs::read_dir(dir)
            .map(|entries| {
                entries
                    .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default()
    };
    let next = processes.members.len();
    let data_dir = processes.data_dir(next);

    // A member's data is never replaced: the source's own directory is refused untouched.
    let error = restore(
        processes.data_dir(0),
        info.position.clone(),
        stored.sha256.clone(),
    )
    .await
    .unwrap_err();
    assert!(matches!(error, PhysicalError::NotEmpty { .. }), "{error}");
    assert_eq!(
        count_rows(&processes, 0, "shop.items").await,
        acknowledged_count() as u64
    );

    // A stream whose digest is not the one the backup recorded is refused, and nothing of it is
    // left in the directory; so is a changed byte, which the unpacker's own checksums may
    // catch first.
    let error = restore(data_dir.clone(), info.position.clone(), "0".repeat(64))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, PhysicalError::Fetch(message) if message.contains(&"0".repeat(64))),
        "{error}"
    );
    assert!(
        entries(data_dir.clone()).is_empty(),
        "{:?}",
        entries(data_dir.clone())
    );
    let path = std::path::PathBuf::from(&stored.location);
    let original = std::fs::read(&path).unwrap();
    let mut tampered = original.clone();
    let middle = tampered.len() / 2;
    tampered[middle] ^= 0x01;
    std::fs::write(&path, &tampered).unwrap();
    let error = restore(data_dir.clone(), info.position.clone(), stored.sha256.clone())
        .await
        .unwrap_err();
    assert!(
        matches!(
            &error,
            PhysicalError::Fetch(_)
                | PhysicalError::Failed {
                    program: "mbstream",
                    ..
                }
        ),
        "{error}"
    );
    assert!(
        entries(data_dir.clone()).is_empty(),
        "{:?}",
        entries(data_dir.clone())
    );

    // So is another backup's position, before anything is moved into place.
    std::fs::write(&path, &original).unwrap();
    let elsewhere = GtidPosition::parse(Flavor::MariaDB, "0-1-1").unwrap();
    let error = restore(data_dir.clone(), elsewhere, stored.sha256.clone())
        .await
        .unwrap_err();
    assert!(matches!(error, PhysicalError::PositionMismatch { .. }), "{error}");
    assert!(
        entries(data_dir.clone()).is_empty(),
        "{:?}",
        entries(data_dir.clone())
    );

    // Verified, it holds exactly the transactions up to its position.
    let position = restore(data_dir.clone(), info.position.clone(), stored.sha256.clone())
        .await
        .unwrap();
    assert_eq!(position, info.position);
    let restored_index = processes.start_member_on_its_data().await;
    assert_eq!(restored_index, next);
    let restored = admin(&processes, restored_index);
    let ids = processes
        .sql(restored_index, "SELECT id FROM shop.items ORDER BY id")
        .await;
    let ids: Vec<u64> = ids.lines().map(|line| line.trim().parse().unwrap()).collect();
    assert_eq!(
        ids, expected,
        "every acknowledged row up to the position, and no other"
    );

    // It takes the backup's position as its history, and its own next transaction follows it.
    restored.adopt_position(&info.position).await.unwrap();
    assert_eq!(executed(&restored).await, info.position);
    restored.set_read_only(false).await.unwrap();
    processes
        .sql(
            restored_index,
            "INSERT INTO shop.items VALUES (0, 'after restore')",
        )
        .await;
    let binlog = processes
        .sql(restored_index, "SELECT @@GLOBAL.gtid_binlog_pos")
        .await;
    assert_eq!(
        binlog.trim(),
        format!("0-{}-{}", restored_index + 1, copied_through + 1)
    );
}
