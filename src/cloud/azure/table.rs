//! The route table's routes: how cloud-provider-azure names them, how a listed route
//! maps to its node, and the merge of a batch of changes into the table as read, which
//! touches no route but those the changes name.

use std::net::IpAddr;

use serde_json::{Value, json};

use super::ROUTE_NAME_SEPARATOR;
use crate::model::{Cidr, Route};
use crate::provider::{CloudError, CloudErrorKind};

/// The name of the route of `node` to `cidr`: cloud-provider-azure's
/// (`mapNodeNameToRouteName` with dual stack on, as it has been since the
/// IPv6DualStack gate went GA), `<node>____<cidr without ':', '.' and '/'>`, whenever
/// that is a valid ARM name ([`is_valid_route_name`]), so that its routes are adopted
/// as they are. cloud-provider-azure writes the same name when it is not (a node name
/// of more than about 60 characters: FQDN-style names), and ARM refuses the whole
/// table for it; here the node part is then [`short_node_name`] instead, valid and
/// the same at every pass.
pub fn route_name(node: &str, cidr: &str) -> String {
    let stripped: String = cidr
        .chars()
        .filter(|c| !matches!(c, ':' | '.' | '/'))
        .collect();
    let name = format!("{node}{ROUTE_NAME_SEPARATOR}{stripped}");
    if is_valid_route_name(&name) {
        return name;
    }
    format!("{}{ROUTE_NAME_SEPARATOR}{stripped}", short_node_name(node))
}

/// ARM's rule for a route's name, as its `400 InvalidResourceName` states it: 1 to 80
/// characters of `[A-Za-z0-9_.-]`, beginning with a letter or digit, ending with a
/// letter, digit or `_`.
pub fn is_valid_route_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let (Some(first), Some(last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    bytes.len() <= MAX_ROUTE_NAME
        && first.is_ascii_alphanumeric()
        && (last.is_ascii_alphanumeric() || *last == b'_')
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// ARM's longest resource name.
const MAX_ROUTE_NAME: usize = 80;

/// Characters of the node name kept in [`short_node_name`]: with the hash (9) and the
/// longest CIDR (an IPv6 /128 strips to 35), `<short>____<cidr>` is at most 76
/// characters, and a suffix that keeps two routes' names apart still fits.
const SHORT_NODE_PREFIX: usize = 28;

/// The node part of a route name for a node whose full name makes no valid route
/// name: its first [`SHORT_NODE_PREFIX`] characters that ARM allows (trailing `.`
/// and `-` dropped), `-`, and 8 hex digits of the SHA-256 of the whole name, so two
/// nodes that share a long prefix still get names of their own. No Kubernetes node
/// name holds `_`, so the separator still splits it off.
pub fn short_node_name(node: &str) -> String {
    use sha2::{Digest, Sha256};
    let kept: String = node
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-'))
        .take(SHORT_NODE_PREFIX)
        .collect();
    let kept = kept.trim_end_matches(['.', '-']);
    let kept = if kept.starts_with(|c: char| c.is_ascii_alphanumeric()) {
        kept
    } else {
        "node"
    };
    let digest = Sha256::digest(node.as_bytes());
    let hash: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    format!("{kept}-{hash}")
}

/// The node a route name stands for (`MapRouteNameToNodeName`): what precedes the
/// first separator, or the whole name (the single-stack names of older releases).
/// A shortened node part ([`short_node_name`]) is mapped back by [`NodeNames`].
pub fn node_of_route_name(name: &str) -> &str {
    name.split(ROUTE_NAME_SEPARATOR).next().unwrap_or(name)
}

/// Whether the route named `name` is the route of `node` to `cidr`'s node part: the
/// node's name, or the shortened one [`route_name`] gives it for `cidr`.
fn names_node(name: &str, node: &str, ours: &str) -> bool {
    let part = node_of_route_name(name);
    part == node || part == node_of_route_name(ours)
}

/// The nodes whose names are long enough to be shortened in a route name, by their
/// short name, for reading a listed route's node back.
#[derive(Default)]
pub(super) struct NodeNames {
    by_short: std::collections::HashMap<String, String>,
}

impl NodeNames {
    pub(super) fn new<'a>(names: impl Iterator<Item = &'a str>) -> NodeNames {
        NodeNames {
            by_short: names
                .filter(|n| n.len() > SHORT_NODE_PREFIX)
                .map(|n| (short_node_name(n), n.to_string()))
                .collect(),
        }
    }

    /// The node of a route name: the shortened form's node, else the name's node part.
    pub(super) fn node_of<'a>(&'a self, name: &'a str) -> &'a str {
        let part = node_of_route_name(name);
        self.by_short.get(part).map_or(part, String::as_str)
    }
}

/// The route table as last read: the whole resource, for the next write.
#[derive(Clone, Debug)]
pub(super) struct Table {
    pub(super) etag: Option<String>,
    pub(super) body: Value,
}

impl Table {
    pub(super) fn routes(&self) -> &[Value] {
        self.body
            .pointer("/properties/routes")
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice)
    }

    /// The same table with `routes`, everything else as read.
    pub(super) fn with_routes(&self, routes: Vec<Value>) -> Value {
        let mut body = self.body.clone();
        if let Some(obj) = body.as_object_mut() {
            let props = obj
                .entry("properties")
                .or_insert_with(|| Value::Object(Default::default()));
            if let Some(props) = props.as_object_mut() {
                props.insert("routes".into(), Value::Array(routes));
            }
        }
        body
    }
}

