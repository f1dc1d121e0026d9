//! The HTTP side of the Alibaba Cloud provider: RPC-style calls (`POST /?Action's
//! parameters`, an empty body, V3-signed) to the VPC and ECS APIs. Every call passes
//! the lease fence first, is counted ([`Meter`], metrics by action) and fails as a
//! [`CloudError`] whose kind says what the controller should do, with the API's
//! `Code` kept for the provider's own decisions ([`Failure`]).
//!
//! Codes (VPC API reference, "Error codes" of each action): `TaskConflict`,
//! `IncorrectRouteEntryStatus`, `IncorrectStatus.*`, `SystemBusy` and
//! `OperationFailed.ConcurrentOperation` say the VPC is busy with
//! another change (it takes one batch at a time): a conflict, retried soon.
//! `Throttling.*` is the account's flow control: rate limited. `QuotaExceeded.*` is
//! a full route table. A call that got no reply, or a 5xx, may have been applied if
//! it was a write: ambiguous.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Deserialize;
use serde_json::Value;

use super::auth::Identity;
use super::sign;
use crate::fence::Fence;
use crate::metrics::Metrics;
use crate::provider::{CloudError, CloudErrorKind, Meter};

/// The VPC API's version.
pub const VPC_VERSION: &str = "2016-04-28";
/// The ECS API's version.
pub const ECS_VERSION: &str = "2014-05-26";
const MAX_REPLY_BYTES: u64 = 32 << 20;
/// How long to send nothing after `Throttling.*`: the API gives no `Retry-After`.
const THROTTLE_PAUSE: Duration = Duration::from_secs(2);

/// One API: where it is and which version it speaks.
#[derive(Clone, Debug)]
pub(super) struct Service {
    pub url: String,
    pub version: &'static str,
}

/// A failed call: the API's code (empty without a reply) and what to do.
#[derive(Clone, Debug)]
pub(super) struct Failure {
    pub code: String,
    pub error: CloudError,
    /// The API answered that the identity may not do this (HTTP 403, `NoPermission*`,
    /// `Forbidden*`): a refusal that stays until a policy changes, unlike a failure
    /// of the moment.
    pub denied: bool,
}

impl From<Failure> for CloudError {
    fn from(f: Failure) -> CloudError {
        f.error
    }
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "PascalCase")]
struct ErrorBody {
    code: String,
    message: String,
    request_id: String,
}

/// The client, shared by the provider's threads.
pub(super) struct Api {
    agent: ureq::Agent,
    pub identity: Identity,
    metrics: Option<Arc<Metrics>>,
    fence: Fence,
    request_timeout: Duration,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api")
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

/// The agent of the APIs and STS: statuses are read, not turned into errors.
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

/// The agent of the instance metadata service: never proxied, a short timeout.
pub(super) fn metadata_agent() -> ureq::Agent {
    crate::http::metadata_config()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(5)))
        .build()
        .into()
}

impl Api {
    pub(super) fn new(
        agent: ureq::Agent,
        identity: Identity,
        metrics: Option<Arc<Metrics>>,
        request_timeout: Duration,
    ) -> Api {
        Api {
            agent,
            identity,
            metrics,
            fence: Fence::open(),
            request_timeout,
        }
    }

    pub(super) fn set_fence(&mut self, fence: Fence) {
        fence.covers(self.request_timeout);
        self.fence = fence;
    }

