//! The controller's view of the nodes: what the watch delivered, complete only between
//! a relist's `InitDone` and the next `Init`, with each node's pod CIDRs parsed once
//! when it arrives. It says what changed; the controller decides what that triggers.
//!
//! Nodes the node filter does not route (`--node-selector`, another provider's
//! providerID) are kept by name and providerID only, apart from the routed ones: the
//! view must tell a node that is gone (its routes are deleted) from one that exists
//! but is not routed here (its routes are left alone), and such a node costs no memory
//! beyond its name and providerID. The providerID is what lets a provider map a route
//! to the node (a Hetzner route's gateway to the node's server) when the node is named
//! differently from its server or instance; without it such a route would look like a
//! route to nobody, and be deleted.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::known::{Known, NodeSet};
use super::{Command, Controller, Mode, NodeEvent, Trigger};
use crate::model::{Cidr, Condition, Node, same_address_set};
use crate::plan::NodeFacts;
use crate::provider::NodeDirectory;

/// What a complete list changed.
pub(super) struct Listed {
    /// This was the first complete list since start.
    pub first: bool,
    /// Nodes added, deleted or changed since the previous view.
    pub changes: Vec<Trigger>,
}

/// A relist in progress. A node listed exactly as the view holds it is only marked
/// in the view (`Known::listed`); the others wait here until `InitDone`. A relist of
/// an unchanged cluster so holds nothing but the marks: no second copy of the nodes,
/// and no second map of their names (at 50 000 nodes, some 4 MiB).
#[derive(Default)]
struct Relist {
    /// Its number, for the marks.
    number: u32,
    /// Nodes listed new or changed.
    nodes: NodeSet,
    unselected: Unrouted,
}

/// Nodes that exist but are not routed here: providerID by name.
pub(super) type Unrouted = BTreeMap<String, Option<String>>;

/// The node view. See the module documentation.
#[derive(Default)]
pub(super) struct NodeView {
    /// By name.
    nodes: NodeSet,
    /// Nodes that exist but are not routed here.
    unselected: Unrouted,
    /// Nodes of a relist in progress, swapped in at `InitDone`.
    relist: Option<Relist>,
    /// The number of the last relist begun.
    relists: u32,
    synced: bool,
    ever_synced: bool,
    /// When each (node, pod CIDR) was first seen, for the node-to-route metric.
    cidr_seen: RouteClock,
}

impl NodeView {
    /// Whether a complete list has been seen and no relist is in progress.
    pub fn is_synced(&self) -> bool {
        self.synced
    }

    pub fn get(&self, name: &str) -> Option<&Known> {
        self.nodes.get(name)
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Known> {
        self.nodes.iter()
    }

    /// The place of node `name` in the view's name order.
    pub fn position(&self, name: &str) -> Option<u32> {
        u32::try_from(self.nodes.position(name)?).ok()
    }

    /// The name of the node at `position` of the view's name order.
    pub fn name_at(&self, position: u32) -> Option<&str> {
        self.nodes.at(position as usize).map(NodeFacts::name)
    }

    /// The node at `position` of the view's name order.
    pub fn at(&self, position: u32) -> Option<&Known> {
        self.nodes.at(position as usize)
    }

    /// The places in the view of `names`, which come in the view's name order (as a
    /// plan of its nodes lists them): one walk, where a search per name would compare
    /// a dozen names.
    pub fn positions_in_order<'a>(&self, names: impl Iterator<Item = &'a str>) -> Vec<Option<u32>> {
        let mut at = 0usize;
        names
            .map(|name| {
                let mut rest = self.nodes.iter().skip(at);
                match rest.position(|k| k.name_bytes() == name.as_bytes()) {
                    Some(i) => {
                        at += i + 1;
                        u32::try_from(at - 1).ok()
                    }
                    // Not in order after all: found by name.
                    None => self.position(name),
                }
            })
            .collect()
    }

    pub fn names(&self) -> Vec<String> {
        self.nodes.names().map(str::to_string).collect()
    }

    /// The nodes that exist but are not routed here.
    pub fn unselected(&self) -> &Unrouted {
        &self.unselected
    }

