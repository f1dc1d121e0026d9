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
//! One change never holds back the others. The worker leaves out of the write every
//! change the provider's pre-check refuses ([`Routes::precheck`](crate::Routes::precheck)).
//! When the cloud still refuses a batch whole for one of its changes
//! ([`CloudErrorKind::BatchRefused`]):
//! - if the cloud names the change (ARM and Neutron messages name the route), that
//!   change is refused for its node alone and the others go again at once, at the
//!   head of the queue: one more write applies them;
//! - else the batch's changes become suspects, and the next writes are halves of the
//!   suspects alone (everything else waits, so no write is wasted on a mix): a half
//!   refused whole is the new suspects (the other half waits in the queue as any
//!   change); a half applied leaves the other half, which is then known to hold the
//!   change at fault; the last suspect is refused without a write. One change at fault
//!   among n costs 1 + ⌈log₂ n⌉ writes to find, and every other change is applied by
//!   then or by the next write. Each write is spent from the budget like any other.
//!   The search ends early, and its suspects go back to ordinary batches, if one of
//!   them is no longer queued as it was (a new plan dropped it, the lease was lost)
//!   or a half fails for anything but its changes (a conflict, a rate limit): the
//!   reasoning behind it no longer holds.
//!
//! A change the cloud refused is refused as a pre-check refusal is (a
//! `NetworkUnavailable` reason naming the cloud's rule, an event with the cloud's
//! message, `route_controller_route_refusals_total{reason}`), retried slowly, and
//! from then on sent in a write of its own until it succeeds, so it never fails a
//! batch again. A refused delete, like a failed one, leaves its route in place: the
//! create queued behind it (a replacement) waits for the delete's retry.
//!
//! [`Operations`]: super::ops::Operations

use std::collections::{BTreeSet, HashSet};
use std::time::Instant;

use super::budget::Cost;
use super::dispatch::route_change;
use super::ops::OpKind;
use super::{CloudOp, CloudReply, Command, Controller, OpId, Queued};
use crate::model::Cidr;
use crate::provider::{CloudError, CloudErrorKind};

/// The batch in flight: its id, the ids of its changes in the order sent, and the
/// suspects it tests, if it is a half of a search.
pub(super) struct Batch {
    id: OpId,
    changes: Vec<OpId>,
    tested: Option<Vec<Cidr>>,
}

/// The search for the change at fault in a batch the cloud refused whole without
/// naming it, and the changes the cloud refused, which go alone from then on. See the
/// module documentation.
#[derive(Default)]
pub(super) struct Splitting {
    /// Destinations whose changes, together, the cloud refused: at least one of them
    /// is at fault. Empty: no search.
    suspects: Vec<Cidr>,
    /// The suspects' requests as the cloud refused them: a destination whose request
    /// is another since (re-planned to another node, its node's addresses or UID
    /// changed) is no longer the change under suspicion.
    refused_as: Vec<OpKind>,
    /// The cloud's refusal of the suspects, for the one found by elimination.
    refusal: Option<CloudError>,
    /// Destinations whose change the cloud refused: sent alone until one succeeds.
    alone: HashSet<Cidr>,
}

impl Splitting {
    fn abandon(&mut self) {
        self.suspects.clear();
        self.refused_as.clear();
        self.refusal = None;
    }

    /// The change to `cidr` went through (or is no longer wanted).
    pub fn settled(&mut self, cidr: Cidr) {
        self.alone.remove(&cidr);
    }

    pub fn keep_wanted(&mut self, wanted: &HashSet<Cidr>) {
        self.alone.retain(|c| wanted.contains(c));
    }

    /// The cloud refused the change to `cidr`: it goes alone from now on.
    pub fn refused(&mut self, cidr: Cidr) {
        self.alone.insert(cidr);
    }

    /// Whether the change to `cidr` goes in a write of its own.
    fn is_alone(&self, cidr: Cidr) -> bool {
        self.alone.contains(&cidr)
    }
}

/// What the next batch holds.
enum Pick {
    /// A half of the suspects, nothing else.
    Test(Vec<Cidr>),
    /// The change to this destination alone: the cloud refused it before.
    Alone(Cidr),
    /// Anything queued but the changes that go alone.
    Any(HashSet<Cidr>),
}

