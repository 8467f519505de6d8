//! Operator configuration: every setting is a flag with an environment variable behind it, so
//! the same binary is configured by a Helm value, an OLM CSV env entry or a command line.

use std::net::SocketAddr;

use clap::{ArgAction, Args, ValueEnum};

/// Settings shared by every Quorum operator. Embed with `#[command(flatten)]`.
#[derive(Args, Clone, Debug)]
pub struct OperatorConfig {
    /// Namespaces to watch, comma separated. Empty: every namespace.
    #[arg(long = "watch-namespaces", env = "WATCH_NAMESPACES", value_delimiter = ',')]
    pub watch_namespaces: Vec<String>,

    /// Log format.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Address of the HTTP endpoint serving /metrics, /healthz and /readyz.
    #[arg(long, env = "METRICS_ADDRESS", default_value = "0.0.0.0:8080")]
    pub metrics_address: SocketAddr,

    /// Run leader election, so that only one replica acts at a time.
    #[arg(long, env = "LEADER_ELECT", default_value_t = true, action = ArgAction::Set)]
    pub leader_elect: bool,

    /// Namespace of the leader-election Lease. Default: the operator's own namespace
    /// (POD_NAMESPACE), else `default`.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE")]
    pub leader_election_namespace: Option<String>,

    /// This replica's identity in elections and events. Default: POD_NAME, else the host name.
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,

    /// The operator's own namespace, from the downward API.
    #[arg(long, env = "POD_NAMESPACE", hide = true)]
    pub pod_namespace: Option<String>,

    /// Requests per second the operator sends the API server on average (watches included).
    #[arg(long, env = "API_QPS", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub api_qps: u32,

    /// Requests the operator may send at once above that average, after a quiet moment.
    #[arg(long, env = "API_BURST", default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..))]
    pub api_burst: u32,

    /// Passes each controller runs at once, over different objects: a slow database call holds
    /// one, never the others.
    #[arg(long, env = "MAX_CONCURRENT_RECONCILES", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub max_concurrent_reconciles: u16,
}

/// Where an engine operator finds its members and may send backups: flags every engine's
/// operator takes. Embed with `#[command(flatten)]`.
#[derive(Args, Clone, Debug)]
pub struct MemberConfig {
    /// The cluster's DNS domain, for member addresses.
    #[arg(long, env = "CLUSTER_DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,

    /// How member addresses are found: in-cluster DNS, or loopback processes for local demos.
    #[arg(long, env = "MEMBER_ADDRESSES", value_enum, default_value_t = MemberAddresses::Dns)]
    pub member_addresses: MemberAddresses,

    /// Allow backups to plain-HTTP S3 endpoints (credentials and data cross the network in
    /// clear text; for local test stores only).
    #[arg(long, env = "ALLOW_HTTP_BACKUPS", default_value_t = false, action = ArgAction::Set)]
    pub allow_http_backups: bool,

    /// Where a backup's bytes go through: a Job in the cluster's namespace, beside the data,
    /// running the operator's image; or the operator's own process.
    #[arg(long, env = "BACKUP_RUNNER", value_enum, default_value_t = BackupRunner::Job)]
    pub backup_runner: BackupRunner,
}

/// Where a backup runs (the `--backup-runner` flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum BackupRunner {
    /// A Job per run in the cluster's namespace: the bytes stream from the member to the
    /// destination there, and the operator's memory, CPU and network carry none of them.
    Job,
    /// The operator's own process (local demos and tests whose pods run nothing).
    Operator,
}

impl MemberConfig {
    /// The settings as the environment a backup Job's process reads them from (the same
    /// flags), so it finds members and sends backups as the operator would.
    pub fn job_environment(&self) -> Vec<(&'static str, String)> {
        let addresses = match self.member_addresses {
            MemberAddresses::Dns => "dns",
            MemberAddresses::Loopback => "loopback",
        };
        vec![
            ("CLUSTER_DOMAIN", self.cluster_domain.clone()),
            ("MEMBER_ADDRESSES", addresses.to_string()),
            ("ALLOW_HTTP_BACKUPS", self.allow_http_backups.to_string()),
            ("BACKUP_RUNNER", "operator".to_string()),
        ]
    }
}

