//! A Hetzner Cloud project in the test double, as the end-to-end tests need it: one
//! private network with a subnet for the servers, servers attached to it, and the
//! environment that points `route-controller run --cloud-provider=hcloud` at it.
//!
//! [`HcloudCluster`] puts it together with a private kube-apiserver and the
//! controller's identity: one per test, because the controller reconciles every node
//! of its cluster, so two tests' controllers on one API server would act on each
//! other's nodes (and write each other's conditions).
//!
//! Include it after `kube_apiserver`, `e2e_cluster`, `hcloud_double` and
//! `controller_process` (it uses them through `crate::`):
//! `#[path = "support/e2e_hcloud.rs"] mod e2e_hcloud;`.

// Every test binary that includes this module uses only part of it.
#![allow(dead_code)]

use std::net::Ipv4Addr;

use route_controller::manifests::RbacRule;
use serde_json::Value;

use crate::controller_process::Spawn;
use crate::e2e_cluster::{Identity, create_node};
use crate::hcloud_double::{HcloudDouble, Recorded, RouteEntry};
use crate::kube_apiserver::{KubeApiserver, Version};

/// The feature gate of KEP-5237, on: watch mode.
pub const WATCH_MODE: &str =
    "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true";

/// The network's ID (`HCLOUD_NETWORK`).
pub const NETWORK: u64 = 1;
/// The network's range; servers get addresses in [`SUBNET`].
pub const IP_RANGE: &str = "10.0.0.0/8";
pub const SUBNET: &str = "10.0.0.0/16";
/// The pod network: inside the network's range, outside its subnet, as Hetzner
/// requires of route destinations.
pub const CLUSTER_CIDR: &str = "10.244.0.0/16";

/// A 64-character API token (the length of real ones, so the provider does not warn)
/// that names its holder, for reading request logs.
pub fn token(holder: &str) -> String {
    format!("{holder:x<64}").chars().take(64).collect()
}

/// The double with network [`NETWORK`] and no servers.
pub struct Hetzner {
    pub double: HcloudDouble,
}

impl Hetzner {
    /// A project whose first token is `token("controller")`.
    pub fn start() -> Hetzner {
        Hetzner::start_with_token(&token("controller"))
    }

    pub fn start_with_token(token: &str) -> Hetzner {
        let double = HcloudDouble::start(token);
        double.add_network(NETWORK, "k8s", IP_RANGE, &[SUBNET]);
        Hetzner { double }
    }

    /// Adds server `id`, attached to the network, and returns
    /// `(providerID, private IP)` for the node that runs on it.
    pub fn add_server(&self, id: u64) -> (String, String) {
        let ip = server_ip(id);
        self.double
            .add_server(id, &format!("server-{id}"), Some((NETWORK, &ip)));
        (format!("hcloud://{id}"), ip)
    }

    /// `HCLOUD_TOKEN`, `HCLOUD_NETWORK` and `HCLOUD_ENDPOINT` for a controller that
    /// uses `token`.
    pub fn env(&self, spawn: Spawn, token: &str) -> Spawn {
        spawn
            .env("HCLOUD_TOKEN", token)
            .env("HCLOUD_NETWORK", NETWORK.to_string())
            .env("HCLOUD_ENDPOINT", self.double.endpoint())
    }

    /// The network's routes as `(destination, gateway)`.
    pub fn routes(&self) -> Vec<RouteEntry> {
        self.double.routes(NETWORK)
    }

    pub fn has_route(&self, destination: &str, gateway: &str) -> bool {
        self.routes()
            .iter()
            .any(|(d, g)| d == destination && g == gateway)
    }

    pub fn has_route_to(&self, destination: &str) -> bool {
        self.routes().iter().any(|(d, _)| d == destination)
    }

    /// Every `add_route` request (any outcome) for `destination`.
    pub fn add_route_requests(&self, destination: &str) -> Vec<Recorded> {
        self.actions("add_route", Some(destination))
    }

    pub fn delete_route_requests(&self, destination: &str) -> Vec<Recorded> {
        self.actions("delete_route", Some(destination))
    }

    /// Requests of the route action `command`, for `destination` if given.
    pub fn actions(&self, command: &str, destination: Option<&str>) -> Vec<Recorded> {
        let path = format!("/networks/{NETWORK}/actions/{command}");
        self.double
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.path == path)
            .filter(|r| destination.is_none_or(|d| r.destination.as_deref() == Some(d)))
            .collect()
    }

    /// The writes (route actions) sent with `token`.
    pub fn writes_by(&self, token: &str) -> Vec<Recorded> {
        self.double
            .requests()
            .into_iter()
            .filter(|r| r.method == "POST" && r.token == token)
            .collect()
    }
}

