//! The route operations of the controller between planning and their reply: queued in
//! plan order, sent oldest first with at most one per destination CIDR in flight.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Instant;

use super::OpId;
use crate::model::Cidr;
use crate::plan;

/// A route operation as sent: everything the provider needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum OpKind {
    Create(plan::CreateRequest),
    Delete(plan::Delete),
}

impl OpKind {
    pub(super) fn cidr(&self) -> Cidr {
        match self {
            OpKind::Create(c) => c.cidr,
            OpKind::Delete(d) => d.cidr,
        }
    }

    pub(super) fn node(&self) -> &str {
        match self {
            OpKind::Create(c) => &c.route.target_node,
            OpKind::Delete(d) => &d.route.target_node,
        }
    }

    /// The queued form of this operation.
    pub(super) fn planned(&self) -> Planned {
        match self {
            OpKind::Create(c) => Planned::Create(plan::Create {
                node: c.route.target_node.clone(),
                cidr: c.cidr,
                replaces: c.replaces,
            }),
            OpKind::Delete(d) => Planned::Delete(Box::new(d.clone())),
        }
    }
}

/// A route operation as queued. A create names only its node and CIDR; the request is
/// built from the node as it is when the operation is sent. Thousands of creates can
/// wait behind a rate limit, so they are kept small.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Planned {
    Create(plan::Create),
    Delete(Box<plan::Delete>),
}

impl Planned {
    pub(super) fn cidr(&self) -> Cidr {
        match self {
            Planned::Create(c) => c.cidr,
            Planned::Delete(d) => d.cidr,
        }
    }

    pub(super) fn node(&self) -> &str {
        match self {
            Planned::Create(c) => &c.node,
            Planned::Delete(d) => &d.route.target_node,
        }
    }

    fn is_create(&self) -> bool {
        matches!(self, Planned::Create(_))
    }

    /// Whether `self` makes what `other` asks for. A create's `replaces` only says
    /// whether an old route was seen: the replacement sent while its delete was in
    /// flight makes the same route as a create planned once the delete is answered.
    fn makes_same_as(&self, other: &Planned) -> bool {
        match (self, other) {
            (Planned::Create(a), Planned::Create(b)) => a.node == b.node && a.cidr == b.cidr,
            _ => self == other,
        }
    }
}

/// Which queued operations may go next.
#[derive(Clone, Copy, Debug)]
pub(super) struct Order {
    pub deletes_allowed: bool,
    pub creates_allowed: bool,
    /// The address families (IPv4, IPv6) whose creates may not go: no room in the
    /// tables for that family (a cloud that counts each family apart, EC2).
    pub full_families: (bool, bool),
    /// Any delete that may go goes before any create.
    pub deletes_first: bool,
}

impl Order {
    /// Whether a create to `cidr` may go.
    fn allows_create(&self, cidr: Cidr) -> bool {
        let full = if cidr.is_ipv4() {
            self.full_families.0
        } else {
            self.full_families.1
        };
        self.creates_allowed && !full
    }
}

/// An operation waiting to be sent, with the pass that planned it.
#[derive(Clone, Debug)]
pub(super) struct Queued {
    pub op: Planned,
    pub pass: u64,
}

/// An operation sent and not yet answered; `kind` is `None` for a list.
pub(super) struct Flight {
    pub kind: Option<OpKind>,
    pub pass: u64,
    pub sent: Instant,
}

/// Queued and in-flight operations.
#[derive(Default)]
pub(super) struct Operations {
    queue: VecDeque<Queued>,
    in_flight: HashMap<OpId, Flight>,
    /// Destinations with an operation in flight.
    busy: HashSet<Cidr>,
    /// Creates queued or in flight, per node: a node's condition waits for them.
    node_creates: HashMap<String, usize>,
}

impl Operations {
    pub(super) fn is_busy(&self, cidr: &Cidr) -> bool {
        self.busy.contains(cidr)
    }

    pub(super) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    pub(super) fn mutations_in_flight(&self) -> usize {
        self.in_flight.values().filter(|f| f.kind.is_some()).count()
    }

    pub(super) fn queued(&self) -> usize {
        self.queue.len()
    }

    pub(super) fn is_idle(&self) -> bool {
        self.queue.is_empty() && self.in_flight.is_empty()
    }

    pub(super) fn pending_creates(&self, node: &str) -> usize {
        self.node_creates.get(node).copied().unwrap_or(0)
    }

    fn count_create(&mut self, node: &str, is_create: bool, delta: isize) {
        if !is_create {
            return;
        }
        let node = node.to_string();
        let n = self.node_creates.entry(node.clone()).or_default();
        *n = n.saturating_add_signed(delta);
        if *n == 0 {
            self.node_creates.remove(&node);
        }
    }