    /// Routes the nodes want: one per pod CIDR.
    pub fn wanted_routes(&self) -> usize {
        self.nodes.iter().map(Known::cidr_count).sum()
    }

    /// Node names by provider ID, for a list. Built per list and dropped after it
    /// (lists are rare in watch mode; keeping it would cost memory per node).
    pub fn directory(&self) -> Arc<NodeDirectory> {
        // Unselected nodes too, so that the provider maps their routes to them and they
        // are not taken for routes to nobody.
        let unselected = self
            .unselected
            .iter()
            .map(|(n, id)| (n.as_str(), id.as_deref()));
        Arc::new(NodeDirectory::new(
            self.nodes()
                .map(|n| (n.name(), n.provider_id()))
                .chain(unselected),
        ))
    }

    /// A relist begins: the view is incomplete until [`NodeView::complete_list`].
    pub fn begin_relist(&mut self) {
        self.relist = Some(self.next_relist());
        self.synced = false;
    }

    fn next_relist(&mut self) -> Relist {
        // Numbered from 1 (0 is "never listed"); after four billion relists the
        // numbers wrap, and a mark that old is long overwritten.
        self.relists = self.relists.wrapping_add(1).max(1);
        Relist {
            number: self.relists,
            ..Relist::default()
        }
    }

    /// The relist in progress; one is begun for a listed node without its `Init`.
    fn relist(&mut self) -> &mut Relist {
        if self.relist.is_none() {
            let relist = self.next_relist();
            self.relist = Some(relist);
        }
        self.relist.get_or_insert_default()
    }

    /// One node of a relist.
    pub fn list_apply(&mut self, node: Node) {
        let number = self.relist().number;
        let unchanged = self.nodes.get(&node.name).map(|k| k.is(&node));
        if let Some(unchanged) = unchanged {
            let mark = if unchanged { number } else { 0 };
            self.nodes.update(&node.name, |k| k.listed = mark);
        }
        let relist = self.relist();
        relist.unselected.remove(&node.name);
        if unchanged == Some(true) {
            relist.nodes.remove(&node.name);
        } else {
            relist.nodes.insert(Known::new(&node));
        }
    }

    /// One node of a relist that is not routed here.
    pub fn list_unselected(&mut self, name: String, provider_id: Option<String>) {
        self.unmark(&name);
        let relist = self.relist();
        relist.nodes.remove(&name);
        relist.unselected.insert(name, provider_id);
    }

    /// `name` is not listed as the view holds it (any more).
    fn unmark(&mut self, name: &str) {
        self.nodes.update(name, |k| k.listed = 0);
    }

    /// A node added or changed: what that is, in `mode`'s terms (`None` during a
    /// relist, which buffers it, and for changes that concern no route), and whether
    /// only its resourceVersion changed (a heartbeat: the view is then as it was, but
    /// for the version).
    pub fn apply(&mut self, node: Node, mode: Mode, now: Instant) -> (Option<Trigger>, bool) {
        if self.relist.is_some() {
            self.list_apply(node);
            return (None, false);
        }
        let new = Known::new(&node);
        let name = node.name;
        // Upstream treats an update with the same resourceVersion as a resync (see
        // `change_trigger`): that one is no heartbeat.
        if let Some(old) = self.nodes.get(&name)
            && !old.waits_since_list
            && old.same_but_version(&new)
            && (mode != Mode::UpstreamWatch || old.resource_version() != new.resource_version())
        {
            // Its CIDRs wait, or not, as they did: a heartbeat starts no clock.
            self.nodes.insert(new);
            return (None, true);
        }
        if let Some(old) = self.nodes.get(&name) {
            // The CIDRs it keeps wait since they did; those it no longer has wait for
            // no route.
            if old.waits_since_list {
                self.cidr_seen.note_since_list(old, |c| new.has_cidr(c));
            }
            let dropped = old.valid_cidrs().filter(|c| !new.has_cidr(*c));
            self.cidr_seen.stop(&name, dropped);
        }
        for cidr in new.valid_cidrs() {
            self.cidr_seen.note(&name, cidr, now);
        }
        let trigger = match self.nodes.get(&name) {
            None if self.unselected.remove(&name).is_some() => {
                Some(Trigger::NodeSelected(name.clone()))
            }
            None => Some(Trigger::NodeAdded(name.clone())),
            Some(old) => change_trigger(old, &new, mode),
        };
        self.nodes.insert(new);
        (trigger, false)
    }

