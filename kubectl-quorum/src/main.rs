//! `kubectl quorum`: see the library's documentation, and the README's section of the same name.

use std::{io::IsTerminal, process::ExitCode};

use clap::{Parser, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams, Patch, PatchParams, PostParams},
    core::GroupVersionKind,
    discovery::ApiResource,
};
use kubectl_quorum::{
    actions, connect,
    credentials::{self, Connection},
    target::{self, Engine, Target},
    view::{self, ClusterView, Placement, Pods, Style},
};
use quorum_core::crd::BackupDestination;

/// Status and day-two actions for Quorum's etcd, MySQL/MariaDB, Redis and MongoDB clusters.
#[derive(Parser, Debug)]
#[command(name = "kubectl-quorum", version, about)]
struct Cli {
    /// The namespace (default: the kubeconfig context's).
    #[arg(short, long, global = true)]
    namespace: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Output {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// The cluster and its members (role, health, lag, pod, node, volume), its conditions, the
    /// step in flight and what the operator waits for, the newest backup and the last failover.
    Status {
        /// `<kind>/<name>`, for example `mysqlcluster/shop`.
        target: String,
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Stops the operator from acting on the cluster (annotation `quorum.dev/paused`).
    Pause { target: String },
    /// Lets the operator act on the cluster again.
    Resume { target: String },
    /// Asks for a switchover to `--to` (MySQL/MariaDB).
    Switchover {
        target: String,
        /// The member (pod name) to become primary.
        #[arg(long)]
        to: String,
    },
    /// Asks the operator to rebuild a member from its peers on an empty volume (annotation
    /// `quorum.dev/repair`), through its safety gate; `--end` ends the request once done.
    Repair {
        target: String,
        /// The member (pod name) to rebuild.
        #[arg(required_unless_present = "end")]
        member: Option<String>,
        /// Remove the request (after `status` shows the repair Done, or to withdraw it).
        #[arg(long, conflicts_with = "member")]
        end: bool,
    },
    /// Asks the operator to bring a cluster whose primary is lost for good back into service
    /// from the named surviving member (annotation `quorum.dev/recover-from`; MySQL/MariaDB,
    /// MongoDB, and etcd with a majority lost).
    /// What only the lost members held is given up; `--end` ends the request.
    Recover {
        target: String,
        /// The surviving member (pod name) to serve from.
        #[arg(required_unless_present = "end")]
        member: Option<String>,
        /// Remove the request (after `status` shows the recovery Done, or to withdraw it).
        #[arg(long, conflicts_with = "member")]
        end: bool,
    },
    /// Takes a backup now: a one-shot backup object of the engine's kind.
    Backup {
        target: String,
        /// Its name (default: `<cluster>-<UTC time>`).
        #[arg(long)]
        name: Option<String>,
        /// Back up to the destination of this existing backup instead of the cluster's
        /// `spec.backup.destination`.
        #[arg(long)]
        like: Option<String>,
    },
    /// How to connect: the Services, the accounts and the Secrets of their passwords, with the
    /// command that reads each; the passwords themselves only with `--show-password`.
    Credentials {
        target: String,
        /// Print the passwords (read from their Secrets).
        #[arg(long)]
        show_password: bool,
        #[arg(short, long, value_enum, default_value = "text")]
        output: Output,
    },
    /// Opens the engine's client in the right member through `kubectl exec` (`mariadb` or
    /// `mysql` on the primary, `redis-cli`, `etcdctl`, `mongosh` where the image has it);
    /// arguments after `--` go to the client.
    Connect {
        target: String,
        #[arg(last = true)]
        client_args: Vec<String>,
    },
    /// Restores a backup into a new cluster `target`, with the spec of the cluster the backup
    /// was taken of (without its backup policy).
    Restore {
        /// The new cluster, `<kind>/<name>`; it must not exist.
        target: String,
        /// The backup (of the same engine, in the same namespace).
        #[arg(long)]
        from: String,
        /// Restore to this time (RFC 3339): MySQL/MariaDB from a backup with archiveBinlogs,
        /// MongoDB from one with archiveOplog.
        #[arg(long, conflicts_with = "to_gtid")]
        to_time: Option<String>,
        /// MySQL/MariaDB: restore to this GTID position, from a backup with archiveBinlogs.
        #[arg(long)]
        to_gtid: Option<String>,
    },
}

#[derive(Debug, thiserror::Error)]
enum Failure {
    #[error(transparent)]
    Target(#[from] target::TargetError),
    #[error(transparent)]
    Refused(#[from] actions::Refusal),
    #[error(transparent)]
    NoSession(#[from] connect::NoSession),
    #[error("{0}")]
    Kubectl(String),
    #[error("{what}: {source}")]
    Api {
        what: String,
        #[source]
        source: kube::Error,
    },
}

fn api(what: impl Into<String>) -> impl FnOnce(kube::Error) -> Failure {
    let what = what.into();
    move |source| Failure::Api { what, source }
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("error: {failure}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> Result<(), Failure> {
    quorum_core::install_crypto_provider();
    let client = Client::try_default()
        .await
        .map_err(api("connecting to the cluster (kubeconfig)"))?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| client.default_namespace().to_string());
    let scope = Scope { client, namespace };
    match cli.command {
        Command::Status { target, output } => {
            let target = target::parse(&target)?;
            let view = scope.status(&target).await?;
            match output {
                Output::Json => println!(
                    "{}",
                    serde_json::to_string_pretty(&view).expect("a view serializes")
                ),
                Output::Text => {
                    let style = if std::io::stdout().is_terminal() {
                        Style::Colour
                    } else {
                        Style::Plain
                    };
                    print!("{}", view::render(&view, style));
                }
            }
        }
        Command::Pause { target } => {
            let target = target::parse(&target)?;
            scope.patch(&target, actions::pause(true)).await?;
            println!(
                "{target} paused: the operator takes no step for it until `kubectl quorum resume {target}`"
            );
        }
        Command::Resume { target } => {
            let target = target::parse(&target)?;
            scope.patch(&target, actions::pause(false)).await?;
            println!("{target} resumed");
        }
        Command::Switchover { target, to } => {
            let target = target::parse(&target)?;
            let patch = actions::switchover(&target, &to)?;
            scope.patch(&target, patch).await?;
            println!(
                "{target}: switchover to {to} requested (annotation {}); `kubectl quorum status {target}` shows its progress",
                mysql_operator::crd::SWITCHOVER_ANNOTATION
            );
        }
        Command::Repair { target, member, .. } => {
            let target = target::parse(&target)?;
            scope.patch(&target, actions::repair(member.as_deref())).await?;
            match member {
                Some(member) => println!(
                    "{target}: repair of {member} requested (annotation {}); `kubectl quorum status {target}` shows its progress, and `kubectl quorum repair {target} --end` ends the request once it is Done",
                    quorum_core::crd::REPAIR_ANNOTATION
                ),
                None => println!("{target}: repair request ended"),
            }
        }
        Command::Recover { target, member, .. } => {
            let target = target::parse(&target)?;
            scope.patch(&target, actions::recover(member.as_deref())).await?;
            match member {
                Some(member) => println!(
                    "{target}: recovery from {member} requested (annotation {}); `kubectl quorum status {target}` shows whether it is taken or refused and why, and `kubectl quorum recover {target} --end` ends the request",
                    quorum_core::crd::RECOVER_ANNOTATION
                ),
                None => println!("{target}: recovery request ended"),
            }
        }
        Command::Backup { target, name, like } => {
            let target = target::parse(&target)?;
            let name = name.unwrap_or_else(|| {
                format!(
                    "{}-{}",
                    target.name,
                    jiff::Timestamp::now().strftime("%Y%m%dt%H%M%Sz")
                )
            });
            let destination = match like {
                Some(other) => scope.backup_destination(target.engine, &other).await?,
                None => scope.cluster_destination(&target).await?,
            };
            let object = actions::backup(&target, &name, destination.as_ref())?;
            let backups = scope.dynamic(target.engine.backup_kind());
            let object: DynamicObject = serde_json::from_value(object).expect("a backup object");
            backups
                .create(&PostParams::default(), &object)
                .await
                .map_err(api(format!("creating {} {name}", target.engine.backup_kind())))?;
            println!(
                "{} {name} created for {target}; `kubectl get {} {name}` shows its phase",
                target.engine.backup_kind(),
                target.engine.backup_kind().to_ascii_lowercase()
            );
        }
        Command::Credentials {
            target,
            show_password,
            output,
        } => {
            let target = target::parse(&target)?;
            let connection = scope.connection(&target).await?;
            let passwords = if show_password {
                Some(scope.passwords(&connection).await?)
            } else {
                None
            };
            match output {
                Output::Json => {
                    let mut json = serde_json::to_value(&connection).expect("a connection serializes");
                    if let Some(passwords) = &passwords {
                        json["passwords"] = serde_json::json!(passwords);
                    }
                    println!("{}", serde_json::to_string_pretty(&json).expect("JSON"));
                }
                Output::Text => print!(
                    "{}",
                    credentials::render(&connection, &scope.namespace, passwords.as_deref())
                ),
            }
        }
        Command::Connect { target, client_args } => {
            let target = target::parse(&target)?;
            let session = scope.session(&target).await?;
            let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
            let args = connect::kubectl_args(&session, &scope.namespace, tty, &client_args);
            let status =
                std::process::Command::new(std::env::var("KUBECTL").unwrap_or_else(|_| "kubectl".into()))
                    .args(&args)
                    .status()
                    .map_err(|source| Failure::Kubectl(source.to_string()))?;
            if !status.success() {
                return Err(Failure::Kubectl(format!(
                    "kubectl exec into {} ended with {status}",
                    session.pod
                )));
            }
        }
        Command::Restore {
            target,
            from,
            to_time,
            to_gtid,
        } => {
            let target = target::parse(&target)?;
            let point = to_time
                .map(actions::PointInTime::Time)
                .or(to_gtid.map(actions::PointInTime::Gtid));
            let backup_kind = target.engine.backup_kind();
            let backup = scope
                .dynamic(backup_kind)
                .get(&from)
                .await
                .map_err(api(format!("{backup_kind} {from}")))?;
            let source = backup
                .data
                .pointer("/spec/clusterName")
                .and_then(|name| name.as_str())
                .unwrap_or_default()
                .to_string();
            let clusters = scope.dynamic(target.engine.kind());
            let source_cluster = clusters.get(&source).await.map_err(api(format!(
                "{} {source}, which {backup_kind} {from} was taken of",
                target.engine.kind()
            )))?;
            let object = actions::restore(
                &target,
                source_cluster
                    .data
                    .get("spec")
                    .unwrap_or(&serde_json::Value::Null),
                &from,
                point.as_ref(),
            )?;
            let object: DynamicObject = serde_json::from_value(object).expect("a cluster object");
            clusters
                .create(&PostParams::default(), &object)
                .await
                .map_err(api(format!(
                    "creating {target} (a restore goes into a new cluster)"
                )))?;
            println!(
                "{target} created from {backup_kind} {from} (the spec of {source}); `kubectl quorum status {target}` shows the restore"
            );
        }
    }
    Ok(())
}

struct Scope {
    client: Client,
    namespace: String,
}

impl Scope {
    /// The cluster `target` names, as its engine's type; a missing one is named in the error.
    async fn cluster<K>(&self, target: &Target) -> Result<K, Failure>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        self.typed()
            .get(&target.name)
            .await
            .map_err(api(format!("{target} in {}", self.namespace)))
    }

    fn typed<K>(&self) -> Api<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn dynamic(&self, kind: &str) -> Api<DynamicObject> {
        let engine = Engine::ALL
            .into_iter()
            .find(|engine| engine.kind() == kind || engine.backup_kind() == kind)
            .expect("a kind of Quorum's");
        let group = actions::group(engine);
        let plural = format!("{}s", kind.to_ascii_lowercase());
        let resource =
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1alpha1", kind), &plural);
        Api::namespaced_with(self.client.clone(), &self.namespace, &resource)
    }

    async fn patch(&self, target: &Target, patch: serde_json::Value) -> Result<(), Failure> {
        self.dynamic(target.engine.kind())
            .patch(&target.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api(format!("{target} in {}", self.namespace)))?;
        Ok(())
    }

    async fn pods(&self, name: &str) -> Result<Pods, Failure> {
        let pods: Api<Pod> = self.typed();
        let listed = pods
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={name}")))
            .await
            .map_err(api("listing the cluster's pods"))?;
        Ok(listed
            .items
            .into_iter()
            .map(|pod| {
                let spec = pod.spec.clone().unwrap_or_default();
                let volume = spec
                    .volumes
                    .unwrap_or_default()
                    .into_iter()
                    .find_map(|volume| volume.persistent_volume_claim.map(|claim| claim.claim_name));
                let placement = Placement {
                    pod: pod.name_any(),
                    node: spec.node_name,
                    volume,
                };
                (pod.name_any(), placement)
            })
            .collect())
    }

    async fn status(&self, target: &Target) -> Result<ClusterView, Failure> {
        let pods = self.pods(&target.name).await?;
        let now = jiff::Timestamp::now();
        Ok(match target.engine {
            Engine::Etcd => view::etcd(&self.cluster(target).await?, &pods, now),
            Engine::MySql => view::mysql(&self.cluster(target).await?, &pods, now),
            Engine::Redis => view::redis(&self.cluster(target).await?, &pods, now),
            Engine::MongoDb => view::mongodb(&self.cluster(target).await?, &pods, now),
        })
    }

    async fn connection(&self, target: &Target) -> Result<Connection, Failure> {
        let namespace = &self.namespace;
        Ok(match target.engine {
            Engine::Etcd => credentials::etcd(&self.cluster(target).await?, namespace),
            Engine::MySql => credentials::mysql(&self.cluster(target).await?, namespace),
            Engine::Redis => credentials::redis(&self.cluster(target).await?, namespace),
            Engine::MongoDb => credentials::mongodb(&self.cluster(target).await?, namespace),
        })
    }

    async fn session(&self, target: &Target) -> Result<connect::Session, Failure> {
        Ok(match target.engine {
            Engine::Etcd => connect::etcd(&self.cluster(target).await?),
            Engine::MySql => connect::mysql(target, &self.cluster(target).await?)?,
            Engine::Redis => connect::redis(target, &self.cluster(target).await?)?,
            Engine::MongoDb => connect::mongodb(target, &self.cluster(target).await?)?,
        })
    }

    /// Each account's password, read from its Secret.
    async fn passwords(&self, connection: &Connection) -> Result<Vec<String>, Failure> {
        let secrets: Api<Secret> = self.typed();
        let mut passwords = Vec::new();
        for account in &connection.accounts {
            let secret = secrets
                .get(&account.secret)
                .await
                .map_err(api(format!("Secret {}", account.secret)))?;
            let value = secret
                .data
                .unwrap_or_default()
                .remove(account.key)
                .map(|bytes| String::from_utf8_lossy(&bytes.0).into_owned())
                .unwrap_or_default();
            passwords.push(value);
        }
        Ok(passwords)
    }

    async fn cluster_destination(&self, target: &Target) -> Result<Option<BackupDestination>, Failure> {
        let policy = match target.engine {
            Engine::Etcd => {
                let cluster: etcd_operator::crd::EtcdCluster = self.cluster(target).await?;
                cluster.spec.backup
            }
            Engine::MySql => {
                let cluster: mysql_operator::crd::MySQLCluster = self.cluster(target).await?;
                cluster.spec.backup.map(|policy| policy.policy)
            }
            Engine::Redis => {
                let cluster: redis_operator::crd::RedisCluster = self.cluster(target).await?;
                cluster.spec.backup
            }
            Engine::MongoDb => {
                let cluster: mongodb_operator::crd::MongoDBReplicaSet = self.cluster(target).await?;
                cluster.spec.backup.map(|policy| policy.policy)
            }
        };
        Ok(policy.map(|policy| policy.destination))
    }

    async fn backup_destination(
        &self,
        engine: Engine,
        name: &str,
    ) -> Result<Option<BackupDestination>, Failure> {
        let backup = self
            .dynamic(engine.backup_kind())
            .get(name)
            .await
            .map_err(api(format!("{} {name}", engine.backup_kind())))?;
        Ok(backup
            .data
            .pointer("/spec/destination")
            .cloned()
            .and_then(|destination| serde_json::from_value(destination).ok()))
    }
}
