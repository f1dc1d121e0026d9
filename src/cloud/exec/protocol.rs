//! The plugin protocol, version [`API_VERSION`]: one JSON request on the plugin's
//! stdin, one JSON reply on its stdout, then the plugin exits.
//!
//! Requests carry `apiVersion`, `verb` (`describe`, `list`, `create`, `delete`),
//! `clusterName` and, for `create` and `delete`, the `route`. Replies carry the same
//! `apiVersion` and either what was asked (`routes`, `tables`; `budget`, `batchSize`)
//! or an `error` whose `kind` is one of [`ERROR_KINDS`]. A plugin that cannot write
//! JSON may exit with one of the codes in [`kind_of_exit_code`] instead.
//!
//! This module only builds requests and reads replies; it never runs anything, so it
//! is tested without processes. Unknown fields in a reply are ignored (a newer plugin
//! may say more); a missing or different `apiVersion` is an error, so a plugin written
//! for another version is never half understood.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::model::{Cidr, NodeAddress, Route};
use crate::provider::{CloudError, CloudErrorKind, RouteTarget};

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
}

impl Verb {
    /// The verb as it is sent.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Describe => "describe",
            Verb::List => "list",
            Verb::Create => "create",
            Verb::Delete => "delete",
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
            route: Some(WireRoute {
                name: String::new(),
                name_hint: name_hint.to_string(),
                destination_cidr: route.destination_cidr.clone(),
                target_node: target.node_name.clone(),
                target_addresses: wire_addresses(&target.addresses),
                blackhole: false,
            }),
            ..Request::new(Verb::Create, cluster_name)
        }
    }

    /// `delete` of `route`, as `list` returned it or as it was created.
    pub fn delete(cluster_name: &'a str, route: &Route) -> Request<'a> {
        Request {
            route: Some(WireRoute {
                name: route.name.clone(),
                name_hint: String::new(),
                destination_cidr: route.destination_cidr.clone(),
                target_node: route.target_node.clone(),
                target_addresses: wire_addresses(&route.target_node_addresses),
                blackhole: false,
            }),
            ..Request::new(Verb::Delete, cluster_name)
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
    /// `describe`: changes one request can carry (used once the core batches).
    pub batch_size: Option<u32>,
    /// Any verb: the call failed.
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
    let message = if error.message.is_empty() {
        format!("plugin {plugin}: {} failed: {}", verb, error.kind)
    } else {
        format!(
            "plugin {plugin}: {} failed: {}: {}",
            verb, error.kind, error.message
        )
    };
    Some(match kind_of(error) {
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
    })
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
}