    /// A node added or changed that is not routed here: a trigger if it was routed
    /// until now (`None` during a relist, which buffers it).
    pub fn unselect(&mut self, name: String, provider_id: Option<String>) -> Option<Trigger> {
        if self.relist.is_some() {
            self.list_unselected(name, provider_id);
            return None;
        }
        let removed = self.nodes.remove(&name);
        let was_routed = removed.is_some();
        if let Some(known) = removed {
            self.cidr_seen.stop(&name, known.valid_cidrs());
        }
        self.unselected.insert(name.clone(), provider_id);
        was_routed.then_some(Trigger::NodeUnselected(name))
    }

    /// A node deleted; whether the view knew it, routed or not (a relist only forgets
    /// it).
    pub fn delete(&mut self, name: &str) -> bool {
        if self.relist.is_some() {
            self.unmark(name);
            let relist = self.relist();
            relist.nodes.remove(name);
            relist.unselected.remove(name);
            return false;
        }
        let removed = self.nodes.remove(name);
        let known = removed.is_some();
        if let Some(k) = removed {
            self.cidr_seen.stop(name, k.valid_cidrs());
        }
        known | self.unselected.remove(name).is_some()
    }

    /// A complete list: swap it in and say what changed while the watch was away.
    pub fn complete_list(&mut self, mode: Mode, now: Instant) -> Listed {
        let Relist {
            number,
            nodes: mut buffered,
            unselected,
        } = self.relist.take().unwrap_or_default();
        let first = !self.ever_synced;
        let marked = |k: &Known| number != 0 && k.listed == number;
        // Every listed name, in order: the view's nodes listed unchanged and the
        // buffered ones.
        let mut listed: Vec<&str> = self
            .nodes
            .iter()
            .filter(|k| marked(k))
            .map(Known::name)
            .chain(buffered.names())
            .collect();
        listed.sort_unstable();
        let mut changes = Vec::new();
        for &name in &listed {
            match (self.nodes.get(name), buffered.get(name)) {
                // Listed as the view holds it: the same resourceVersion.
                (Some(_), None) => {
                    if mode == Mode::UpstreamWatch {
                        // Upstream sees a relisted, unchanged node as a resync update.
                        changes.push(Trigger::NodeResynced(name.to_string()));
                    }
                }
                (None, _) if self.unselected.contains_key(name) => {
                    changes.push(Trigger::NodeSelected(name.to_string()))
                }
                (None, _) => changes.push(Trigger::NodeAdded(name.to_string())),
                (Some(old), Some(known)) => {
                    let equal_rv = old.resource_version() == known.resource_version();
                    if mode == Mode::UpstreamWatch && equal_rv {
                        changes.push(Trigger::NodeResynced(name.to_string()));
                    } else if let Some(t) = change_trigger(old, known, Mode::Watch) {
                        changes.push(t);
                    }
                }
            }
        }
        let is_listed = |name: &str| listed.binary_search(&name).is_ok();
        for name in self
            .nodes
            .names()
            .chain(self.unselected.keys().map(String::as_str))
        {
            if unselected.contains_key(name) {
                if self.nodes.contains(name) {
                    changes.push(Trigger::NodeUnselected(name.to_string()));
                }
            } else if !is_listed(name) {
                changes.push(Trigger::NodeDeleted(name.to_string()));
            }
        }
        drop(listed);
        // Nodes still waiting since the previous list go on waiting since then, as
        // entries of their own: the mark is about to mean this list.
        let clock = &mut self.cidr_seen;
        for known in self.nodes.iter_mut().filter(|k| k.waits_since_list) {
            clock.note_since_list(known, |_| true);
            known.waits_since_list = false;
        }
        // The view keeps its unchanged nodes in place; the listed ones replace theirs
        // and wait for their routes since this list (the first pass clears those that
        // have them).
        self.nodes
            .retain(|k| marked(k) && !buffered.contains(k.name()));
        for known in buffered.iter_mut() {
            known.waits_since_list = true;
        }
        self.nodes.append(&mut buffered);
        self.cidr_seen.relisted(&self.nodes, now);
        self.unselected = unselected;
        self.synced = true;
        self.ever_synced = true;
        Listed { first, changes }
    }

