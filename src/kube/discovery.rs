//! The start-up check that the API server serves the APIs this run needs.
//!
//! An API server of another version, or one with an API group switched off
//! (`--runtime-config=coordination.k8s.io/v1=false`, a review API that is not
//! served), would otherwise show up as a 404 in a retry loop: leader election
//! retrying its Lease for ever, every scrape of the secure port failing. Asking
//! discovery (`GET /apis/GROUP/VERSION`) once at start turns that into one error
//! that names the API, what needs it and the fix.
//!
//! Only a definite answer counts: a 404 for the group version, or a list without
//! the resource. An API server that cannot be asked (down, 5xx, 403) is not
//! judged here; the threads that use the APIs wait for it as they always do.

use std::time::Duration;

use serde::Deserialize;

use super::{ApiErrorKind, Client};

/// How long one discovery request may take; a server that is slow to answer is
/// not judged, so this only bounds the delay of the start.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);

/// An API resource that a part of the controller uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequiredApi {
    /// `GROUP/VERSION`, e.g. `coordination.k8s.io/v1`.
    pub group_version: &'static str,
    /// The resource's plural name, e.g. `leases`.
    pub resource: &'static str,
    /// What needs it, e.g. `leader election (--leader-elect)`.
    pub needed_by: &'static str,
    /// How to do without it or get it, e.g. `run with --leader-elect=false`.
    pub fix: &'static str,
}

/// The Lease API, for leader election.
pub const LEASES: RequiredApi = RequiredApi {
    group_version: "coordination.k8s.io/v1",
    resource: "leases",
    needed_by: "leader election (--leader-elect, on by default)",
    fix: "serve coordination.k8s.io/v1 (GA since Kubernetes 1.14) or run a single replica \
          with --leader-elect=false",
};

/// TokenReview, for the secure port's authentication.
pub const TOKEN_REVIEWS: RequiredApi = RequiredApi {
    group_version: "authentication.k8s.io/v1",
    resource: "tokenreviews",
    needed_by: "the secure port's authentication (--secure-port)",
    fix: "serve authentication.k8s.io/v1, point --authentication-kubeconfig at an API \
          server that does, or serve metrics without it (--secure-port=0 --metrics-bind-address)",
};

/// SubjectAccessReview, for the secure port's authorization.
pub const SUBJECT_ACCESS_REVIEWS: RequiredApi = RequiredApi {
    group_version: "authorization.k8s.io/v1",
    resource: "subjectaccessreviews",
    needed_by: "the secure port's authorization (--secure-port)",
    fix: "serve authorization.k8s.io/v1, point --authorization-kubeconfig at an API \
          server that does, or serve metrics without it (--secure-port=0 --metrics-bind-address)",
};

#[derive(Deserialize)]
struct ResourceList {
    #[serde(default)]
    resources: Vec<Resource>,
}

#[derive(Deserialize)]
struct Resource {
    name: String,
}

/// The path of the discovery document of `group_version` (`/api/v1` for the core
/// group).
fn discovery_path(group_version: &str) -> String {
    match group_version {
        "v1" => "/api/v1".to_string(),
        gv => format!("/apis/{gv}"),
    }
}

/// Asks `client`'s API server whether it serves `api`. `Err` only when it definitely
/// does not, with the message to stop on; a server that cannot be asked passes.
pub fn check(client: &Client, api: &RequiredApi) -> Result<(), String> {
    let path = discovery_path(api.group_version);
    match client.get_json_timeout::<ResourceList>(&path, CHECK_TIMEOUT) {
        Ok(list) if list.resources.iter().any(|r| r.name == api.resource) => Ok(()),
        Ok(list) => Err(format!(
            "the API server at {} serves {} without {} (it has: {}), which {} needs; {}",
            client.server(),
            api.group_version,
            api.resource,
            list.resources
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            api.needed_by,
            api.fix
        )),
        Err(e) if e.is(ApiErrorKind::NotFound) => Err(format!(
            "the API server at {} does not serve {} (GET {path} answered 404), which {} \
             needs for its {}; {}",
            client.server(),
            api.group_version,
            api.needed_by,
            api.resource,
            api.fix
        )),
        Err(e) => {
            log::debug!(
                "could not check that the API server serves {}: {e}; going on",
                api.group_version
            );
            Ok(())
        }
    }
}

/// [`check`] for each of `apis`, stopping at the first that is missing.
pub fn check_all(client: &Client, apis: &[RequiredApi]) -> Result<(), String> {
    apis.iter().try_for_each(|api| check(client, api))
}
