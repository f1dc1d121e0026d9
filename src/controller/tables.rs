//! Room in the cloud's route tables: each table's size and limit as the provider last
//! listed them, kept current by the controller's own creates and deletes, and the
//! creates held back because they would not fit.
//!
//! A Hetzner network holds 100 routes, an AWS route table 500 by default; stale routes
//! after a scale-down fill them. Upstream sends every create and lets the cloud refuse
//! it, again at every pass. Here a create goes out only when every table has room for
//! it (counting the creates in flight); when the tables are near full, deletes go
//! first; a create that cannot fit is held, with a warning, an event on its node and
//! `NetworkUnavailable=True` (reason `RouteTableFull`), and planned again when a delete
//! succeeds or a list shows room. Nothing is ever deleted to make room: which routes
//! go is the planner's decision alone.
//!
//! Counts between lists are estimates: a create adds one to every table, a delete
//! takes one from every table (in the count of the route's family, for a cloud that
//! counts each family apart: EC2). With several tables a route may be in some only, so an
//! estimate can be off by the partial routes until the next list makes it exact.

use std::collections::BTreeMap;
use std::time::Instant;

use super::{Command, Controller, NodeEventRecord, Trigger};
use crate::model::Cidr;
use crate::plan::NodeFacts;
use crate::provider::{ROUTE_TABLE_FULL, TableUsage};

/// The tables and the held creates. See the module documentation.
#[derive(Default)]
pub(super) struct Tables {
    /// As of the last list plus our own operations since; empty: no limit known.
    tables: Vec<TableUsage>,
    /// Creates held back for want of room, by destination: the node they are for.
    held: BTreeMap<Cidr, String>,
}

impl Tables {
    /// The provider's count after a list.
    pub fn listed(&mut self, tables: Vec<TableUsage>) {
        self.tables = tables;
    }

    /// Routes that still fit in the fullest table, `None` when no limit is known.
    pub fn room(&self) -> Option<usize> {
        self.tables
            .iter()
            .map(|t| t.limit.saturating_sub(t.routes))
            .min()
    }

    /// Routes of one family (`ipv6`) that still fit in the fullest table: a cloud
    /// that counts each family apart (EC2) has room for one when the other is full.
    pub fn room_of(&self, ipv6: bool) -> Option<usize> {
        self.tables
            .iter()
            .map(|t| t.limit.saturating_sub(t.routes_of(ipv6)))
            .min()
    }

    /// The fullest table for `cidr`'s family, for messages.
    fn fullest(&self, cidr: Cidr) -> Option<&TableUsage> {
        let ipv6 = !cidr.is_ipv4();
        self.tables
            .iter()
            .min_by_key(|t| t.limit.saturating_sub(t.routes_of(ipv6)))
    }

    /// A create to `cidr` succeeded: one route more in its family.
    pub fn created(&mut self, cidr: Cidr) {
        let ipv6 = !cidr.is_ipv4();
        for t in &mut self.tables {
            let routes = t.routes_of(ipv6) + 1;
            t.set_routes_of(ipv6, routes);
        }
    }

    pub fn deleted(&mut self, cidr: Cidr) {
        let ipv6 = !cidr.is_ipv4();
        for t in &mut self.tables {
            let routes = t.routes_of(ipv6).saturating_sub(1);
            t.set_routes_of(ipv6, routes);
        }
    }

    /// The cloud refused a create to `cidr` for a full table: believe it for that
    /// family until the next list.
    pub fn cloud_full(&mut self, cidr: Cidr) {
        let ipv6 = !cidr.is_ipv4();
        for t in &mut self.tables {
            let routes = t.routes_of(ipv6).max(t.limit);
            t.set_routes_of(ipv6, routes);
        }
    }

    pub fn tables(&self) -> &[TableUsage] {
        &self.tables
    }

    /// Holds a create; true when it was not held already (warn once per episode).
    fn hold(&mut self, cidr: Cidr, node: &str) -> bool {
        self.held.insert(cidr, node.to_string()).as_deref() != Some(node)
    }