    /// The route to `node`'s `cidr` exists: how long since the node showed it.
    pub fn route_created(&mut self, node: &str, cidr: Cidr, now: Instant) -> Option<Duration> {
        let seen = match self.cidr_seen.take(node, cidr) {
            Some(seen) => seen,
            None => {
                // Marked as waiting since the last list: this CIDR's wait ends, its
                // other CIDRs (a dual-stack node's) go on waiting since then.
                let clock = &mut self.cidr_seen;
                let mut seen = None;
                self.nodes.update(node, |known| {
                    if known.waits_since_list {
                        clock.note_since_list(known, |c| c != cidr);
                        known.waits_since_list = false;
                        seen = clock.listed_at;
                    }
                });
                seen?
            }
        };
        Some(now.saturating_duration_since(seen))
    }

    /// Every route of `node` exists: it no longer counts towards node-to-route latency.
    /// Called for every node a pass plans, so it looks up the node's own CIDRs: a
    /// sweep of the whole map here made a pass at 50 000 nodes take 27 s of the actor.
    /// Whether some pod CIDR waits for its route (the node-to-route clock runs).
    pub fn route_clock_running(&self) -> bool {
        !self.cidr_seen.since.is_empty()
    }

    /// Whether some pod CIDR of `known` waits for its route as an entry of the clock
    /// (one looked up by key only while the clock runs at all).
    pub fn clock_runs_for(&self, known: &Known) -> bool {
        self.route_clock_running()
            && known.valid_cidrs().any(|c| {
                self.cidr_seen
                    .since
                    .contains_key(&self.cidr_seen.key(known.name(), c))
            })
    }

    /// A plan creates `node`'s route to `cidr`. If no clock runs for it (the route was
    /// lost behind the controller's back: a heartbeat starts none), it waits from now,
    /// so that the metric records the repair; a running clock goes on.
    pub fn route_planned(&mut self, node: &str, cidr: Cidr, now: Instant) {
        if self.nodes.get(node).is_some_and(|k| !k.waits_since_list) {
            self.cidr_seen.note(node, cidr, now);
        }
    }

    pub fn all_routed(&mut self, node: &str) {
        let clock = &mut self.cidr_seen;
        self.nodes.update(node, |known| {
            clock.stop(node, known.valid_cidrs());
            known.waits_since_list = false;
        });
    }

    /// A condition write succeeded: until the watch confirms it, the view shows what
    /// was written, so the skip rule does not write it again.
    pub fn condition_written(&mut self, node: &str, condition: Condition) {
        self.nodes.update(node, |k| k.condition_written(condition));
    }
}

// The controller's side: what a node event means for passes.
impl Controller {
    pub(super) fn on_node_event(&mut self, event: NodeEvent, now: Instant, out: &mut Vec<Command>) {
        if matches!(
            event,
            NodeEvent::Added(_) | NodeEvent::Modified(_) | NodeEvent::Deleted(_)
        ) {
            self.metrics.watch_events.inc();
        }
        match event {
            NodeEvent::Init => {
                // The view is incomplete until InitDone: nothing queued may be sent, and
                // the pass after InitDone plans afresh.
                self.nodes.begin_relist();
                self.metrics.synced.set(0);
                self.cancel_queued(now, out);
            }
            NodeEvent::InitApply(node) => self.nodes.list_apply(node),
            NodeEvent::InitUnselected {
                name,
                provider_id,
                why,
            } => {
                log::debug!("node {name} is not routed here: {why}");
                self.nodes.list_unselected(name, provider_id);
            }
            NodeEvent::InitDone => self.on_list_complete(now),
            NodeEvent::Added(node) | NodeEvent::Modified(node) => {
                let (trigger, only_version) = self.nodes.apply(node, self.config.mode, now);
                if !only_version {
                    self.changed = true;
                }
                if let Some(t) = trigger {
                    self.node_trigger(t, now);
                }
            }
            NodeEvent::Unselected {
                name,
                provider_id,
                why,
            } => {
                if let Some(t) = self.nodes.unselect(name.clone(), provider_id) {
                    log::info!(
                        "node {name} is no longer routed here: {why}; its routes are {}",
                        if self.config.delete_routes_of_unselected_nodes {
                            "deleted (--delete-routes-of-unselected-nodes)"
                        } else {
                            "left alone"
                        }
                    );
                    self.conditions.forget(&name);
                    self.node_trigger(t, now);
                }
            }
            NodeEvent::Deleted(node) => {
                if self.nodes.delete(&node.name) {
                    self.conditions.forget(&node.name);
                    self.node_trigger(Trigger::NodeDeleted(node.name), now);
                }
            }
        }
    }

