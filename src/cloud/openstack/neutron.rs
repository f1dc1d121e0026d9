//! The HTTP side of the OpenStack provider: a blocking Neutron v2.0 client that takes
//! its token and endpoint from [`Keystone`], passes the lease fence before every
//! request, counts every request ([`Meter`]) and turns failures into [`CloudError`]s
//! that say what the controller should do.
//!
//! Whether a failed request may have taken effect decides between "retry" and
//! "ambiguous": a GET changes nothing; a PUT whose reply was lost may have. A 401 is
//! answered once by a new token and the same request; a second 401 is a refusal.
//! This module never logs or formats a token.

use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::keystone::Keystone;
use crate::fence::Fence;
use crate::metrics::Metrics;
use crate::provider::{CloudError, CloudErrorKind, Meter};

const MAX_REPLY_BYTES: u64 = 32 << 20;
/// `NetworkUnavailable` reason: the node's port holds as many allowed address pairs
/// as Neutron's `max_allowed_address_pair`, so its pod CIDR cannot be added.
pub const PAIRS_EXHAUSTED: &str = "AllowedAddressPairsExhausted";
/// How long to send nothing after a 429 without `Retry-After`.
const THROTTLE_PAUSE: Duration = Duration::from_secs(5);

/// A route of a router, as Neutron spells it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct RouteJson {
    pub destination: String,
    pub nexthop: String,
}

/// A router, the fields we use.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Router {
    pub id: String,
    pub routes: Vec<RouteJson>,
    pub revision_number: u64,
}

#[derive(Deserialize)]
struct RouterReply {
    router: Router,
}

/// A port, the fields we use.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Port {
    pub id: String,
    pub network_id: String,
    pub device_id: String,
    pub device_owner: String,
    pub fixed_ips: Vec<FixedIp>,
    pub allowed_address_pairs: Vec<AddressPair>,
    /// The port-security extension's switch; `Some(false)`: Neutron checks no
    /// source address on this port, so it needs no pairs (and refuses them).
    pub port_security_enabled: Option<bool>,
    /// Bumped by Neutron on every change; a write guarded by `If-Match` with it
    /// fails (412) if anyone changed the port since it was read.
    pub revision_number: u64,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct FixedIp {
    pub ip_address: String,
    pub subnet_id: String,
}

/// A subnet, the fields we use.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Subnet {
    pub id: String,
    pub cidr: String,
}

/// An allowed address pair; `mac_address` is kept as read so that a write keeps it.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
pub(super) struct AddressPair {
    pub ip_address: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
}

#[derive(Deserialize)]
struct PortReply {
    port: Port,
}

#[derive(Deserialize)]
struct ExtensionsReply {
    extensions: Vec<Extension>,
}

#[derive(Deserialize)]
struct Extension {
    alias: String,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "PascalCase")]
struct ErrorEnvelope {
    neutron_error: ErrorBody,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct ErrorBody {
    #[serde(rename = "type")]
    kind: String,
    message: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Put,
}

/// The Neutron client, shared by the provider's threads.
pub(super) struct Neutron {
    agent: ureq::Agent,
    keystone: Keystone,
    /// Overrides the catalog's endpoint.
    endpoint: Option<String>,
    metrics: Option<Arc<Metrics>>,
    fence: Fence,
    request_timeout: Duration,
}

impl std::fmt::Debug for Neutron {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Neutron")
            .field("keystone", &self.keystone)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// The pages one list may take: Neutron's `pagination_max_limit` is rarely below 100,
/// so 10 000 pages hold a million items; a server that links on past it is not trusted.
const MAX_PAGES: usize = 10_000;

/// The agent both clients share: statuses are read, not turned into errors.
pub(super) fn agent(
    request_timeout: Duration,
    trust: &crate::Trust,
    proxying: &crate::Proxying,
) -> ureq::Agent {
    crate::http::agent_config(trust, proxying)
        .http_status_as_error(false)
        .timeout_global(Some(request_timeout))
        .timeout_connect(Some(request_timeout.min(Duration::from_secs(5))))
        .max_idle_age(Duration::from_secs(5))
        .user_agent(concat!("route-controller/", env!("CARGO_PKG_VERSION")))
        .build()
        .into()
}

impl Neutron {
    pub(super) fn new(
        agent: ureq::Agent,
        keystone: Keystone,
        endpoint: Option<String>,
        request_timeout: Duration,
        metrics: Option<Arc<Metrics>>,
    ) -> Neutron {
        Neutron {
            agent,
            keystone,
            endpoint,
            metrics,
            fence: Fence::open(),
            request_timeout,
        }
    }