    /// Calls `action` of `service` with `params`; `write`: it changes something, so
    /// a lost reply is ambiguous. An expired STS token is answered once by new keys.
    pub(super) fn call(
        &self,
        service: &Service,
        action: &'static str,
        params: &[(String, String)],
        write: bool,
    ) -> Result<Value, Failure> {
        let what = format!("alibaba: {action}");
        let mut renewed = false;
        loop {
            // The fence first: a replica that lost its lease fetches no keys either.
            self.fence.check().map_err(|e| Failure {
                code: String::new(),
                denied: false,
                error: CloudError::new(e.kind, format!("{what}: {}", e.message)),
            })?;
            let keys = self.identity.keys().map_err(|error| Failure {
                code: String::new(),
                denied: false,
                error,
            })?;
            let host = service
                .url
                .split_once("://")
                .map_or(service.url.as_str(), |(_, rest)| rest)
                .trim_end_matches('/')
                .to_string();
            let empty = crate::signing::sha256_hex(b"");
            let nonce = format!("{:032x}", rand::random::<u128>());
            let mut headers = vec![
                ("host", host),
                ("x-acs-action", action.to_string()),
                ("x-acs-version", service.version.to_string()),
                ("x-acs-date", sign::acs_date(SystemTime::now())),
                ("x-acs-signature-nonce", nonce),
                ("x-acs-content-sha256", empty.clone()),
            ];
            if let Some(token) = &keys.security_token {
                headers.push(("x-acs-security-token", token.expose().to_string()));
            }
            let request = sign::Request {
                method: "POST",
                path: "/",
                query: params,
                headers: &headers,
            };
            let authorization =
                sign::authorization(&request, &empty, &keys.id, keys.secret.expose());
            let url = format!("{}/?{}", service.url, sign::canonical_query(params));
            let mut builder = self.agent.post(&url).header("Accept", "application/json");
            for (name, value) in headers.iter().filter(|(n, _)| *n != "host") {
                builder = builder.header(*name, value.as_str());
            }
            Meter::request();
            let sent = builder.header("Authorization", authorization).send_empty();
            let mut reply = match sent {
                Ok(r) => r,
                Err(e) => {
                    self.record(action, None);
                    let kind = if !write || crate::http::certainly_unsent(&e) {
                        CloudErrorKind::Retry { after: None }
                    } else {
                        CloudErrorKind::Ambiguous
                    };
                    return Err(Failure {
                        code: String::new(),
                        denied: false,
                        error: CloudError::new(
                            kind,
                            format!("{what}: no reply ({})", crate::http::describe(&e)),
                        ),
                    });
                }
            };
            let status = reply.status().as_u16();
            self.record(action, Some(status));
            let body = reply
                .body_mut()
                .with_config()
                .limit(MAX_REPLY_BYTES)
                .read_to_vec()
                .map_err(|e| Failure {
                    code: String::new(),
                    denied: false,
                    error: CloudError::new(
                        if write {
                            CloudErrorKind::Ambiguous
                        } else {
                            CloudErrorKind::Retry { after: None }
                        },
                        format!("{what}: reply cut short ({})", crate::http::describe(&e)),
                    ),
                })?;
            if (200..300).contains(&status) {
                return serde_json::from_slice(&body).map_err(|e| Failure {
                    code: String::new(),
                    denied: false,
                    error: CloudError::new(
                        if write {
                            CloudErrorKind::Ambiguous
                        } else {
                            CloudErrorKind::Retry { after: None }
                        },
                        format!("{what}: HTTP {status} with a reply that is not JSON ({e})"),
                    ),
                });
            }
            let error: ErrorBody = serde_json::from_slice(&body).unwrap_or_default();
            if error.code.starts_with("InvalidSecurityToken") && !renewed {
                // Revoked or expired early: new keys, the same request.
                self.identity.invalidate();
                renewed = true;
                continue;
            }
            let failure = classify(&what, status, error, write);
            if let CloudErrorKind::RateLimited { after } = failure.error.kind {
                Meter::throttled(after);
            }
            return Err(failure);
        }
    }

    fn record(&self, action: &'static str, status: Option<u16>) {
        if let Some(m) = &self.metrics {
            m.cloud_api_request("alibaba", action, status);
        }
    }
}

/// Whether `code` says the VPC is busy with another change.
pub(super) fn is_busy(code: &str) -> bool {
    matches!(
        code,
        "TaskConflict"
            | "IncorrectRouteEntryStatus"
            | "OperationConflict"
            | "SystemBusy"
            | "OperationFailed.ConcurrentOperation"
    ) || code.starts_with("IncorrectStatus")
        || code.starts_with("IncorrectVpcStatus")
        || code.starts_with("OperationFailed.LastTokenProcessing")
}

/// The kind of a code, also for an entry the API refused in a batch reply
/// (`FailedRouteEntries[].FailedCode`); `None`: no rule of ours, the caller decides.
pub(super) fn kind_of(code: &str) -> Option<CloudErrorKind> {
    // VPC_ROUTE_ENTRY_STATUS_ERROR: the entry is not Available yet (a batch of
    // another writer is still at it); the peer's name for it.
    if is_busy(code) || code == "VPC_ROUTE_ENTRY_STATUS_ERROR" {
        return Some(CloudErrorKind::Conflict);
    }
    if code.starts_with("Throttling") {
        return Some(CloudErrorKind::RateLimited {
            after: THROTTLE_PAUSE,
        });
    }
    if code.starts_with("QuotaExceeded") || code == "QuotaExceeded" {
        return Some(CloudErrorKind::TableFull);
    }
    match code {
        "InvalidRouteEntry.NotFound"
        | "InvalidRouteEntryId.NotFound"
        | "VPC_ROUTER_ENTRY_NOT_EXIST"
        | "InvalidRouteEntryNotFound" => Some(CloudErrorKind::NotFound),
        "InvalidCIDRBlock.Duplicate"
        | "RouterEntryConflict.Duplicated"
        | "VPC_ROUTE_ENTRY_CIDR_BLOCK_DUPLICATE"
        | "InvalidDestinationCidrBlock.Duplicate" => Some(CloudErrorKind::AlreadyExists),
        _ => None,
    }
}