    /// A complete list: swap it in, and ask for a pass even if nothing changed while
    /// the watch was away (and even with no nodes at all).
    fn on_list_complete(&mut self, now: Instant) {
        self.metrics.watch_relists.inc();
        let Listed { first, changes } = self.nodes.complete_list(self.config.mode, now);
        self.metrics.synced.set(1);
        let unselected = self.nodes.unselected().len();
        if unselected > 0 {
            log::info!(
                "node list: {unselected} nodes are not routed here (--node-selector, or \
                 another provider's providerID); their routes are {}",
                if self.config.delete_routes_of_unselected_nodes {
                    "deleted"
                } else {
                    "left alone"
                }
            );
        }
        if first {
            self.arm_timer(now);
        }
        match self.config.mode {
            Mode::UpstreamWatch => {
                // Upstream has no explicit initial pass: each listed node enqueues, and
                // an empty cluster enqueues nothing.
                for t in changes {
                    self.trigger(t, now);
                }
            }
            Mode::Watch | Mode::Poll => {
                // One pass after every complete list, even an empty one; what changed
                // while the watch was away rides along as its cause.
                let trigger = if first {
                    Trigger::Startup
                } else {
                    Trigger::Relist
                };
                self.trigger(trigger, now);
                if self.config.mode == Mode::Watch {
                    for t in changes {
                        self.metrics.trigger(t.kind());
                        self.scheduler.note(t, now);
                    }
                }
            }
        }
    }
}

/// The node-to-route clock: when each (node, pod CIDR) without its route was first
/// seen.
///
/// A node that a complete list brought new or changed is only marked
/// (`Known::waits_since_list`): its CIDRs wait since the list, whose time is kept
/// here once. The map holds the CIDRs that wait since a watch event, and those of a
/// marked node once its mark no longer tells (one of its routes is created, the node
/// changes, another list comes). So after a start or a relist the map does not hold
/// every node's CIDRs until the first pass (at 50 000 nodes, 3 MiB the first pass
/// held besides the nodes); the pass clears the marks of the nodes whose routes
/// exist.
///
/// Keyed by a hash of the node's name, not a copy of it: the copies cost 1.6 MiB more
/// at 50 000 nodes. Two names that hash alike (64 bits: about one chance in 10^10
/// among 50 000 nodes) would only swap their latency samples; no decision reads this.
#[derive(Default)]
struct RouteClock {
    since: HashMap<(u64, Cidr), Instant>,
    names: RandomState,
    /// When the last complete list was: what marked nodes wait since.
    listed_at: Option<Instant>,
}

impl RouteClock {
    fn key(&self, node: &str, cidr: Cidr) -> (u64, Cidr) {
        (self.names.hash_one(node), cidr)
    }

    /// `node` shows `cidr` at `now`; the first time counts.
    fn note(&mut self, node: &str, cidr: Cidr, now: Instant) {
        let key = self.key(node, cidr);
        self.since.entry(key).or_insert(now);
    }

    /// The CIDRs of marked node `known` for which `keep` holds wait since the last
    /// list, as entries of their own.
    fn note_since_list(&mut self, known: &Known, keep: impl Fn(Cidr) -> bool) {
        let Some(listed_at) = self.listed_at else {
            return;
        };
        for cidr in known.valid_cidrs().filter(|&c| keep(c)) {
            self.note(known.name(), cidr, listed_at);
        }
    }

