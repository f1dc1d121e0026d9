//! The controller's view of the cloud's routes: the last list, plus the effect of its
//! own successful operations since.

use std::time::Instant;

use super::compact::{Reader, push_field, push_varint, push_word};
use crate::model::{ADDRESS_TYPES, Cidr, CidrError, NodeAddress, Route};
use crate::plan::RouteFacts;

/// What the cloud holds, as of the last list plus our own successful operations.
pub(super) struct RouteView {
    pub routes: RouteList,
    /// The usable routes (not blackholes, with a target node and a destination that
    /// parses): their positions in `routes`, sorted by target node. A map by node
    /// name would cost a second copy of every name and a vector per node: about 130
    /// bytes a route against 4.
    by_node: Vec<u32>,
    pub listed_at: Instant,
    /// An ambiguous reply or a surprise (already exists) was seen since the list.
    pub stale: bool,
    /// The provider's listed routes carry node addresses (`enable_node_addresses`).
    /// Routes the controller creates enter the view the way the provider will list
    /// them, so that an address change replaces them before the next list too.
    pub reports_addresses: bool,
}

impl RouteView {
    pub(super) fn new(routes: RouteList, listed_at: Instant) -> RouteView {
        let reports_addresses = routes.0.iter().any(|r| r.enable_node_addresses());
        let mut view = RouteView {
            routes,
            by_node: Vec::new(),
            listed_at,
            stale: false,
            reports_addresses,
        };
        // Sorted once, in place (list order among the routes to one node, which the
        // position gives), rather than inserted one at a time at its place.
        let mut by_node: Vec<u32> = (0..view.routes.len())
            .filter(|&i| view.routes.0[i].usable().is_some())
            .map(position)
            .collect();
        // Stable, so list order among one node's routes; each target decoded once
        // rather than at every comparison.
        by_node.sort_by_cached_key(|&p| view.target(p));
        by_node.shrink_to_fit();
        view.by_node = by_node;
        view
    }

    pub(super) fn insert(&mut self, route: &Route) {
        let route = KeptRoute::new(route);
        if route.usable().is_some() {
            let at = self.first_after(route.target_node());
            self.by_node.insert(at, position(self.routes.len()));
        }
        self.routes.0.push(route);
    }

    pub(super) fn remove(&mut self, route: &Route, cidr: Cidr) {
        let same = |r: &KeptRoute| r.target_node() == route.target_node && r.cidr() == Some(cidr);
        let Some(i) = self.routes.0.iter().position(same) else {
            return;
        };
        self.routes.0.remove(i);
        let removed = position(i);
        self.by_node.retain(|&p| p != removed);
        for p in &mut self.by_node {
            if *p > removed {
                *p -= 1;
            }
        }
    }

    /// The routes as listed (the effect of our own operations included).
    pub(super) fn to_routes(&self) -> Vec<Route> {
        self.routes.to_routes()
    }

    /// The listed routes, for the planner.
    pub(super) fn kept(&self) -> &[KeptRoute] {
        &self.routes.0
    }

    /// The destinations of the usable routes to `node`.
    pub(super) fn routes_to<'a>(
        &'a self,
        node: &'a str,
    ) -> impl Iterator<Item = Cidr> + Clone + 'a {
        let node = node.as_bytes();
        let start = self.by_node.partition_point(|&p| self.target(p) < node);
        self.by_node[start..]
            .iter()
            .take_while(move |&&p| self.target(p) == node)
            .filter_map(|&p| self.routes.0[p as usize].cidr())
    }

    /// The target node's bytes (byte order is name order).
    fn target(&self, position: u32) -> &[u8] {
        self.routes.0[position as usize].target_node_bytes()
    }

    /// Where in `by_node` a new route to `node` goes: after the routes to it, before
    /// those to the nodes after it.
    fn first_after(&self, node: &str) -> usize {
        self.by_node
            .partition_point(|&p| self.target(p) <= node.as_bytes())
    }
}

/// The routes of a list, kept compact: the provider hands them over one by one
/// ([`crate::Routes::list_routes_each`]) and each is stored as it comes, so that a list
/// of 50 000 routes is never held twice, as [`Route`]s and again as the view's.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteList(Vec<KeptRoute>);

impl RouteList {
    /// An empty list.
    pub fn new() -> RouteList {
        RouteList::default()
    }

    /// Adds `route` at the end.
    pub fn push(&mut self, route: &Route) {
        self.0.push(KeptRoute::new(route));
    }

    /// The number of routes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether it holds no route.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The routes, copied back into [`Route`]s.
    pub fn to_routes(&self) -> Vec<Route> {
        self.0.iter().map(KeptRoute::to_route).collect()
    }

    /// Whether `other` holds the same routes, in any order: a cloud need not list its
    /// routes in the same order twice.
    pub(super) fn same_routes(&self, other: &RouteList) -> bool {
        if self.0.len() != other.0.len() {
            return false;
        }
        if self.0 == other.0 {
            return true;
        }
        fn sorted(list: &RouteList) -> Vec<&[u8]> {
            let mut kept: Vec<&[u8]> = list.0.iter().map(|k| &*k.0).collect();
            kept.sort_unstable();
            kept
        }
        sorted(self) == sorted(other)
    }