    pub(super) fn set_fence(&mut self, fence: Fence) {
        fence.covers(self.request_timeout);
        self.fence = fence;
    }

    /// The aliases of Neutron's extensions.
    pub(super) fn extensions(&self) -> Result<Vec<String>, CloudError> {
        let reply: ExtensionsReply = self.exchange(
            Method::Get,
            "/v2.0/extensions",
            None,
            None,
            "extensions.list",
        )?;
        Ok(reply.extensions.into_iter().map(|e| e.alias).collect())
    }

    pub(super) fn router(&self, id: &str) -> Result<Router, CloudError> {
        let r: RouterReply = self.exchange(
            Method::Get,
            &format!("/v2.0/routers/{id}"),
            None,
            None,
            "routers.get",
        )?;
        Ok(r.router)
    }

    /// `add_extraroutes` (`add`) or `remove_extraroutes`: one request for every route.
    pub(super) fn extraroutes(
        &self,
        id: &str,
        add: bool,
        routes: &[RouteJson],
    ) -> Result<Router, CloudError> {
        let (action, endpoint) = match add {
            true => ("add_extraroutes", "routers.add_extraroutes"),
            false => ("remove_extraroutes", "routers.remove_extraroutes"),
        };
        let body = serde_json::json!({"router": {"routes": routes}});
        let r: RouterReply = self.exchange(
            Method::Put,
            &format!("/v2.0/routers/{id}/{action}"),
            Some(&body),
            None,
            endpoint,
        )?;
        Ok(r.router)
    }

    /// The whole route list, only if the router is still at `revision`
    /// (`If-Match: revision_number=N`; 412 otherwise, as [`CloudErrorKind::Conflict`]).
    pub(super) fn set_routes(
        &self,
        id: &str,
        routes: &[RouteJson],
        revision: u64,
    ) -> Result<Router, CloudError> {
        let body = serde_json::json!({"router": {"routes": routes}});
        let r: RouterReply = self.exchange(
            Method::Put,
            &format!("/v2.0/routers/{id}"),
            Some(&body),
            Some(revision),
            "routers.update",
        )?;
        Ok(r.router)
    }

    /// Ports matching `query` (already encoded: `device_id=…`, `network_id=…`), every
    /// page of them.
    pub(super) fn ports(&self, query: &str) -> Result<Vec<Port>, CloudError> {
        self.list("ports", query, "ports.list")
    }

    /// The subnets `ids` (their CIDRs never change: Neutron refuses an update of one).
    pub(super) fn subnets(&self, ids: &[&str]) -> Result<Vec<Subnet>, CloudError> {
        let query: Vec<String> = ids.iter().map(|id| format!("id={}", encode(id))).collect();
        self.list("subnets", &query.join("&"), "subnets.list")
    }

    /// Every page of a list (at most [`MAX_PAGES`]): with Neutron's `pagination_max_limit` set, a list stops at
    /// that many items and links the next page (`<kind>_links`, `rel=next`).
    fn list<T: DeserializeOwned>(
        &self,
        kind: &str,
        query: &str,
        endpoint: &'static str,
    ) -> Result<Vec<T>, CloudError> {
        let mut all = Vec::new();
        let mut path = format!("/v2.0/{kind}?{query}");
        // A server that links a page to one already read must not keep us here.
        let mut seen = std::collections::HashSet::new();
        loop {
            let page: serde_json::Value =
                self.exchange(Method::Get, &path, None, None, endpoint)?;
            let items = page.get(kind).cloned().unwrap_or_default();
            let items: Vec<T> = serde_json::from_value(items).map_err(|e| {
                CloudError::new(
                    CloudErrorKind::Retry { after: None },
                    format!("openstack: GET {path}: a reply without Neutron's {kind} ({e})"),
                )
            })?;
            let empty = items.is_empty();
            all.extend(items);
            match next_page(&page, &format!("{kind}_links")) {
                None => return Ok(all),
                Some(_) if empty => return Ok(all),
                Some(next) if seen.insert(next.clone()) && seen.len() <= MAX_PAGES => path = next,
                // A partial list must never pass for a whole one: what is on the pages
                // not read would look gone.
                Some(next) => {
                    return Err(CloudError::new(
                        CloudErrorKind::Retry { after: None },
                        format!(
                            "openstack: listing {kind}: the next page {next} was read already, \
                             or the list is longer than {MAX_PAGES} pages; the list is not \
                             trusted"
                        ),
                    ));
                }
            }
        }
    }