    pub(super) fn enqueue(&mut self, op: Planned, pass: u64) {
        self.count_create(op.node(), op.is_create(), 1);
        self.queue.push_back(Queued { op, pass });
    }

    /// Puts an operation back at the head of the queue (it was refused for a rate
    /// limit and must go first when sending resumes).
    pub(super) fn requeue_front(&mut self, queued: Queued) {
        self.count_create(queued.op.node(), queued.op.is_create(), 1);
        self.queue.push_front(queued);
    }

    /// Keeps the queued operations for which `keep` says true and returns the others.
    pub(super) fn retain_queued(&mut self, mut keep: impl FnMut(&Queued) -> bool) -> Vec<Queued> {
        let (kept, dropped): (VecDeque<Queued>, VecDeque<Queued>) =
            self.queue.drain(..).partition(|q| keep(q));
        self.queue = kept;
        for q in &dropped {
            self.count_create(q.op.node(), q.op.is_create(), -1);
        }
        dropped.into()
    }

    /// Drops the queued operations a new plan does not repeat, and returns them. Those
    /// whose destination has an operation in flight stay: the plan could not see that
    /// operation's outcome.
    ///
    /// Also says, for each of `planned`, whether an identical operation is queued (it
    /// stays, and must not be queued twice). One look at the queue for the whole plan:
    /// asked one by one, a first pass's 5 000 creates compared each new one with all
    /// queued before it, about 90 ms of planning.
    pub(super) fn supersede(&mut self, planned: &[Planned]) -> (Vec<Queued>, Vec<bool>) {
        if self.queue.is_empty() {
            return (Vec::new(), vec![false; planned.len()]);
        }
        let mut repeated = vec![false; self.queue.len()];
        let queued = self.by_cidr();
        let already_queued = planned
            .iter()
            .map(|op| {
                let at = queued.find(&self.queue, op);
                if let Some(i) = at {
                    repeated[i] = true;
                }
                at.is_some()
            })
            .collect();
        let busy = std::mem::take(&mut self.busy);
        let mut repeated = repeated.into_iter();
        // `retain_queued` asks in queue order.
        let dropped = self.retain_queued(|q| {
            let repeated = repeated.next().unwrap_or(false);
            busy.contains(&q.op.cidr()) || repeated
        });
        self.busy = busy;
        (dropped, already_queued)
    }

    /// Whether a create of `cidr` for `node` is queued (the second half of a
    /// replacement waits there for its delete). The count goes first: thousands of
    /// creates can wait in the queue behind a rate limit.
    pub(super) fn create_queued(&self, node: &str, cidr: Cidr) -> bool {
        self.pending_creates(node) > 0
            && self
                .queue
                .iter()
                .any(|q| matches!(&q.op, Planned::Create(c) if c.cidr == cidr && c.node == node))
    }

    /// Whether an operation doing what `op` asks is in flight.
    pub(super) fn is_in_flight(&self, op: &Planned) -> bool {
        self.in_flight
            .values()
            .filter_map(|f| f.kind.as_ref())
            .any(|k| k.planned().makes_same_as(op))
    }

    /// The queue's positions by destination, for the lookups of a whole plan. It is
    /// as large as the queue (usually empty), not as the plan.
    fn by_cidr(&self) -> QueueIndex {
        let mut positions: HashMap<Cidr, Vec<usize>> = HashMap::new();
        for (i, q) in self.queue.iter().enumerate() {
            positions.entry(q.op.cidr()).or_default().push(i);
        }
        QueueIndex(positions)
    }

    /// Creates sent and not yet answered.
    pub(super) fn creates_in_flight(&self) -> usize {
        self.in_flight
            .values()
            .filter(|f| matches!(f.kind, Some(OpKind::Create(_))))
            .count()
    }

    /// Creates in flight to destinations of one family (`ipv6`).
    pub(super) fn creates_in_flight_of(&self, ipv6: bool) -> usize {
        self.in_flight
            .values()
            .filter_map(|f| f.kind.as_ref())
            .filter(|k| matches!(k, OpKind::Create(_)) && k.cidr().is_ipv4() != ipv6)
            .count()
    }

    /// Creates waiting to be sent.
    pub(super) fn queued_creates(&self) -> usize {
        self.queue.iter().filter(|q| q.op.is_create()).count()
    }

    /// Deletes queued or in flight: room in the route table may yet appear.
    pub(super) fn deletes_pending(&self) -> bool {
        self.queue.iter().any(|q| !q.op.is_create())
            || self
                .in_flight
                .values()
                .any(|f| matches!(f.kind, Some(OpKind::Delete(_))))
    }