/// A listed route as the controller sees it: its node from its name, a blackhole if
/// its next hop is `None`.
pub(super) fn to_route(r: &Value, nodes: &NodeNames) -> Route {
    let name = text(r, "/name");
    let blackhole = text(r, "/properties/nextHopType").eq_ignore_ascii_case("None");
    Route {
        name: name.to_string(),
        target_node: if blackhole {
            String::new()
        } else {
            nodes.node_of(name).to_string()
        },
        destination_cidr: text(r, "/properties/addressPrefix").to_string(),
        blackhole,
        ..Route::default()
    }
}

/// A change ready to merge into the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Prepared {
    Create {
        cidr: Cidr,
        /// The route's name ([`route_name`]).
        name: String,
        node: String,
        /// The destination as the node spells it (cloud-provider-azure writes it so).
        prefix: String,
        next_hop: IpAddr,
    },
    Delete {
        cidr: Cidr,
        /// The name it was listed with; empty for a route created since the list.
        name: String,
        node: String,
        /// The name [`route_name`] gives the route, for one created since the list.
        ours: String,
    },
}

impl Prepared {
    pub(super) fn delete(route: &Route) -> Result<Prepared, CloudError> {
        let cidr = Cidr::parse(&route.destination_cidr).map_err(|e| {
            CloudError::invalid(format!("azure: cannot delete route {:?}: {e}", route.name))
        })?;
        Ok(Prepared::Delete {
            cidr,
            name: route.name.clone(),
            node: route.target_node.clone(),
            ours: route_name(&route.target_node, &route.destination_cidr),
        })
    }

    pub(super) fn describe(&self) -> String {
        match self {
            Prepared::Create {
                cidr,
                name,
                next_hop,
                ..
            } => format!("route {name} ({cidr} via {next_hop})"),
            Prepared::Delete { cidr, node, .. } => {
                format!("the removal of the route {cidr} to node {node:?}")
            }
        }
    }

    /// Whether this delete removes `r`: same destination, and the name it was listed
    /// with, or (created since the list) a name that stands for its node.
    fn deletes(&self, r: &Value) -> bool {
        let Prepared::Delete {
            cidr,
            name,
            node,
            ours,
        } = self
        else {
            return false;
        };
        prefix_of(r) == Some(*cidr)
            && if name.is_empty() {
                names_node(text(r, "/name"), node, ours)
            } else {
                text(r, "/name").eq_ignore_ascii_case(name)
            }
    }

    /// Whether `r` is exactly the route this create makes.
    fn made(&self, r: &Value) -> bool {
        let Prepared::Create {
            cidr,
            name,
            node,
            next_hop,
            ..
        } = self
        else {
            return false;
        };
        prefix_of(r) == Some(*cidr)
            && names_node(text(r, "/name"), node, name)
            && text(r, "/properties/nextHopType").eq_ignore_ascii_case("VirtualAppliance")
            && text(r, "/properties/nextHopIpAddress")
                .parse::<IpAddr>()
                .ok()
                == Some(*next_hop)
    }

    pub(super) fn is_held_by(&self, routes: &[Value]) -> bool {
        match self {
            Prepared::Create { .. } => routes.iter().any(|r| self.made(r)),
            Prepared::Delete { .. } => !routes.iter().any(|r| self.deletes(r)),
        }
    }
}

