//! Fixtures of the end-to-end tests on the Kubernetes side: the controller's identity,
//! nodes as a kubelet and a cloud controller would leave them, and reading back what
//! the controller wrote (conditions, events).
//!
//! The identity is a ServiceAccount bound to exactly the rules of
//! [`route_controller::manifests::rbac_rules`], created from that data (not written
//! out by hand), with a kubeconfig holding the harness CA and a TokenRequest token.
//! Every end-to-end test runs the binary with it, which proves that the generated
//! RBAC is sufficient. [`Identity::provision_with`] lets a test remove a rule to show
//! that the tests fail when it is not.
//!
//! Include it after `kube_apiserver` (it uses `crate::kube_apiserver`):
//! `#[path = "support/e2e_cluster.rs"] mod e2e_cluster;`.

// Every test binary that includes this module uses only part of it.
#![allow(dead_code)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use base64::Engine as _;
use route_controller::manifests::{RbacRule, rbac_rules};
use serde_json::{Value, json};

use crate::kube_apiserver::KubeApiserver;

/// The ServiceAccount's name, as the manifests name it.
pub const SERVICE_ACCOUNT: &str = route_controller::manifests::NAME;
/// The Lease the controllers of a test elect with (in the test's namespace).
pub const LEASE: &str = "route-controller";
/// How long RBAC may take to reach the authorizer's cache.
const RBAC_PROPAGATION: Duration = Duration::from_secs(30);

/// Polls `probe` every 25 ms until it returns `Some`, or `None` after `timeout`.
pub fn poll_until<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = probe() {
            return Some(v);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

// --- the controller's identity -----------------------------------------------------

/// A ServiceAccount with the controller's RBAC and a kubeconfig for it.
#[derive(Debug)]
pub struct Identity {
    /// The ServiceAccount's namespace, which also holds the Lease.
    pub namespace: String,
    /// The rules bound to it.
    pub rules: Vec<RbacRule>,
    /// A kubeconfig with the harness CA and the ServiceAccount's token.
    pub kubeconfig: PathBuf,
    /// `system:serviceaccount:<namespace>:route-controller`.
    pub user: String,
}

impl Identity {
    /// The ServiceAccount `route-controller` in `namespace`, bound to exactly
    /// `rbac_rules(namespace, LEASE)`.
    pub fn provision(api: &KubeApiserver, namespace: &str) -> Identity {
        Identity::provision_with(api, namespace, |_| {})
    }

    /// As [`Identity::provision`], with the rules changed by `edit` first.
    pub fn provision_with(
        api: &KubeApiserver,
        namespace: &str,
        edit: impl FnOnce(&mut Vec<RbacRule>),
    ) -> Identity {
        let mut rules = rbac_rules(namespace, LEASE);
        edit(&mut rules);
        let token = api.service_account_token(namespace, SERVICE_ACCOUNT);
        let user = format!("system:serviceaccount:{namespace}:{SERVICE_ACCOUNT}");
        // Unique per identity, since events get a Role in the shared `default`.
        let role_name = format!("{SERVICE_ACCOUNT}-{namespace}");
        let subject =
            json!([{ "kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace }]);

        let cluster_rules: Vec<Value> = rules
            .iter()
            .filter(|r| r.namespace.is_none())
            .map(policy_rule)
            .collect();
        api.post_json(
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": { "name": role_name }, "rules": cluster_rules,
            }),
        );
        api.post_json(
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": { "name": role_name },
                "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name },
                "subjects": subject,
            }),
        );
        let mut namespaces: Vec<&str> = rules
            .iter()
            .filter_map(|r| r.namespace.as_deref())
            .collect();
        namespaces.dedup();
        namespaces.sort_unstable();
        namespaces.dedup();
        for ns in namespaces {
            api.ensure_namespace(ns);
            let here: Vec<Value> = rules
                .iter()
                .filter(|r| r.namespace.as_deref() == Some(ns))
                .map(policy_rule)
                .collect();
            api.post_json(
                &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"),
                &json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": { "name": role_name, "namespace": ns }, "rules": here,
                }),
            );
            api.post_json(
                &format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"),
                &json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": { "name": role_name, "namespace": ns },
                    "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role_name },
                    "subjects": subject,
                }),
            );
        }

        let identity = Identity {
            namespace: namespace.to_string(),
            kubeconfig: write_kubeconfig(api, namespace, &token),
            rules,
            user,
        };
        identity.wait_until_effective(api);
        identity
    }

    /// Waits until the authorizer allows every verb of every rule, so that the
    /// controller does not start against a cache that has not seen the bindings.
    fn wait_until_effective(&self, api: &KubeApiserver) {
        let checks: Vec<Access> = self.rules.iter().flat_map(Access::of_rule).collect();
        let pending = poll_until(RBAC_PROPAGATION, || {
            let denied: Vec<&Access> = checks.iter().filter(|c| !self.can(api, c)).collect();
            denied.is_empty().then_some(())
        });
        if pending.is_none() {
            let denied: Vec<String> = checks
                .iter()
                .filter(|c| !self.can(api, c))
                .map(|c| format!("{c:?}"))
                .collect();
            panic!(
                "{} is still denied {denied:?} {RBAC_PROPAGATION:?} after its bindings were created",
                self.user
            );
        }
    }

    /// Whether the authorizer allows `access` to this identity (a SubjectAccessReview).
    pub fn can(&self, api: &KubeApiserver, access: &Access) -> bool {
        let (resource, subresource) = match access.resource.split_once('/') {
            Some((r, s)) => (r, s),
            None => (access.resource.as_str(), ""),
        };
        let review = json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {
                "user": self.user,
                "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{}", self.namespace), "system:authenticated"],
                "resourceAttributes": {
                    "namespace": access.namespace.clone().unwrap_or_default(),
                    "verb": access.verb,
                    "group": access.group,
                    "resource": resource,
                    "subresource": subresource,
                    "name": access.name.clone().unwrap_or_default(),
                },
            },
        });
        let answer = api.post_json(
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            &review,
        );
        answer["status"]["allowed"] == true
    }

    /// `--kubeconfig` and the lease flags of a controller with this identity.
    pub fn flags(&self) -> Vec<String> {
        vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            format!("--leader-elect-resource-namespace={}", self.namespace),
            format!("--leader-elect-resource-name={LEASE}"),
        ]
    }
}

