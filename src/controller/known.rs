//! A node as the controller keeps it between events: compact, because 50 000 of them
//! stay in memory for the life of the process.
//!
//! A decoded [`Node`] is about a dozen allocations: each string, the vectors of pod
//! CIDRs and addresses, the condition's words. Kept as is, with malloc's overhead on
//! each and its B-tree entry, a node cost about 560 bytes in the view; with its strings
//! in one allocation, their ends in a second and its parsed pod CIDRs in a third, about
//! 330. Here a node is one allocation: its facts encoded end to end in a byte string
//! (the layout is [`Known`]'s), the well-known words (address types, condition status
//! and reason) as a byte each, the pod CIDRs parsed once; and the view's [`NodeSet`] is
//! a sorted vector of such nodes, 24 bytes each. About 150 bytes a node with malloc's
//! overhead for a node of the benchmarks (benches/README.md, Benchmarks).
//!
//! Nothing of the node's JSON outlives its decoding, and nothing here is kept that no
//! decision reads: the condition's message is dropped (the skip rule reads status and
//! reason only).

use super::compact::{OTHER, Reader, code, push_field, push_varint, push_word};
use crate::model::{ADDRESS_TYPES, CONDITION_WORDS, Cidr, Condition, Node, NodeAddress, label};
use crate::plan::NodeFacts;

/// A node of the view. See the module documentation.
///
/// The layout of `data`, in the encoding of [`super::compact`]:
/// - a flags byte (bit 0: the node has a providerID; bit 1: it has `NetworkUnavailable`),
///   then the condition's status and reason codes ([`CONDITION_WORDS`]; the text of a
///   word that is not well known is the last field), here rather than with the words'
///   text so that a condition written changes them in place;
/// - the number of pod CIDRs and of addresses, each a varint;
/// - the name, the UID, the resourceVersion and the providerID (empty when there is
///   none); for each pod CIDR its text as written, then its network as
///   [`Cidr::encode`] writes it (empty when the text does not parse); for each address
///   its type (a word of [`ADDRESS_TYPES`]) and the address; then the condition's words
///   that are not well known, status first.
#[derive(Debug)]
pub(super) struct Known {
    data: Box<[u8]>,
    /// The relist that last listed this node unchanged (its number), 0 for none: a
    /// relist marks the view's nodes instead of holding a second map of them.
    pub listed: u32,
    /// Its pod CIDRs have waited for their routes since the last complete list, which
    /// brought the node new or changed (the node-to-route clock, `nodes.rs`): a mark
    /// here instead of an entry per CIDR in the clock's map for every listed node.
    pub waits_since_list: bool,
}

const HAS_PROVIDER_ID: u8 = 1;
const HAS_CONDITION: u8 = 2;

impl Known {
    pub(super) fn new(node: &Node) -> Known {
        let condition = node.network_unavailable.as_ref();
        let status = condition.map_or(OTHER, |c| code(&c.status, CONDITION_WORDS));
        let reason = condition.map_or(OTHER, |c| code(&c.reason, CONDITION_WORDS));
        let mut flags = 0;
        if node.provider_id.is_some() {
            flags |= HAS_PROVIDER_ID;
        }
        if condition.is_some() {
            flags |= HAS_CONDITION;
        }
        let mut data = vec![flags, status, reason];
        push_varint(&mut data, node.pod_cidrs.len());
        push_varint(&mut data, node.addresses.len());
        push_field(&mut data, node.name.as_bytes());
        push_field(&mut data, node.uid.as_bytes());
        push_field(&mut data, node.resource_version.as_bytes());
        push_field(
            &mut data,
            node.provider_id.as_deref().unwrap_or("").as_bytes(),
        );
        let mut network = Vec::with_capacity(17);
        for text in &node.pod_cidrs {
            push_field(&mut data, text.as_bytes());
            network.clear();
            if let Ok(cidr) = Cidr::parse(text) {
                cidr.encode(&mut network);
            }
            push_field(&mut data, &network);
        }
        for address in &node.addresses {
            push_word(&mut data, &address.kind, ADDRESS_TYPES);
            push_field(&mut data, address.address.as_bytes());
        }
        if let Some(c) = condition {
            for (code, word) in [(status, &c.status), (reason, &c.reason)] {
                if code == OTHER {
                    push_field(&mut data, word.as_bytes());
                }
            }
        }
        Known {
            data: data.into_boxed_slice(),
            listed: 0,
            waits_since_list: false,
        }
    }

