//! How to connect to a cluster, built without I/O from the cluster object: the Services a client
//! in the cluster uses, the accounts and the Secrets that hold their passwords, and a command
//! that reads a password without showing it. A password itself is printed only when asked for
//! (`--show-password`), by the caller, which reads the Secret.

use serde::Serialize;

/// One way in: a Service, its port, and what it serves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Endpoint {
    /// What it is for (`primary (read-write)`, `replicas (read-only)`, ...).
    pub role: &'static str,
    /// `<service>.<namespace>.svc:<port>`.
    pub address: String,
}

/// An account and where its password is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Account {
    /// The account name; `None` when the Secret holds it (MongoDB's `username` key).
    pub user: Option<String>,
    /// The Secret and key holding the password.
    pub secret: String,
    pub key: &'static str,
    /// The database the account may use, when it is limited to one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub database: Option<String>,
}

/// How to connect to one cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Connection {
    pub endpoints: Vec<Endpoint>,
    pub accounts: Vec<Account>,
    /// The Secret with the certificate authority clients must trust, when traffic is TLS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tls_secret: Option<String>,
}

fn address(service: &str, namespace: &str, port: i32) -> String {
    format!("{service}.{namespace}.svc:{port}")
}

/// The two Services of an engine with one primary: writes, and reads spread over replicas.
fn primary_and_replicas(primary: &str, replicas: &str, namespace: &str, port: i32) -> Vec<Endpoint> {
    vec![
        Endpoint {
            role: "primary (read-write)",
            address: address(primary, namespace, port),
        },
        Endpoint {
            role: "replicas (read-only)",
            address: address(replicas, namespace, port),
        },
    ]
}

pub fn mysql(cluster: &mysql_operator::crd::MySQLCluster, namespace: &str) -> Connection {
    use mysql_operator::resources::{PASSWORD_KEY, PORT, primary_service_name, replicas_service_name};
    let name = kube::ResourceExt::name_any(cluster);
    let mut accounts = vec![Account {
        user: Some("root".into()),
        secret: mysql_operator::resources::root_secret_name(cluster),
        key: PASSWORD_KEY,
        database: None,
    }];
    accounts.extend(cluster.spec.users.iter().map(|user| Account {
        user: Some(user.name.clone()),
        secret: user.password_secret.clone(),
        key: PASSWORD_KEY,
        database: Some(user.database.clone()),
    }));
    Connection {
        endpoints: primary_and_replicas(
            &primary_service_name(&name),
            &replicas_service_name(&name),
            namespace,
            PORT,
        ),
        accounts,
        tls_secret: cluster.spec.tls.as_ref().map(|tls| tls.secret_name.clone()),
    }
}

pub fn redis(cluster: &redis_operator::crd::RedisCluster, namespace: &str) -> Connection {
    use redis_operator::{
        crd::Mode,
        resources::{PASSWORD_KEY, PORT, client_service_name, primary_service_name, replicas_service_name},
    };
    let name = kube::ResourceExt::name_any(cluster);
    let endpoints = match cluster.spec.mode {
        Mode::Replication => primary_and_replicas(
            &primary_service_name(&name),
            &replicas_service_name(&name),
            namespace,
            PORT,
        ),
        Mode::Cluster => vec![Endpoint {
            role: "any node (cluster-aware clients follow redirections)",
            address: address(&client_service_name(&name), namespace, PORT),
        }],
    };
    Connection {
        endpoints,
        accounts: vec![Account {
            user: Some("default".into()),
            secret: redis_operator::resources::auth_secret_name(cluster),
            key: PASSWORD_KEY,
            database: None,
        }],
        tls_secret: None,
    }
}

