//! A node as the controller keeps it between events: compact, because 50 000 of them
//! stay in memory for the life of the process.
//!
//! A decoded [`Node`] is about a dozen allocations: each string, the vectors of pod
//! CIDRs and addresses, the condition's words. Kept as is, with malloc's overhead on
//! each and its B-tree entry, a node cost about 560 bytes in the view. Here its
//! strings share one allocation, their ends another, and its pod CIDRs are parsed
//! once; the view's set ([`NodeSet`]) orders the nodes by the name inside them instead
//! of a copy: about 330 bytes a node with malloc's overhead (README, Benchmarks).
//! Nothing of the node's JSON outlives its decoding, and nothing here is kept that no
//! decision reads: the condition's message is dropped (the skip rule reads status and
//! reason only).

use std::borrow::{Borrow, Cow};
use std::cmp::Ordering;
use std::collections::BTreeSet;

use crate::model::{Condition, Label, Node, NodeAddress, PodCidrs};
use crate::plan::NodeFacts;

/// A node of the view. See the module documentation.
#[derive(Debug)]
pub(super) struct Known {
    /// The node's strings, end to end: name, UID, resourceVersion, providerID, each pod
    /// CIDR as written, then each address's type and address.
    text: Box<str>,
    /// Where each part of `text` ends.
    ends: Box<[u32]>,
    /// `spec.podCIDRs`, parsed, in order (as many as there are pod CIDR texts).
    pub pod_cidrs: PodCidrs,
    /// `spec.providerID` is set (an empty part in `text` is also an empty providerID).
    has_provider_id: bool,
    /// `NetworkUnavailable`'s status and reason.
    network_unavailable: Option<(Label, Label)>,
    /// The relist that last listed this node unchanged (its number), 0 for none: a
    /// relist marks the view's nodes instead of holding a second map of them.
    pub listed: u32,
}

/// Parts before the pod CIDRs: name, UID, resourceVersion, providerID.
const FIXED_PARTS: usize = 4;

impl Known {
    pub(super) fn new(node: &Node) -> Box<Known> {
        let mut text = String::new();
        let mut ends =
            Vec::with_capacity(FIXED_PARTS + node.pod_cidrs.len() + 2 * node.addresses.len());
        let mut push = |part: &str| {
            text.push_str(part);
            // A node's strings are a few hundred bytes; 4 GiB of them is not a node.
            ends.push(u32::try_from(text.len()).unwrap_or(u32::MAX));
        };
        push(&node.name);
        push(&node.uid);
        push(&node.resource_version);
        push(node.provider_id.as_deref().unwrap_or(""));
        for cidr in &node.pod_cidrs {
            push(cidr);
        }
        for address in &node.addresses {
            push(&address.kind);
            push(&address.address);
        }
        Box::new(Known {
            text: text.into_boxed_str(),
            ends: ends.into_boxed_slice(),
            pod_cidrs: PodCidrs::parse(&node.pod_cidrs),
            has_provider_id: node.provider_id.is_some(),
            network_unavailable: node
                .network_unavailable
                .as_ref()
                .map(|c| (c.status.clone(), c.reason.clone())),
            listed: 0,
        })
    }

    /// Part `i` of `text`.
    fn part(&self, i: usize) -> &str {
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        &self.text[start..self.ends[i] as usize]
    }

    fn cidr_count(&self) -> usize {
        self.pod_cidrs.entries().len()
    }

    pub fn resource_version(&self) -> &str {
        self.part(2)
    }

    /// Whether the node has pod CIDRs at all.
    pub fn has_pod_cidrs(&self) -> bool {
        self.cidr_count() > 0
    }

    /// Whether all of the node's pod CIDRs can be routed (it has some, all parse).
    pub fn is_routable(&self) -> bool {
        self.pod_cidrs.all_valid()
    }

    /// Whether `node` is this node as it was decoded (the condition's message aside,
    /// which is not kept).
    pub fn is(&self, node: &Node) -> bool {
        self.name() == node.name
            && self.uid() == node.uid
            && self.resource_version() == node.resource_version
            && self.provider_id() == node.provider_id.as_deref()
            && self
                .pod_cidr_texts()
                .eq(node.pod_cidrs.iter().map(String::as_str))
            && self.addresses().eq(node
                .addresses
                .iter()
                .map(|a| (&*a.kind, a.address.as_str())))
            && self.network_unavailable.as_ref().map(|(s, r)| (&**s, &**r))
                == node
                    .network_unavailable
                    .as_ref()
                    .map(|c| (&*c.status, &*c.reason))
    }