fn classify(what: &str, status: u16, error: ErrorBody, write: bool) -> Failure {
    let code = error.code;
    let request = if error.request_id.is_empty() {
        String::new()
    } else {
        format!(" (RequestId {})", error.request_id)
    };
    let message: String = error.message.chars().take(300).collect();
    let (kind, hint) = match kind_of(&code) {
        Some(CloudErrorKind::TableFull) => (
            CloudErrorKind::TableFull,
            "; the route table holds its quota of custom entries: raise \
             vpc_quota_route_entrys_num in Quota Center (read again at the next list), and \
             Global.routeEntryQuota if it is set",
        ),
        Some(kind) => (kind, ""),
        None if code.starts_with("InvalidAccessKeyId")
            || code.starts_with("SignatureDoesNotMatch")
            || code.starts_with("IncompleteSignature")
            || code.starts_with("InvalidSecurityToken") =>
        {
            (
                CloudErrorKind::Invalid,
                "; the keys were refused: check the AccessKey pair or the role (see \
                 check-config's identity line)",
            )
        }
        // `Forbbiden` as the API spells it in places.
        None if code.starts_with("Forbidden")
            || code.starts_with("Forbbiden")
            || code.starts_with("NoPermission") =>
        {
            (
                CloudErrorKind::Invalid,
                "; the identity lacks a permission: the README's Alibaba Cloud section lists \
             the RAM policy",
            )
        }
        None if status == 429 => (
            CloudErrorKind::RateLimited {
                after: THROTTLE_PAUSE,
            },
            "",
        ),
        None if status >= 500 || code == "ServiceUnavailable" || code == "InternalError" => {
            if write {
                (CloudErrorKind::Ambiguous, "")
            } else {
                (CloudErrorKind::Retry { after: None }, "")
            }
        }
        // A bare 404 (the table, the action, the region) is no entry's "gone":
        // only the codes of an entry above are.
        None if status == 404 => (CloudErrorKind::Invalid, ""),
        None => (CloudErrorKind::Invalid, ""),
    };
    let shown = if code.is_empty() {
        String::new()
    } else {
        format!(" {code}")
    };
    let denied = status == 403
        || code.starts_with("Forbidden")
        || code.starts_with("Forbbiden")
        || code.starts_with("NoPermission");
    Failure {
        error: CloudError::new(
            kind,
            format!("{what}: HTTP {status}{shown}: {message}{request}{hint}"),
        ),
        denied,
        code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Guards the codes the controller reacts to differently: busy VPC, flow
    /// control, a full table, gone and duplicate entries; a 5xx of a write is
    /// ambiguous, of a read a retry.
    #[test]
    fn codes_map_to_what_the_controller_does() {
        let fail = |status: u16, code: &str, write: bool| {
            classify(
                "alibaba: X",
                status,
                ErrorBody {
                    code: code.into(),
                    message: "m".into(),
                    request_id: "r".into(),
                },
                write,
            )
            .error
            .kind
        };
        for busy in [
            "TaskConflict",
            "SystemBusy",
            "OperationFailed.ConcurrentOperation",
        ] {
            assert_eq!(fail(400, busy, true), CloudErrorKind::Conflict, "{busy}");
        }
        assert_eq!(
            fail(400, "IncorrectRouteEntryStatus", true),
            CloudErrorKind::Conflict
        );
        assert_eq!(
            fail(400, "IncorrectStatus.VpcRouteEntry", true),
            CloudErrorKind::Conflict
        );
        assert!(matches!(
            fail(400, "Throttling.User", false),
            CloudErrorKind::RateLimited { .. }
        ));
        assert_eq!(
            fail(400, "QuotaExceeded.RouteEntryNum", true),
            CloudErrorKind::TableFull
        );
        assert_eq!(
            fail(404, "InvalidRouteEntry.NotFound", true),
            CloudErrorKind::NotFound
        );
        assert_eq!(
            fail(503, "ServiceUnavailable", true),
            CloudErrorKind::Ambiguous
        );
        assert!(matches!(
            fail(500, "InternalError", false),
            CloudErrorKind::Retry { .. }
        ));
        assert_eq!(fail(403, "Forbidden.RAM", false), CloudErrorKind::Invalid);
        assert_eq!(
            fail(404, "InvalidRouteTableId.NotFound", true),
            CloudErrorKind::Invalid
        );
        assert_eq!(fail(400, "InvalidParameter", true), CloudErrorKind::Invalid);
    }
}
