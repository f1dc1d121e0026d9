//! The controller's view of the cloud's routes: the last list, plus the effect of its
//! own successful operations since.

use std::time::Instant;

use crate::model::{Cidr, Route};

/// What the cloud holds, as of the last list plus our own successful operations.
pub(super) struct RouteView {
    pub routes: Vec<Route>,
    /// The usable routes (not blackholes, with a target node and a destination that
    /// parses): their positions in `routes`, sorted by target node, with their
    /// destination parsed. A map by node name would cost a second copy of every name
    /// and a vector per node: about 130 bytes a route against 24.
    by_node: Vec<(u32, Cidr)>,
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
        // Sized for the list up front: grown by doubling, the vector of 50 000 routes
        // would keep up to twice their room.
        let mut view = RouteView {
            routes: Vec::with_capacity(routes.len()),
            by_node: Vec::new(),
            listed_at,
            stale: false,
            reports_addresses,
        };
        for r in routes {
            // Copied by the actor's thread, which keeps it: the cloud worker that
            // decoded the list allocated it among its short-lived buffers, and one
            // route kept there holds a page of that thread's arena resident for good.
            view.routes.push(kept(r).clone());
        }
        // Sorted once, stably (list order among the routes to one node), rather than
        // inserted one at a time at its place.
        let mut by_node: Vec<(u32, Cidr)> = (0..view.routes.len())
            .filter_map(|i| Some((position(i), usable(&view.routes[i])?)))
            .collect();
        by_node.sort_by(|&(a, _), &(b, _)| view.target(a).cmp(view.target(b)));
        by_node.shrink_to_fit();
        view.by_node = by_node;
        view
    }

    pub(super) fn insert(&mut self, route: Route) {
        let route = kept(route);
        if let Some(cidr) = usable(&route) {
            let at = self.first_after(&route.target_node);
            self.by_node.insert(at, (position(self.routes.len()), cidr));
        }
        self.routes.push(route);
    }

    pub(super) fn remove(&mut self, route: &Route, cidr: Cidr) {
        let same = |r: &Route| {
            r.target_node == route.target_node
                && Cidr::parse(&r.destination_cidr).ok() == Some(cidr)
        };
        let Some(i) = self.routes.iter().position(same) else {
            return;
        };
        self.routes.remove(i);
        let removed = position(i);
        self.by_node.retain(|&(p, _)| p != removed);
        for (p, _) in &mut self.by_node {
            if *p > removed {
                *p -= 1;
            }
        }
    }

    /// The destinations of the usable routes to `node`.
    pub(super) fn routes_to(&self, node: &str) -> Vec<Cidr> {
        let start = self
            .by_node
            .partition_point(|&(p, _)| self.target(p) < node);
        self.by_node[start..]
            .iter()
            .take_while(|&&(p, _)| self.target(p) == node)
            .map(|&(_, cidr)| cidr)
            .collect()
    }

    fn target(&self, position: u32) -> &str {
        &self.routes[position as usize].target_node
    }

    /// Where in `by_node` a new route to `node` goes: after the routes to it, before
    /// those to the nodes after it.
    fn first_after(&self, node: &str) -> usize {
        self.by_node
            .partition_point(|&(p, _)| self.target(p) <= node)
    }
}

/// `route` as the view keeps it.
fn kept(mut route: Route) -> Route {
    if !route.enable_node_addresses {
        // Addresses count only with the flag; without it they are dead weight.
        route.target_node_addresses = Vec::new();
    }
    route
}

/// The destination of a usable route: not a blackhole, to a node, and parsable.
fn usable(route: &Route) -> Option<Cidr> {
    if route.blackhole || route.target_node.is_empty() {
        return None;
    }
    Cidr::parse(&route.destination_cidr).ok()
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
        view.routes
            .iter()
            .filter(|r| r.target_node == node)
            .filter_map(usable)
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
                let r = view.routes[next(view.routes.len())].clone();
                if let Ok(cidr) = Cidr::parse(&r.destination_cidr) {
                    view.remove(&r, cidr);
                }
            } else {
                let cidr = format!("10.1.{}.0/24", next(20));
                view.insert(route(nodes[next(5)], &cidr, next(5) == 0));
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
}
