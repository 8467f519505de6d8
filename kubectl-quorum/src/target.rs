//! Which cluster a command means.

use std::fmt;

/// The engine of a cluster kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    Etcd,
    MySql,
    Redis,
    MongoDb,
}

impl Engine {
    pub const ALL: [Engine; 4] = [Engine::Etcd, Engine::MySql, Engine::Redis, Engine::MongoDb];

    /// The cluster kind.
    pub fn kind(self) -> &'static str {
        match self {
            Engine::Etcd => "EtcdCluster",
            Engine::MySql => "MySQLCluster",
            Engine::Redis => "RedisCluster",
            Engine::MongoDb => "MongoDBReplicaSet",
        }
    }

    /// The kind of its backups.
    pub fn backup_kind(self) -> &'static str {
        match self {
            Engine::Etcd => "EtcdBackup",
            Engine::MySql => "MySQLBackup",
            Engine::Redis => "RedisBackup",
            Engine::MongoDb => "MongoDBBackup",
        }
    }

    /// The names `kubectl` users type for the kind: the kind, its plural, and the engine.
    fn names(self) -> &'static [&'static str] {
        match self {
            Engine::Etcd => &["etcdcluster", "etcdclusters", "etcd"],
            Engine::MySql => &["mysqlcluster", "mysqlclusters", "mysql", "mariadb"],
            Engine::Redis => &["rediscluster", "redisclusters", "redis"],
            Engine::MongoDb => &["mongodbreplicaset", "mongodbreplicasets", "mongodb", "mongo"],
        }
    }
}

/// One cluster: its engine and name (the namespace comes from the command line or kubeconfig).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub engine: Engine,
    pub name: String,
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.engine.kind(), self.name)
    }
}

/// Why a target could not be read.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TargetError {
    #[error("expected <kind>/<name>, for example mysqlcluster/shop; got {0:?}")]
    Shape(String),
    #[error(
        "{0:?} is not a Quorum cluster kind; use etcdcluster, mysqlcluster, rediscluster or mongodbreplicaset"
    )]
    UnknownKind(String),
}

/// Reads `<kind>/<name>`; the kind in any case, singular, plural or the engine's name, with or
/// without its API group (`mysqlclusters.mysql.quorum.dev/shop`).
pub fn parse(text: &str) -> Result<Target, TargetError> {
    let (kind, name) = text
        .split_once('/')
        .filter(|(kind, name)| !kind.is_empty() && !name.is_empty() && !name.contains('/'))
        .ok_or_else(|| TargetError::Shape(text.to_string()))?;
    let kind = kind.to_ascii_lowercase();
    let bare = kind.split('.').next().unwrap_or_default();
    let engine = Engine::ALL
        .into_iter()
        .find(|engine| engine.names().contains(&bare))
        .ok_or_else(|| TargetError::UnknownKind(kind.clone()))?;
    Ok(Target {
        engine,
        name: name.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_read_by_any_of_their_names() {
        for (text, engine) in [
            ("etcdcluster/main", Engine::Etcd),
            ("EtcdCluster/main", Engine::Etcd),
            ("mysqlclusters.mysql.quorum.dev/main", Engine::MySql),
            ("mariadb/main", Engine::MySql),
            ("redis/main", Engine::Redis),
            ("mongodbreplicaset/main", Engine::MongoDb),
            ("mongo/main", Engine::MongoDb),
        ] {
            assert_eq!(
                parse(text),
                Ok(Target {
                    engine,
                    name: "main".into()
                }),
                "{text}"
            );
        }
    }

    #[test]
    fn a_wrong_target_says_what_is_expected() {
        assert_eq!(parse("main"), Err(TargetError::Shape("main".into())));
        assert_eq!(parse("mysql/"), Err(TargetError::Shape("mysql/".into())));
        let unknown = parse("postgres/main").unwrap_err();
        assert!(unknown.to_string().contains("mysqlcluster"), "{unknown}");
    }
}
