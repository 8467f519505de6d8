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
    prune(&diagnostics_root());
    directory
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
