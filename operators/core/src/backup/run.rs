//! The engine-neutral frame of a backup controller's run and of a restore's fetch: whether a
//! backup resource is due, the sink of one cluster's backups, and the store and key a
//! recorded location names.

use std::time::Duration;

use jiff::Timestamp;
use kube::Client;

use super::{
    BackupError, BackupSink, BackupTarget, CredentialsError, DestinationError, S3Credentials, S3Target,
    ScheduleError, backup_target, credentials, due_at, scoped_target,
};
use crate::crd::{BackupDestination, BackupPhase};

/// Whether a backup resource runs now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Due {
    /// Its time has come (or a one-shot backup has not finished yet).
    Now,
    /// Not yet: requeue after this long.
    Later(Duration),
    /// A one-shot backup that finished; only a change of the resource matters now.
    Never,
}

/// [`due_at`] read against `now`: what the controller of a backup resource does on this pass.
///
/// # Errors
/// [`ScheduleError`] for a schedule that is invalid or never fires.
pub fn due(
    schedule: Option<&str>,
    phase: Option<BackupPhase>,
    started_at: Option<Timestamp>,
    created_at: Option<Timestamp>,
    now: Timestamp,
) -> Result<Due, ScheduleError> {
    Ok(match due_at(schedule, phase, started_at, created_at)? {
        None => Due::Never,
        Some(at) if at <= now => Due::Now,
        Some(at) => Due::Later(until(now, at)),
    })
}

/// How long from `now` until `at`; a minute when `at` is too far for a `Duration`, zero when
/// it has passed.
pub fn until(now: Timestamp, at: Timestamp) -> Duration {
    if at <= now {
        return Duration::ZERO;
    }
    Duration::try_from(now.duration_until(at)).unwrap_or(Duration::from_secs(60))
}

/// Why [`cluster_sink`] could not build the sink.
#[derive(Debug, thiserror::Error)]
pub enum SinkSetupError {
    #[error(transparent)]
    Credentials(#[from] CredentialsError),
    #[error(transparent)]
    Destination(#[from] DestinationError),
    #[error(transparent)]
    Sink(#[from] BackupError),
}

impl SinkSetupError {
    /// A short, bounded label for the error counter.
    pub fn metric_label(&self) -> &'static str {
        match self {
            SinkSetupError::Credentials(_) | SinkSetupError::Destination(_) => "destination",
            SinkSetupError::Sink(error) => error.metric_label(),
        }
    }
}

/// The sink of `cluster`'s backups in `namespace`: the destination's store (its S3 credentials
/// read from their Secret), narrowed to the cluster (see [`scoped_target`]), so that retention
/// never reaches another cluster's backups.
///
/// # Errors
/// [`SinkSetupError`] naming the Secret, the destination or the store that failed.
pub async fn cluster_sink(
    client: &Client,
    namespace: &str,
    cluster: &str,
    destination: &BackupDestination,
    allow_http: bool,
) -> Result<BackupSink, SinkSetupError> {
    let target = backup_target(
        destination,
        credentials(client, namespace, destination).await?,
        allow_http,
    )?;
    Ok(BackupSink::new(scoped_target(target, namespace, cluster))?)
}

/// A stored object a restored member's init container fetches: where it is, the SHA-256 its
/// backup recorded, and what its store needs that the location does not say.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectFetch {
    /// `s3://bucket/key` or an absolute path, as the backup recorded it.
    pub location: String,
    pub sha256: String,
    /// For an S3 location: endpoint, region and the credentials Secret.
    pub s3_endpoint: Option<String>,
    pub s3_region: Option<String>,
    pub credentials_secret_name: Option<String>,
    pub allow_http: bool,
}

impl ObjectFetch {
    /// The object at `location` with `sha256`, in the destination whose S3 settings are `s3`
    /// (none for a filesystem destination).
    pub fn of(
        location: &str,
        sha256: &str,
        s3: Option<&crate::crd::S3Destination>,
        allow_http: bool,
    ) -> Self {
        Self {
            location: location.to_string(),
            sha256: sha256.to_string(),
            s3_endpoint: s3.and_then(|s3| s3.endpoint.clone()),
            s3_region: s3.and_then(|s3| s3.region.clone()),
            credentials_secret_name: s3.map(|s3| s3.credentials_secret_name.clone()),
            allow_http,
        }
    }

    /// The init container's `--location` and `--sha256`.
    pub fn object_args(&self) -> [String; 2] {
        [
            format!("--location={}", self.location),
            format!("--sha256={}", self.sha256),
        ]
    }

    /// The init container's store flags ([`StoreSettings`]).
    pub fn store_args(&self) -> Vec<String> {
        let mut args = Vec::new();
        args.extend(
            self.s3_endpoint
                .iter()
                .map(|endpoint| format!("--s3-endpoint={endpoint}")),
        );
        args.extend(
            self.s3_region
                .iter()
                .map(|region| format!("--s3-region={region}")),
        );
        if self.allow_http {
            args.push("--allow-http".to_string());
        }
        args
    }