    /// The flags, the condition's codes, the counts, and a reader at the first field.
    fn header(&self) -> (Header, Reader<'_>) {
        let mut r = Reader::new(&self.data);
        let header = Header {
            flags: r.byte(),
            status: r.byte(),
            reason: r.byte(),
            cidrs: r.varint(),
            addresses: r.varint(),
        };
        (header, r)
    }

    /// The fixed field `i` (0: name, 1: UID, 2: resourceVersion, 3: providerID).
    fn fixed(&self, i: usize) -> &str {
        let (_, mut r) = self.header();
        r.skip(i);
        r.text()
    }

    /// A reader at the first pod CIDR, and the counts.
    fn after_fixed(&self) -> (Header, Reader<'_>) {
        let (header, mut r) = self.header();
        r.skip(4);
        (header, r)
    }

    /// A reader at the first address, and the counts.
    fn after_cidrs(&self) -> (Header, Reader<'_>) {
        let (header, mut r) = self.after_fixed();
        r.skip(2 * header.cidrs);
        (header, r)
    }

    pub fn resource_version(&self) -> &str {
        self.fixed(2)
    }

    /// Whether `other` is this node with at most another resourceVersion: the same
    /// bytes before the version's field and after it.
    pub fn same_but_version(&self, other: &Known) -> bool {
        let (before, after) = self.around_version();
        let (other_before, other_after) = other.around_version();
        before == other_before && after == other_after
    }

    /// The bytes before the resourceVersion's field and after it.
    fn around_version(&self) -> (&[u8], &[u8]) {
        let (_, mut r) = self.header();
        r.skip(2);
        let start = r.position();
        r.skip(1);
        let end = r.position();
        (&self.data[..start], &self.data[end..])
    }

    /// `spec.podCIDRs` in order, each its text and its network (`None`: it does not
    /// parse).
    fn cidr_entries(&self) -> impl Iterator<Item = (&str, Option<Cidr>)> + Clone {
        let (header, mut r) = self.after_fixed();
        (0..header.cidrs).map(move |_| {
            let text = r.text();
            (text, Cidr::decode(r.field()))
        })
    }

