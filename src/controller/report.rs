//! The summary of a pass, logged as one line when its last operation is answered.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{Cause, Mode};

/// The summary of a pass, logged as one line.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PassReport {
    /// Why the pass ran; its number is `cause.pass`.
    pub cause: Arc<Cause>,
    /// The mode it ran in.
    pub mode: Mode,
    /// Whether this pass listed the cloud routes.
    pub listed: bool,
    /// Set when the pass could not plan (its list failed).
    pub list_error: Option<String>,
    /// Routes created.
    pub created: usize,
    /// Routes deleted (or found already gone).
    pub deleted: usize,
    /// Routes already as wanted.
    pub kept: usize,
    /// The list showed the routes the last plan kept, which found nothing to do, and
    /// nothing else it reads had changed: this pass did not plan again.
    pub unchanged: bool,
    /// Route operations that failed (each is retried in watch mode).
    pub failed: usize,
    /// Operations not attempted: waiting for a retry backoff, or cancelled (relist,
    /// lost leadership, shutdown).
    pub deferred: usize,
    /// `NetworkUnavailable` writes sent.
    pub conditions: usize,
    /// Cloud calls made by this pass, the list included.
    pub cloud_calls: usize,
    /// From the start of the pass to its last answer.
    pub duration: Duration,
    /// What the planner could not use (an unparsable pod CIDR, a bad route).
    pub problems: Vec<String>,
}

impl fmt::Display for PassReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pass {} ({}) caused by {}: ",
            self.cause.pass,
            self.mode.as_str(),
            self.cause
        )?;
        if let Some(e) = &self.list_error {
            return write!(
                f,
                "listing routes failed: {e}; {} cloud calls",
                self.cloud_calls
            );
        }
        write!(
            f,
            "routes created {}, deleted {}, kept {}, failed {}, deferred {}; conditions written {}; \
             {} cloud calls{}; took {}",
            self.created,
            self.deleted,
            self.kept,
            self.failed,
            self.deferred,
            self.conditions,
            self.cloud_calls,
            if self.listed { " (listed)" } else { "" },
            crate::duration::format(self.duration)
        )?;
        for p in &self.problems {
            write!(f, "; {p}")?;
        }
        Ok(())
    }
}