    /// The route to `node`'s `cidr` exists: since when it waited, if it did as an
    /// entry of its own.
    fn take(&mut self, node: &str, cidr: Cidr) -> Option<Instant> {
        let key = self.key(node, cidr);
        let seen = self.since.remove(&key);
        shrink_when_sparse(&mut self.since);
        seen
    }

    /// `node`'s `cidrs` wait for no route any more. Removed by key: a sweep of the
    /// whole map per node made a pass quadratic.
    fn stop(&mut self, node: &str, cidrs: impl Iterator<Item = Cidr>) {
        for cidr in cidrs {
            let key = self.key(node, cidr);
            self.since.remove(&key);
        }
        shrink_when_sparse(&mut self.since);
    }

    /// A complete list at `now`, of `nodes` (marks set): of the entries, only those
    /// of CIDRs the listed nodes have still wait, each since it did.
    fn relisted(&mut self, nodes: &NodeSet, now: Instant) {
        self.listed_at = Some(now);
        if self.since.is_empty() {
            return;
        }
        let mut before = std::mem::take(&mut self.since);
        for known in nodes.iter() {
            for cidr in known.valid_cidrs() {
                let key = self.key(known.name(), cidr);
                if let Some(seen) = before.remove(&key) {
                    self.since.insert(key, seen);
                }
            }
        }
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.since.is_empty()
    }
}

/// Gives back a map's room once it holds a quarter of it or less: after a start or a
/// relist every node's CIDRs wait here for their routes, and a map keeps its largest
/// size (megabytes at 50 000 nodes) when it empties.
fn shrink_when_sparse<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>) {
    if map.len() * 4 <= map.capacity() && map.capacity() > 64 {
        map.shrink_to_fit();
    }
}

/// The watch-mode trigger filter for an update: pod CIDRs or addresses changed.
/// Ours compares both as sets (a reordering changes no route); upstream compares them
/// in order and also treats an equal resourceVersion as a resync.
fn change_trigger(old: &Known, new: &Known, mode: Mode) -> Option<Trigger> {
    let name = || new.name().to_string();
    let (o_rv, n_rv) = (old.resource_version(), new.resource_version());
    match mode {
        Mode::UpstreamWatch => {
            if o_rv == n_rv {
                Some(Trigger::NodeResynced(name()))
            } else if !old.pod_cidr_texts().eq(new.pod_cidr_texts()) {
                Some(Trigger::PodCidrsChanged(name()))
            } else if !old.addresses().eq(new.addresses()) {
                Some(Trigger::AddressesChanged(name()))
            } else {
                None
            }
        }
        Mode::Watch | Mode::Poll => {
            if o_rv == n_rv && !o_rv.is_empty() {
                None
            } else if !same_cidrs(old, new) {
                Some(Trigger::PodCidrsChanged(name()))
            } else if !same_address_set(old.addresses(), new.addresses()) {
                Some(Trigger::AddressesChanged(name()))
            } else {
                None
            }
        }
    }
}