    /// The networks of the pod CIDRs that parse, in order.
    pub fn valid_cidrs(&self) -> impl Iterator<Item = Cidr> + Clone + '_ {
        self.cidr_entries().filter_map(|(_, c)| c)
    }

    /// The number of pod CIDRs, valid or not.
    pub fn cidr_count(&self) -> usize {
        self.header().0.cidrs
    }

    /// Whether `cidr` is one of the node's pod CIDRs.
    pub fn has_cidr(&self, cidr: Cidr) -> bool {
        self.valid_cidrs().any(|c| c == cidr)
    }

    /// Whether the node has pod CIDRs at all.
    pub fn has_pod_cidrs(&self) -> bool {
        self.cidr_count() > 0
    }

    /// Whether all of the node's pod CIDRs can be routed (it has some, all parse).
    pub fn is_routable(&self) -> bool {
        self.has_pod_cidrs() && self.cidr_entries().all(|(_, c)| c.is_some())
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
            && self.condition_words()
                == node
                    .network_unavailable
                    .as_ref()
                    .map(|c| (&*c.status, &*c.reason))
    }

    /// A condition write succeeded: until the watch confirms it, the view shows what
    /// was written, so the skip rule does not write it again.
    pub fn condition_written(&mut self, condition: Condition) {
        let status = code(&condition.status, CONDITION_WORDS);
        let reason = code(&condition.reason, CONDITION_WORDS);
        let (header, _) = self.header();
        let words_kept_as_text =
            header.flags & HAS_CONDITION != 0 && (header.status == OTHER || header.reason == OTHER);
        if status != OTHER && reason != OTHER && !words_kept_as_text {
            // The usual case, both words well known: the codes change in place.
            self.data[0] |= HAS_CONDITION;
            self.data[1] = status;
            self.data[2] = reason;
            return;
        }
        let mut node = self.to_node();
        node.network_unavailable = Some(condition);
        let (listed, waits) = (self.listed, self.waits_since_list);
        *self = Known::new(&node);
        self.listed = listed;
        self.waits_since_list = waits;
    }

    /// `NetworkUnavailable`'s status and reason, if the node has it.
    fn condition_words(&self) -> Option<(&str, &str)> {
        let (header, mut r) = self.after_cidrs();
        if header.flags & HAS_CONDITION == 0 {
            return None;
        }
        for _ in 0..header.addresses {
            r.word(ADDRESS_TYPES);
            r.field();
        }
        let mut word = |code: u8| match code {
            OTHER => r.text(),
            known => CONDITION_WORDS
                .get(usize::from(known) - 1)
                .copied()
                .unwrap_or(""),
        };
        let status = word(header.status);
        let reason = word(header.reason);
        Some((status, reason))
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
        self.fixed(0)
    }

    fn uid(&self) -> &str {
        self.fixed(1)
    }

    fn provider_id(&self) -> Option<&str> {
        (self.header().0.flags & HAS_PROVIDER_ID != 0).then(|| self.fixed(3))
    }

    fn pod_cidr_texts(&self) -> impl Iterator<Item = &str> + Clone {
        self.cidr_entries().map(|(text, _)| text)
    }

    fn pod_cidrs(&self) -> impl Iterator<Item = Result<Cidr, &'static str>> + Clone {
        self.cidr_entries().map(|(text, cidr)| match cidr {
            Some(c) => Ok(c),
            // Parsed again only to say why not: an invalid pod CIDR is rare.
            None => Err(Cidr::parse(text)
                .err()
                .map_or("does not parse", |e| e.problem)),
        })
    }

    fn addresses(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        let (header, mut r) = self.after_cidrs();
        (0..header.addresses).map(move |_| {
            let kind = r.word(ADDRESS_TYPES);
            (kind, r.text())
        })
    }

    fn network_unavailable(&self) -> Option<Condition> {
        self.condition_words().map(|(status, reason)| Condition {
            status: label(status, CONDITION_WORDS),
            reason: label(reason, CONDITION_WORDS),
            message: "".into(),
        })
    }

    /// The name's bytes, for ordering the view without checking them as text again.
    fn name_bytes(&self) -> &[u8] {
        let (_, mut r) = self.header();
        r.field()
    }
}

struct Header {
    flags: u8,
    status: u8,
    reason: u8,
    cidrs: usize,
    addresses: usize,
}

/// The view's nodes, sorted by name, each name once: found by binary search. A
/// node's entry is 24 bytes, where a B-tree keyed by a copy of the name cost 24 bytes
/// and an allocation a node more, and half-empty leaves besides. Adding or removing
/// a node moves the entries after it (50 000 × 24 bytes, well under a millisecond);
/// the events that do it are rare, the lookups many.
#[derive(Debug, Default)]
pub(super) struct NodeSet(Vec<Known>);

impl NodeSet {
    /// Where the node `name` is, or would go.
    fn find(&self, name: &str) -> Result<usize, usize> {
        self.0
            .binary_search_by(|k| k.name_bytes().cmp(name.as_bytes()))
    }

    pub fn get(&self, name: &str) -> Option<&Known> {
        self.find(name).ok().map(|i| &self.0[i])
    }

    pub fn contains(&self, name: &str) -> bool {
        self.find(name).is_ok()
    }

    /// The place of node `name` in name order.
    pub fn position(&self, name: &str) -> Option<usize> {
        self.find(name).ok()
    }

    /// The node at `position` of name order.
    pub fn at(&self, position: usize) -> Option<&Known> {
        self.0.get(position)
    }

    /// Puts `known` in, in place of the node of its name if there is one.
    pub fn insert(&mut self, known: Known) {
        match self.find(known.name()) {
            Ok(i) => self.0[i] = known,
            Err(i) => self.0.insert(i, known),
        }
    }

    pub fn remove(&mut self, name: &str) -> Option<Known> {
        let i = self.find(name).ok()?;
        let known = self.0.remove(i);
        self.shrink_when_sparse();
        Some(known)
    }

    /// Changes the node `name` by `change` (which cannot change its name: `Known`
    /// has no way to), if it is here.
    pub fn update(&mut self, name: &str, change: impl FnOnce(&mut Known)) {
        if let Ok(i) = self.find(name) {
            change(&mut self.0[i]);
        }
    }