    /// The port as it is now.
    pub(super) fn port(&self, id: &str) -> Result<Port, CloudError> {
        let r: PortReply = self.exchange(
            Method::Get,
            &format!("/v2.0/ports/{id}"),
            None,
            None,
            "ports.get",
        )?;
        Ok(r.port)
    }

    /// The port's whole pair list (Neutron replaces it), only if the port is still at
    /// `revision` when one is given (412 otherwise, as [`CloudErrorKind::Conflict`]).
    pub(super) fn set_address_pairs(
        &self,
        port: &str,
        pairs: &[AddressPair],
        revision: Option<u64>,
    ) -> Result<Port, CloudError> {
        let body = serde_json::json!({"port": {"allowed_address_pairs": pairs}});
        let r: PortReply = self.exchange(
            Method::Put,
            &format!("/v2.0/ports/{port}"),
            Some(&body),
            revision,
            "ports.update",
        )?;
        Ok(r.port)
    }

    fn exchange<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<&serde_json::Value>,
        revision: Option<u64>,
        endpoint: &'static str,
    ) -> Result<T, CloudError> {
        let verb = if method == Method::Get { "GET" } else { "PUT" };
        let what = format!("openstack: {verb} {path}");
        let mut renewed = false;
        loop {
            let (token, catalog_url) = self.keystone.token()?;
            let base = self.endpoint.clone().unwrap_or(catalog_url);
            // Right before the request leaves: the lease may have been lost, also
            // between a port update and the router write of the same batch.
            self.fence
                .check()
                .map_err(|e| CloudError::new(e.kind, format!("{what}: {}", e.message)))?;
            let url = format!("{base}{path}");
            Meter::request();
            let sent = match method {
                Method::Get => self
                    .agent
                    .get(&url)
                    .header("Accept", "application/json")
                    .header("X-Auth-Token", token.expose())
                    .call(),
                Method::Put => {
                    let mut request = self
                        .agent
                        .put(&url)
                        .header("Accept", "application/json")
                        .header("X-Auth-Token", token.expose());
                    if let Some(n) = revision {
                        request = request.header("If-Match", format!("revision_number={n}"));
                    }
                    request
                        .content_type("application/json")
                        .send(body.map(|b| b.to_string()).unwrap_or_default().as_bytes())
                }
            };
            let mut response = match sent {
                Ok(r) => r,
                Err(e) => {
                    self.record(endpoint, None);
                    return Err(transport_error(&e, method, &what));
                }
            };
            let status = response.status().as_u16();
            self.record(endpoint, Some(status));
            let retry_after = response
                .headers()
                .get("Retry-After")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(|s| Duration::from_secs(s.min(600)));
            let bytes = response
                .body_mut()
                .with_config()
                .limit(MAX_REPLY_BYTES)
                .read_to_vec()
                .map_err(|e| transport_error(&e, method, &what))?;
            if status == 401 && !renewed {
                // Revoked or expired early: one new token, the same request.
                self.keystone.invalidate();
                renewed = true;
                continue;
            }
            if (200..300).contains(&status) {
                return serde_json::from_slice(&bytes).map_err(|e| {
                    let kind = match method {
                        Method::Get => CloudErrorKind::Retry { after: None },
                        Method::Put => CloudErrorKind::Ambiguous,
                    };
                    CloudError::new(
                        kind,
                        format!(
                            "{what}: HTTP {status} with a reply that is not Neutron's JSON ({e})"
                        ),
                    )
                });
            }
            let error = api_error(method, &what, status, &bytes, retry_after);
            if let CloudErrorKind::RateLimited { after } = error.kind {
                Meter::throttled(after);
            }
            return Err(error);
        }
    }