    /// Gives back the room the list grew into beyond its routes.
    pub fn shrink_to_fit(&mut self) {
        self.0.shrink_to_fit();
    }
}

impl From<Vec<Route>> for RouteList {
    fn from(routes: Vec<Route>) -> RouteList {
        routes.iter().collect()
    }
}

impl<'a> FromIterator<&'a Route> for RouteList {
    fn from_iter<I: IntoIterator<Item = &'a Route>>(routes: I) -> RouteList {
        RouteList(routes.into_iter().map(KeptRoute::new).collect())
    }
}

/// A route as the view keeps it, for the life of the process: one allocation, in the
/// encoding of [`super::compact`]. A [`Route`] is 104 bytes and three allocations (its
/// name, target node and destination); this is 16 and one.
///
/// The layout: a flags byte (bit 0: a blackhole; bit 1: `enable_node_addresses`), the
/// destination's network as [`Cidr::encode`] writes it (empty when it does not parse),
/// the name, the target node and the destination as listed; with
/// `enable_node_addresses` the number of addresses (a varint) and each address's type
/// (a word of [`ADDRESS_TYPES`]) and address (without it they count for nothing and
/// are not kept).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct KeptRoute(Box<[u8]>);

const BLACKHOLE: u8 = 1;
const ENABLE_NODE_ADDRESSES: u8 = 2;

impl KeptRoute {
    fn new(route: &Route) -> KeptRoute {
        let mut flags = 0;
        if route.blackhole {
            flags |= BLACKHOLE;
        }
        if route.enable_node_addresses {
            flags |= ENABLE_NODE_ADDRESSES;
        }
        let mut data = Vec::with_capacity(
            24 + route.name.len() + route.target_node.len() + route.destination_cidr.len(),
        );
        data.push(flags);
        let mut network = Vec::with_capacity(17);
        if let Ok(cidr) = Cidr::parse(&route.destination_cidr) {
            cidr.encode(&mut network);
        }
        push_field(&mut data, &network);
        push_field(&mut data, route.name.as_bytes());
        push_field(&mut data, route.target_node.as_bytes());
        push_field(&mut data, route.destination_cidr.as_bytes());
        if route.enable_node_addresses {
            push_varint(&mut data, route.target_node_addresses.len());
            for a in &route.target_node_addresses {
                push_word(&mut data, &a.kind, ADDRESS_TYPES);
                push_field(&mut data, a.address.as_bytes());
            }
        }
        KeptRoute(data.into_boxed_slice())
    }

    fn flags(&self) -> u8 {
        self.0.first().copied().unwrap_or(0)
    }

    /// A reader at the text field `i` (0: name, 1: target node, 2: destination).
    fn at_text(&self, i: usize) -> Reader<'_> {
        let mut r = Reader::new(&self.0);
        r.byte();
        r.skip(1 + i);
        r
    }

    /// The destination, if it parses.
    fn cidr(&self) -> Option<Cidr> {
        let mut r = Reader::new(&self.0);
        r.byte();
        Cidr::decode(r.field())
    }

    /// The destination of a usable route: not a blackhole, to a node, and parsable.
    fn usable(&self) -> Option<Cidr> {
        if self.blackhole() || self.target_node().is_empty() {
            return None;
        }
        self.cidr()
    }
}

impl RouteFacts for KeptRoute {
    fn name(&self) -> &str {
        self.at_text(0).text()
    }

    fn target_node(&self) -> &str {
        self.at_text(1).text()
    }

    fn target_node_bytes(&self) -> &[u8] {
        self.at_text(1).field()
    }

    fn destination_text(&self) -> &str {
        self.at_text(2).text()
    }

    fn destination(&self) -> Result<Cidr, CidrError> {
        match self.cidr() {
            Some(cidr) => Ok(cidr),
            // Parsed again only to say why not: an unparsable route is rare.
            None => Cidr::parse(self.destination_text()),
        }
    }

    fn blackhole(&self) -> bool {
        self.flags() & BLACKHOLE != 0
    }

    fn enable_node_addresses(&self) -> bool {
        self.flags() & ENABLE_NODE_ADDRESSES != 0
    }

    fn target_node_addresses(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        let mut r = self.at_text(3);
        let count = if self.enable_node_addresses() {
            r.varint()
        } else {
            0
        };
        (0..count).map(move |_| {
            let kind = r.word(ADDRESS_TYPES);
            (kind, r.text())
        })
    }

    fn to_route(&self) -> Route {
        Route {
            name: self.name().to_string(),
            target_node: self.target_node().to_string(),
            target_node_addresses: self
                .target_node_addresses()
                .map(|(kind, address)| NodeAddress::new(kind, address))
                .collect(),
            destination_cidr: self.destination_text().to_string(),
            blackhole: self.blackhole(),
            enable_node_addresses: self.enable_node_addresses(),
        }
    }
}