    /// The oldest operation that may be sent now (its destination has nothing in
    /// flight and no older queued operation) and whose kind `order` allows; with
    /// `deletes_first`, any delete that may go before any create (a route table near
    /// full), among the destinations `only` accepts (an operation it leaves out still
    /// holds back later ones to its destination).
    pub(super) fn take_next_where(
        &mut self,
        order: Order,
        only: &dyn Fn(Cidr) -> bool,
    ) -> Option<Queued> {
        let index = self.next_index_of(order, only)?;
        let queued = self.queue.remove(index)?;
        self.count_create(queued.op.node(), queued.op.is_create(), -1);
        Some(queued)
    }

    /// The operation [`Operations::take_next_where`] would take of any destination,
    /// left in the queue.
    pub(super) fn peek_next_of(&self, order: Order) -> Option<&Queued> {
        self.queue.get(self.next_index_of(order, &|_| true)?)
    }

    fn next_index_of(&self, order: Order, only: &dyn Fn(Cidr) -> bool) -> Option<usize> {
        if order.deletes_first
            && order.deletes_allowed
            && let Some(i) = self.first_index(|op| !op.is_create() && only(op.cidr()))
        {
            return Some(i);
        }
        self.first_index(|op| {
            only(op.cidr())
                && if op.is_create() {
                    order.allows_create(op.cidr())
                } else {
                    order.deletes_allowed
                }
        })
    }

    /// The queued operation that makes what `op` asks for (a create: to the same
    /// node), if any.
    pub(super) fn queued_as(&self, op: &Planned) -> Option<&Queued> {
        self.queue.iter().find(|q| q.op.makes_same_as(op))
    }

    /// Takes the first queued operation to `cidr` out of the queue, whatever its kind.
    pub(super) fn remove_queued(&mut self, cidr: Cidr) -> Option<Queued> {
        let i = self.queue.iter().position(|q| q.op.cidr() == cidr)?;
        let q = self.queue.remove(i)?;
        self.count_create(q.op.node(), q.op.is_create(), -1);
        Some(q)
    }

    fn first_index(&self, allowed: impl Fn(&Planned) -> bool) -> Option<usize> {
        let mut skipped: HashSet<Cidr> = HashSet::new();
        self.queue.iter().position(|q| {
            let cidr = q.op.cidr();
            let blocked = self.busy.contains(&cidr) || skipped.contains(&cidr) || !allowed(&q.op);
            if blocked {
                skipped.insert(cidr);
            }
            !blocked
        })
    }

    /// Records an operation as sent.
    pub(super) fn sent(&mut self, id: OpId, kind: OpKind, pass: u64, now: Instant) {
        self.busy.insert(kind.cidr());
        self.count_create(kind.node(), matches!(kind, OpKind::Create(_)), 1);
        self.in_flight.insert(
            id,
            Flight {
                kind: Some(kind),
                pass,
                sent: now,
            },
        );
    }

    pub(super) fn list_sent(&mut self, id: OpId, pass: u64, now: Instant) {
        self.in_flight.insert(
            id,
            Flight {
                kind: None,
                pass,
                sent: now,
            },
        );
    }

    /// The operation `id`, still in flight.
    pub(super) fn flight(&self, id: OpId) -> Option<&Flight> {
        self.in_flight.get(&id)
    }

    /// The operation answered by `id`, no longer in flight.
    pub(super) fn complete(&mut self, id: OpId) -> Option<Flight> {
        let flight = self.in_flight.remove(&id)?;
        if let Some(kind) = &flight.kind {
            self.busy.remove(&kind.cidr());
            self.count_create(kind.node(), matches!(kind, OpKind::Create(_)), -1);
        }
        Some(flight)
    }

    /// Removes the queued create for `cidr`, if any (its delete failed).
    pub(super) fn remove_queued_create(&mut self, cidr: Cidr) -> Option<Queued> {
        let i = self
            .queue
            .iter()
            .position(|q| q.op.is_create() && q.op.cidr() == cidr)?;
        let q = self.queue.remove(i)?;
        self.count_create(q.op.node(), true, -1);
        Some(q)
    }
}

/// Positions in the queue by destination: a replacement's delete and create share one.
struct QueueIndex(HashMap<Cidr, Vec<usize>>);

impl QueueIndex {
    /// The position of the queued operation identical to `op`, if any.
    fn find(&self, queue: &VecDeque<Queued>, op: &Planned) -> Option<usize> {
        self.0
            .get(&op.cidr())?
            .iter()
            .copied()
            .find(|&i| queue[i].op == *op)
    }
}
