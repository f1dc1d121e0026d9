//! The plugin protocol, version [`API_VERSION`]: one JSON request on the plugin's
//! stdin, one JSON reply on its stdout, then the plugin exits.
//!
//! Requests carry `apiVersion`, `verb` (`describe`, `list`, `create`, `delete`,
//! `apply`), `clusterName` and, for `create` and `delete`, the `route`; for `apply`,
//! the `changes`. Replies carry the same `apiVersion` and either what was asked
//! (`routes`, `tables`; `budget`, `batchSize`; `outcomes`) or an `error` whose `kind`
//! is one of [`ERROR_KINDS`]. A plugin that cannot write JSON may exit with one of the
//! codes in [`kind_of_exit_code`] instead.
//!
//! `apply` is sent only to a plugin whose `describe` declares `batchSize` above 1: it
//! carries up to that many changes, each `{"action": "create", "route": …}` or
//! `{"action": "delete", "route": …}` with the route exactly as `create` or `delete`
//! would carry it, and its reply holds one outcome per change, in order: `{}` for done,
//! `{"error": …}` as that change's own `create` or `delete` would have failed.
//!
//! This module only builds requests and reads replies; it never runs anything, so it
//! is tested without processes. Unknown fields in a reply are ignored (a newer plugin
//! may say more); a missing or different `apiVersion` is an error, so a plugin written
//! for another version is never half understood.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{Cidr, NodeAddress, Route};
use crate::provider::{CloudError, CloudErrorKind, RouteChange, RouteTarget};

/// The protocol's version, sent in every request and expected in every reply.
pub const API_VERSION: &str = "route-controller.plugin/v1";

/// What the controller asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verb {
    /// The plugin's budget, batch size and tables (optional for plugins).
    Describe,
    /// The routes the plugin manages.
    List,
    /// Create one route.
    Create,
    /// Delete one route.
    Delete,
    /// Apply several creates and deletes in one call (only with `batchSize` > 1).
    Apply,
}

impl Verb {
    /// The verb as it is sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Describe => "describe",
            Verb::List => "list",
            Verb::Create => "create",
            Verb::Delete => "delete",
            Verb::Apply => "apply",
        }
    }
}

/// One request, as written to the plugin's stdin.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Request<'a> {
    api_version: &'static str,
    verb: Verb,
    cluster_name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<WireRoute>,
    #[serde(skip_serializing_if = "Option::is_none")]
    changes: Option<Vec<WireChange>>,
}

/// One change of an `apply`: the action and the route as `create` or `delete` sends it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct WireChange {
    /// `create` or `delete`.
    pub action: Verb,
    /// The route, as the single verb carries it (`nameHint` and target for a create).
    pub route: WireRoute,
}