/// A position in the route list as the index keeps it: no route table holds four
/// billion routes.
fn position(i: usize) -> u32 {
    u32::try_from(i).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(node: &str, cidr: &str, blackhole: bool) -> Route {
        Route {
            target_node: node.into(),
            destination_cidr: cidr.into(),
            blackhole,
            ..Route::default()
        }
    }

    /// Guards the quiet poll's comparison: the same routes listed in another order are
    /// the same routes; another route, or one listed twice, is not.
    #[test]
    fn a_list_is_the_same_in_any_order() {
        let (a, b) = (
            route("n0", "10.0.0.0/24", false),
            route("n1", "10.0.1.0/24", false),
        );
        let list = |routes: &[&Route]| routes.iter().copied().collect::<RouteList>();
        assert!(list(&[&a, &b]).same_routes(&list(&[&b, &a])));
        assert!(!list(&[&a, &b]).same_routes(&list(&[&a, &a])));
        let blackhole = route("n1", "10.0.1.0/24", true);
        assert!(!list(&[&a, &b]).same_routes(&list(&[&blackhole, &a])));
    }

    /// What `routes_to` must say: the usable routes to `node`, in list order.
    fn naive(view: &RouteView, node: &str) -> Vec<Cidr> {
        view.to_routes()
            .iter()
            .filter(|r| r.target_node == node && !node.is_empty() && !r.blackhole)
            .filter_map(|r| Cidr::parse(&r.destination_cidr).ok())
            .collect()
    }

    /// Guards the sorted index against the list it indexes, through a list and a
    /// long run of inserts and removes (positions shift on every remove): breaking
    /// the shift in `remove`, the sort in `new` or the place in `insert` fails it.
    #[test]
    fn the_index_agrees_with_the_routes_through_inserts_and_removes() {
        let nodes = ["a", "b", "c", "d", ""];
        let mut seed = 7u64;
        let mut next = |n: usize| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as usize % n
        };
        let listed: Vec<Route> = (0..40)
            .map(|i| {
                let cidr = if i % 13 == 0 {
                    "bogus".to_string()
                } else {
                    format!("10.0.{}.0/24", i % 9)
                };
                route(nodes[i % 5], &cidr, i % 7 == 0)
            })
            .collect();
        let mut view = RouteView::new(listed.into(), Instant::now());
        for step in 0..400 {
            if next(2) == 0 && !view.routes.is_empty() {
                let r = view.routes.0[next(view.routes.len())].to_route();
                if let Ok(cidr) = Cidr::parse(&r.destination_cidr) {
                    view.remove(&r, cidr);
                }
            } else {
                let cidr = format!("10.1.{}.0/24", next(20));
                view.insert(&route(nodes[next(5)], &cidr, next(5) == 0));
            }
            for node in nodes {
                assert_eq!(
                    view.routes_to(node).collect::<Vec<_>>(),
                    naive(&view, node),
                    "step {step}, node {node:?}"
                );
            }
        }
    }

    /// Guards the compact layout: every field a route is listed with comes back, for
    /// each shape of route; the addresses only when they count.
    #[test]
    fn a_route_comes_back_as_it_went_in() {
        let addresses = vec![
            NodeAddress::internal_ip("10.0.0.2"),
            NodeAddress::new("Hostname", "node-1"),
        ];
        let full = Route {
            name: "10.0.0.2-10.244.1.0/24".into(),
            target_node: "node-1".into(),
            target_node_addresses: addresses.clone(),
            destination_cidr: "10.244.1.0/24".into(),
            blackhole: false,
            enable_node_addresses: true,
        };
        let shapes = [
            full.clone(),
            Route::default(),
            Route {
                destination_cidr: "bogus".into(),
                blackhole: true,
                ..full.clone()
            },
            Route {
                name: String::new(),
                target_node: String::new(),
                ..full.clone()
            },
            Route {
                target_node: "ünïcode-node".into(),
                destination_cidr: "fd00:1::/64".into(),
                ..full.clone()
            },
        ];
        for route in shapes {
            let kept = KeptRoute::new(&route);
            assert_eq!(kept.to_route(), route);
            assert_eq!(
                kept.destination().ok(),
                Cidr::parse(&route.destination_cidr).ok()
            );
            assert_eq!(
                kept.destination().err().map(|e| e.problem),
                Cidr::parse(&route.destination_cidr)
                    .err()
                    .map(|e| e.problem)
            );
        }
        let without = Route {
            enable_node_addresses: false,
            ..full
        };
        let kept = KeptRoute::new(&without);
        assert_eq!(
            kept.target_node_addresses().count(),
            0,
            "they count for nothing"
        );
        assert_eq!(
            kept.to_route(),
            Route {
                target_node_addresses: Vec::new(),
                ..without
            }
        );
    }

    /// Guards the size the module's figures assume (16 bytes on a 64-bit target,
    /// against a `Route`'s 104).
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_kept_route_is_16_bytes() {
        assert_eq!(std::mem::size_of::<KeptRoute>(), 16);
        assert_eq!(std::mem::size_of::<Route>(), 104);
    }
}
