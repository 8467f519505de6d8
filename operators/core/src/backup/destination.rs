//! From a resource's backup destination to a [`BackupTarget`]: the S3 credentials Secret, the
//! mapping itself, the per-cluster scope, and the names backups are stored under.

use std::{collections::BTreeMap, fmt, path::PathBuf};

use jiff::Timestamp;
use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::{Api, Client};

use super::{BackupTarget, S3Target};
use crate::crd::BackupDestination;

/// The key of the access key id in an S3 credentials Secret.
pub const ACCESS_KEY_ID_KEY: &str = "accessKeyId";
/// The key of the secret access key in an S3 credentials Secret.
pub const SECRET_ACCESS_KEY_KEY: &str = "secretAccessKey";

/// S3 credentials, as read from the destination's Secret. `Debug` never prints the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    /// The access key id requests are signed with.
    pub access_key_id: String,
    /// The secret that signs requests; never logged.
    pub secret_access_key: String,
}

impl fmt::Debug for S3Credentials {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter
            .debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .finish()
    }
}

impl S3Credentials {
    /// From `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`, as a restore step's container
    /// receives them; `None` unless both are set.
    pub fn from_env() -> Option<Self> {
        Some(Self {
            access_key_id: std::env::var("AWS_ACCESS_KEY_ID").ok()?,
            secret_access_key: std::env::var("AWS_SECRET_ACCESS_KEY").ok()?,
        })
    }

    /// Reads `accessKeyId` and `secretAccessKey` from a Secret's `data`. Surrounding whitespace
    /// (a trailing newline from `kubectl create secret --from-file`) is trimmed.
    ///
    /// # Errors
    /// [`DestinationError::InvalidCredentials`] naming `secret_name` when a key is missing,
    /// empty or not UTF-8. The message never contains the secret's value.
    pub fn from_secret_data(
        secret_name: &str,
        data: &BTreeMap<String, ByteString>,
    ) -> Result<Self, DestinationError> {
        let read = |key: &'static str| {
            let invalid = |reason: &'static str| DestinationError::InvalidCredentials {
                secret: secret_name.to_string(),
                key,
                reason,
            };
            let bytes = data.get(key).ok_or_else(|| invalid("missing"))?;
            let text = std::str::from_utf8(&bytes.0).map_err(|_| invalid("not UTF-8"))?;
            let text = text.trim();
            if text.is_empty() {
                return Err(invalid("empty"));
            }
            Ok(text.to_string())
        };
        Ok(Self {
            access_key_id: read(ACCESS_KEY_ID_KEY)?,
            secret_access_key: read(SECRET_ACCESS_KEY_KEY)?,
        })
    }
}

/// Why a [`BackupDestination`] cannot become a sink target. Permanent until the resource (or
/// its Secret) changes: a reconciler reports it and waits rather than retrying.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DestinationError {
    /// Neither `s3` nor `filesystem` is set.
    #[error("the destination names neither s3 nor filesystem")]
    NoDestination,
    /// Both `s3` and `filesystem` are set.
    #[error("the destination names both s3 and filesystem; choose one")]
    BothDestinations,
    /// An S3 destination was mapped without credentials.
    #[error("the s3 destination needs the credentials of Secret {secret}, and none were given")]
    MissingCredentials { secret: String },
    /// The credentials Secret lacks a key, or holds an empty or non-UTF-8 value (a Secret that
    /// does not exist lacks both keys).
    #[error("Secret {secret}: {key} is {reason}")]
    InvalidCredentials {
        secret: String,
        key: &'static str,
        reason: &'static str,
    },
}

/// Why [`credentials`] could not produce the credentials of a destination.
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    /// Reading the Secret from the API server failed; transient as far as the caller can tell.
    #[error("reading Secret {secret}: {source}")]
    Read {
        secret: String,
        #[source]
        source: kube::Error,
    },
    /// The Secret was read (or is absent) and does not hold usable credentials; permanent until
    /// it changes.
    #[error(transparent)]
    Invalid(#[from] DestinationError),
}