    /// A condition write succeeded: until the watch confirms it, the view shows what
    /// was written, so the skip rule does not write it again.
    pub fn condition_written(&mut self, condition: Condition) {
        self.network_unavailable = Some((condition.status, condition.reason));
    }

    /// The node as a [`Node`] again (its condition without a message).
    pub fn to_node(&self) -> Node {
        Node {
            name: self.name().to_string(),
            uid: self.uid().to_string(),
            resource_version: self.resource_version().to_string(),
            provider_id: self.provider_id().map(str::to_string),
            pod_cidrs: self.pod_cidr_texts().map(str::to_string).collect(),
            addresses: self
                .addresses()
                .map(|(kind, address)| NodeAddress::new(kind, address))
                .collect(),
            network_unavailable: self.network_unavailable(),
        }
    }
}

impl NodeFacts for Known {
    fn name(&self) -> &str {
        self.part(0)
    }

    fn uid(&self) -> &str {
        self.part(1)
    }

    fn provider_id(&self) -> Option<&str> {
        self.has_provider_id.then(|| self.part(3))
    }

    fn pod_cidr_texts(&self) -> impl Iterator<Item = &str> + Clone {
        (FIXED_PARTS..FIXED_PARTS + self.cidr_count()).map(|i| self.part(i))
    }

    fn addresses(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        let first = FIXED_PARTS + self.cidr_count();
        (first..self.ends.len())
            .step_by(2)
            .map(|i| (self.part(i), self.part(i + 1)))
    }

    fn network_unavailable(&self) -> Option<Condition> {
        self.network_unavailable
            .as_ref()
            .map(|(status, reason)| Condition {
                status: status.clone(),
                reason: reason.clone(),
                message: Cow::Borrowed(""),
            })
    }
}

/// Nodes by name, each name kept once: the set orders the nodes by the name inside
/// them, where a map by name would copy every name into its key (24 bytes and an
/// allocation a node, 2.7 MiB at 50 000 nodes). Boxed: a B-tree keeps several times
/// the size of its values in half-empty leaves, and a node is large.
#[derive(Debug, Default)]
pub(super) struct NodeSet(BTreeSet<ByName>);

/// A node ordered and found by its name.
#[derive(Debug)]
struct ByName(Box<Known>);

impl Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        self.0.name()
    }
}

impl Ord for ByName {
    fn cmp(&self, other: &ByName) -> Ordering {
        self.0.name().cmp(other.0.name())
    }
}

impl PartialOrd for ByName {
    fn partial_cmp(&self, other: &ByName) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &ByName) -> bool {
        self.0.name() == other.0.name()
    }
}

impl Eq for ByName {}

impl NodeSet {
    pub fn get(&self, name: &str) -> Option<&Known> {
        self.0.get(name).map(|k| &*k.0)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// Puts `known` in, in place of the node of its name if there is one.
    pub fn insert(&mut self, known: Box<Known>) {
        self.0.replace(ByName(known));
    }

    pub fn remove(&mut self, name: &str) -> Option<Box<Known>> {
        self.0.take(name).map(|k| k.0)
    }

    /// Changes the node `name` by `change` (which cannot change its name: `Known`
    /// has no way to), if it is here.
    pub fn update(&mut self, name: &str, change: impl FnOnce(&mut Known)) {
        if let Some(mut known) = self.remove(name) {
            change(&mut known);
            self.insert(known);
        }
    }

    /// The nodes in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Known> {
        self.0.iter().map(|k| &*k.0)
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.iter().map(NodeFacts::name)
    }

    pub fn retain(&mut self, mut keep: impl FnMut(&Known) -> bool) {
        self.0.retain(|k| keep(&k.0));
    }

