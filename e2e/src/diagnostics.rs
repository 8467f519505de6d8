//! What a failed real-node test leaves for whoever reads the failure: its namespace's objects,
//! events, quorum resources and every container's log (the current and the previous run), in
//! `<cache>/diagnostics/<namespace>/`, written while the test unwinds.
//!
//! A failed test keeps its namespace, but a CI run stops the cluster when it ends, and a
//! message such as "timed out waiting for ..." rarely says why: the servers' own logs usually
//! do. Only the newest [`KEPT`] namespaces' diagnostics are kept.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use crate::{control_plane::kubeconfig_path, tools::cache_root, tools::kubectl_binary};

/// How many failed tests' diagnostics are kept, the newest first.
const KEPT: usize = 30;

/// Collects the diagnostics of `namespace` when dropped while its thread panics.
pub struct OnFailure {
    namespace: String,
}

impl OnFailure {
    pub fn new(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
        }
    }
}

impl Drop for OnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let directory = collect(&self.namespace);
            eprintln!(
                "diagnostics of namespace {}: {}",
                self.namespace,
                directory.display()
            );
        }
    }
}

/// Where the diagnostics of failed tests go.
pub fn diagnostics_root() -> PathBuf {
    cache_root().join("diagnostics")
}

/// Writes what `namespace` holds now; returns the directory.
pub fn collect(namespace: &str) -> PathBuf {
    let directory = diagnostics_root().join(namespace);
    if let Err(error) = fs::create_dir_all(&directory) {
        eprintln!("cannot create {}: {error}", directory.display());
        return directory;
    }
    let kubectl = |args: &[&str]| -> String {
        let kubeconfig = kubeconfig_path().display().to_string();
        match Command::new(kubectl_binary())
            .args(["--kubeconfig", &kubeconfig, "--namespace", namespace])
            .args(args)
            .output()
        {
            Ok(output) => format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
            Err(error) => format!("kubectl {args:?}: {error}\n"),
        }
    };
    let write = |file: &str, text: String| {
        if let Err(error) = fs::write(directory.join(file), text) {
            eprintln!("cannot write {file} of {namespace}'s diagnostics: {error}");
        }
    };
    write(
        "objects.txt",
        kubectl(&[
            "get",
            "pods,statefulsets,services,endpoints,persistentvolumeclaims,jobs,configmaps",
            "--output=wide",
        ]),
    );
    write(
        "events.txt",
        kubectl(&["get", "events", "--sort-by=.lastTimestamp"]),
    );
    let api_resources = kubectl(&["api-resources", "--output=name"]);
    let kinds = quorum_kinds(&api_resources);
    if !kinds.is_empty() {
        write(
            "resources.yaml",
            kubectl(&["get", &kinds.join(","), "--output=yaml"]),
        );
    }
    write("pods.yaml", kubectl(&["get", "pods", "--output=yaml"]));
    for pod in kubectl(&["get", "pods", "--output=name"])
        .lines()
        .filter_map(|line| line.strip_prefix("pod/"))
    {
        let logs = |previous: bool| {
            let mut args = vec!["logs", pod, "--all-containers", "--prefix", "--timestamps"];
            if previous {
                args.push("--previous");
            }
            kubectl(&args)
        };
        write(&format!("{pod}.log"), logs(false));
        write(&format!("{pod}.previous.log"), logs(true));
    }
    // The node's Service plumbing is shared by every namespace: what it did last says why a
    // Service did not answer (endpoints not yet programmed, a rule sync failing).
    let node_logs = cache_root().join("cluster").join("logs");
    for component in ["kube-proxy", "kubelet"] {
        if let Ok(text) = fs::read_to_string(node_logs.join(format!("{component}.log"))) {
            write(
                &format!("node-{component}.log"),
                last_lines(&text, NODE_LOG_LINES),
            );
        }
    }
    prune(&diagnostics_root());
    directory
}

/// How many of the node components' newest log lines a failed test keeps.
const NODE_LOG_LINES: usize = 3000;

/// The last `count` lines of `text`.
fn last_lines(text: &str, count: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut kept = lines[lines.len().saturating_sub(count)..].join("\n");
    kept.push('\n');
    kept
}

/// The quorum resources among `kubectl api-resources --output=name`'s lines.
fn quorum_kinds(api_resources: &str) -> Vec<&str> {
    api_resources
        .lines()
        .filter(|name| name.ends_with(".quorum.dev"))
        .collect()
}

/// Removes all but the newest [`KEPT`] directories under `root`.
fn prune(root: &Path) {
    let Ok(entries) = fs::read_dir(root) else {
        return;
    };
    let mut directories: Vec<(std::time::SystemTime, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| Some((entry.metadata().ok()?.modified().ok()?, entry.path())))
        .collect();
    directories.sort_by_key(|(modified, _)| std::cmp::Reverse(*modified));
    for (_, path) in directories.into_iter().skip(KEPT) {
        let _ = fs::remove_dir_all(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_log_is_kept_from_its_newest_lines() {
        assert_eq!(last_lines("a\nb\nc\n", 2), "b\nc\n");
        assert_eq!(last_lines("a\n", 5), "a\n");
    }

    #[test]
    fn only_quorum_resources_are_collected() {
        let listed = "pods\netcdclusters.etcd.quorum.dev\nredisclusters.redis.quorum.dev\nleases.coordination.k8s.io\n";
        assert_eq!(
            quorum_kinds(listed),
            ["etcdclusters.etcd.quorum.dev", "redisclusters.redis.quorum.dev"]
        );
    }

    #[test]
    fn only_the_newest_diagnostics_are_kept() {
        let root = std::env::temp_dir().join(format!("quorum-diagnostics-{:08x}", rand::random::<u32>()));
        for index in 0..KEPT + 3 {
            let directory = root.join(format!("ns-{index:02}"));
            fs::create_dir_all(&directory).unwrap();
            let modified =
                std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000 + index as u64);
            fs::File::open(&directory)
                .unwrap()
                .set_modified(modified)
                .unwrap();
        }
        prune(&root);
        let mut left: Vec<String> = fs::read_dir(&root)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left.len(), KEPT);
        assert_eq!(left.first().map(String::as_str), Some("ns-03"));
        fs::remove_dir_all(&root).unwrap();
    }
}