    fn record(&self, endpoint: &'static str, status: Option<u16>) {
        if let Some(m) = &self.metrics {
            m.cloud_api_request("openstack", endpoint, status);
        }
    }
}

fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

/// The path and query of a list's next page: the `href` of the `rel=next` link in
/// `key` (`ports_links`), which Neutron gives as a full URL of its own endpoint.
fn next_page(page: &serde_json::Value, key: &str) -> Option<String> {
    let href = page
        .get(key)?
        .as_array()?
        .iter()
        .find(|l| l.get("rel").and_then(|r| r.as_str()) == Some("next"))?
        .get("href")?
        .as_str()?;
    let at = href.find("/v2.0/")?;
    Some(href[at..].to_string())
}

/// A request that got no reply: one that never reached Neutron changed nothing.
fn transport_error(e: &ureq::Error, method: Method, what: &str) -> CloudError {
    let kind = if method == Method::Get || crate::http::certainly_unsent(e) {
        CloudErrorKind::Retry { after: None }
    } else {
        CloudErrorKind::Ambiguous
    };
    CloudError::new(
        kind,
        format!("{what}: no reply ({})", crate::http::describe(e)),
    )
}

/// The error of a non-2xx reply, by status and Neutron's error type.
fn api_error(
    method: Method,
    what: &str,
    status: u16,
    body: &[u8],
    retry_after: Option<Duration>,
) -> CloudError {
    let envelope: ErrorEnvelope = serde_json::from_slice(body).unwrap_or_default();
    let detail = match envelope.neutron_error.message.as_str() {
        "" => String::from_utf8_lossy(body)
            .chars()
            .take(200)
            .collect::<String>(),
        m => m.to_string(),
    };
    let kind_text = envelope.neutron_error.kind.as_str();
    // By neutron-lib's exception types of the router and port calls
    // (neutron_lib.exceptions.{extraroute,allowedaddresspairs,l3}, the revision
    // plugin's 412), then by status. Only RoutesExhausted is a full router; the other
    // "exceeds the maximum" (AllowedAddressPairExhausted) is the port's.
    let (kind, hint) = match (status, kind_text) {
        (429, _) => (
            CloudErrorKind::RateLimited {
                after: retry_after.unwrap_or(THROTTLE_PAUSE),
            },
            "",
        ),
        (_, "RoutesExhausted") => (
            CloudErrorKind::TableFull,
            "; the router holds max_routes routes: raise Neutron's max_routes and [Route] \
             max-routes",
        ),
        (_, "AllowedAddressPairExhausted") => (
            CloudErrorKind::Refused {
                reason: PAIRS_EXHAUSTED,
                lasting: false,
            },
            "; the node's port holds Neutron's max_allowed_address_pair pairs: raise \
             max_allowed_address_pair in neutron.conf, or free pairs on the port",
        ),
        (_, "InvalidRoutes") => (
            CloudErrorKind::Invalid,
            "; Neutron refuses the whole request when one next hop is not inside a subnet \
             attached to the router",
        ),
        (_, "OverQuota") => (
            CloudErrorKind::Invalid,
            "; the project's quota is used up: openstack quota show",
        ),
        // Port security went off between our read and our write: the re-read sees it.
        (_, "AddressPairAndPortSecurityRequired") => (CloudErrorKind::Conflict, ""),
        (401, _) => (
            CloudErrorKind::Invalid,
            "; Keystone's token was refused twice: check the credentials in cloud.conf",
        ),
        (403, _) => (
            CloudErrorKind::Invalid,
            "; the credentials lack a permission: the README's OpenStack section lists them",
        ),
        (404, _) => (CloudErrorKind::NotFound, ""),
        (409 | 412, _) => (CloudErrorKind::Conflict, ""),
        (400..=499, _) => (CloudErrorKind::Invalid, ""),
        _ if method == Method::Get => (CloudErrorKind::Retry { after: retry_after }, ""),
        _ => (CloudErrorKind::Ambiguous, ""),
    };
    let shown_type = if kind_text.is_empty() {
        String::new()
    } else {
        format!(" {kind_text}")
    };
    CloudError::new(
        kind,
        format!("{what}: HTTP {status}{shown_type}: {detail}{hint}"),
    )
}