/// The private IP of server `id`: 10.0.x.y (never .0, .1 or the broadcast address).
pub fn server_ip(id: u64) -> String {
    let n = u32::try_from(id).expect("a small server id");
    assert!(n < 250 * 256, "server ids of this fixture are below 64000");
    Ipv4Addr::new(10, 0, (n / 250) as u8, (n % 250) as u8 + 2).to_string()
}

/// The pod CIDR of node number `i` (0–255): `10.244.i.0/24`.
pub fn pod_cidr(i: u32) -> String {
    assert!(i < 256, "pod CIDRs of this fixture are 10.244.0-255.0/24");
    format!("10.244.{i}.0/24")
}

/// A private API server, the controller's identity on it, and a Hetzner project.
pub struct HcloudCluster {
    pub api: KubeApiserver,
    pub identity: Identity,
    pub hetzner: Hetzner,
}

impl HcloudCluster {
    /// Everything fresh; the identity lives in `namespace` with exactly the
    /// generated RBAC; the project has the servers `servers` (create every server a
    /// test's nodes use here, before the controller starts: servers exist long before
    /// their kubelet registers a node, and the provider trusts a server list for a
    /// while).
    pub fn start(namespace: &str, servers: impl IntoIterator<Item = u64>) -> HcloudCluster {
        HcloudCluster::start_with_rules(namespace, servers, |_| {})
    }

    /// As [`HcloudCluster::start`], with the identity's rules edited first.
    pub fn start_with_rules(
        namespace: &str,
        servers: impl IntoIterator<Item = u64>,
        edit: impl FnOnce(&mut Vec<RbacRule>),
    ) -> HcloudCluster {
        HcloudCluster::start_on_with_rules(Version::Current, namespace, servers, edit)
    }

    /// As [`HcloudCluster::start`], on an API server of Kubernetes `version`.
    pub fn start_on(
        version: Version,
        namespace: &str,
        servers: impl IntoIterator<Item = u64>,
    ) -> HcloudCluster {
        HcloudCluster::start_on_with_rules(version, namespace, servers, |_| {})
    }

    /// As [`HcloudCluster::start_with_rules`], on an API server of `version`.
    pub fn start_on_with_rules(
        version: Version,
        namespace: &str,
        servers: impl IntoIterator<Item = u64>,
        edit: impl FnOnce(&mut Vec<RbacRule>),
    ) -> HcloudCluster {
        let api = KubeApiserver::start_fresh_version(version);
        let identity = Identity::provision_with(&api, namespace, edit);
        let hetzner = Hetzner::start();
        for id in servers {
            hetzner.add_server(id);
        }
        HcloudCluster {
            api,
            identity,
            hetzner,
        }
    }

    /// `run --cloud-provider=hcloud --cluster-cidr=… --kubeconfig=… <lease flags>`
    /// with the environment of `token`; add the mode and other flags.
    pub fn controller_with_token(&self, token: &str) -> Spawn {
        let spawn = Spawn::new()
            .arg("--cloud-provider=hcloud")
            .arg(format!("--cluster-cidr={CLUSTER_CIDR}"))
            .args(self.identity.flags());
        self.hetzner.env(spawn, token)
    }

    /// [`HcloudCluster::controller_with_token`] with the project's first token.
    pub fn controller(&self) -> Spawn {
        self.controller_with_token(self.hetzner.double.token())
    }

    /// Creates the node `name` on server `id` (which [`HcloudCluster::start`] made),
    /// with pod CIDR [`pod_cidr`]`(id % 256)`. Returns the node, its pod CIDR and the
    /// gateway its route must have.
    pub fn node(&self, name: &str, id: u64) -> TestNode {
        let (provider_id, ip) = (format!("hcloud://{id}"), server_ip(id));
        let cidr = pod_cidr((id % 256) as u32);
        let object = create_node(&self.api, name, &[&cidr], &ip, &provider_id);
        TestNode {
            name: name.to_string(),
            uid: object["metadata"]["uid"]
                .as_str()
                .expect("a created node has a uid")
                .to_string(),
            cidr,
            gateway: ip,
            object,
        }
    }
}

/// A node created by [`HcloudCluster::node`].
#[derive(Clone, Debug)]
pub struct TestNode {
    pub name: String,
    pub uid: String,
    pub cidr: String,
    /// Its server's private IP: the route's gateway.
    pub gateway: String,
    pub object: Value,
}