    /// The nodes in name order.
    pub fn iter(&self) -> impl Iterator<Item = &Known> {
        self.0.iter()
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = &mut Known> {
        self.0.iter_mut()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.iter().map(NodeFacts::name)
    }

    pub fn retain(&mut self, keep: impl FnMut(&Known) -> bool) {
        self.0.retain(keep);
        self.shrink_when_sparse();
    }

    /// Moves every node of `other` here; the caller has removed those of the same
    /// names first.
    pub fn append(&mut self, other: &mut NodeSet) {
        if other.0.is_empty() {
            return;
        }
        self.0.append(&mut other.0);
        // Two sorted runs; names are unique, so an unstable sort (in place, no
        // scratch buffer of the whole vector) orders them as a stable one would.
        self.0
            .sort_unstable_by(|a, b| a.name_bytes().cmp(b.name_bytes()));
        other.0 = Vec::new();
    }

    /// Gives back room once a quarter or less of it is used: a relist or a scale-down
    /// would otherwise keep the vector's largest size.
    fn shrink_when_sparse(&mut self) {
        if self.0.len() * 4 <= self.0.capacity() && self.0.capacity() > 64 {
            self.0.shrink_to_fit();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

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
    /// node (the message aside, which is not kept), and the pod CIDRs come back parsed
    /// as the model parses them.
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
        let mut odd_words = node();
        odd_words.network_unavailable = Some(Condition::new("Maybe", "", "m"));
        shapes.push(odd_words);
        let mut long = node();
        long.name = "n".repeat(300);
        long.provider_id = Some("ünïcode://".repeat(40));
        shapes.push(long);
        for n in shapes {
            let known = Known::new(&n);
            let mut expected = n.clone();
            if let Some(c) = &mut expected.network_unavailable {
                c.message = Cow::Borrowed("");
            }
            assert_eq!(known.to_node(), expected);
            assert!(known.is(&n), "{n:?}");
            let parsed: Vec<_> = n
                .pod_cidrs
                .iter()
                .map(|t| Cidr::parse(t).map_err(|e| e.problem))
                .collect();
            assert_eq!(known.pod_cidrs().collect::<Vec<_>>(), parsed);
            assert_eq!(known.cidr_count(), n.pod_cidrs.len());
            assert_eq!(
                known.is_routable(),
                !parsed.is_empty() && parsed.iter().all(Result::is_ok)
            );
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
            |n| n.addresses[2].kind = Cow::Borrowed("MadeUpToo"),
            |n| n.network_unavailable = None,
            |n| n.network_unavailable = Some(Condition::new("True", "NoRouteCreated", "")),
            |n| n.network_unavailable = Some(Condition::new("False", "Other", "")),
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

    /// Guards `condition_written`: the view shows the condition written, in place or
    /// by encoding the node again, and keeps its marks.
    #[test]
    fn a_written_condition_replaces_the_one_listed() {
        for (before, written) in [
            (Some(("False", "RouteCreated")), ("True", "NoRouteCreated")),
            (None, ("True", "NoRouteCreated")),
            (Some(("Maybe", "Odd")), ("False", "RouteCreated")),
            (Some(("False", "RouteCreated")), ("True", "RouteTableFull")),
        ] {
            let mut n = node();
            n.network_unavailable = before.map(|(s, r)| Condition::new(s, r, ""));
            let mut known = Known::new(&n);
            known.listed = 3;
            known.condition_written(Condition::new(written.0, written.1, "m"));
            let c = known.network_unavailable().unwrap();
            assert_eq!((&*c.status, &*c.reason), written, "{before:?}");
            assert_eq!(known.listed, 3);
            n.network_unavailable = Some(Condition::new(written.0, written.1, ""));
            assert!(known.is(&n), "the rest is kept: {before:?}");
        }
    }

    /// Guards `NodeSet`: found by name, in name order, a node of a name already there
    /// replaces it, an update changes the node in place, and an append merges two
    /// sorted sets.
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
        other.insert(named("aa", "1"));
        set.append(&mut other);
        assert_eq!(set.names().collect::<Vec<_>>(), ["a", "aa", "b", "d"]);
        set.retain(|k| k.name() != "a");
        assert_eq!(set.names().collect::<Vec<_>>(), ["aa", "b", "d"]);
        assert!(other.iter().next().is_none());
    }
}
