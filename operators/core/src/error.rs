//! Errors of the shared machinery, and the contract every operator's reconcile error fulfils.

/// A failed call made by the shared machinery. Each variant names the call that failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Server-side apply of a child object was refused or could not be sent.
    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Writing the status subresource failed.
    #[error("patching status of {kind} {name}: {source}")]
    PatchStatus {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// The object a pass decided for was deleted, or replaced by another under its name, while
    /// the pass ran: nothing was written to the one that stands now.
    #[error(
        "{kind} {name} was deleted or replaced by another of its name during the pass; nothing was written, and the next pass starts from what stands now"
    )]
    Gone { kind: String, name: String },
    /// Reading an object from the API server failed.
    #[error("reading {kind} {name}: {source}")]
    Read {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Deleting a child the owner no longer wants failed.
    #[error("deleting {kind} {name}: {source}")]
    Delete {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// Reading or writing the leader-election Lease failed.
    #[error("leader election lease {name}: {source}")]
    Lease {
        name: String,
        #[source]
        source: kube::Error,
    },
    /// The object lacks a field the machinery needs (a namespace, a name, a uid).
    #[error("{kind} is missing {field}")]
    MissingField { kind: String, field: &'static str },
    /// An object under a child's name is not the cluster's: it was neither adopted nor changed.
    #[error("{0}")]
    NotOwned(Box<crate::ownership::NotOwned>),
}

impl Error {
    /// A short, bounded label for the error counter.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Apply { .. } => "apply",
            Error::PatchStatus { .. } => "patch_status",
            Error::Gone { .. } => "gone",
            Error::Read { .. } => "read",
            Error::Delete { .. } => "delete",
            Error::Lease { .. } => "lease",
            Error::MissingField { .. } => "missing_field",
            Error::NotOwned(_) => "not_owned",
        }
    }
}

/// What the runner needs to know about an operator's reconcile error.
pub trait ReconcileError: std::error::Error + Send + Sync + 'static {
    /// A short, bounded label (for example `"apply"`, `"admin_call"`) for the error counter.
    fn metric_label(&self) -> &'static str;

    /// `true` when retrying cannot help until the resource itself changes (an invalid spec):
    /// the runner then waits for the next change instead of retrying with backoff.
    fn is_permanent(&self) -> bool {
        false
    }

    /// The shared machinery's error behind this one, when it is one: the runner reports some of
    /// them on the cluster ([`Error::NotOwned`]).
    fn shared(&self) -> Option<&Error> {
        None
    }
}

impl ReconcileError for Error {
    fn metric_label(&self) -> &'static str {
        Error::metric_label(self)
    }

    fn shared(&self) -> Option<&Error> {
        Some(self)
    }
}
