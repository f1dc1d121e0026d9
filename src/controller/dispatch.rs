//! Sending: what goes out next, and as what. A pass waiting for its list sends the
//! list once nothing else is out; otherwise queued operations go, oldest first, one
//! per destination, each only when the cloud's budget lets it go at once, and deletes
//! only once the node view is whole. A provider that batches gets them as one
//! operation of several changes ([`super::batches`]); any other as one operation each,
//! at most `max_in_flight` (and what the budget's rules allow) in flight.

use std::collections::BTreeSet;
use std::time::Instant;

use super::budget::Cost;
use super::ops::{OpKind, Order, Planned};
use super::{CloudOp, Command, Controller, OpId};
use crate::model::Cidr;
use crate::provider::{RouteChange, RouteTarget};

impl Controller {
    pub(super) fn op_id(&mut self) -> OpId {
        let id = self.next_op;
        self.next_op += 1;
        id
    }

    /// Sends the list a planning pass waits for, or queued operations.
    pub(super) fn dispatch(&mut self, now: Instant, out: &mut Vec<Command>) {
        if self.planning.is_some() {
            // Nothing else goes out while a pass waits to list.
            self.dispatch_list(now, out);
            return;
        }
        match self.config.batch_size {
            Some(size) => self.dispatch_batch(size, now, out),
            None => self.dispatch_each(now, out),
        }
        self.hold_what_cannot_fit(now, out);
    }

    fn dispatch_list(&mut self, now: Instant, out: &mut Vec<Command>) {
        let Some(planning) = &self.planning else {
            return;
        };
        if planning.list.is_some()
            || self.ops.in_flight() > 0
            || !self.spending.can_send(Cost::List, now)
        {
            return;
        }
        self.spending.spend(Cost::List, now);
        let pass = planning.pass;
        let id = self.op_id();
        let nodes = self.nodes.directory();
        self.ops.list_sent(id, pass, now);
        if let Some(p) = &mut self.planning {
            p.list = Some(id);
        }
        let cause = self.passes.cause_of(pass);
        if let Some(r) = self.passes.report(pass) {
            r.cloud_calls += 1;
            r.listed = true;
        }
        out.push(Command::Cloud {
            id,
            op: CloudOp::List { nodes },
            cause,
        });
    }

    /// One operation per change, at most [`Controller::in_flight_limit`] in total.
    /// An operation whose buckets cannot pay waits without holding back one of
    /// another kind whose buckets can: EC2 throttling `CreateRoute` leaves the
    /// deletes going.
    fn dispatch_each(&mut self, now: Instant, out: &mut Vec<Command>) {
        while self.ops.in_flight() < self.in_flight_limit()
            && self.ops.mutations_in_flight() < self.spending.mutations_at_once()
        {
            let order = self.affordable_order(now);
            let Some(cost) = self
                .ops
                .peek_next_of(order)
                .map(|q| Cost::of_planned(&q.op))
            else {
                break;
            };
            let Some(next) = self.take_request_of(order, now, out) else {
                break;
            };
            let Some((pass, kind)) = next else {
                continue;
            };
            let id = self.op_id();
            let op = cloud_op(&kind);
            let cause = self.passes.cause_of(pass);
            if let Some(r) = self.passes.report(pass) {
                r.cloud_calls += 1;
            }
            self.spending.spend(cost, now);
            self.ops.sent(id, kind, pass, now);
            out.push(Command::Cloud { id, op, cause });
        }
    }

    /// Operations in flight at most: `--concurrent-route-operations`
    /// ([`Config::max_in_flight`](super::Config::max_in_flight)) as a cap on what the
    /// budget's rules allow ([`Spending::in_flight_limit`](super::budget::Spending)).
    pub(super) fn in_flight_limit(&self) -> usize {
        self.config
            .max_in_flight
            .min(self.spending.in_flight_limit())
            .max(1)
    }

    /// [`Controller::dispatch_order`], less the kinds whose buckets cannot pay now
    /// and those with as many in flight as full buckets pay for at once (more would
    /// only wait on the wire, where no new plan can drop them).
    fn affordable_order(&self, now: Instant) -> Order {
        let order = self.dispatch_order();
        let creates = self.ops.creates_in_flight();
        let deletes = self.ops.mutations_in_flight().saturating_sub(creates);
        Order {
            creates_allowed: order.creates_allowed
                && creates < self.spending.at_once(Cost::Create)
                && self.spending.can_send(Cost::Create, now),
            deletes_allowed: order.deletes_allowed
                && deletes < self.spending.at_once(Cost::Delete)
                && self.spending.can_send(Cost::Delete, now),
            ..order
        }
    }

    /// The kinds of route change queued that [`Controller::dispatch_order`] lets go.
    pub(super) fn queued_kinds(&self) -> Vec<Cost> {
        let order = self.dispatch_order();
        let only = |creates: bool| Order {
            creates_allowed: order.creates_allowed && creates,
            deletes_allowed: order.deletes_allowed && !creates,
            deletes_first: false,
            ..order
        };
        let mut kinds = Vec::new();
        if self.ops.peek_next_of(only(true)).is_some() {
            kinds.push(Cost::Create);
        }
        if self.ops.peek_next_of(only(false)).is_some() {
            kinds.push(Cost::Delete);
        }
        kinds
    }