impl Controller {
    /// Sends what may go of the queue as one batch of at most `size` changes, unless a
    /// batch is in flight or the budget cannot pay for one now.
    pub(super) fn dispatch_batch(&mut self, size: usize, now: Instant, out: &mut Vec<Command>) {
        if self.batch.is_some() || !self.spending.can_send(Cost::Batch, now) {
            return;
        }
        let batch_size = size;
        let Some(pick) = self.pick(now, out) else {
            return;
        };
        let (only, size, tested): (Box<dyn Fn(Cidr) -> bool>, usize, _) = match pick {
            Pick::Test(half) => {
                let set: HashSet<Cidr> = half.iter().copied().collect();
                (Box::new(move |c| set.contains(&c)), half.len(), Some(half))
            }
            Pick::Alone(cidr) => (Box::new(move |c| c == cidr), 1, None),
            Pick::Any(alone) => (Box::new(move |c| !alone.contains(&c)), size, None),
        };
        let mut changes = Vec::new();
        let mut ids = Vec::new();
        let mut passes = BTreeSet::new();
        while ids.len() < size.max(1) {
            // Asked for each change: the room in the tables shrinks with each create.
            let order = self.dispatch_order();
            let Some(next) = self.take_request_where(order, &*only, now, out) else {
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
            if tested.is_some() {
                // The half may not go (the table has no room left for its creates): the
                // search would wait for ever and hold back every other change. It stops,
                // and what is queued goes in ordinary batches.
                log::info!(
                    "the search for the change the cloud refused stops: the next half cannot \
                     be sent now; the rest go in ordinary batches"
                );
                self.splitting.abandon();
                self.dispatch_batch(batch_size, now, out);
            }
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
        self.batch = Some(Batch {
            id,
            changes: ids,
            tested,
        });
        out.push(Command::Cloud {
            id,
            op: CloudOp::Apply { changes },
            cause: self.passes.cause_of(first),
        });
    }

    /// What the next batch may hold: during a search, the first half of the
    /// suspects; a change the cloud refused before, alone; else anything else.
    /// `None`: nothing may go.
    fn pick(&mut self, now: Instant, out: &mut Vec<Command>) -> Option<Pick> {
        let suspects = &self.splitting.suspects;
        if !suspects.is_empty() {
            let still_queued = |c: &Cidr| {
                self.splitting
                    .refused_as
                    .iter()
                    .find(|k| k.cidr() == *c)
                    .is_some_and(|k| {
                        self.ops
                            .queued_as(&k.planned())
                            .is_some_and(|q| self.request_for(&q.op).as_ref() == Some(k))
                    })
            };
            if !suspects.iter().all(still_queued) {
                log::info!(
                    "the search for the change the cloud refused stops: a suspect is no \
                     longer queued as it was refused; the rest go in ordinary batches"
                );
                self.splitting.abandon();
            } else if let [last] = suspects[..] {
                self.refuse_by_elimination(last, now, out);
            } else {
                let half = suspects[..suspects.len().div_ceil(2)].to_vec();
                return Some(Pick::Test(half));
            }
        }
        let next = self.ops.peek_next_of(self.dispatch_order())?.op.cidr();
        if self.splitting.is_alone(next) {
            return Some(Pick::Alone(next));
        }
        Some(Pick::Any(self.splitting.alone.clone()))
    }

    /// The last suspect: the changes it was refused with were applied without it, so
    /// it is the change at fault. Refused without another write.
    fn refuse_by_elimination(&mut self, cidr: Cidr, now: Instant, out: &mut Vec<Command>) {
        let refusal = self.splitting.refusal.take();
        self.splitting.abandon();
        let Some(queued) = self.ops.remove_queued(cidr) else {
            return;
        };
        let Some(kind) = self.request_for(&queued.op) else {
            // Moot now (the node is gone or lost the CIDR): its pass plans again.
            self.passes.resolve(queued.pass, |r| r.deferred += 1);
            self.maybe_finish(queued.pass, now, out);
            return;
        };
        let (reason, message) = match &refusal {
            Some(CloudError {
                kind: CloudErrorKind::BatchRefused { reason, .. },
                message,
            }) => (*reason, message.as_str()),
            _ => ("RefusedByCloud", "the cloud refused the change"),
        };
        let e = CloudError::batch_refused(
            reason,
            None,
            format!(
                "{message} (route {cidr} found at fault by splitting the batch: the cloud \
                 applied the other changes without it)"
            ),
        );
        self.on_op_done(kind, queued.pass, Err(e), now, now, out);
        self.maybe_finish(queued.pass, now, out);
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
    /// the wrong shape or length) may or may not have been made: ambiguous. A batch
    /// the cloud refused whole for one change goes on without it (see the module
    /// documentation).
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
        let mut outcomes = outcomes.into_iter();
        let outcomes: Vec<Result<(), CloudError>> = batch
            .changes
            .iter()
            .map(|_| {
                outcomes.next().unwrap_or_else(|| {
                    Err(CloudError::ambiguous(format!(
                        "batch {}: no outcome for this change",
                        batch.id
                    )))
                })
            })
            .collect();
        let refused: Vec<usize> = outcomes
            .iter()
            .enumerate()
            .filter(|(_, o)| matches!(o, Err(e) if matches!(e.kind, CloudErrorKind::BatchRefused { .. })))
            .map(|(i, _)| i)
            .collect();
        match refused.first().map(|&i| outcomes[i].clone()) {
            Some(Err(refusal)) => self.batch_refused(batch, outcomes, &refused, refusal, now, out),
            _ => {
                if let Some(half) = &batch.tested {
                    self.half_answered(half, &batch.changes, &outcomes);
                }
                self.answer_each(&batch.changes, outcomes, now, out);
            }
        }
    }

    /// Each change answered as if sent alone; those that failed are tried again
    /// together.
    fn answer_each(
        &mut self,
        changes: &[OpId],
        outcomes: Vec<Result<(), CloudError>>,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        let cidrs: Vec<Cidr> = changes
            .iter()
            .filter_map(|id| Some(self.ops.flight(*id)?.kind.as_ref()?.cidr()))
            .collect();
        for (&change, outcome) in changes.iter().zip(outcomes) {
            self.on_cloud_reply(change, CloudReply::Done(outcome), now, out);
        }
        // Failed together, tried again together: jittered apart they would each be a
        // write of their own.
        self.retries.align(&cidrs);
    }

    /// A half of the suspects was answered without a refusal: applied, the other
    /// half holds the change at fault. Any failure of the write as a whole (a
    /// conflict, a rate limit, no reply) tells nothing of its changes: the search
    /// ends.
    fn half_answered(
        &mut self,
        half: &[Cidr],
        changes: &[OpId],
        outcomes: &[Result<(), CloudError>],
    ) {
        let sent: HashSet<Cidr> = changes
            .iter()
            .filter_map(|id| Some(self.ops.flight(*id)?.kind.as_ref()?.cidr()))
            .collect();
        let conclusive = sent.len() == half.len()
            && half.iter().all(|c| sent.contains(c))
            && outcomes.iter().all(|o| match o {
                Ok(()) => true,
                Err(e) => matches!(
                    e.kind,
                    CloudErrorKind::NotFound
                        | CloudErrorKind::AlreadyExists
                        | CloudErrorKind::TableFull
                        | CloudErrorKind::Refused { .. }
                ),
            });
        if conclusive {
            self.splitting.suspects.retain(|c| !sent.contains(c));
        } else {
            self.splitting.abandon();
        }
    }

    /// The cloud refused the batch whole for one of its changes: that change is
    /// refused alone if the cloud named it (or it is the only one written), and the
    /// others go again at once; else the written changes become the suspects of a
    /// search. Changes the pre-check refused are answered as usual.
    fn batch_refused(
        &mut self,
        batch: Batch,
        outcomes: Vec<Result<(), CloudError>>,
        refused: &[usize],
        refusal: CloudError,
        now: Instant,
        out: &mut Vec<Command>,
    ) {
        let named = match refusal.kind {
            CloudErrorKind::BatchRefused { at_fault, .. } => at_fault,
            _ => None,
        };
        let fault = match named {
            Some(i) if refused.contains(&i) => Some(i),
            _ if refused.len() == 1 => Some(refused[0]),
            _ => None,
        };
        let mut bystanders = Vec::new();
        let mut answered = Vec::new();
        let mut answers = Vec::new();
        for (i, (change, outcome)) in batch.changes.iter().zip(outcomes).enumerate() {
            if refused.contains(&i) && Some(i) != fault {
                bystanders.push(*change);
            } else {
                answered.push(*change);
                answers.push(outcome);
            }
        }
        let suspects = self.not_applied(&bystanders);
        match fault {
            Some(_) => {
                log::info!(
                    "batch {}: the cloud refused it for one change ({}); the {} others go \
                     again without it",
                    batch.id,
                    refusal.message,
                    suspects.len()
                );
                self.splitting.abandon();
            }
            None => {
                log::info!(
                    "batch {}: the cloud refused its {} changes together without naming the \
                     one at fault ({}); splitting them to find it",
                    batch.id,
                    suspects.len(),
                    refusal.message
                );
                self.splitting.suspects = suspects.iter().map(OpKind::cidr).collect();
                self.splitting.refused_as = suspects;
                self.splitting.refusal = Some(refusal);
            }
        }
        self.answer_each(&answered, answers, now, out);
    }

    /// Changes the cloud did not apply through no fault of theirs: back at the head
    /// of the queue, in the order sent, with no failure counted. Their operations.
    fn not_applied(&mut self, ids: &[OpId]) -> Vec<OpKind> {
        let mut back = Vec::new();
        let mut kinds = Vec::new();
        for &id in ids {
            if let Some(flight) = self.ops.complete(id)
                && let Some(kind) = flight.kind
            {
                back.push(Queued {
                    op: kind.planned(),
                    pass: flight.pass,
                });
                kinds.push(kind);
            }
        }
        for q in back.into_iter().rev() {
            self.ops.requeue_front(q);
        }
        kinds
    }
}