/// How an operator finds its members' addresses (the `--member-addresses` flag).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum MemberAddresses {
    /// In-cluster DNS names through the cluster's headless Service.
    Dns,
    /// Processes on this machine's loopback addresses (local demos and tests).
    Loopback,
}

/// How log lines are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line, for log pipelines.
    Json,
}

impl OperatorConfig {
    /// The namespace that holds the leader-election Lease.
    pub fn lease_namespace(&self) -> String {
        self.leader_election_namespace
            .clone()
            .or_else(|| self.pod_namespace.clone())
            .unwrap_or_else(|| "default".to_string())
    }

    /// This replica's identity: the pod name, else the host name, else the process id.
    pub fn identity(&self) -> String {
        self.identity
            .clone()
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .unwrap_or_else(|| format!("pid-{}", std::process::id()))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        config: OperatorConfig,
    }

    #[test]
    fn flags_parse_with_defaults_and_lists() {
        let cli = Cli::parse_from([
            "op",
            "--watch-namespaces=a,b",
            "--log-format=json",
            "--leader-elect=false",
            "--leader-election-namespace=ops",
        ]);
        assert_eq!(cli.config.watch_namespaces, vec!["a", "b"]);
        assert_eq!(cli.config.log_format, LogFormat::Json);
        assert!(!cli.config.leader_elect);
        assert_eq!(cli.config.lease_namespace(), "ops");
        assert_eq!(cli.config.metrics_address.port(), 8080);
        assert_eq!(
            (
                cli.config.api_qps,
                cli.config.api_burst,
                cli.config.max_concurrent_reconciles
            ),
            (20, 30, 10)
        );
    }

    #[test]
    fn bad_values_are_refused_naming_the_flag() {
        let error = Cli::try_parse_from(["op", "--log-format=xml"])
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("--log-format"), "{error}");
        for flag in ["--api-qps=0", "--api-burst=0", "--max-concurrent-reconciles=0"] {
            let error = Cli::try_parse_from(["op", flag]).err().unwrap().to_string();
            let name = flag.split('=').next().unwrap();
            assert!(error.contains(name), "{error}");
        }
    }

    #[derive(Parser)]
    struct MemberCli {
        #[command(flatten)]
        members: MemberConfig,
    }

    /// A backup Job's process reads the operator's member settings from its environment: each
    /// variable is one the flags read, and read back it gives the same settings, with backups
    /// taken in that process.
    #[test]
    fn a_backup_jobs_environment_carries_the_operators_member_settings() {
        use clap::CommandFactory;
        let operator = MemberCli::parse_from([
            "op",
            "--cluster-domain=example.internal",
            "--member-addresses=loopback",
            "--allow-http-backups=true",
        ])
        .members;
        assert_eq!(operator.backup_runner, BackupRunner::Job, "the default");
        let command = MemberCli::command();
        let flags: Vec<String> = operator
            .job_environment()
            .into_iter()
            .map(|(name, value)| {
                let argument = command
                    .get_arguments()
                    .find(|argument| argument.get_env().is_some_and(|env| env == name))
                    .unwrap_or_else(|| panic!("{name} is no flag's variable"));
                format!("--{}={value}", argument.get_long().unwrap())
            })
            .collect();
        let job = MemberCli::parse_from(std::iter::once("op".to_string()).chain(flags)).members;
        assert_eq!(job.cluster_domain, operator.cluster_domain);
        assert_eq!(job.member_addresses, operator.member_addresses);
        assert_eq!(job.allow_http_backups, operator.allow_http_backups);
        assert_eq!(job.backup_runner, BackupRunner::Operator);
    }
}