/// One verb on one resource, as a SubjectAccessReview asks it.
#[derive(Clone, Debug)]
pub struct Access {
    pub namespace: Option<String>,
    pub group: String,
    /// `nodes` or `nodes/status`.
    pub resource: String,
    pub verb: String,
    pub name: Option<String>,
}

impl Access {
    /// Every (verb, resource, name) a rule grants.
    pub fn of_rule(rule: &RbacRule) -> Vec<Access> {
        let names: Vec<Option<String>> = if rule.resource_names.is_empty() {
            vec![None]
        } else {
            rule.resource_names.iter().cloned().map(Some).collect()
        };
        let mut out = Vec::new();
        for group in &rule.api_groups {
            for resource in &rule.resources {
                for verb in &rule.verbs {
                    for name in &names {
                        out.push(Access {
                            namespace: rule.namespace.clone(),
                            group: group.clone(),
                            resource: resource.clone(),
                            verb: verb.clone(),
                            name: name.clone(),
                        });
                    }
                }
            }
        }
        out
    }
}

fn policy_rule(rule: &RbacRule) -> Value {
    serde_json::to_value(rule.policy_rule()).expect("a PolicyRule serialises")
}

/// A kubeconfig for `token`, next to the apiserver's data, so that it goes with it.
fn write_kubeconfig(api: &KubeApiserver, namespace: &str, token: &str) -> PathBuf {
    let ca = base64::engine::general_purpose::STANDARD.encode(api.ca_pem());
    let config = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "e2e", "cluster": { "server": api.server(), "certificate-authority-data": ca } }],
        "users": [{ "name": SERVICE_ACCOUNT, "user": { "token": token } }],
        "contexts": [{ "name": "e2e", "context": { "cluster": "e2e", "user": SERVICE_ACCOUNT } }],
        "current-context": "e2e",
    });
    let path = api
        .data_dir()
        .join(format!("{SERVICE_ACCOUNT}-{namespace}.kubeconfig"));
    std::fs::write(
        &path,
        serde_json::to_vec_pretty(&config).expect("serialise the kubeconfig"),
    )
    .unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

// --- nodes -------------------------------------------------------------------------

/// A node as the kubelet registers it and the node IPAM controller completes it:
/// `spec.podCIDRs`, `spec.providerID`, addresses, and a `Ready` condition with a
/// heartbeat (which the condition writes must leave alone).
pub fn node_object(name: &str, pod_cidrs: &[&str], internal_ip: &str, provider_id: &str) -> Value {
    let now = rfc3339_now();
    let mut spec = json!({ "providerID": provider_id });
    if let Some(first) = pod_cidrs.first() {
        spec["podCIDR"] = json!(first);
        spec["podCIDRs"] = json!(pod_cidrs);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": { "name": name, "labels": { "kubernetes.io/hostname": name } },
        "spec": spec,
        "status": {
            "addresses": [
                { "type": "InternalIP", "address": internal_ip },
                { "type": "Hostname", "address": name },
            ],
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
                "lastHeartbeatTime": now, "lastTransitionTime": now,
            }],
        },
    })
}

/// Creates the node and returns the stored object.
pub fn create_node(
    api: &KubeApiserver,
    name: &str,
    pod_cidrs: &[&str],
    internal_ip: &str,
    provider_id: &str,
) -> Value {
    api.post_json(
        "/api/v1/nodes",
        &node_object(name, pod_cidrs, internal_ip, provider_id),
    )
}

