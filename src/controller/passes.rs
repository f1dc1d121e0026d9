//! The ledger of passes: each pass's number, its cause, and the report that collects
//! its outcomes until its last operation is answered.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Cause, Mode, PassReport};

/// A pass whose report waits for its operations.
struct OpenPass {
    started: Instant,
    /// Operations of this pass queued or in flight.
    outstanding: usize,
    report: PassReport,
}

/// The open passes, by number. See the module documentation.
#[derive(Default)]
pub(super) struct Passes {
    open: BTreeMap<u64, OpenPass>,
    /// The last pass number handed out (they count from 1).
    count: u64,
}

impl Passes {
    /// Whether every pass has reported.
    pub fn none_open(&self) -> bool {
        self.open.is_empty()
    }

    /// Opens the next pass for `cause` at `now`; returns its number and its cause.
    pub fn start(&mut self, mut cause: Cause, mode: Mode, now: Instant) -> (u64, Arc<Cause>) {
        self.count += 1;
        let pass = self.count;
        cause.pass = pass;
        let cause = Arc::new(cause);
        let report = PassReport {
            cause: cause.clone(),
            mode,
            listed: false,
            list_error: None,
            created: 0,
            deleted: 0,
            kept: 0,
            unchanged: false,
            failed: 0,
            deferred: 0,
            conditions: 0,
            cloud_calls: 0,
            duration: Duration::ZERO,
            problems: Vec::new(),
        };
        let open = OpenPass {
            started: now,
            outstanding: 0,
            report,
        };
        self.open.insert(pass, open);
        (pass, cause)
    }

    /// The report of an open pass, to count into.
    pub fn report(&mut self, pass: u64) -> Option<&mut PassReport> {
        self.open.get_mut(&pass).map(|p| &mut p.report)
    }

    /// One more operation of `pass` is queued.
    pub fn queued(&mut self, pass: u64) {
        if let Some(p) = self.open.get_mut(&pass) {
            p.outstanding += 1;
        }
    }

    /// Counts an outcome for one of `pass`'s operations and resolves it.
    pub fn resolve(&mut self, pass: u64, count: impl FnOnce(&mut PassReport)) {
        if let Some(p) = self.open.get_mut(&pass) {
            count(&mut p.report);
            p.outstanding = p.outstanding.saturating_sub(1);
        }
    }

    /// Closes `pass` if all its operations are answered, with its duration.
    pub fn finish(&mut self, pass: u64, now: Instant) -> Option<PassReport> {
        if self.open.get(&pass)?.outstanding > 0 {
            return None;
        }
        let open = self.open.remove(&pass)?;
        let mut report = open.report;
        report.duration = now.saturating_duration_since(open.started);
        Some(report)
    }

    /// The cause of `pass` (a default one if it has closed).
    pub fn cause_of(&self, pass: u64) -> Arc<Cause> {
        self.open
            .get(&pass)
            .map(|p| p.report.cause.clone())
            .unwrap_or_default()
    }

    /// The cause of the newest open pass.
    pub fn latest_cause(&self) -> Arc<Cause> {
        self.open
            .values()
            .next_back()
            .map(|p| p.report.cause.clone())
            .unwrap_or_default()
    }
}