    /// Moves every node of `other` here; the caller has removed those of the same
    /// names first.
    pub fn append(&mut self, other: &mut NodeSet) {
        self.0.append(&mut other.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node() -> Node {
        Node {
            name: "node-1".into(),
            uid: "7c3e2d1a-0b9f-4e8d-a6c5-1f2e3d4c5b6a".into(),
            resource_version: "4711".into(),
            provider_id: Some("hcloud://42".into()),
            pod_cidrs: vec!["10.244.1.0/24".into(), "fd00:1::/64".into(), "bogus".into()],
            addresses: vec![
                NodeAddress::internal_ip("10.0.0.2"),
                NodeAddress::new("Hostname", "node-1"),
                NodeAddress::new("MadeUp", "x"),
            ],
            network_unavailable: Some(Condition::new("False", "RouteCreated", "a message")),
        }
    }

    /// Guards the layout: every field comes back as it went in, for each shape of
    /// node (the message aside, which is not kept).
    #[test]
    fn a_node_comes_back_as_it_went_in() {
        let mut shapes = vec![node(), Node::default()];
        let mut bare = node();
        bare.provider_id = None;
        bare.pod_cidrs.clear();
        bare.network_unavailable = None;
        shapes.push(bare);
        let mut empty_id = node();
        empty_id.provider_id = Some(String::new());
        empty_id.addresses.clear();
        shapes.push(empty_id);
        for n in shapes {
            let known = Known::new(&n);
            let mut expected = n.clone();
            if let Some(c) = &mut expected.network_unavailable {
                c.message = Cow::Borrowed("");
            }
            assert_eq!(known.to_node(), expected);
            assert!(known.is(&n), "{n:?}");
            assert_eq!(known.pod_cidrs, PodCidrs::parse(&n.pod_cidrs));
        }
    }

    /// Guards `is`: a difference in any field kept makes it another node.
    #[test]
    fn a_difference_in_any_kept_field_is_another_node() {
        let known = Known::new(&node());
        let changes: Vec<fn(&mut Node)> = vec![
            |n| n.name.push('x'),
            |n| n.uid.push('x'),
            |n| n.resource_version.push('1'),
            |n| n.provider_id = None,
            |n| n.pod_cidrs.pop().map(drop).unwrap_or(()),
            |n| n.pod_cidrs.swap(0, 1),
            |n| n.addresses[0].address.push('1'),
            |n| n.addresses[1].kind = Cow::Borrowed("InternalDNS"),
            |n| n.network_unavailable = None,
            |n| n.network_unavailable = Some(Condition::new("True", "NoRouteCreated", "")),
        ];
        for (i, change) in changes.iter().enumerate() {
            let mut other = node();
            change(&mut other);
            assert!(!known.is(&other), "change {i} went unnoticed");
        }
        let mut message = node();
        message.network_unavailable = Some(Condition::new("False", "RouteCreated", "other"));
        assert!(known.is(&message), "the message is not kept");
    }

    /// Guards `condition_written`: the view shows the condition written.
    #[test]
    fn a_written_condition_replaces_the_one_listed() {
        let mut known = Known::new(&node());
        known.condition_written(Condition::new("True", "NoRouteCreated", "m"));
        let c = known.network_unavailable().unwrap();
        assert_eq!((&*c.status, &*c.reason), ("True", "NoRouteCreated"));
    }

    /// Guards `NodeSet`: found by name, in name order, a node of a name already there
    /// replaces it (a set's plain insert would keep the old one), and an update
    /// changes the node in place.
    #[test]
    fn a_node_set_keeps_one_node_a_name_in_name_order() {
        let named = |name: &str, rv: &str| {
            Known::new(&Node {
                name: name.into(),
                resource_version: rv.into(),
                ..node()
            })
        };
        let mut set = NodeSet::default();
        for name in ["c", "a", "b"] {
            set.insert(named(name, "1"));
        }
        set.insert(named("a", "2"));
        assert_eq!(set.names().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(set.get("a").map(Known::resource_version), Some("2"));
        set.update("b", |k| k.listed = 7);
        assert_eq!(set.get("b").map(|k| k.listed), Some(7));
        assert_eq!(
            set.remove("c").map(|k| k.name().to_string()).as_deref(),
            Some("c")
        );
        assert!(!set.contains("c") && set.get("c").is_none());
        let mut other = NodeSet::default();
        other.insert(named("d", "1"));
        set.append(&mut other);
        set.retain(|k| k.name() != "a");
        assert_eq!(set.names().collect::<Vec<_>>(), ["b", "d"]);
        assert!(other.iter().next().is_none());
    }
}
