//! The controller's view of the cloud's routes: the last list, plus the effect of its
//! own successful operations since.

use std::collections::HashMap;
use std::time::Instant;

use crate::model::{Cidr, Route};

/// What the cloud holds, as of the last list plus our own successful operations.
pub(super) struct RouteView {
    pub routes: Vec<Route>,
    /// Destinations of usable (non-blackhole) routes by target node.
    by_node: HashMap<String, Vec<Cidr>>,
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
            by_node: HashMap::with_capacity(routes.len()),
            listed_at,
            stale: false,
            reports_addresses,
        };
        for r in routes {
            // Copied by the actor's thread, which keeps it: the cloud worker that
            // decoded the list allocated it among its short-lived buffers, and one
            // route kept there holds a page of that thread's arena resident for good.
            view.insert(r.clone());
        }
        view
    }

    pub(super) fn insert(&mut self, mut route: Route) {
        if !route.enable_node_addresses {
            // Addresses count only with the flag; without it they are dead weight.
            route.target_node_addresses = Vec::new();
        }
        if !route.blackhole
            && !route.target_node.is_empty()
            && let Ok(cidr) = Cidr::parse(&route.destination_cidr)
        {
            // One CIDR per node is the rule; do not reserve room for four.
            match self.by_node.get_mut(&route.target_node) {
                Some(list) => list.push(cidr),
                None => {
                    self.by_node.insert(route.target_node.clone(), vec![cidr]);
                }
            }
        }
        self.routes.push(route);
    }

    pub(super) fn remove(&mut self, route: &Route, cidr: Cidr) {
        let same = |r: &Route| {
            r.target_node == route.target_node
                && Cidr::parse(&r.destination_cidr).ok() == Some(cidr)
        };
        if let Some(i) = self.routes.iter().position(same) {
            self.routes.remove(i);
        }
        if let Some(list) = self.by_node.get_mut(&route.target_node) {
            if let Some(i) = list.iter().position(|c| *c == cidr) {
                list.swap_remove(i);
            }
            if list.is_empty() {
                self.by_node.remove(&route.target_node);
            }
        }
    }

    pub(super) fn routes_to(&self, node: &str) -> &[Cidr] {
        self.by_node.get(node).map(Vec::as_slice).unwrap_or(&[])
    }
}