    /// The S3 credentials from their Secret ([`s3_credentials_env`]).
    pub fn credentials_env(&self) -> Vec<k8s_openapi::api::core::v1::EnvVar> {
        self.credentials_secret_name
            .as_deref()
            .map(s3_credentials_env)
            .unwrap_or_default()
    }
}

/// The S3 credentials of the Secret `secret`, as a restore step reads them
/// ([`S3Credentials::from_env`]): `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`.
pub fn s3_credentials_env(secret: &str) -> Vec<k8s_openapi::api::core::v1::EnvVar> {
    use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, SecretKeySelector};
    [
        ("AWS_ACCESS_KEY_ID", super::ACCESS_KEY_ID_KEY),
        ("AWS_SECRET_ACCESS_KEY", super::SECRET_ACCESS_KEY_KEY),
    ]
    .into_iter()
    .map(|(name, key)| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_string(),
                key: key.into(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
        ..EnvVar::default()
    })
    .collect()
}

/// The store settings a recorded location alone does not carry (an S3 location names only
/// bucket and key).
/// A restore step takes them as flags (`--s3-endpoint`, `--s3-region`, `--allow-http`).
#[derive(clap::Args, Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreSettings {
    /// S3 endpoint URL, for `s3://` locations outside AWS.
    #[arg(long)]
    pub s3_endpoint: Option<String>,
    #[arg(long)]
    pub s3_region: Option<String>,
    /// Allow a plain-HTTP S3 endpoint.
    #[arg(long, default_value_t = false)]
    pub allow_http: bool,
}

/// Why a recorded location does not name an object.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LocateError {
    #[error("location {0} is neither s3://bucket/key nor an absolute path to a file")]
    Location(String),
    #[error("the s3:// location {0} needs credentials, and none were given")]
    MissingCredentials(String),
}

/// Splits a location as a [`BackupSink`] records it (`s3://bucket/key` or an absolute path)
/// into the store and the key within it, for a restore that has only the location.
///
/// # Errors
/// [`LocateError::Location`] for anything else; [`LocateError::MissingCredentials`] for an S3
/// location without credentials.
pub fn locate(
    location: &str,
    settings: &StoreSettings,
    credentials: Option<S3Credentials>,
) -> Result<(BackupTarget, String), LocateError> {
    let invalid = || LocateError::Location(location.to_string());
    if let Some(rest) = location.strip_prefix("s3://") {
        let (bucket, key) = rest
            .split_once('/')
            .filter(|(bucket, key)| !bucket.is_empty() && !key.is_empty())
            .ok_or_else(invalid)?;
        let credentials = credentials.ok_or_else(|| LocateError::MissingCredentials(location.to_string()))?;
        return Ok((
            BackupTarget::S3(S3Target {
                bucket: bucket.to_string(),
                prefix: None,
                endpoint: settings.s3_endpoint.clone(),
                region: settings.s3_region.clone(),
                access_key_id: credentials.access_key_id,
                secret_access_key: credentials.secret_access_key,
                allow_http: settings.allow_http,
            }),
            key.to_string(),
        ));
    }
    let path = std::path::Path::new(location);
    match (path.is_absolute(), path.parent(), path.file_name()) {
        (true, Some(parent), Some(file)) => Ok((
            BackupTarget::Filesystem {
                directory: parent.to_path_buf(),
            },
            file.to_string_lossy().into_owned(),
        )),
        _ => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("timestamp")
    }

    #[test]
    fn a_backup_is_due_now_later_or_never() {
        let now = at("2026-11-21T15:30:00Z");
        assert_eq!(due(None, None, None, Some(now), now), Ok(Due::Now));
        assert_eq!(
            due(None, Some(BackupPhase::Succeeded), None, Some(now), now),
            Ok(Due::Never)
        );
        assert_eq!(
            due(Some("0 */6 * * *"), None, None, Some(now), now),
            Ok(Due::Later(Duration::from_secs(150 * 60)))
        );
        assert_eq!(
            due(
                Some("0 */6 * * *"),
                None,
                None,
                Some(at("2026-11-21T11:59:00Z")),
                now
            ),
            Ok(Due::Now),
            "a run missed while the operator was away is taken at once"
        );
        assert!(due(Some("never"), None, None, None, now).is_err());
    }

    #[test]
    fn locations_split_into_a_store_and_a_key() {
        let credentials = || {
            Some(S3Credentials {
                access_key_id: "a".into(),
                secret_access_key: "s".into(),
            })
        };
        let settings = StoreSettings {
            s3_endpoint: Some("https://s3.example".into()),
            ..StoreSettings::default()
        };
        let (target, key) = locate("s3://bucket/redis/ns/main/main-1.rdb", &settings, credentials()).unwrap();
        assert_eq!(key, "redis/ns/main/main-1.rdb");
        assert!(matches!(target, BackupTarget::S3(s3)
            if s3.bucket == "bucket" && s3.prefix.is_none() && s3.endpoint.as_deref() == Some("https://s3.example")));
        let (target, key) = locate("/backups/ns/main/main-1.rdb", &settings, None).unwrap();
        assert_eq!(key, "main-1.rdb");
        assert!(
            matches!(target, BackupTarget::Filesystem { directory } if directory == Path::new("/backups/ns/main"))
        );
        assert!(matches!(
            locate("s3://bucket/k", &settings, None),
            Err(LocateError::MissingCredentials(_))
        ));
        for invalid in ["relative/path.rdb", "s3://bucket", "s3:///key", "/"] {
            assert!(
                matches!(
                    locate(invalid, &settings, credentials()),
                    Err(LocateError::Location(_))
                ),
                "{invalid}"
            );
        }
    }
}
