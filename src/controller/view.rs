//! The controller's view of the cloud's routes: the last list, plus the effect of its
//! own successful operations since.

use std::time::Instant;

use crate::model::{Cidr, CidrError, NodeAddress, Route};
use crate::plan::RouteFacts;

/// What the cloud holds, as of the last list plus our own successful operations.
pub(super) struct RouteView {
    pub routes: Vec<KeptRoute>,
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
    pub(super) fn new(routes: Vec<Route>, listed_at: Instant) -> RouteView {
        let reports_addresses = routes.iter().any(|r| r.enable_node_addresses);
        // Made by the actor's thread, which keeps them: the cloud worker that decoded
        // the list allocated its routes among its short-lived buffers. Sized for the
        // list up front: grown by doubling, the vector of 50 000 routes would keep up
        // to twice their room.
        let mut view = RouteView {
            routes: routes.iter().map(KeptRoute::new).collect(),
            by_node: Vec::new(),
            listed_at,
            stale: false,
            reports_addresses,
        };
        drop(routes);
        // Sorted once, stably (list order among the routes to one node), rather than
        // inserted one at a time at its place.
        let mut by_node: Vec<u32> = (0..view.routes.len())
            .filter(|&i| view.routes[i].usable().is_some())
            .map(position)
            .collect();
        by_node.sort_by(|&a, &b| view.target(a).cmp(view.target(b)));
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
        self.routes.push(route);
    }

    pub(super) fn remove(&mut self, route: &Route, cidr: Cidr) {
        let same = |r: &KeptRoute| r.target_node() == route.target_node && r.cidr == Some(cidr);
        let Some(i) = self.routes.iter().position(same) else {
            return;
        };
        self.routes.remove(i);
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
        self.routes.iter().map(KeptRoute::to_route).collect()
    }

    /// The destinations of the usable routes to `node`.
    pub(super) fn routes_to(&self, node: &str) -> Vec<Cidr> {
        let start = self.by_node.partition_point(|&p| self.target(p) < node);
        self.by_node[start..]
            .iter()
            .take_while(|&&p| self.target(p) == node)
            .filter_map(|&p| self.routes[p as usize].cidr)
            .collect()
    }

    fn target(&self, position: u32) -> &str {
        self.routes[position as usize].target_node()
    }

    /// Where in `by_node` a new route to `node` goes: after the routes to it, before
    /// those to the nodes after it.
    fn first_after(&self, node: &str) -> usize {
        self.by_node.partition_point(|&p| self.target(p) <= node)
    }
}

/// A route as the view keeps it, for the life of the process: its three strings in
/// one allocation and its destination parsed once. A [`Route`] is 104 bytes and three
/// allocations (its name, target node and destination); this is 64 and one, about 90
/// bytes a route less with malloc's overhead (README, Benchmarks).
#[derive(Debug)]
pub(super) struct KeptRoute {
    /// Name, target node and destination as listed, end to end.
    text: Box<str>,
    /// Where the name and the target node end in `text`.
    ends: [u32; 2],
    /// The destination, if it parses.
    cidr: Option<Cidr>,
    blackhole: bool,
    enable_node_addresses: bool,
    /// Kept only with `enable_node_addresses`: without it they count for nothing
    /// (an empty box allocates nothing).
    addresses: Box<[NodeAddress]>,
}

impl KeptRoute {
    fn new(route: &Route) -> KeptRoute {
        let text = [
            route.name.as_str(),
            &route.target_node,
            &route.destination_cidr,
        ]
        .concat();
        // A route's strings are a few dozen bytes; 4 GiB of them is not a route.
        let end = |len: usize| u32::try_from(len).unwrap_or(u32::MAX);
        KeptRoute {
            ends: [
                end(route.name.len()),
                end(route.name.len() + route.target_node.len()),
            ],
            text: text.into_boxed_str(),
            cidr: Cidr::parse(&route.destination_cidr).ok(),
            blackhole: route.blackhole,
            enable_node_addresses: route.enable_node_addresses,
            addresses: if route.enable_node_addresses {
                route.target_node_addresses.clone().into_boxed_slice()
            } else {
                Box::default()
            },
        }
    }

    /// The destination of a usable route: not a blackhole, to a node, and parsable.
    fn usable(&self) -> Option<Cidr> {
        if self.blackhole || self.target_node().is_empty() {
            return None;
        }
        self.cidr
    }

    fn part(&self, i: usize) -> &str {
        let start = match i {
            0 => 0,
            _ => self.ends[i - 1] as usize,
        };
        let end = self.ends.get(i).map_or(self.text.len(), |&e| e as usize);
        self.text.get(start..end).unwrap_or("")
    }
}

impl RouteFacts for KeptRoute {
    fn name(&self) -> &str {
        self.part(0)
    }

    fn target_node(&self) -> &str {
        self.part(1)
    }

    fn destination_text(&self) -> &str {
        self.part(2)
    }

    fn destination(&self) -> Result<Cidr, CidrError> {
        match self.cidr {
            Some(cidr) => Ok(cidr),
            // Parsed again only to say why not: an unparsable route is rare.
            None => Cidr::parse(self.destination_text()),
        }
    }

    fn blackhole(&self) -> bool {
        self.blackhole
    }

    fn enable_node_addresses(&self) -> bool {
        self.enable_node_addresses
    }

    fn target_node_addresses(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        self.addresses
            .iter()
            .map(|a| (&*a.kind, a.address.as_str()))
    }

    fn to_route(&self) -> Route {
        Route {
            name: self.name().to_string(),
            target_node: self.target_node().to_string(),
            target_node_addresses: self.addresses.to_vec(),
            destination_cidr: self.destination_text().to_string(),
            blackhole: self.blackhole,
            enable_node_addresses: self.enable_node_addresses,
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
        let mut view = RouteView::new(listed, Instant::now());
        for step in 0..400 {
            if next(2) == 0 && !view.routes.is_empty() {
                let r = view.routes[next(view.routes.len())].to_route();
                if let Ok(cidr) = Cidr::parse(&r.destination_cidr) {
                    view.remove(&r, cidr);
                }
            } else {
                let cidr = format!("10.1.{}.0/24", next(20));
                view.insert(&route(nodes[next(5)], &cidr, next(5) == 0));
            }
            for node in nodes {
                assert_eq!(
                    view.routes_to(node),
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

    /// Guards the size the module's figures assume (64 bytes on a 64-bit target,
    /// against a `Route`'s 104).
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_kept_route_is_64_bytes() {
        assert_eq!(std::mem::size_of::<KeptRoute>(), 64);
        assert_eq!(std::mem::size_of::<Route>(), 104);
    }
}
