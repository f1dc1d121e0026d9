//! Batched changes, for a provider that applies several route changes to its route
//! tables in one request ([`Routes::batch_size`](crate::Routes::batch_size)): Azure
//! writes a route table whole with its ETag, and rejects a second write while one
//! runs; Neutron takes a list of routes in one `add_extraroutes`.
//!
//! What is queued goes out as one [`CloudOp::Apply`] of at most the batch size, and
//! only one is in flight at a time: the table sees one writer. Changes planned while
//! it is out wait in the queue, where later passes can still re-plan or drop them,
//! and join the next batch as soon as its answer is in. Nothing waits for a window:
//! an idle controller sends its first change at once, so a new node's route costs
//! one write.
//!
//! Each change of the batch is an operation of its own in the ledger ([`Operations`],
//! with its own id, pass and destination), so every per-route rule holds as for a
//! provider that does not batch: one operation per destination, deletes only once the
//! node view is whole, room in the tables, retries with backoff, conditions and
//! events. The batch's answer carries one outcome per change, and each is handled as
//! the answer of that change alone; the changes that failed are tried again together,
//! at the earliest of their backoffs. The budget is charged once per batch
//! ([`Budget::requests_per_batch`](crate::Budget::requests_per_batch)).
//!
//! [`Operations`]: super::ops::Operations

use std::collections::BTreeSet;
use std::time::Instant;

use super::budget::Cost;
use super::dispatch::route_change;
use super::{CloudOp, CloudReply, Command, Controller, OpId};
use crate::model::Cidr;
use crate::provider::CloudError;

/// The batch in flight: its id, and the ids of its changes in the order sent.
pub(super) struct Batch {
    id: OpId,
    changes: Vec<OpId>,
}

impl Controller {
    /// Sends what may go of the queue as one batch of at most `size` changes, unless a
    /// batch is in flight or the budget cannot pay for one now.
    pub(super) fn dispatch_batch(&mut self, size: usize, now: Instant, out: &mut Vec<Command>) {
        if self.batch.is_some()
            || self.ops.peek_next_of(self.dispatch_order()).is_none()
            || !self.spending.can_send(Cost::Batch, now)
        {
            return;
        }
        let mut changes = Vec::new();
        let mut ids = Vec::new();
        let mut passes = BTreeSet::new();
        while ids.len() < size.max(1) {
            let Some(next) = self.take_request(now, out) else {
                break;
            };
            let Some((pass, kind)) = next else {
                continue;
            };
            let id = self.op_id();
            changes.push(route_change(&kind));
            passes.insert(pass);
            self.ops.sent(id, kind, pass, now);
            ids.push(id);
        }
        let Some(&first) = passes.first() else {
            return;
        };
        // One request, made for each pass that has a change in it.
        for &pass in &passes {
            if let Some(r) = self.passes.report(pass) {
                r.cloud_calls += 1;
            }
        }
        let id = self.op_id();
        self.spending.spend(Cost::Batch, now);
        self.batch = Some(Batch { id, changes: ids });
        out.push(Command::Cloud {
            id,
            op: CloudOp::Apply { changes },
            cause: self.passes.cause_of(first),
        });
    }

    /// The changes of the batch `id`, if it is the one in flight.
    pub(super) fn batch_changes(&self, id: OpId) -> Vec<OpId> {
        match &self.batch {
            Some(b) if b.id == id => b.changes.clone(),
            _ => Vec::new(),
        }
    }

    /// Whether `id` is the batch in flight.
    pub(super) fn is_batch(&self, id: OpId) -> bool {
        self.batch.as_ref().is_some_and(|b| b.id == id)
    }

    /// The answer to the batch in flight: each change is answered with its outcome as
    /// if it had been sent alone. A change the answer has no outcome for (a reply of
    /// the wrong shape or length) may or may not have been made: ambiguous.
    pub(super) fn on_applied(&mut self, reply: CloudReply, now: Instant, out: &mut Vec<Command>) {
        let Some(batch) = self.batch.take() else {
            return;
        };
        let outcomes = match reply {
            CloudReply::Applied(outcomes) => outcomes,
            other => {
                log::error!(
                    "batch {} got a reply of the wrong shape ({other:?}); treating it as ambiguous",
                    batch.id
                );
                Vec::new()
            }
        };
        let cidrs: Vec<Cidr> = batch
            .changes
            .iter()
            .filter_map(|id| Some(self.ops.flight(*id)?.kind.as_ref()?.cidr()))
            .collect();
        let mut outcomes = outcomes.into_iter();
        for change in batch.changes {
            let outcome = outcomes.next().unwrap_or_else(|| {
                Err(CloudError::ambiguous(format!(
                    "batch {}: no outcome for this change",
                    batch.id
                )))
            });
            self.on_cloud_reply(change, CloudReply::Done(outcome), now, out);
        }
        // Failed together, tried again together: jittered apart they would each be a
        // write of their own.
        self.retries.align(&cidrs);
    }
}