/// Reads the credentials of an S3 destination from the Secret named by
/// `s3.credentialsSecretName` in `namespace`. `None` for a destination without `s3`, which
/// needs none; the result is what [`backup_target`] takes.
///
/// # Errors
/// [`CredentialsError::Read`] when the Secret cannot be read; [`CredentialsError::Invalid`]
/// (see [`S3Credentials::from_secret_data`]) when it does not exist or lacks a key.
pub async fn credentials(
    client: &Client,
    namespace: &str,
    destination: &BackupDestination,
) -> Result<Option<S3Credentials>, CredentialsError> {
    let Some(s3) = &destination.s3 else {
        return Ok(None);
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = secrets
        .get_opt(&s3.credentials_secret_name)
        .await
        .map_err(|source| CredentialsError::Read {
            secret: s3.credentials_secret_name.clone(),
            source,
        })?;
    let data = secret.and_then(|secret| secret.data).unwrap_or_default();
    Ok(Some(S3Credentials::from_secret_data(
        &s3.credentials_secret_name,
        &data,
    )?))
}

/// Maps a resource's [`BackupDestination`] to a sink target. Pure: the reconciler reads the
/// Secret named by `s3.credentialsSecretName` (see [`credentials`]) and passes the result; a
/// filesystem destination ignores `credentials`.
///
/// `allow_http` is the operator's setting, not the resource's: whether an `http://` S3
/// endpoint may be used (credentials and data would cross the network in clear text). The sink
/// refuses such an endpoint when it is off.
///
/// # Errors
/// [`DestinationError::NoDestination`], [`DestinationError::BothDestinations`],
/// [`DestinationError::MissingCredentials`] for an S3 destination without credentials.
pub fn backup_target(
    destination: &BackupDestination,
    credentials: Option<S3Credentials>,
    allow_http: bool,
) -> Result<BackupTarget, DestinationError> {
    match (&destination.s3, &destination.filesystem) {
        (None, None) => Err(DestinationError::NoDestination),
        (Some(_), Some(_)) => Err(DestinationError::BothDestinations),
        (None, Some(filesystem)) => Ok(BackupTarget::Filesystem {
            directory: PathBuf::from(&filesystem.path),
        }),
        (Some(s3), None) => {
            let credentials = credentials.ok_or_else(|| DestinationError::MissingCredentials {
                secret: s3.credentials_secret_name.clone(),
            })?;
            Ok(BackupTarget::S3(S3Target {
                bucket: s3.bucket.clone(),
                prefix: s3.prefix.clone(),
                endpoint: s3.endpoint.clone(),
                region: s3.region.clone(),
                access_key_id: credentials.access_key_id,
                secret_access_key: credentials.secret_access_key,
                allow_http,
            }))
        }
    }
}

/// The target for one cluster's backups: `target` narrowed to `<namespace>/<cluster>` (below
/// the S3 prefix, or below the directory). A sink applies retention to everything under its
/// prefix, so scoping keeps one cluster's retention from touching another cluster's backups
/// that share a bucket or directory.
pub fn scoped_target(target: BackupTarget, namespace: &str, cluster: &str) -> BackupTarget {
    match target {
        BackupTarget::S3(mut s3) => {
            let base = s3.prefix.take().unwrap_or_default();
            let base = base.trim_matches('/');
            s3.prefix = Some(if base.is_empty() {
                format!("{namespace}/{cluster}")
            } else {
                format!("{base}/{namespace}/{cluster}")
            });
            BackupTarget::S3(s3)
        }
        BackupTarget::Filesystem { directory } => BackupTarget::Filesystem {
            directory: directory.join(namespace).join(cluster),
        },
    }
}

/// The name of a backup of `cluster` taken at `at` by the backup resource `backup` of kind
/// `kind`: `<kind, lower case>/<backup>/<cluster>-YYYYMMDDTHHMMSS.mmmZ.<extension>` (UTC,
/// milliseconds), for example `etcdbackup/nightly/main-20261121T153000.750Z.db`.
///
/// Each backup resource's objects share the prefix of its kind and name (see [`object_prefix`]),
/// so its retention sees only what it made, even when clusters of two engines share a name and
/// a bucket, and never an object of the earlier naming (`<cluster>/<cluster>-….<extension>`,
/// files where this naming has directories). Names of one resource with one extension sort by
/// time; two resources never share a name, even in the same second.
pub fn object_name(kind: &str, backup: &str, cluster: &str, at: Timestamp, extension: &str) -> String {
    format!(
        "{}/{cluster}-{}.{extension}",
        object_prefix(kind, backup),
        at.strftime("%Y%m%dT%H%M%S%.3fZ")
    )
}

/// The prefix under which the backup resource `backup` of kind `kind` stores its objects.
pub fn object_prefix(kind: &str, backup: &str) -> String {
    format!("{}/{backup}", kind.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{FilesystemDestination, S3Destination};

    fn s3_destination() -> BackupDestination {
        BackupDestination {
            s3: Some(S3Destination {
                bucket: "backups".to_string(),
                prefix: Some("etcd/prod".to_string()),
                endpoint: Some("https://minio.example:9000".to_string()),
                region: Some("eu-west-1".to_string()),
                credentials_secret_name: "backup-credentials".to_string(),
            }),
            filesystem: None,
        }
    }

    fn credentials() -> S3Credentials {
        S3Credentials {
            access_key_id: "AKIA".to_string(),
            secret_access_key: "very-secret".to_string(),
        }
    }

    #[test]
    fn an_s3_destination_maps_every_field_and_the_credentials() {
        let target = backup_target(&s3_destination(), Some(credentials()), false).expect("target");
        assert_eq!(
            target,
            BackupTarget::S3(S3Target {
                bucket: "backups".to_string(),
                prefix: Some("etcd/prod".to_string()),
                endpoint: Some("https://minio.example:9000".to_string()),
                region: Some("eu-west-1".to_string()),
                access_key_id: "AKIA".to_string(),
                secret_access_key: "very-secret".to_string(),
                allow_http: false,
            })
        );
        let BackupTarget::S3(allowed) =
            backup_target(&s3_destination(), Some(credentials()), true).expect("target")
        else {
            panic!("an S3 destination maps to an S3 target");
        };
        assert!(allowed.allow_http, "plain HTTP is the operator's setting");
    }

    #[test]
    fn an_s3_destination_without_credentials_names_the_secret() {
        assert_eq!(
            backup_target(&s3_destination(), None, false),
            Err(DestinationError::MissingCredentials {
                secret: "backup-credentials".to_string()
            })
        );
    }

    #[test]
    fn a_filesystem_destination_is_a_directory_and_needs_no_credentials() {
        let destination = BackupDestination {
            s3: None,
            filesystem: Some(FilesystemDestination {
                path: "/backups/etcd".to_string(),
            }),
        };
        assert_eq!(
            backup_target(&destination, None, false),
            Ok(BackupTarget::Filesystem {
                directory: PathBuf::from("/backups/etcd")
            })
        );
    }

    #[test]
    fn a_destination_names_exactly_one_store() {
        let neither = BackupDestination {
            s3: None,
            filesystem: None,
        };
        assert_eq!(
            backup_target(&neither, Some(credentials()), false),
            Err(DestinationError::NoDestination)
        );
        let both = BackupDestination {
            filesystem: Some(FilesystemDestination {
                path: "/backups".to_string(),
            }),
            ..s3_destination()
        };
        assert_eq!(
            backup_target(&both, Some(credentials()), false),
            Err(DestinationError::BothDestinations)
        );
    }

    #[test]
    fn credentials_come_from_secret_data_and_never_print_the_secret() {
        let data: BTreeMap<String, ByteString> = [
            (ACCESS_KEY_ID_KEY.to_string(), ByteString(b"AKIA\n".to_vec())),
            (
                SECRET_ACCESS_KEY_KEY.to_string(),
                ByteString(b"very-secret".to_vec()),
            ),
        ]
        .into();
        let read = S3Credentials::from_secret_data("creds", &data).expect("credentials");
        assert_eq!(read, credentials());
        let printed = format!("{read:?}");
        assert!(!printed.contains("very-secret"), "{printed}");

        let mut missing = data.clone();
        missing.remove(SECRET_ACCESS_KEY_KEY);
        assert_eq!(
            S3Credentials::from_secret_data("creds", &missing),
            Err(DestinationError::InvalidCredentials {
                secret: "creds".to_string(),
                key: SECRET_ACCESS_KEY_KEY,
                reason: "missing"
            })
        );
        let mut empty = data;
        empty.insert(ACCESS_KEY_ID_KEY.to_string(), ByteString(b" \n".to_vec()));
        let error = S3Credentials::from_secret_data("creds", &empty).expect_err("empty key id");
        assert!(!error.to_string().contains("very-secret"));
    }

    #[test]
    fn backups_are_kept_per_namespace_and_cluster() {
        let s3 = BackupTarget::S3(S3Target {
            bucket: "b".into(),
            prefix: Some("/etcd/".into()),
            endpoint: None,
            region: None,
            access_key_id: "a".into(),
            secret_access_key: "s".into(),
            allow_http: false,
        });
        match scoped_target(s3, "prod", "main") {
            BackupTarget::S3(s3) => assert_eq!(s3.prefix.as_deref(), Some("etcd/prod/main")),
            other => panic!("{other:?}"),
        }
        let unprefixed = BackupTarget::S3(S3Target {
            bucket: "b".into(),
            prefix: None,
            endpoint: None,
            region: None,
            access_key_id: "a".into(),
            secret_access_key: "s".into(),
            allow_http: false,
        });
        match scoped_target(unprefixed, "prod", "main") {
            BackupTarget::S3(s3) => assert_eq!(s3.prefix.as_deref(), Some("prod/main")),
            other => panic!("{other:?}"),
        }
        match scoped_target(
            BackupTarget::Filesystem {
                directory: PathBuf::from("/backups"),
            },
            "prod",
            "main",
        ) {
            BackupTarget::Filesystem { directory } => {
                assert_eq!(directory, PathBuf::from("/backups/prod/main"))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn object_names_are_per_backup_unique_within_a_second_and_sort_by_time() {
        let at: Timestamp = "2026-11-21T15:30:00.75Z".parse().expect("timestamp");
        assert_eq!(
            object_name("EtcdBackup", "nightly", "main", at, "db"),
            "etcdbackup/nightly/main-20261121T153000.750Z.db"
        );
        assert_eq!(
            object_name("MySQLBackup", "nightly", "main", at, "sql.gz"),
            "mysqlbackup/nightly/main-20261121T153000.750Z.sql.gz"
        );
        // Two backup resources of one cluster in the same millisecond: two objects; two
        // engines' backups of the same name: two prefixes.
        assert_ne!(
            object_name("EtcdBackup", "nightly", "main", at, "db"),
            object_name("EtcdBackup", "before-upgrade", "main", at, "db")
        );
        assert_ne!(
            object_prefix("EtcdBackup", "main-scheduled"),
            object_prefix("MySQLBackup", "main-scheduled")
        );
        let same_second: Timestamp = "2026-11-21T15:30:00.9Z".parse().expect("timestamp");
        let later: Timestamp = "2026-11-21T15:30:01Z".parse().expect("timestamp");
        let next_year: Timestamp = "2027-01-01T00:00:00Z".parse().expect("timestamp");
        let name = |at| object_name("EtcdBackup", "nightly", "main", at, "db");
        let mut names = vec![name(next_year), name(same_second), name(at), name(later)];
        names.sort();
        assert_eq!(names, [name(at), name(same_second), name(later), name(next_year)]);
    }
}