    /// Takes the next queued operation that may go in `order` (see
    /// [`Controller::dispatch_order`]) and builds its request from the node as it is
    /// now: `None` when none may go, `Some(None)` when the one taken is moot (the node
    /// is gone or no longer has the pod CIDR; the pass its change triggered plans
    /// again), else its pass and request.
    fn take_request_of(
        &mut self,
        order: Order,
        now: Instant,
        out: &mut Vec<Command>,
    ) -> Option<Option<(u64, OpKind)>> {
        self.take_request_where(order, &|_| true, now, out)
    }

    /// [`Controller::take_request_of`], among the destinations `only` accepts.
    pub(super) fn take_request_where(
        &mut self,
        order: Order,
        only: &dyn Fn(Cidr) -> bool,
        now: Instant,
        out: &mut Vec<Command>,
    ) -> Option<Option<(u64, OpKind)>> {
        let queued = self.ops.take_next_where(order, only)?;
        let Some(kind) = self.request_for(&queued.op) else {
            self.passes.resolve(queued.pass, |r| r.deferred += 1);
            self.maybe_finish(queued.pass, now, out);
            return Some(None);
        };
        Some(Some((queued.pass, kind)))
    }

    /// Which queued operations may go next: deletes once the node view is whole; a
    /// create only if it fits in the route tables (in its family's count, for a
    /// cloud that counts each family apart); near their limit, deletes first.
    pub(super) fn dispatch_order(&self) -> Order {
        let room = self.create_room();
        let full_families = (
            self.create_room_of(false) == Some(0),
            self.create_room_of(true) == Some(0),
        );
        Order {
            deletes_allowed: self.nodes.is_synced(),
            creates_allowed: !(full_families.0 && full_families.1),
            full_families,
            deletes_first: room.is_some_and(|r| r < self.ops.queued_creates()),
        }
    }

    /// With no room and nothing in flight or queued that could make some, the queued
    /// creates are held instead of waiting (or being sent to be refused).
    fn hold_what_cannot_fit(&mut self, now: Instant, out: &mut Vec<Command>) {
        // Per family: a cloud that counts each apart has room for one when the
        // other is full.
        let full = |ipv6: bool| {
            self.create_room_of(ipv6) == Some(0) && self.ops.creates_in_flight_of(ipv6) == 0
        };
        let full = (full(false), full(true));
        if !(full.0 || full.1) || self.ops.queued_creates() == 0 || self.ops.deletes_pending() {
            return;
        }
        let held = self.ops.retain_queued(|q| match &q.op {
            Planned::Create(c) => !(if c.cidr.is_ipv4() { full.0 } else { full.1 }),
            _ => true,
        });
        if held.is_empty() {
            return;
        }
        let mut passes = BTreeSet::new();
        let mut nodes = BTreeSet::new();
        for q in held {
            if let Planned::Create(c) = &q.op {
                self.hold_create(c.cidr, &c.node, q.pass, out);
                nodes.insert((c.node.clone(), q.pass));
            }
            self.passes.resolve(q.pass, |r| r.deferred += 1);
            passes.insert(q.pass);
        }
        for (node, pass) in nodes {
            if self.ops.pending_creates(&node) == 0 {
                self.write_condition_for(&node, None, pass, out);
            }
        }
        for pass in passes {
            self.maybe_finish(pass, now, out);
        }
    }

    /// The request for a queued operation, from the node as it is now.
    pub(super) fn request_for(&self, op: &Planned) -> Option<OpKind> {
        match op {
            Planned::Delete(d) => Some(OpKind::Delete((**d).clone())),
            Planned::Create(c) => {
                let known = self.nodes.get(&c.node)?;
                if !known.has_cidr(c.cidr) {
                    return None;
                }
                Some(OpKind::Create(c.request(known)))
            }
        }
    }
}

/// The operation that carries out `kind` alone.
fn cloud_op(kind: &OpKind) -> CloudOp {
    match kind {
        OpKind::Create(c) => CloudOp::Create {
            route: c.route.clone(),
            name_hint: c.name_hint.clone(),
            target: target_of(c),
        },
        OpKind::Delete(d) => CloudOp::Delete {
            route: d.route.clone(),
            reason: d.reason,
        },
    }
}

/// `kind` as one change of a batch.
pub(super) fn route_change(kind: &OpKind) -> RouteChange {
    match kind {
        OpKind::Create(c) => RouteChange::Create {
            route: c.route.clone(),
            name_hint: c.name_hint.clone(),
            target: target_of(c),
        },
        OpKind::Delete(d) => RouteChange::Delete {
            route: d.route.clone(),
        },
    }
}

fn target_of(c: &crate::plan::CreateRequest) -> RouteTarget {
    RouteTarget {
        node_name: c.route.target_node.clone(),
        provider_id: c.provider_id.clone(),
        addresses: c.route.target_node_addresses.clone(),
    }
}