/// The node, or `None` if it does not exist.
pub fn get_node(api: &KubeApiserver, name: &str) -> Option<Value> {
    let r = api.request(
        "GET",
        &format!("/api/v1/nodes/{name}"),
        api.admin_token(),
        None,
        None,
    );
    match r.status {
        200 => Some(r.json()),
        404 => None,
        other => panic!("GET node {name}: {other} {}", r.body),
    }
}

/// The node's condition of `kind`, if it has one.
pub fn condition(node: &Value, kind: &str) -> Option<Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
}

/// `(status, reason)` of the node's `NetworkUnavailable` condition, read from the API.
pub fn network_unavailable(api: &KubeApiserver, name: &str) -> Option<(String, String)> {
    let node = get_node(api, name)?;
    let c = condition(&node, "NetworkUnavailable")?;
    Some((
        c["status"].as_str().unwrap_or_default().to_string(),
        c["reason"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Waits until every node in `names` shows `NetworkUnavailable` = `status`/`reason`;
/// `Err` lists the nodes that do not, with what they show.
pub fn wait_for_network_unavailable(
    api: &KubeApiserver,
    names: &[String],
    status: &str,
    reason: &str,
    timeout: Duration,
) -> Result<(), String> {
    let want = (status.to_string(), reason.to_string());
    let mut missing: Vec<(String, Option<(String, String)>)> = Vec::new();
    let done = poll_until(timeout, || {
        let listed: std::collections::HashMap<String, Option<(String, String)>> =
            list_conditions(api).into_iter().collect();
        missing = names
            .iter()
            .filter_map(|n| {
                let shown = listed.get(n).cloned().flatten();
                (shown.as_ref() != Some(&want)).then(|| (n.clone(), shown))
            })
            .collect();
        missing.is_empty().then_some(())
    });
    match done {
        Some(()) => Ok(()),
        None => {
            let shown: Vec<String> = missing
                .iter()
                .take(10)
                .map(|(n, c)| format!("{n}: {c:?}"))
                .collect();
            Err(format!(
                "after {timeout:?}, {} of {} nodes do not show NetworkUnavailable={status}/{reason}: {}",
                missing.len(),
                names.len(),
                shown.join(", ")
            ))
        }
    }
}

/// `(node, NetworkUnavailable (status, reason))` of every node, in one list call.
pub fn list_conditions(api: &KubeApiserver) -> Vec<(String, Option<(String, String)>)> {
    let list = api.get_json("/api/v1/nodes");
    list["items"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|n| {
            let name = n["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let c = condition(n, "NetworkUnavailable").map(|c| {
                (
                    c["status"].as_str().unwrap_or_default().to_string(),
                    c["reason"].as_str().unwrap_or_default().to_string(),
                )
            });
            (name, c)
        })
        .collect()
}

/// Sets a new heartbeat on the node's `Ready` condition, as the kubelet does every
/// few seconds (a strategic-merge patch of the status, merged on `type`).
pub fn heartbeat(api: &KubeApiserver, name: &str) {
    let body = json!({ "status": { "conditions": [{
        "type": "Ready", "status": "True", "reason": "KubeletReady",
        "message": "kubelet is posting ready status",
        "lastHeartbeatTime": rfc3339_now(),
    }]}});
    api.patch(
        &format!("/api/v1/nodes/{name}/status"),
        "application/strategic-merge-patch+json",
        &body,
    );
}

/// Replaces the node's addresses.
pub fn set_internal_ip(api: &KubeApiserver, name: &str, internal_ip: &str) {
    let body = json!({ "status": { "addresses": [
        { "type": "InternalIP", "address": internal_ip },
        { "type": "Hostname", "address": name },
    ]}});
    api.patch(
        &format!("/api/v1/nodes/{name}/status"),
        "application/merge-patch+json",
        &body,
    );
}

pub fn set_label(api: &KubeApiserver, name: &str, key: &str, value: &str) {
    api.patch(
        &format!("/api/v1/nodes/{name}"),
        "application/merge-patch+json",
        &json!({ "metadata": { "labels": { key: value } } }),
    );
}

pub fn delete_node(api: &KubeApiserver, name: &str) {
    api.delete(&format!("/api/v1/nodes/{name}"));
}

// --- events ------------------------------------------------------------------------

/// The events about the object with `uid` in namespace `default`, where events of
/// cluster-scoped objects go.
pub fn events_about(api: &KubeApiserver, uid: &str) -> Vec<Value> {
    let list = api.get_json(&format!(
        "/api/v1/namespaces/default/events?fieldSelector=involvedObject.uid%3D{uid}"
    ));
    list["items"].as_array().cloned().unwrap_or_default()
}

/// RFC 3339 UTC with whole seconds, as metav1.Time serialises.
pub fn rfc3339_now() -> String {
    route_controller::kube::status::rfc3339(std::time::SystemTime::now())
}