pub fn etcd(cluster: &etcd_operator::crd::EtcdCluster, namespace: &str) -> Connection {
    use etcd_operator::resources::{CLIENT_PORT, client_service_name};
    let name = kube::ResourceExt::name_any(cluster);
    Connection {
        endpoints: vec![Endpoint {
            role: "clients (any member)",
            address: address(&client_service_name(&name), namespace, CLIENT_PORT),
        }],
        // etcd runs without authentication: who may connect is decided by the network and,
        // with TLS, by client certificates signed by the cluster's CA.
        accounts: Vec::new(),
        tls_secret: cluster
            .spec
            .tls
            .as_ref()
            .and_then(|tls| tls.client_secret_name.clone()),
    }
}

pub fn mongodb(replica_set: &mongodb_operator::crd::MongoDBReplicaSet, namespace: &str) -> Connection {
    use mongodb_operator::resources::{PASSWORD_KEY, PORT, client_service_name};
    let name = kube::ResourceExt::name_any(replica_set);
    Connection {
        endpoints: vec![Endpoint {
            role: "replica set (drivers find the primary)",
            address: address(&client_service_name(&name), namespace, PORT),
        }],
        accounts: vec![Account {
            user: None,
            secret: mongodb_operator::resources::admin_secret_name(replica_set),
            key: PASSWORD_KEY,
            database: Some("admin".into()),
        }],
        tls_secret: None,
    }
}

/// The connection in words. `passwords` holds each account's password, in order, when the
/// user asked to see them; otherwise the command that reads one is printed instead.
pub fn render(connection: &Connection, namespace: &str, passwords: Option<&[String]>) -> String {
    let mut out = String::new();
    for endpoint in &connection.endpoints {
        out.push_str(&format!("{:<56} {}\n", endpoint.address, endpoint.role));
    }
    if connection.accounts.is_empty() {
        out.push_str("no accounts: the server does not authenticate clients\n");
    }
    for (index, account) in connection.accounts.iter().enumerate() {
        let user = account
            .user
            .clone()
            .unwrap_or_else(|| format!("(key `username` of Secret {})", account.secret));
        let scope = account
            .database
            .as_ref()
            .map(|database| format!(" on {database}"))
            .unwrap_or_default();
        out.push_str(&format!("user {user}{scope}\n"));
        match passwords.and_then(|passwords| passwords.get(index)) {
            Some(password) => out.push_str(&format!("  password: {password}\n")),
            None => out.push_str(&format!(
                "  password: kubectl get secret -n {namespace} {} -o jsonpath='{{.data.{}}}' | base64 -d\n",
                account.secret, account.key
            )),
        }
    }
    if let Some(secret) = &connection.tls_secret {
        out.push_str(&format!(
            "TLS: trust ca.crt of Secret {secret}: kubectl get secret -n {namespace} {secret} -o jsonpath='{{.data.ca\\.crt}}' | base64 -d\n"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shop() -> mysql_operator::crd::MySQLCluster {
        let mut cluster: mysql_operator::crd::MySQLCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "mysql.quorum.dev/v1alpha1",
            "kind": "MySQLCluster",
            "metadata": {"name": "shop", "namespace": "apps"},
            "spec": {"replicas": 3, "flavor": "MariaDB", "version": "10.11", "storage": {"size": "1Gi"},
                     "users": [{"name": "app", "passwordSecret": "app-password", "database": "shop"}]}
        }))
        .unwrap();
        cluster.spec.root_password_secret = None;
        cluster
    }

    #[test]
    fn a_password_is_shown_only_when_asked_and_otherwise_read_by_a_command() {
        let connection = mysql(&shop(), "apps");
        assert_eq!(connection.endpoints[0].address, "shop-primary.apps.svc:3306");
        assert_eq!(connection.accounts[1].user.as_deref(), Some("app"));
        let hidden = render(&connection, "apps", None);
        assert!(
            hidden
                .contains("kubectl get secret -n apps shop-root -o jsonpath='{.data.password}' | base64 -d"),
            "{hidden}"
        );
        assert!(hidden.contains("user app on shop"), "{hidden}");
        let shown = render(&connection, "apps", Some(&["s3cret".into(), "other".into()]));
        assert!(
            shown.contains("password: s3cret") && shown.contains("password: other"),
            "{shown}"
        );
        assert!(!hidden.contains("s3cret"));
    }
}
