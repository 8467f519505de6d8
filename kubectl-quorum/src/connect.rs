//! `connect`: an interactive client session in the right member, through `kubectl exec`, built
//! here without I/O. The password is read inside the container from the file the member itself
//! reads it from, so it never appears on a command line on the user's machine.

use crate::target::Target;

/// Where to run the client and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    pub pod: String,
    pub container: &'static str,
    /// The shell script run in the container; the user's extra arguments follow it as `"$@"`.
    pub script: String,
}

/// Why no session can be opened.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NoSession {
    #[error("{0} reports no primary yet; `kubectl quorum status {0}` shows why")]
    NoPrimary(String),
}

/// The session into a MySQL/MariaDB cluster's primary, as root.
pub fn mysql(target: &Target, cluster: &mysql_operator::crd::MySQLCluster) -> Result<Session, NoSession> {
    let status = cluster.status.as_ref();
    let pod = status
        .and_then(|s| s.primary.clone())
        .ok_or_else(|| NoSession::NoPrimary(target.to_string()))?;
    let client = match cluster.spec.flavor {
        mysql_operator::crd::Flavor::MariaDB => "mariadb",
        mysql_operator::crd::Flavor::MySQL => "mysql",
    };
    Ok(Session {
        pod,
        container: "mysqld",
        // Root logs in over the pod's address: the loopback root accounts are dropped.
        script: format!(
            "exec {client} -uroot -p\"$(cat /etc/mysql/credentials/{})\" -h\"$POD_IP\" \"$@\"",
            mysql_operator::resources::ROOT_PASSWORD_FILE
        ),
    })
}

/// The session into a Redis deployment: the primary in replication mode, a node following
/// redirections in cluster mode.
pub fn redis(target: &Target, cluster: &redis_operator::crd::RedisCluster) -> Result<Session, NoSession> {
    use redis_operator::crd::Mode;
    let (pod, cluster_flag) = match cluster.spec.mode {
        Mode::Replication => (
            cluster
                .status
                .as_ref()
                .and_then(|s| s.primary.clone())
                .ok_or_else(|| NoSession::NoPrimary(target.to_string()))?,
            "",
        ),
        Mode::Cluster => (redis_operator::resources::DataNodes::of(cluster).name(0), " -c"),
    };
    Ok(Session {
        pod,
        container: "redis",
        script: format!(
            "exec redis-cli{cluster_flag} --no-auth-warning -a \"$(cat /etc/redis/credentials/{})\" \"$@\"",
            redis_operator::resources::PASSWORD_KEY
        ),
    })
}

/// The session into an etcd cluster: `etcdctl` in the first member, over TLS when clients use it.
pub fn etcd(cluster: &etcd_operator::crd::EtcdCluster) -> Session {
    let name = kube::ResourceExt::name_any(cluster);
    let tls = cluster
        .spec
        .tls
        .as_ref()
        .is_some_and(|tls| tls.client_secret_name.is_some());
    let flags = if tls {
        " --endpoints=https://127.0.0.1:2379 --cacert=/etc/etcd/tls/client/ca.crt \
         --cert=/etc/etcd/tls/client/tls.crt --key=/etc/etcd/tls/client/tls.key"
    } else {
        ""
    };
    Session {
        pod: etcd_operator::resolver::member_name(&name, 0),
        container: "etcd",
        script: format!("exec etcdctl{flags} \"$@\""),
    }
}

/// The session into a MongoDB replica set's primary with `mongosh`, where the image has it.
pub fn mongodb(
    target: &Target,
    replica_set: &mongodb_operator::crd::MongoDBReplicaSet,
) -> Result<Session, NoSession> {
    let pod = replica_set
        .status
        .as_ref()
        .and_then(|s| s.primary.clone())
        .ok_or_else(|| NoSession::NoPrimary(target.to_string()))?;
    Ok(Session {
        pod,
        container: mongodb_operator::resources::MONGOD_CONTAINER,
        script: "command -v mongosh >/dev/null || { echo 'this image has no MongoDB shell (mongosh)' >&2; exit 127; }; \
                 exec mongosh --quiet -u \"$(cat /etc/mongodb/admin/username)\" \
                 -p \"$(cat /etc/mongodb/admin/password)\" --authenticationDatabase admin \"$@\""
            .into(),
    })
}

/// The `kubectl` arguments that open `session` in `namespace`, with a terminal when `tty`,
/// passing `extra` to the client.
pub fn kubectl_args(session: &Session, namespace: &str, tty: bool, extra: &[String]) -> Vec<String> {
    let mut args = vec!["exec".to_string(), "-i".into()];
    if tty {
        args.push("-t".into());
    }
    args.extend([
        "-n".into(),
        namespace.into(),
        session.pod.clone(),
        "-c".into(),
        session.container.into(),
        "--".into(),
        "sh".into(),
        "-c".into(),
        session.script.clone(),
        "sh".into(),
    ]);
    args.extend(extra.iter().cloned());
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Engine;

    #[test]
    fn a_session_opens_on_the_primary_and_reads_the_password_inside_the_container() {
        let mut cluster: mysql_operator::crd::MySQLCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "mysql.quorum.dev/v1alpha1",
            "kind": "MySQLCluster",
            "metadata": {"name": "shop"},
            "spec": {"replicas": 3, "flavor": "MariaDB", "version": "10.11.19", "storage": {"size": "1Gi"}}
        }))
        .unwrap();
        let target = Target {
            engine: Engine::MySql,
            name: "shop".into(),
        };
        assert_eq!(
            mysql(&target, &cluster),
            Err(NoSession::NoPrimary("MySQLCluster/shop".into()))
        );
        cluster.status = Some(mysql_operator::crd::MySQLClusterStatus {
            primary: Some("shop-2".into()),
            ..Default::default()
        });
        let session = mysql(&target, &cluster).unwrap();
        let args = kubectl_args(&session, "apps", false, &["-e".into(), "SELECT 1".into()]);
        assert_eq!(
            &args[..8],
            ["exec", "-i", "-n", "apps", "shop-2", "-c", "mysqld", "--"]
        );
        assert!(
            args[10].contains("$(cat /etc/mysql/credentials/root-password)"),
            "{args:?}"
        );
        assert_eq!(&args[11..], ["sh", "-e", "SELECT 1"]);
        assert!(kubectl_args(&session, "apps", true, &[]).contains(&"-t".to_string()));
    }
}