/// A route as the protocol spells it, both ways.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WireRoute {
    /// The plugin's name for the route (from `list`; empty for a route the controller
    /// created since).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// On `create`: the node's UID, the same for both CIDRs of a dual-stack node.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub name_hint: String,
    /// The destination, e.g. `10.244.1.0/24`.
    #[serde(rename = "destinationCIDR")]
    pub destination_cidr: String,
    /// The node the traffic goes to; empty in a `list` reply for a route whose target
    /// is unknown (it is then deleted if it lies in the cluster CIDRs).
    pub target_node: String,
    /// The node's addresses (`create`, `delete`), or the addresses the route points at
    /// (`list`, informational).
    pub target_addresses: Vec<WireAddress>,
    /// In a `list` reply: the route's target is gone.
    #[serde(skip_serializing_if = "is_false")]
    pub blackhole: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A node address: `{"type": "InternalIP", "address": "10.0.0.2"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WireAddress {
    /// `InternalIP`, `ExternalIP`, `Hostname`, `InternalDNS` or `ExternalDNS`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The address.
    pub address: String,
}

fn wire_addresses(addresses: &[NodeAddress]) -> Vec<WireAddress> {
    addresses
        .iter()
        .map(|a| WireAddress {
            kind: a.kind.to_string(),
            address: a.address.clone(),
        })
        .collect()
}

impl<'a> Request<'a> {
    /// `describe` or `list`.
    pub fn new(verb: Verb, cluster_name: &'a str) -> Request<'a> {
        Request {
            api_version: API_VERSION,
            verb,
            cluster_name,
            route: None,
            changes: None,
        }
    }

    /// `create`: the route to `target`, named after `name_hint`.
    pub fn create(
        cluster_name: &'a str,
        name_hint: &str,
        route: &Route,
        target: &RouteTarget,
    ) -> Request<'a> {
        Request {
            route: Some(created(name_hint, route, target)),
            ..Request::new(Verb::Create, cluster_name)
        }
    }

    /// `delete` of `route`, as `list` returned it or as it was created.
    pub fn delete(cluster_name: &'a str, route: &Route) -> Request<'a> {
        Request {
            route: Some(deleted(route)),
            ..Request::new(Verb::Delete, cluster_name)
        }
    }

    /// `apply` of `changes`, in order, each as its `create` or `delete` would carry it.
    pub fn apply(cluster_name: &'a str, changes: &[RouteChange]) -> Request<'a> {
        let changes = changes
            .iter()
            .map(|change| match change {
                RouteChange::Create {
                    route,
                    name_hint,
                    target,
                } => WireChange {
                    action: Verb::Create,
                    route: created(name_hint, route, target),
                },
                RouteChange::Delete { route } => WireChange {
                    action: Verb::Delete,
                    route: deleted(route),
                },
            })
            .collect();
        Request {
            changes: Some(changes),
            ..Request::new(Verb::Apply, cluster_name)
        }
    }

    /// The request as one line of JSON.
    pub fn to_json(&self) -> String {
        // Serializing plain strings and vectors cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The verb asked.
    pub fn verb(&self) -> Verb {
        self.verb
    }
}

/// The route of a `create`.
fn created(name_hint: &str, route: &Route, target: &RouteTarget) -> WireRoute {
    WireRoute {
        name: String::new(),
        name_hint: name_hint.to_string(),
        destination_cidr: route.destination_cidr.clone(),
        target_node: target.node_name.clone(),
        target_addresses: wire_addresses(&target.addresses),
        blackhole: false,
    }
}

/// The route of a `delete`.
fn deleted(route: &Route) -> WireRoute {
    WireRoute {
        name: route.name.clone(),
        name_hint: String::new(),
        destination_cidr: route.destination_cidr.clone(),
        target_node: route.target_node.clone(),
        target_addresses: wire_addresses(&route.target_node_addresses),
        blackhole: false,
    }
}

/// A reply as the plugin wrote it. Every field is optional; which ones must be there
/// depends on the verb.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Reply {
    /// Must be [`API_VERSION`].
    pub api_version: Option<String>,
    /// `list`: the plugin's routes.
    pub routes: Option<Vec<WireRoute>>,
    /// `list`: the tables and the routes each holds (anyone's); `describe`: the tables
    /// and their limits.
    pub tables: Vec<WireTable>,
    /// `describe`: the budget.
    pub budget: Option<WireBudget>,
    /// `describe`: changes one `apply` can carry (above 1: the plugin implements
    /// `apply`).
    pub batch_size: Option<u32>,
    /// `apply`: one outcome per change, in the request's order.
    pub outcomes: Option<Vec<WireOutcome>>,
    /// Any verb: the call failed.
    pub error: Option<WireError>,
}

/// What became of one change of an `apply`: `{}` for done, else its error.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WireOutcome {
    /// The change failed, as its own `create` or `delete` would have.
    pub error: Option<WireError>,
}

/// A route table: its name, the routes it holds and the routes it may hold.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WireTable {
    /// The table's name for logs and the `table` label.
    pub name: String,
    /// Routes it holds now, anyone's (`list`).
    pub routes: Option<usize>,
    /// Routes it may hold (`describe` or `list`).
    pub limit: Option<usize>,
    /// With `routesIPv6`, instead of `routes`: the routes of each family, for a
    /// target whose `limit` holds for each family apart (as EC2's does), so that a
    /// full IPv4 side holds back no IPv6 create (`list`).
    #[serde(rename = "routesIPv4")]
    pub routes_ipv4: Option<usize>,
    /// The IPv6 routes, beside `routesIPv4`.
    #[serde(rename = "routesIPv6")]
    pub routes_ipv6: Option<usize>,
}

/// What the plugin's target allows.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WireBudget {
    /// Calls per second, sustained.
    pub requests_per_second: Option<f64>,
    /// Calls that may go out at once after a quiet period.
    pub burst: Option<u32>,
    /// Creates and deletes that may run at the same time.
    pub mutations_at_once: Option<usize>,
}

/// A failed call, as the plugin reports it.
#[derive(Clone, Debug, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct WireError {
    /// One of [`ERROR_KINDS`].
    pub kind: String,
    /// What happened, for logs and events.
    pub message: String,
    /// `Retry`, `RateLimited`: when to come back.
    pub retry_after_seconds: Option<f64>,
}

/// The error kinds a plugin may report, with what the controller does about each.
pub const ERROR_KINDS: &[(&str, &str)] = &[
    (
        "Retry",
        "nothing happened; retried with backoff or after retryAfterSeconds",
    ),
    (
        "RateLimited",
        "nothing happened; nothing is sent for retryAfterSeconds",
    ),
    (
        "Conflict",
        "the table is busy with another change; retried soon",
    ),
    (
        "NotFound",
        "delete: the route is already gone (counted as done)",
    ),
    (
        "AlreadyExists",
        "create: another route has that destination; the controller lists",
    ),
    (
        "Invalid",
        "the request cannot succeed as it is; retried only slowly",
    ),
    (
        "Ambiguous",
        "the call may have taken effect; the controller lists before trusting its view",
    ),
    (
        "TableFull",
        "create: the table is full; creates wait for room",
    ),
    (
        "UnknownVerb",
        "the plugin does not implement this verb (fine for describe)",
    ),
];

/// An [`WireError`]'s kind that says the plugin does not implement the verb.
pub const UNKNOWN_VERB: &str = "UnknownVerb";

/// The kind of a plugin's error; `None` for an unknown kind.
pub fn kind_of(error: &WireError) -> Option<CloudErrorKind> {
    let after = error
        .retry_after_seconds
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(|s| Duration::from_secs_f64(s.min(3600.0)));
    Some(match error.kind.as_str() {
        "Retry" => CloudErrorKind::Retry { after },
        "RateLimited" => CloudErrorKind::RateLimited {
            after: after.unwrap_or(Duration::from_secs(1)),
        },
        "Conflict" => CloudErrorKind::Conflict,
        "NotFound" => CloudErrorKind::NotFound,
        "AlreadyExists" => CloudErrorKind::AlreadyExists,
        "Invalid" | UNKNOWN_VERB => CloudErrorKind::Invalid,
        "Ambiguous" => CloudErrorKind::Ambiguous,
        "TableFull" => CloudErrorKind::TableFull,
        _ => return None,
    })
}

/// The kind of a plugin's exit code when its stdout holds no reply: for plugins that
/// cannot write JSON (a shell one-liner). 0 needs a reply; any other code not listed
/// here is [`CloudErrorKind::Ambiguous`] (the plugin failed somewhere; the change may
/// have happened).
pub fn kind_of_exit_code(code: i32) -> CloudErrorKind {
    match code {
        3 => CloudErrorKind::NotFound,
        4 => CloudErrorKind::AlreadyExists,
        5 => CloudErrorKind::Conflict,
        6 => CloudErrorKind::Retry { after: None },
        7 => CloudErrorKind::RateLimited {
            after: Duration::from_secs(1),
        },
        8 => CloudErrorKind::Invalid,
        9 => CloudErrorKind::TableFull,
        _ => CloudErrorKind::Ambiguous,
    }
}

/// The exit codes of [`kind_of_exit_code`], for documentation and `plugin-check`.
pub const EXIT_CODES: &[(i32, &str)] = &[
    (0, "the reply on stdout says what happened"),
    (3, "NotFound"),
    (4, "AlreadyExists"),
    (5, "Conflict"),
    (6, "Retry"),
    (7, "RateLimited (1 s)"),
    (8, "Invalid"),
    (9, "TableFull"),
    (1, "any other code: Ambiguous"),
];

/// Reads a reply: JSON, of this version. `plugin` names the plugin in errors.
pub fn parse_reply(plugin: &str, verb: &str, stdout: &[u8]) -> Result<Reply, CloudError> {
    let text = String::from_utf8_lossy(stdout);
    let text = text.trim();
    if text.is_empty() {
        return Err(CloudError::ambiguous(format!(
            "plugin {plugin}: {} printed nothing on stdout; a plugin must print one JSON reply \
             ({{\"apiVersion\":\"{API_VERSION}\"}} at least) and exit 0",
            verb
        )));
    }
    let reply: Reply = serde_json::from_str(text).map_err(|e| {
        CloudError::ambiguous(format!(
            "plugin {plugin}: {} printed something that is not one JSON object ({e}): {:?}; \
             print exactly one JSON reply on stdout and anything else (logs, progress) on stderr",
            verb,
            excerpt(text, 120)
        ))
    })?;
    match reply.api_version.as_deref() {
        Some(API_VERSION) => Ok(reply),
        Some(other) => Err(CloudError::invalid(format!(
            "plugin {plugin}: {} replied with apiVersion {other:?}, but this controller speaks \
             {API_VERSION:?}; use a plugin version that speaks {API_VERSION}",
            verb
        ))),
        None => Err(CloudError::invalid(format!(
            "plugin {plugin}: {}'s reply has no apiVersion; add \"apiVersion\": \"{API_VERSION}\" \
             to every reply",
            verb
        ))),
    }
}

/// The reply's error as a [`CloudError`], if it has one.
pub fn reply_error(plugin: &str, verb: &str, reply: &Reply) -> Option<CloudError> {
    let error = reply.error.as_ref()?;
    Some(wire_error(&format!("plugin {plugin}: {verb}"), verb, error))
}

/// A plugin's error as a [`CloudError`]; `call` names the plugin and the call
/// (`plugin p: apply, change 2 of 5 (create 10.244.1.0/24)`) for the message.
fn wire_error(call: &str, verb: &str, error: &WireError) -> CloudError {
    let message = if error.message.is_empty() {
        format!("{call} failed: {}", error.kind)
    } else {
        format!("{call} failed: {}: {}", error.kind, error.message)
    };
    match kind_of(error) {
        Some(kind) if error.kind == UNKNOWN_VERB && verb == Verb::Apply.as_str() => {
            CloudError::new(
                kind,
                format!(
                    "{message} (the plugin does not implement apply, but its describe declares a                      batchSize above 1; implement apply, or declare batchSize 1 (or leave it                      out) for one create or delete per call)"
                ),
            )
        }
        Some(kind) if error.kind == UNKNOWN_VERB => CloudError::new(
            kind,
            format!(
                "{message} (the plugin does not implement {verb}; a plugin must implement list, \
                 create and delete of {API_VERSION})"
            ),
        ),
        Some(kind) => CloudError::new(kind, message),
        None => {
            let known: Vec<&str> = ERROR_KINDS.iter().map(|(k, _)| *k).collect();
            CloudError::ambiguous(format!(
                "{message} (the error kind {:?} is unknown, so the call is treated as ambiguous; \
                 use one of {})",
                error.kind,
                known.join(", ")
            ))
        }
    }
}

/// The outcomes of an `apply` reply for `changes`, one per change in order, each
/// mapped as the change's own `create` or `delete` reply would be. A reply without
/// exactly one outcome per change is an error for the whole call: which changes took
/// effect is then unknown, so it is ambiguous.
pub fn outcomes_of(
    plugin: &str,
    changes: &[RouteChange],
    reply: Reply,
) -> Result<Vec<Result<(), CloudError>>, CloudError> {
    let fix = "reply one outcome per change, in the order of the request's changes: {} for a \
               change done, {\"error\": {\"kind\": …, \"message\": …}} for one that failed";
    let Some(outcomes) = reply.outcomes else {
        return Err(CloudError::ambiguous(format!(
            "plugin {plugin}: apply's reply has no \"outcomes\"; {fix}"
        )));
    };
    if outcomes.len() != changes.len() {
        return Err(CloudError::ambiguous(format!(
            "plugin {plugin}: apply of {} change(s) replied {} outcome(s), so which changes \
             took effect is unknown; {fix}",
            changes.len(),
            outcomes.len()
        )));
    }
    let total = changes.len();
    Ok(changes
        .iter()
        .zip(outcomes)
        .enumerate()
        .map(|(i, (change, outcome))| match outcome.error {
            None => Ok(()),
            Some(error) => {
                let action = match change {
                    RouteChange::Create { .. } => Verb::Create,
                    RouteChange::Delete { .. } => Verb::Delete,
                };
                let call = format!(
                    "plugin {plugin}: apply, change {} of {total} ({} {})",
                    i + 1,
                    action.as_str(),
                    change.route().destination_cidr
                );
                Err(wire_error(&call, action.as_str(), &error))
            }
        })
        .collect())
}

/// The routes of a `list` reply, each checked: a route whose destination is not a
/// CIDR is an error naming it (a list the controller cannot read whole must not be
/// trusted, or it would miss a route).
pub fn routes_of(plugin: &str, reply: Reply) -> Result<Vec<Route>, CloudError> {
    let Some(routes) = reply.routes else {
        return Err(CloudError::ambiguous(format!(
            "plugin {plugin}: list's reply has no \"routes\"; reply {{\"apiVersion\": \
             \"{API_VERSION}\", \"routes\": []}} for an empty table"
        )));
    };
    routes
        .into_iter()
        .map(|r| {
            Cidr::parse(&r.destination_cidr).map_err(|e| {
                CloudError::ambiguous(format!(
                    "plugin {plugin}: list returned a route whose destinationCIDR {:?} is not a \
                     CIDR ({e}); report destinations such as 10.244.1.0/24",
                    r.destination_cidr
                ))
            })?;
            Ok(Route {
                name: r.name,
                target_node: r.target_node,
                target_node_addresses: r
                    .target_addresses
                    .iter()
                    .map(|a| NodeAddress::new(&a.kind, &a.address))
                    .collect(),
                destination_cidr: r.destination_cidr,
                blackhole: r.blackhole,
                enable_node_addresses: false,
            })
        })
        .collect()
}

/// At most `max` characters of `text`, for error messages.
pub fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_carry_the_version_the_verb_and_the_route() {
        let route = Route {
            destination_cidr: "10.244.1.0/24".into(),
            ..Route::default()
        };
        let target = RouteTarget {
            node_name: "node-a".into(),
            provider_id: None,
            addresses: vec![NodeAddress::internal_ip("10.0.0.2")],
        };
        let json = Request::create("kubernetes", "uid-1", &route, &target).to_json();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["apiVersion"], API_VERSION);
        assert_eq!(v["verb"], "create");
        assert_eq!(v["clusterName"], "kubernetes");
        assert_eq!(v["route"]["destinationCIDR"], "10.244.1.0/24");
        assert_eq!(v["route"]["nameHint"], "uid-1");
        assert_eq!(v["route"]["targetNode"], "node-a");
        assert_eq!(v["route"]["targetAddresses"][0]["type"], "InternalIP");
        assert_eq!(v["route"]["targetAddresses"][0]["address"], "10.0.0.2");
        let list = Request::new(Verb::List, "c").to_json();
        assert!(!list.contains("route\""), "{list}");
    }

    #[test]
    fn garbage_a_wrong_version_or_no_version_are_errors_naming_the_plugin_and_the_fix() {
        let e = parse_reply("p", "list", b"hello").unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Ambiguous);
        assert!(
            e.message.contains("plugin p") && e.message.contains("stderr"),
            "{e}"
        );
        let e = parse_reply("p", "list", b"").unwrap_err();
        assert!(e.message.contains("printed nothing"), "{e}");
        let e = parse_reply("p", "list", br#"{"apiVersion":"x/v9"}"#).unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Invalid);
        assert!(
            e.message.contains("x/v9") && e.message.contains(API_VERSION),
            "{e}"
        );
        let e = parse_reply("p", "list", br#"{"routes":[]}"#).unwrap_err();
        assert!(e.message.contains("no apiVersion"), "{e}");
    }

    #[test]
    fn error_kinds_and_exit_codes_map_to_cloud_error_kinds() {
        let reply = parse_reply(
            "p",
            "delete",
            br#"{"apiVersion":"route-controller.plugin/v1","error":{"kind":"NotFound","message":"gone"}}"#,
        )
        .unwrap();
        let e = reply_error("p", "delete", &reply).unwrap();
        assert_eq!(e.kind, CloudErrorKind::NotFound);
        assert!(e.message.contains("gone"));
        let retry = WireError {
            kind: "Retry".into(),
            retry_after_seconds: Some(2.5),
            ..WireError::default()
        };
        assert_eq!(
            kind_of(&retry),
            Some(CloudErrorKind::Retry {
                after: Some(Duration::from_millis(2500))
            })
        );
        let odd = Reply {
            error: Some(WireError {
                kind: "Oops".into(),
                ..WireError::default()
            }),
            ..Reply::default()
        };
        let e = reply_error("p", "create", &odd).unwrap();
        assert_eq!(e.kind, CloudErrorKind::Ambiguous);
        assert!(
            e.message.contains("Oops") && e.message.contains("NotFound"),
            "{e}"
        );
        let unknown = Reply {
            error: Some(WireError {
                kind: UNKNOWN_VERB.into(),
                ..WireError::default()
            }),
            ..Reply::default()
        };
        let e = reply_error("p", "delete", &unknown).unwrap();
        assert_eq!(e.kind, CloudErrorKind::Invalid);
        assert!(
            e.message.contains("must implement list, create and delete"),
            "{e}"
        );
        assert_eq!(kind_of_exit_code(3), CloudErrorKind::NotFound);
        assert_eq!(kind_of_exit_code(9), CloudErrorKind::TableFull);
        assert_eq!(kind_of_exit_code(1), CloudErrorKind::Ambiguous);
        assert_eq!(kind_of_exit_code(137), CloudErrorKind::Ambiguous);
    }

    #[test]
    fn a_list_with_a_destination_that_is_no_cidr_is_not_trusted() {
        let reply: Reply = serde_json::from_str(
            r#"{"apiVersion":"route-controller.plugin/v1","routes":[{"destinationCIDR":"10.1.0.0/16","targetNode":"a"},{"destinationCIDR":"nope"}]}"#,
        )
        .unwrap();
        let e = routes_of("p", reply).unwrap_err();
        assert!(e.message.contains("\"nope\""), "{e}");
        let reply: Reply = serde_json::from_str(
            r#"{"apiVersion":"route-controller.plugin/v1","routes":[{"destinationCIDR":"10.1.0.0/16","targetNode":"a","extra":1}]}"#,
        )
        .unwrap();
        let routes = routes_of("p", reply).unwrap();
        assert_eq!(routes[0].target_node, "a");
    }

    fn changes() -> Vec<RouteChange> {
        vec![
            RouteChange::Create {
                route: Route {
                    destination_cidr: "10.244.1.0/24".into(),
                    ..Route::default()
                },
                name_hint: "uid-1".into(),
                target: RouteTarget {
                    node_name: "node-a".into(),
                    provider_id: None,
                    addresses: vec![NodeAddress::internal_ip("10.0.0.2")],
                },
            },
            RouteChange::Delete {
                route: Route {
                    name: "table 100 10.244.2.0/24".into(),
                    destination_cidr: "10.244.2.0/24".into(),
                    target_node: "node-b".into(),
                    target_node_addresses: vec![NodeAddress::internal_ip("10.0.0.3")],
                    ..Route::default()
                },
            },
        ]
    }

    #[test]
    fn an_apply_carries_each_change_as_its_create_or_delete_would_in_order() {
        let changes = changes();
        let json = Request::apply("kubernetes", &changes).to_json();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["apiVersion"], API_VERSION);
        assert_eq!(v["verb"], "apply");
        assert_eq!(v["clusterName"], "kubernetes");
        assert!(v.get("route").is_none(), "{json}");
        let RouteChange::Create {
            route,
            name_hint,
            target,
        } = &changes[0]
        else {
            panic!("the first change is a create")
        };
        let create: serde_json::Value = serde_json::from_str(
            &Request::create("kubernetes", name_hint, route, target).to_json(),
        )
        .unwrap();
        let delete: serde_json::Value =
            serde_json::from_str(&Request::delete("kubernetes", changes[1].route()).to_json())
                .unwrap();
        assert_eq!(v["changes"][0]["action"], "create");
        assert_eq!(v["changes"][0]["route"], create["route"]);
        assert_eq!(v["changes"][0]["route"]["nameHint"], "uid-1");
        assert_eq!(v["changes"][0]["route"]["targetNode"], "node-a");
        assert_eq!(v["changes"][1]["action"], "delete");
        assert_eq!(v["changes"][1]["route"], delete["route"]);
        assert_eq!(v["changes"][1]["route"]["name"], "table 100 10.244.2.0/24");
        assert_eq!(v["changes"].as_array().map(Vec::len), Some(2));
        let list = Request::new(Verb::List, "c").to_json();
        assert!(!list.contains("changes"), "{list}");
    }

    #[test]
    fn apply_outcomes_map_in_order_with_the_kinds_of_single_calls() {
        let reply = parse_reply(
            "p",
            "apply",
            br#"{"apiVersion":"route-controller.plugin/v1","outcomes":[{},{"error":{"kind":"NotFound","message":"gone"}}]}"#,
        )
        .unwrap();
        let outcomes = outcomes_of("p", &changes(), reply).unwrap();
        assert_eq!(outcomes.len(), 2);
        assert!(outcomes[0].is_ok(), "{outcomes:?}");
        let e = outcomes[1].as_ref().unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::NotFound);
        assert!(
            e.message
                .contains("plugin p: apply, change 2 of 2 (delete 10.244.2.0/24)")
                && e.message.contains("gone"),
            "{e}"
        );
        let reply = parse_reply(
            "p",
            "apply",
            br#"{"apiVersion":"route-controller.plugin/v1","outcomes":[{"error":{"kind":"Oops"}},{}]}"#,
        )
        .unwrap();
        let outcomes = outcomes_of("p", &changes(), reply).unwrap();
        let e = outcomes[0].as_ref().unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Ambiguous, "an unknown kind");
        assert!(outcomes[1].is_ok());
    }

    #[test]
    fn an_apply_reply_with_the_wrong_number_of_outcomes_is_ambiguous_naming_the_fix() {
        for body in [
            &br#"{"apiVersion":"route-controller.plugin/v1","outcomes":[{}]}"#[..],
            br#"{"apiVersion":"route-controller.plugin/v1","outcomes":[{},{},{}]}"#,
        ] {
            let reply = parse_reply("p", "apply", body).unwrap();
            let e = outcomes_of("p", &changes(), reply).unwrap_err();
            assert_eq!(e.kind, CloudErrorKind::Ambiguous);
            assert!(
                e.message.contains("plugin p: apply of 2 change(s) replied")
                    && e.message.contains("one outcome per change, in the order"),
                "{e}"
            );
        }
        let reply = parse_reply(
            "p",
            "apply",
            br#"{"apiVersion":"route-controller.plugin/v1"}"#,
        )
        .unwrap();
        let e = outcomes_of("p", &changes(), reply).unwrap_err();
        assert_eq!(e.kind, CloudErrorKind::Ambiguous);
        assert!(e.message.contains("no \"outcomes\""), "{e}");
    }

    #[test]
    fn apply_refused_as_an_unknown_verb_names_batch_size_as_the_fix() {
        let reply = Reply {
            error: Some(WireError {
                kind: UNKNOWN_VERB.into(),
                ..WireError::default()
            }),
            ..Reply::default()
        };
        let e = reply_error("p", "apply", &reply).unwrap();
        assert_eq!(e.kind, CloudErrorKind::Invalid);
        assert!(
            e.message
                .contains("implement apply, or declare batchSize 1"),
            "{e}"
        );
    }
}