/// Whether two nodes have the same pod CIDRs as sets of networks (an unparsable entry
/// compares by its text).
fn same_cidrs(a: &Known, b: &Known) -> bool {
    fn set(k: &Known) -> Vec<Result<Cidr, &str>> {
        let mut out: Vec<Result<Cidr, &str>> = k
            .pod_cidr_texts()
            .zip(k.pod_cidrs())
            .map(|(text, parsed)| parsed.map_err(|_| text))
            .collect();
        out.sort();
        out.dedup();
        out
    }
    set(a) == set(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, rv: &str, cidr: &str) -> Node {
        Node {
            name: name.into(),
            uid: format!("uid-{name}"),
            resource_version: rv.into(),
            pod_cidrs: vec![cidr.into()],
            ..Node::default()
        }
    }

    /// Guards the relist's memory rule: a node listed exactly as the view holds it is
    /// not copied into the relist (the view's copy is taken over at the end), a changed
    /// one is, and after the list the view holds the listed nodes and reports only the
    /// change. Breaking `Relist::apply` to copy every node fails the first assertion;
    /// losing the view's copy at the swap fails the last ones.
    #[test]
    fn a_relist_copies_only_the_nodes_that_changed() {
        let t0 = Instant::now();
        let mut view = NodeView::default();
        view.begin_relist();
        view.list_apply(node("a", "1", "10.0.0.0/24"));
        view.list_apply(node("b", "1", "10.0.1.0/24"));
        view.complete_list(Mode::Watch, t0);

        view.begin_relist();
        view.list_apply(node("a", "1", "10.0.0.0/24"));
        view.list_apply(node("b", "2", "10.0.9.0/24"));
        let relist = view.relist.as_ref().expect("a relist in progress");
        assert!(
            !relist.nodes.contains("a"),
            "an unchanged node is not copied"
        );
        assert_eq!(
            view.nodes.get("a").unwrap().listed,
            relist.number,
            "only marked"
        );
        assert!(relist.nodes.contains("b"), "a changed node is");
        let listed = view.complete_list(Mode::Watch, t0);

        assert_eq!(
            listed.changes,
            vec![Trigger::PodCidrsChanged("b".into())],
            "only b changed"
        );
        assert_eq!(view.names(), vec!["a".to_string(), "b".to_string()]);
        assert_eq!(view.get("a").map(|k| k.resource_version()), Some("1"));
        assert_eq!(
            view.get("b").and_then(|k| k.pod_cidr_texts().next()),
            Some("10.0.9.0/24")
        );
    }

    /// Guards the marks of a relist: a node listed unchanged stays, one deleted or
    /// unselected during the relist goes even if listed before, one not listed goes,
    /// and a mark of an earlier relist does not count. Comparing marks without the
    /// relist's number keeps `f` at the third list; skipping `unmark` on a delete
    /// keeps `a`.
    #[test]
    fn a_relist_keeps_exactly_the_nodes_it_listed() {
        let t0 = Instant::now();
        let mut view = NodeView::default();
        view.begin_relist();
        for n in ["a", "b", "c", "d", "f"] {
            view.list_apply(node(n, "1", "10.0.0.0/24"));
        }
        view.complete_list(Mode::Watch, t0);

        view.begin_relist();
        view.list_apply(node("a", "1", "10.0.0.0/24"));
        view.list_apply(node("b", "2", "10.0.9.0/24"));
        view.list_unselected("d".into(), None);
        view.list_apply(node("e", "1", "10.0.5.0/24"));
        view.list_apply(node("f", "1", "10.0.0.0/24"));
        assert!(!view.delete("a"), "a relist only forgets a deleted node");
        let mut changes = view.complete_list(Mode::Watch, t0).changes;
        changes.sort_by_key(|t| format!("{t:?}"));
        assert_eq!(
            changes,
            vec![
                Trigger::NodeAdded("e".into()),
                Trigger::NodeDeleted("a".into()),
                Trigger::NodeDeleted("c".into()),
                Trigger::NodeUnselected("d".into()),
                Trigger::PodCidrsChanged("b".into()),
            ]
        );
        assert_eq!(view.names(), ["b", "e", "f"]);
        assert!(view.unselected().contains_key("d"));

        view.begin_relist();
        view.list_apply(node("b", "2", "10.0.9.0/24"));
        let listed = view.complete_list(Mode::Watch, t0);
        assert_eq!(view.names(), ["b"], "{:?}", listed.changes);
    }

    /// Guards the node-to-route clock's bookkeeping now that it removes by node and
    /// CIDR instead of sweeping the map: a CIDR the node drops stops waiting, one
    /// `all_routed` clears only its own node, and a deleted node's go. Skipping the
    /// removal in `apply` leaves the dropped CIDR waiting (its route would later be
    /// timed from the old node).
    #[test]
    fn the_route_clock_forgets_exactly_what_no_longer_waits() {
        let t0 = Instant::now();
        let cidr = |c: &str| Cidr::parse(c).unwrap();
        let mut view = NodeView::default();
        view.begin_relist();
        view.list_apply(node("a", "1", "10.0.0.0/24"));
        view.list_apply(node("b", "1", "10.0.1.0/24"));
        view.list_apply(node("c", "1", "10.0.2.0/24"));
        view.complete_list(Mode::Watch, t0);
        let _ = view.apply(node("a", "2", "10.0.9.0/24"), Mode::Watch, t0);
        assert_eq!(
            view.route_created("a", cidr("10.0.0.0/24"), t0),
            None,
            "dropped CIDR"
        );
        view.all_routed("b");
        assert_eq!(view.route_created("b", cidr("10.0.1.0/24"), t0), None);
        assert!(view.delete("c"));
        assert_eq!(view.route_created("c", cidr("10.0.2.0/24"), t0), None);
        assert!(view.route_created("a", cidr("10.0.9.0/24"), t0).is_some());
        assert!(view.cidr_seen.is_empty());
    }

    /// Guards the clock through lists: after a relist exactly the listed nodes' CIDRs
    /// wait, those that waited before since then (as marks of the previous list or as
    /// entries), the new and changed ones since the relist, and an unchanged node
    /// whose route existed not at all; a dual-stack node's two CIDRs each count once.
    /// Skipping the marks' entries at a relist times `a` from the relist; marking
    /// unchanged nodes gives `d` a sample; not keeping the other CIDR's wait in
    /// `route_created` loses `h`'s second.
    #[test]
    fn a_relist_keeps_when_each_cidr_was_first_seen() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let cidr = |c: &str| Cidr::parse(c).unwrap();
        let mut view = NodeView::default();
        view.begin_relist();
        view.list_apply(node("a", "1", "10.0.0.0/24"));
        view.list_apply(node("b", "1", "10.0.1.0/24"));
        view.list_apply(node("c", "1", "10.0.2.0/24"));
        view.list_apply(node("d", "1", "10.0.4.0/24"));
        let mut g = node("g", "1", "10.0.6.0/24");
        g.pod_cidrs.push("fd00:6::/64".into());
        view.list_apply(g.clone());
        view.complete_list(Mode::Watch, t0);
        assert!(view.cidr_seen.is_empty(), "a list only marks");
        view.all_routed("d");
        let _ = view.apply(node("e", "1", "10.0.5.0/24"), Mode::Watch, at(1));

        view.begin_relist();
        view.list_apply(node("a", "1", "10.0.0.0/24"));
        view.list_apply(node("b", "2", "10.0.9.0/24"));
        view.list_apply(node("d", "1", "10.0.4.0/24"));
        view.list_apply(node("e", "1", "10.0.5.0/24"));
        view.list_apply(node("f", "1", "10.0.7.0/24"));
        let mut h = node("h", "1", "10.0.8.0/24");
        h.pod_cidrs.push("fd00:8::/64".into());
        view.list_apply(h);
        view.list_apply(g);
        view.complete_list(Mode::Watch, at(10));

        // (node, CIDR, its route created at (s), waited for (s), why), in this order.
        let expected: [(&str, &str, u64, Option<u64>, &str); 13] = [
            (
                "a",
                "10.0.0.0/24",
                20,
                Some(20),
                "waited since t0, across the relist",
            ),
            ("b", "10.0.9.0/24", 20, Some(10), "changed in the relist"),
            ("b", "10.0.1.0/24", 20, None, "dropped"),
            ("c", "10.0.2.0/24", 20, None, "gone"),
            ("d", "10.0.4.0/24", 20, None, "routed before the relist"),
            ("e", "10.0.5.0/24", 20, Some(19), "since its watch event"),
            ("f", "10.0.7.0/24", 20, Some(10), "new in the relist"),
            ("g", "10.0.6.0/24", 20, Some(20), "the first of two"),
            ("g", "fd00:6::/64", 30, Some(30), "the second"),
            ("g", "10.0.6.0/24", 40, None, "counted once"),
            ("h", "fd00:8::/64", 20, Some(10), "marked by the relist"),
            ("h", "10.0.8.0/24", 30, Some(20), "the other, marked too"),
            ("h", "fd00:8::/64", 40, None, "counted once"),
        ];
        for (node, c, now, waited, why) in expected {
            let got = view.route_created(node, cidr(c), at(now));
            assert_eq!(got.map(|d| d.as_secs()), waited, "{node} {c}: {why}");
        }
        assert!(view.cidr_seen.is_empty());
        assert!(view.nodes().all(|k| !k.waits_since_list));
    }
}