    /// A held create went out or is no longer wanted.
    pub fn release(&mut self, cidr: Cidr) {
        self.held.remove(&cidr);
    }

    pub fn keep_wanted(&mut self, wanted: &std::collections::HashSet<Cidr>) {
        self.held.retain(|c, _| wanted.contains(c));
    }

    pub fn held(&self) -> impl Iterator<Item = Cidr> + '_ {
        self.held.keys().copied()
    }
}

impl Controller {
    /// Creates that may still go out now: the room in the fullest table less the
    /// creates in flight. `None`: no limit is known or the guard is off.
    pub(super) fn create_room(&self) -> Option<usize> {
        if !self.config.guard_table_limits {
            return None;
        }
        let room = self.tables.room()?;
        Some(room.saturating_sub(self.ops.creates_in_flight()))
    }

    /// [`Controller::create_room`] for the creates of one family (`ipv6`).
    pub(super) fn create_room_of(&self, ipv6: bool) -> Option<usize> {
        if !self.config.guard_table_limits {
            return None;
        }
        let room = self.tables.room_of(ipv6)?;
        Some(room.saturating_sub(self.ops.creates_in_flight_of(ipv6)))
    }

    /// The provider's tables after a list: export them, and look again at held
    /// creates if there is room now (the pass of the list plans them anyway).
    pub(super) fn on_tables(&mut self, tables: Vec<TableUsage>) {
        // Every list of a provider that knows its limits brings them: only other
        // counts than the controller's own estimate can change a plan.
        if tables != self.tables.tables() {
            self.changed = true;
        }
        self.spending.set_tables(tables.len());
        self.tables.listed(tables);
        self.update_table_gauges();
    }

    pub(super) fn update_table_gauges(&self) {
        for t in self.tables.tables() {
            self.metrics.set_route_table(&t.table, t.routes, t.limit);
        }
    }

    /// A delete of `deleted` succeeded: one route fewer in its family, and held
    /// creates of that family may fit now.
    pub(super) fn room_freed(&mut self, deleted: Cidr, now: Instant) {
        self.tables.deleted(deleted);
        self.update_table_gauges();
        let ipv6 = !deleted.is_ipv4();
        if self.create_room_of(ipv6).is_some_and(|r| r > 0) {
            let held: Vec<Cidr> = self.tables.held().filter(|c| c.is_ipv4() != ipv6).collect();
            for cidr in held {
                if !self.ops.is_busy(&cidr) {
                    self.trigger(Trigger::Followup(cidr), now);
                }
            }
        }
    }

    /// Holds the create of `cidr` for `node`: no room, and no delete queued or in
    /// flight that could make some. Warns once, records an event on the node and gives
    /// it `NetworkUnavailable=True` with reason `RouteTableFull`.
    pub(super) fn hold_create(
        &mut self,
        cidr: Cidr,
        node: &str,
        pass: u64,
        out: &mut Vec<Command>,
    ) {
        let (table, routes, limit) = self
            .tables
            .fullest(cidr)
            .map(|t| (t.table.clone(), t.routes_of(!cidr.is_ipv4()), t.limit))
            .unwrap_or_default();
        let message = format!(
            "route table {table} is full ({routes} of {limit} routes): route {cidr} for node \
             {node} waits for room; delete routes the cluster no longer needs, or raise the \
             table's limit"
        );
        self.conditions.set_reason(node, ROUTE_TABLE_FULL, &message);
        if !self.tables.hold(cidr, node) {
            return;
        }
        log::warn!(
            "{message} (pass {pass}); no create is sent until a delete or a list shows room"
        );
        if let Some(known) = self.nodes.get(node)
            && self.leading
        {
            out.push(Command::RecordEvent {
                event: NodeEventRecord {
                    node: node.to_string(),
                    uid: known.uid().to_string(),
                    kind: "Warning",
                    reason: ROUTE_TABLE_FULL,
                    message,
                },
                cause: self.passes.cause_of(pass),
            });
        }
    }
}