/// What the merge decided for one change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Needs the write; done if the table read back holds it.
    Written,
    /// The table already holds it: done without a write.
    AlreadyHeld,
    /// Not done, for this reason.
    Failed(CloudError),
}

impl Outcome {
    pub(super) fn settled(self) -> Result<(), CloudError> {
        match self {
            Outcome::Written | Outcome::AlreadyHeld => Ok(()),
            Outcome::Failed(e) => Err(e),
        }
    }
}

/// The table's routes with the changes merged in.
#[derive(Debug)]
pub(super) struct Merged {
    pub(super) routes: Vec<Value>,
    pub(super) outcomes: Vec<Outcome>,
    /// Whether the routes differ from the table's.
    pub(super) changed: bool,
}

/// Merges `changes` into `existing`: deletes first (they make room), then creates,
/// each change touching only its own route. A create whose destination is routed to
/// another node fails with `AlreadyExists`; one that finds its route made counts as
/// done; one beyond `limit` fails with `TableFull`. A delete that finds nothing is
/// `NotFound`. Every other route stays as read.
pub(super) fn merge(existing: &[Value], changes: &[Prepared], limit: usize, table: &str) -> Merged {
    let mut routes = existing.to_vec();
    let mut outcomes = vec![Outcome::AlreadyHeld; changes.len()];
    let mut changed = false;
    for (i, change) in changes.iter().enumerate() {
        if let Prepared::Delete { cidr, node, .. } = change {
            let before = routes.len();
            routes.retain(|r| !change.deletes(r));
            if routes.len() < before {
                outcomes[i] = Outcome::Written;
                changed = true;
            } else {
                outcomes[i] = Outcome::Failed(CloudError::new(
                    CloudErrorKind::NotFound,
                    format!("azure: route table {table} has no route {cidr} to node {node:?}"),
                ));
            }
        }
    }
    for (i, change) in changes.iter().enumerate() {
        let Prepared::Create {
            cidr,
            name,
            node,
            prefix,
            next_hop,
        } = change
        else {
            continue;
        };
        if routes.iter().any(|r| change.made(r)) {
            continue;
        }
        let route = |name: &str| {
            json!({
                "name": name,
                "properties": {
                    "addressPrefix": prefix,
                    "nextHopType": "VirtualAppliance",
                    "nextHopIpAddress": next_hop.to_string(),
                }
            })
        };
        match routes.iter().position(|r| prefix_of(r) == Some(*cidr)) {
            // This node's route with a stale next hop (the node's IP changed): replaced.
            Some(at) if names_node(text(&routes[at], "/name"), node, name) => {
                let keep_name = text(&routes[at], "/name").to_string();
                routes[at] = route(&keep_name);
                outcomes[i] = Outcome::Written;
                changed = true;
            }
            Some(at) => {
                outcomes[i] = Outcome::Failed(CloudError::new(
                    CloudErrorKind::AlreadyExists,
                    format!(
                        "azure: route table {table} already routes {cidr} elsewhere (route {:?} \
                         via {} {}); not replaced",
                        text(&routes[at], "/name"),
                        text(&routes[at], "/properties/nextHopType"),
                        text(&routes[at], "/properties/nextHopIpAddress"),
                    ),
                ));
            }
            None if routes.len() >= limit => {
                outcomes[i] = Outcome::Failed(CloudError::new(
                    CloudErrorKind::TableFull,
                    format!(
                        "azure: route table {table} holds {} routes, its limit \
                         (routeTableRouteLimit={limit}); route {cidr} to node {node} waits for room",
                        routes.len()
                    ),
                ));
            }
            None => {
                // Names are unique in a table (case-insensitively); two CIDRs can strip
                // to one name (10.1.10.0/24, 10.11.0.0/24): a suffix keeps both.
                let mut unique = name.clone();
                let mut n = 2;
                while routes
                    .iter()
                    .any(|r| text(r, "/name").eq_ignore_ascii_case(&unique))
                {
                    unique = format!("{name}-{n}");
                    if !is_valid_route_name(&unique) {
                        // Too long with the suffix: the short node part leaves room.
                        let cidr_part = name.rsplit(ROUTE_NAME_SEPARATOR).next().unwrap_or("");
                        unique = format!(
                            "{}{ROUTE_NAME_SEPARATOR}{cidr_part}-{n}",
                            short_node_name(node)
                        );
                    }
                    n += 1;
                }
                routes.push(route(&unique));
                outcomes[i] = Outcome::Written;
                changed = true;
            }
        }
    }
    Merged {
        routes,
        outcomes,
        changed,
    }
}

pub(super) fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

fn prefix_of(r: &Value) -> Option<Cidr> {
    Cidr::parse(text(r, "/properties/addressPrefix")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// cloud-provider-azure's names (`azure_routes.go`, dual stack on since the gate
    /// went GA): the node name, `____`, the CIDR without `:`, `.` and `/`.
    #[test]
    fn route_names_are_cloud_provider_azures() {
        assert_eq!(
            route_name("aks-nodepool1-0", "10.244.1.0/24"),
            "aks-nodepool1-0____102441024"
        );
        assert_eq!(
            route_name("node-a", "fd00:10:244:1::/64"),
            "node-a____fd0010244164"
        );
        assert_eq!(node_of_route_name("node-a____fd0010244164"), "node-a");
        // Older releases' single-stack names are the node name alone.
        assert_eq!(node_of_route_name("node-a"), "node-a");
        let listed = to_route(
            &json!({"name": "n1____102440024",
            "properties": {"addressPrefix": "10.244.0.0/24", "nextHopType": "VirtualAppliance",
            "nextHopIpAddress": "10.240.0.4"}}),
            &NodeNames::default(),
        );
        assert_eq!(
            (listed.target_node.as_str(), listed.blackhole),
            ("n1", false)
        );
        let dead = to_route(
            &json!({"name": "n1____102440024",
            "properties": {"addressPrefix": "10.244.0.0/24", "nextHopType": "None"}}),
            &NodeNames::default(),
        );
        assert!(dead.blackhole && dead.target_node.is_empty());
    }

    /// Guards ARM's name rule and the short names: a name cloud-provider-azure makes
    /// valid is kept as it is (its routes are adopted); a node too long for one gets
    /// a valid name, the same every time, another for another node of the same
    /// prefix, and the listed route maps back to the node.
    #[test]
    fn a_node_too_long_for_a_route_name_gets_a_valid_stable_one() {
        for (name, valid) in [
            ("a", true),
            ("node-a____102441024", true),
            ("n_", true),
            (&"a".repeat(80)[..], true),
            (&"a".repeat(81)[..], false),
            ("", false),
            ("-a", false),
            ("_a", false),
            ("a.", false),
            ("a-", false),
            ("a b", false),
            ("a/b", false),
        ] {
            assert_eq!(is_valid_route_name(name), valid, "{name:?}");
        }
        // 66 characters: with an IPv4 CIDR 81, one too many.
        let long = format!(
            "{}.internal.cloudapp.net",
            "worker-node-pool-a-0123456789-abc"
        );
        let other = format!(
            "{}.internal.cloudapp.net",
            "worker-node-pool-a-0123456789-abd"
        );
        let fits = "worker-node-pool-a-0123456789-abc.internal.example";
        assert_eq!(
            route_name(fits, "10.244.1.0/24"),
            format!("{fits}____102441024"),
            "a valid name is cloud-provider-azure's"
        );
        let name = route_name(&long, "10.244.1.0/24");
        assert!(is_valid_route_name(&name), "{name}");
        assert_eq!(name, route_name(&long, "10.244.1.0/24"), "stable");
        assert!(name.starts_with("worker-node-pool-a-0123456789-"), "{name}");
        assert_ne!(
            node_of_route_name(&name),
            node_of_route_name(&route_name(&other, "10.244.2.0/24"))
        );
        let v6 = route_name(&long, "fd00:10:244:1:2:3:4:5/128");
        assert!(is_valid_route_name(&v6), "{v6}");
        let nodes = NodeNames::new([long.as_str(), other.as_str(), "n1"].into_iter());
        assert_eq!(nodes.node_of(&name), long);
        assert_eq!(nodes.node_of(&v6), long);
        assert_eq!(nodes.node_of("n1____102440024"), "n1");
        // Two CIDRs that strip to one name, on the longest name that is still valid:
        // the suffix does not make it invalid.
        let edge = "a".repeat(80 - 4 - 10);
        let m = merge(
            &[r(
                &route_name(&edge, "10.1.10.0/24"),
                "10.1.10.0/24",
                "10.240.0.4",
            )],
            &[create(&edge, "10.11.0.0/24", "10.240.0.4")],
            400,
            "rt",
        );
        let made = text(&m.routes[1], "/name");
        assert!(is_valid_route_name(made), "{made}");
    }

    fn r(name: &str, prefix: &str, hop: &str) -> Value {
        json!({"name": name, "id": format!("/x/routes/{name}"), "etag": "W/\"e\"",
            "properties": {"provisioningState": "Succeeded", "addressPrefix": prefix,
            "nextHopType": "VirtualAppliance", "nextHopIpAddress": hop}})
    }

    fn create(node: &str, prefix: &str, hop: &str) -> Prepared {
        Prepared::Create {
            cidr: Cidr::parse(prefix).unwrap(),
            name: route_name(node, prefix),
            node: node.into(),
            prefix: prefix.into(),
            next_hop: hop.parse().unwrap(),
        }
    }

    fn delete(name: &str, node: &str, prefix: &str) -> Prepared {
        Prepared::Delete {
            cidr: Cidr::parse(prefix).unwrap(),
            name: name.into(),
            node: node.into(),
            ours: route_name(node, prefix),
        }
    }

    #[test]
    fn the_merge_touches_only_the_changed_routes() {
        let foreign = json!({"name": "to-firewall", "properties": {"addressPrefix": "0.0.0.0/0",
            "nextHopType": "VirtualAppliance", "nextHopIpAddress": "10.0.0.4", "hasBgpOverride": false}});
        let existing = vec![
            foreign.clone(),
            r("n1____102441024", "10.244.1.0/24", "10.240.0.4"),
            r("n2____102442024", "10.244.2.0/24", "10.240.0.5"),
        ];
        let changes = [
            create("n1", "10.244.1.0/24", "10.240.0.4"), // already there
            create("n3", "10.244.3.0/24", "10.240.0.6"), // new
            delete("n2____102442024", "n2", "10.244.2.0/24"),
            delete("", "n9", "10.244.9.0/24"),           // gone
            create("n4", "10.244.2.0/24", "10.240.0.7"), // freed by the delete above
            create("n5", "0.0.0.0/0", "10.240.0.8"),     // someone else's destination
            delete("", "n6", "0.0.0.0/0"),               // which a delete of ours spares
        ];
        let m = merge(&existing, &changes, 400, "rt");
        assert!(m.changed);
        assert_eq!(m.routes[0], foreign, "others' routes stay byte for byte");
        assert_eq!(m.routes[1], existing[1], "a held route is not rewritten");
        let names: Vec<&str> = m.routes.iter().map(|r| text(r, "/name")).collect();
        assert_eq!(
            names,
            [
                "to-firewall",
                "n1____102441024",
                "n3____102443024",
                "n4____102442024"
            ]
        );
        assert_eq!(m.outcomes[0], Outcome::AlreadyHeld);
        assert_eq!(m.outcomes[1], Outcome::Written);
        assert_eq!(m.outcomes[2], Outcome::Written);
        let kind = |o: &Outcome| match o {
            Outcome::Failed(e) => Some(e.kind),
            _ => None,
        };
        assert_eq!(kind(&m.outcomes[3]), Some(CloudErrorKind::NotFound));
        assert_eq!(m.outcomes[4], Outcome::Written);
        assert_eq!(kind(&m.outcomes[5]), Some(CloudErrorKind::AlreadyExists));
        assert_eq!(kind(&m.outcomes[6]), Some(CloudErrorKind::NotFound));
        // Nothing to do: no write.
        let m = merge(
            &existing,
            &[create("n1", "10.244.1.0/24", "10.240.0.4")],
            400,
            "rt",
        );
        assert!(!m.changed);
    }

    #[test]
    fn the_merge_keeps_to_the_limit_and_repairs_a_stale_next_hop() {
        let existing = vec![r("n1____102441024", "10.244.1.0/24", "10.240.0.4")];
        let m = merge(
            &existing,
            &[
                create("n1", "10.244.1.0/24", "10.240.0.9"),
                create("n2", "10.244.2.0/24", "10.240.0.5"),
            ],
            1,
            "rt",
        );
        assert_eq!(m.outcomes[0], Outcome::Written);
        assert_eq!(
            text(&m.routes[0], "/properties/nextHopIpAddress"),
            "10.240.0.9"
        );
        assert!(
            matches!(&m.outcomes[1], Outcome::Failed(e) if e.kind == CloudErrorKind::TableFull)
        );
        // Two CIDRs that strip to one name both get a route.
        let m = merge(
            &[r("n1____10110024", "10.1.10.0/24", "10.240.0.4")],
            &[create("n1", "10.11.0.0/24", "10.240.0.4")],
            400,
            "rt",
        );
        assert_eq!(text(&m.routes[1], "/name"), "n1____10110024-2");
    }
}
