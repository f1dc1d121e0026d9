//! `route-controller manifests`: the Kubernetes objects that run the controller,
//! printed as ready-to-apply YAML (Namespace, ServiceAccount, RBAC, Deployment; with
//! `--monitoring` a Service, a prometheus-operator ServiceMonitor and a Grafana
//! dashboard).
//!
//! The permissions exist once, as data ([`rbac_rules`]), and the YAML is rendered
//! from that data, so that end-to-end tests can bind exactly these rules to a test
//! identity and prove that they are sufficient. Nothing here may grant a wildcard
//! verb or resource, and every string that comes from the operator is quoted, so an
//! odd value cannot change the structure of the YAML.

use std::fmt::Write as _;

use k8s_openapi::api::rbac::v1::PolicyRule;

use crate::config::parse_cluster_cidrs;
use crate::kube::lease::LeaseConfig;
use crate::kube::status::StatusConfig;

/// The name of every object the manifests create (and of the ServiceAccount).
pub const NAME: &str = "route-controller";

/// The providers `manifests` renders: every one `run` takes.
pub const PROVIDERS: [&str; 8] = [
    "hcloud",
    "aws",
    "azure",
    "gce",
    "openstack",
    "alibaba",
    "exec",
    "fake",
];

/// What to render. Field docs give the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestOptions {
    /// `--cloud-provider`: one of [`PROVIDERS`] (default `hcloud`).
    pub provider: String,
    /// Namespace of the ServiceAccount, the Deployment and the lease (default
    /// `kube-system`).
    pub namespace: String,
    /// The container image (default `route-controller:<this version>`).
    pub image: String,
    /// `--cluster-cidr`; required (default empty, which [`ManifestOptions::validate`]
    /// rejects).
    pub cluster_cidr: String,
    /// `--cluster-name` (default `kubernetes`).
    pub cluster_name: String,
    /// `--leader-elect-resource-name`: the Lease (default `route-controller`).
    pub leader_elect_resource_name: String,
    /// Watch-based reconciliation (KEP-5237) rather than polling (default true).
    pub watch_based: bool,
    /// The secure port (HTTPS, `--secure-port`) of `/metrics`, `/healthz` and
    /// `/readyz` on the host network (default 10270: the CCM beside it holds 10258).
    pub metrics_port: u16,
    /// Replicas of the Deployment; one leads, the others stand by (default 2).
    pub replicas: u32,
    /// A Service and a ServiceMonitor for the secure port, and the Grafana dashboard
    /// (default false).
    pub monitoring: bool,
    /// `--cloud-provider=exec` only: an image holding the plugin under `/plugin/`,
    /// copied by an init container into a volume at [`PLUGIN_DIR`] (default none: the
    /// plugin is in the controller's image, one of the user's built `FROM` ours).
    pub plugin_image: Option<String>,
}

impl Default for ManifestOptions {
    fn default() -> ManifestOptions {
        let lease = LeaseConfig::new("");
        ManifestOptions {
            provider: "hcloud".to_string(),
            namespace: lease.namespace,
            image: format!("{NAME}:{}", env!("CARGO_PKG_VERSION")),
            cluster_cidr: String::new(),
            cluster_name: "kubernetes".to_string(),
            leader_elect_resource_name: lease.name,
            watch_based: true,
            metrics_port: 10270,
            replicas: 2,
            monitoring: false,
            plugin_image: None,
        }
    }
}

impl ManifestOptions {
    /// Checks what Kubernetes or the controller would reject later; the error names
    /// the flag and the fix.
    pub fn validate(&self) -> Result<(), String> {
        if !PROVIDERS.contains(&self.provider.as_str()) {
            return Err(format!(
                "--cloud-provider: {:?} is not a provider; use one of {}",
                self.provider,
                PROVIDERS.join(", ")
            ));
        }
        parse_cluster_cidrs(&self.cluster_cidr)?;
        if !is_dns_label(&self.namespace) {
            return Err(format!(
                "--namespace: {:?} is not a namespace name (lower-case letters, digits and '-', at most 63)",
                self.namespace
            ));
        }
        if !is_dns_subdomain(&self.leader_elect_resource_name) {
            return Err(format!(
                "--leader-elect-resource-name: {:?} is not a Lease name (lower-case letters, digits, '-' and '.')",
                self.leader_elect_resource_name
            ));
        }
        check_image("--image", &self.image)?;
        if let Some(plugin_image) = &self.plugin_image {
            if self.provider != "exec" {
                return Err(format!(
                    "--plugin-image: only --cloud-provider=exec runs a plugin, not {:?}",
                    self.provider
                ));
            }
            check_image("--plugin-image", plugin_image)?;
        }
        if self.cluster_name.trim().is_empty() {
            return Err("--cluster-name: must not be empty (default: kubernetes)".into());
        }
        if self.metrics_port == 0 {
            return Err("--metrics-port: give a port between 1 and 65535".into());
        }
        if self.replicas == 0 {
            return Err("--replicas: give at least 1 (2 keeps a replica standing by)".into());
        }
        Ok(())
    }
}

/// An image reference the nodes can pull: not empty, no whitespace, and not a
/// placeholder copied from the README (`REGISTRY/...`, `<registry>/...`, a host of
/// example.com), which would only end in `ImagePullBackOff`.
fn check_image(flag: &str, image: &str) -> Result<(), String> {
    let example = format!(
        "{flag}=<your registry>/route-controller:{}",
        env!("CARGO_PKG_VERSION")
    );
    if image.trim().is_empty() || image.chars().any(char::is_whitespace) {
        return Err(format!(
            "{flag}: {image:?} is not an image reference; give the image you pushed, e.g. {example}"
        ));
    }
    if let Some(why) = placeholder(image) {
        return Err(format!(
            "{flag}: {image:?} is a placeholder ({why}); build the image (README, \"In a \
             cluster\"), push it to your registry and give its name, e.g. {example}"
        ));
    }
    Ok(())
}

/// Why `image` is a placeholder rather than an image, if it is: its name (the part
/// before the tag or digest) has capitals, which no registry's names have, or angle
/// brackets, or its registry is a host of the domains reserved for examples (RFC 2606).
fn placeholder(image: &str) -> Option<&'static str> {
    let name = image.split('@').next().unwrap_or(image);
    let name = match name.rsplit_once(':') {
        Some((before, tag)) if !tag.contains('/') => before,
        _ => name,
    };
    if name.contains(['<', '>']) {
        return Some("angle brackets");
    }
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        return Some("capitals, as in REGISTRY");
    }
    let host = name.split_once('/').map(|(h, _)| h)?;
    let host = host.split(':').next().unwrap_or(host);
    let reserved = ["example.com", "example.org", "example.net", "example"];
    reserved
        .iter()
        .any(|d| host == *d || host.ends_with(&format!(".{d}")))
        .then_some("a host of a domain reserved for examples")
}

// --- permissions as data ------------------------------------------------------------

/// One RBAC rule and where it applies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RbacRule {
    /// `None`: cluster-wide, in the ClusterRole. `Some(namespace)`: in a Role there.
    pub namespace: Option<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
    /// Empty: any object of the resources.
    pub resource_names: Vec<String>,
    /// Why the controller needs it; rendered as a comment.
    pub why: &'static str,
}

impl RbacRule {
    /// The rule as the RBAC API takes it (for a test that creates the Role itself).
    pub fn policy_rule(&self) -> PolicyRule {
        PolicyRule {
            api_groups: Some(self.api_groups.clone()),
            resources: Some(self.resources.clone()),
            verbs: self.verbs.clone(),
            resource_names: (!self.resource_names.is_empty()).then(|| self.resource_names.clone()),
            non_resource_urls: None,
        }
    }
}

/// Everything the controller does in the Kubernetes API, least privilege:
/// - nodes: list and watch (the node watch), get (kept for parity with upstream's
///   role and for `kubectl auth can-i` checks an operator may run);
/// - nodes/status: patch (the NetworkUnavailable condition);
/// - events in `default` only, where events about cluster-scoped objects such as
///   nodes go: create and patch (aggregated repeats). A Role there grants less than
///   the cluster-wide rule upstream's role has;
/// - leases in `namespace`: get and update of the one lease named `lease_name`, and
///   create, which Kubernetes cannot restrict by name (the name is not known before
///   the object exists), hence a rule of its own;
/// - tokenreviews and subjectaccessreviews: create, to check the bearer token and the
///   access of a scraper of `/metrics` on the secure port (the CCM's delegated
///   authentication and authorization, `system:auth-delegator`'s two rules).
pub fn rbac_rules(namespace: &str, lease_name: &str) -> Vec<RbacRule> {
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let event_namespace = StatusConfig::new("").event_namespace;
    vec![
        RbacRule {
            namespace: None,
            api_groups: strings(&[""]),
            resources: strings(&["nodes"]),
            verbs: strings(&["get", "list", "watch"]),
            resource_names: vec![],
            why: "the node watch: pod CIDRs and addresses of every node",
        },
        RbacRule {
            namespace: None,
            api_groups: strings(&[""]),
            resources: strings(&["nodes/status"]),
            verbs: strings(&["patch"]),
            resource_names: vec![],
            why: "the NetworkUnavailable condition of each node",
        },
        RbacRule {
            namespace: Some(event_namespace),
            api_groups: strings(&[""]),
            resources: strings(&["events"]),
            verbs: strings(&["create", "patch"]),
            resource_names: vec![],
            why: "events about nodes, which go to namespace default; a Role there \
                  rather than a cluster-wide rule",
        },
        RbacRule {
            namespace: Some(namespace.to_string()),
            api_groups: strings(&["coordination.k8s.io"]),
            resources: strings(&["leases"]),
            verbs: strings(&["create"]),
            resource_names: vec![],
            why: "creating the leader-election lease; create cannot be limited by name",
        },
        RbacRule {
            namespace: Some(namespace.to_string()),
            api_groups: strings(&["coordination.k8s.io"]),
            resources: strings(&["leases"]),
            verbs: strings(&["get", "update"]),
            resource_names: vec![lease_name.to_string()],
            why: "holding and renewing the leader-election lease, and only that one",
        },
        RbacRule {
            namespace: None,
            api_groups: strings(&["authentication.k8s.io"]),
            resources: strings(&["tokenreviews"]),
            verbs: strings(&["create"]),
            resource_names: vec![],
            why: "checking the bearer token of a scrape of /metrics (TokenReview)",
        },
        RbacRule {
            namespace: None,
            api_groups: strings(&["authorization.k8s.io"]),
            resources: strings(&["subjectaccessreviews"]),
            verbs: strings(&["create"]),
            resource_names: vec![],
            why: "checking that the scraper may get /metrics (SubjectAccessReview)",
        },
    ]
}

/// The ClusterRole that a scraper of `/metrics` is bound to.
pub const METRICS_READER: &str = "route-controller-metrics-reader";

/// What a scraper needs: `get` on the non-resource URL `/metrics`, which the secure
/// port asks the API server about with a SubjectAccessReview.
pub fn metrics_reader_rule() -> PolicyRule {
    PolicyRule {
        api_groups: None,
        resources: None,
        verbs: vec!["get".to_string()],
        resource_names: None,
        non_resource_urls: Some(vec!["/metrics".to_string()]),
    }
}

/// The namespaces that get a Role, in the order of first appearance.
fn role_namespaces(rules: &[RbacRule]) -> Vec<&str> {
    let mut out: Vec<&str> = Vec::new();
    for ns in rules.iter().filter_map(|r| r.namespace.as_deref()) {
        if !out.contains(&ns) {
            out.push(ns);
        }
    }
    out
}

// --- rendering ----------------------------------------------------------------------

/// The manifests as multi-document YAML. Call [`ManifestOptions::validate`] first;
/// invalid options render, but Kubernetes or the controller would reject them.
pub fn render(opts: &ManifestOptions) -> String {
    let mut out = String::with_capacity(16384);
    header(&mut out, opts);
    if opts.namespace != DEFAULT_NAMESPACE {
        namespace(&mut out, opts);
    }
    service_account(&mut out, opts);
    let rules = rbac_rules(&opts.namespace, &opts.leader_elect_resource_name);
    cluster_role(&mut out, opts, &rules);
    for ns in role_namespaces(&rules) {
        role(&mut out, opts, ns, &rules);
    }
    metrics_reader(&mut out);
    deployment(&mut out, opts);
    if opts.monitoring {
        service(&mut out, opts);
        service_monitor(&mut out, opts);
        dashboard(&mut out, opts);
    }
    out
}

/// The namespace the CCM and this controller usually run in; it exists already.
const DEFAULT_NAMESPACE: &str = "kube-system";

fn namespace(out: &mut String, opts: &ManifestOptions) {
    out.push_str("---\napiVersion: v1\nkind: Namespace\n");
    let _ = writeln!(
        out,
        "metadata:\n  name: {}\n  labels:\n    app.kubernetes.io/name: {NAME}",
        q(&opts.namespace)
    );
}

fn metrics_reader(out: &mut String) {
    let _ = writeln!(
        out,
        "---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: {METRICS_READER}
  labels:
    app.kubernetes.io/name: {NAME}
# Bind it to whoever scrapes /metrics on the secure port, e.g. prometheus-operator's
# Prometheus:
#   kubectl create clusterrolebinding {METRICS_READER} \\
#     --clusterrole={METRICS_READER} --serviceaccount=monitoring:prometheus-k8s
rules:
  - nonResourceURLs: [\"/metrics\"]
    verbs: [\"get\"]"
    );
}

fn header(out: &mut String, opts: &ManifestOptions) {
    let _ = writeln!(
        out,
        "# route-controller {} for provider {}, namespace {}.",
        env!("CARGO_PKG_VERSION"),
        opts.provider,
        opts.namespace
    );
    if opts.image == ManifestOptions::default().image {
        let _ = writeln!(
            out,
            "#\n\
             # The image {image} exists only once you build it and push it where\n\
             # the nodes pull from: build it from this repository's Dockerfile (README, \"In a\n\
             # cluster\"), push it, and render again with --image=<your registry>/{image}.",
            image = opts.image
        );
    }
    out.push_str(
        "#\n\
         # Generated by `route-controller manifests`; apply with `kubectl apply -f FILE`.\n\
         #\n\
         # Switch the cloud-controller-manager's own route controller off first, or both\n\
         # will manage the same routes:\n\
         #   - any CCM: add --controllers=*,-route (keeps every other controller), or\n\
         #     --configure-cloud-routes=false;\n\
         #   - Hetzner's hcloud-cloud-controller-manager: set HCLOUD_NETWORK_ROUTES_ENABLED=false\n\
         #     in its environment (it keeps its network for load balancers).\n\
         # Routes the CCM made are kept as they are when --cluster-name and --cluster-cidr\n\
         # match the CCM's.\n\
         #\n",
    );
    match opts.provider.as_str() {
        "hcloud" => {
            let _ = writeln!(
                out,
                "# It reads the Secret \"hcloud\" (keys token and network), which you create:\n\
                 #   kubectl -n {} create secret generic hcloud --from-literal=token=TOKEN --from-literal=network=NETWORK",
                opts.namespace
            );
        }
        "aws" => out.push_str(
            "# Credentials come preferably from IRSA, EKS Pod Identity or the instance role.\n\
             # Static keys from the optional Secret \"aws-credentials\", when it holds them,\n\
             # come first in the AWS credential chain: leave them out to use the others.\n",
        ),
        _ => {}
    }
    if let Some(file) = cloud_config_file(&opts.provider) {
        cloud_config_header(out, opts, &file);
    }
    if opts.provider == "exec" {
        plugin_header(out, opts);
    }
}

/// How to create the provider's Secret from the file the CCM reads, and what the
/// provider needs besides.
fn cloud_config_header(out: &mut String, opts: &ManifestOptions, file: &CloudConfigFile) {
    let _ = writeln!(
        out,
        "# It reads {what}\n\
         # from the Secret \"{secret}\" (key {key}), which you create{from}:\n\
         #   kubectl -n {ns} create secret generic {secret} --from-file={key}={source}\n\
         # The Secret is mounted whole at {CLOUD_CONFIG_DIR}: a file the config names\n\
         # (a CA, a key) goes in as another key, named there by its path in that directory.",
        what = file.what,
        secret = file.secret,
        key = file.key,
        from = if file.from_ccm {
            " from the CCM's file"
        } else {
            ""
        },
        ns = opts.namespace,
        source = file.source,
    );
    let notes = match opts.provider.as_str() {
        "azure" => {
            "# Its identity needs Network Contributor on the route table and Reader on the\n\
             # nodes' VMs and NICs. For workload identity, label the pods\n\
             # azure.workload.identity/use=true and annotate the ServiceAccount.\n"
        }
        "gce" => {
            "# On GCE its identity is the instance's service account, from the metadata server;\n\
             # roles/compute.networkAdmin holds what it needs (README, GCE: Permissions).\n\
             # With a key file instead, add it to the Secret as key.json and set the container's\n\
             # GOOGLE_APPLICATION_CREDENTIALS=/etc/kubernetes/route-controller/key.json.\n"
        }
        "openstack" => {
            "# Keystone credentials are in cloud.conf ([Global]: an application credential, or\n\
             # a user's password and project); [Route] router-id names the router.\n"
        }
        "alibaba" => {
            "# Its identity: the AccessKey pair of the cloud config (base64, as the peer keeps it),\n\
             # ALIBABA_CLOUD_ACCESS_KEY_ID/_SECRET, RRSA (ALIBABA_CLOUD_ROLE_ARN, _OIDC_PROVIDER_ARN,\n\
             # _OIDC_TOKEN_FILE), else the ECS instance's RAM role. It needs vpc:DescribeRouteTableList,\n\
             # vpc:DescribeRouteEntryList, vpc:CreateRouteEntries, vpc:DeleteRouteEntries,\n\
             # vpc:DescribeVSwitches, vpc:DescribeVpcs and ecs:DescribeInstances; optionally\n\
             # quotas:ListProductQuotas, so that a table's quota is the account's (README, Alibaba\n\
             # Cloud).\n"
        }
        _ => "",
    };
    out.push_str(notes);
}

/// How the exec provider's plugin gets into the pod, both ways.
fn plugin_header(out: &mut String, opts: &ManifestOptions) {
    let _ = writeln!(
        out,
        "# The plugin runs in the controller's container: as user 65532, with no capabilities\n\
         # and within its memory limit (a plugin that changes the host's routing table needs\n\
         # NET_ADMIN added). plugin.conf's Command= names it in {PLUGIN_DIR}:\n\
         #   Command={PLUGIN_DIR}/my-router\n\
         # It gets into the pod one of two ways:\n\
         #   - an image of yours built FROM this one that adds it (the image has nothing else:\n\
         #     the plugin must be a static binary, or bring what it runs on), given as --image:\n\
         #       FROM {image}\n\
         #       COPY --chmod=0555 my-router {PLUGIN_DIR}/my-router\n\
         #   - --plugin-image=IMAGE: an image of yours with the plugin under /plugin/ and a cp\n\
         #     (e.g. FROM busybox); an init container copies it into an emptyDir mounted\n\
         #     read-only at {PLUGIN_DIR}, so the root filesystem stays read-only.\n\
         # {rendered}",
        image = opts.image,
        rendered = match &opts.plugin_image {
            Some(image) => format!("Rendered the second way, --plugin-image={image}."),
            None => "Rendered the first way: the plugin is in --image.".to_string(),
        },
    );
}

/// A provider's settings file, kept in a Secret (it may hold credentials, or name a
/// key beside it) and mounted read-only where `--cloud-config` points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CloudConfigFile {
    /// The Secret, also the name of its volume.
    pub secret: &'static str,
    /// The key holding the file, also its name under [`CLOUD_CONFIG_DIR`].
    pub key: &'static str,
    /// Where the CCM keeps it, or a file of the user's: the source of the Secret.
    pub source: &'static str,
    /// Whether `source` is the CCM's own file.
    pub from_ccm: bool,
    /// What it is, for the header.
    pub what: &'static str,
}

/// The settings file `run` reads with `--cloud-config` for `provider`, if it needs one
/// (hcloud's and AWS's settings come from the environment).
pub fn cloud_config_file(provider: &str) -> Option<CloudConfigFile> {
    let file = |secret, key, source, from_ccm, what| CloudConfigFile {
        secret,
        key,
        source,
        from_ccm,
        what,
    };
    match provider {
        "azure" => Some(file(
            "azure-cloud-config",
            "azure.json",
            "/etc/kubernetes/azure.json",
            true,
            "cloud-provider-azure's azure.json",
        )),
        "gce" => Some(file(
            "gce-cloud-config",
            "gce.conf",
            "/etc/gce.conf",
            true,
            "cloud-provider-gcp's gce.conf",
        )),
        "openstack" => Some(file(
            "openstack-cloud-config",
            "cloud.conf",
            "/etc/kubernetes/cloud.conf",
            true,
            "cloud-provider-openstack's cloud.conf",
        )),
        "alibaba" => Some(file(
            "alibaba-cloud-config",
            "cloud-config.conf",
            "/etc/kubernetes/config/cloud-config.conf",
            true,
            "cloud-provider-alibaba-cloud's cloud config",
        )),
        "exec" => Some(file(
            "exec-cloud-config",
            "plugin.conf",
            "./plugin.conf",
            false,
            "the plugin's settings (Command=, Arg=, Env=, Timeout=; README)",
        )),
        _ => None,
    }
}

fn service_account(out: &mut String, opts: &ManifestOptions) {
    out.push_str("---\napiVersion: v1\nkind: ServiceAccount\n");
    metadata(out, Some(&opts.namespace));
    if opts.provider == "aws" {
        out.push_str(
            "  # For IRSA, annotate with the IAM role to assume:
  # annotations:
  #   eks.amazonaws.com/role-arn: arn:aws:iam::ACCOUNT:role/ROLE
",
        );
    }
}

/// `metadata` of an object named [`NAME`].
fn metadata(out: &mut String, namespace: Option<&str>) {
    let _ = writeln!(out, "metadata:\n  name: {NAME}");
    if let Some(ns) = namespace {
        let _ = writeln!(out, "  namespace: {}", q(ns));
    }
    let _ = writeln!(out, "  labels:\n    app.kubernetes.io/name: {NAME}");
}

fn cluster_role(out: &mut String, opts: &ManifestOptions, rules: &[RbacRule]) {
    out.push_str("---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\n");
    metadata(out, None);
    policy_rules(out, rules.iter().filter(|r| r.namespace.is_none()));
    binding(out, opts, "ClusterRole", None);
}

fn role(out: &mut String, opts: &ManifestOptions, namespace: &str, rules: &[RbacRule]) {
    out.push_str("---\napiVersion: rbac.authorization.k8s.io/v1\nkind: Role\n");
    metadata(out, Some(namespace));
    let here = rules
        .iter()
        .filter(|r| r.namespace.as_deref() == Some(namespace));
    policy_rules(out, here);
    binding(out, opts, "Role", Some(namespace));
}

fn policy_rules<'a>(out: &mut String, rules: impl Iterator<Item = &'a RbacRule>) {
    out.push_str("rules:\n");
    for r in rules {
        let _ = writeln!(out, "  # {}", r.why);
        let _ = writeln!(out, "  - apiGroups: {}", list(&r.api_groups));
        let _ = writeln!(out, "    resources: {}", list(&r.resources));
        if !r.resource_names.is_empty() {
            let _ = writeln!(out, "    resourceNames: {}", list(&r.resource_names));
        }
        let _ = writeln!(out, "    verbs: {}", list(&r.verbs));
    }
}

/// The binding of the role `role_kind` named [`NAME`] to the ServiceAccount.
fn binding(out: &mut String, opts: &ManifestOptions, role_kind: &str, namespace: Option<&str>) {
    let _ = writeln!(
        out,
        "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: {role_kind}Binding"
    );
    metadata(out, namespace);
    let _ = writeln!(
        out,
        "roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: {role_kind}
  name: {NAME}
subjects:
  - kind: ServiceAccount
    name: {NAME}
    namespace: {}",
        q(&opts.namespace)
    );
}

fn deployment(out: &mut String, opts: &ManifestOptions) {
    out.push_str("---\napiVersion: apps/v1\nkind: Deployment\n");
    metadata(out, Some(&opts.namespace));
    let args: String = container_args(opts)
        .iter()
        .map(|a| format!("            - {}\n", q(a)))
        .collect();
    let _ = write!(
        out,
        "spec:
  replicas: {replicas}
  revisionHistoryLimit: 3
  selector:
    matchLabels:
      app.kubernetes.io/name: {NAME}
  # With the host network two replicas cannot share a node (one secure port), so a
  # rollout replaces one pod at a time instead of adding one.
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 0
      maxUnavailable: 1
  template:
    metadata:
      labels:
        app.kubernetes.io/name: {NAME}
    spec:
      serviceAccountName: {NAME}
      automountServiceAccountToken: true
      priorityClassName: system-cluster-critical
      # The controller is what makes the pod network routable, so it must not depend
      # on it: the host's network, and the host's DNS (CoreDNS may not run yet).
      hostNetwork: true
      dnsPolicy: Default
      securityContext:
        runAsNonRoot: true
        runAsUser: 65532
        runAsGroup: 65532
        # Mounted Secrets (the Hetzner token, a provider's settings) are group-readable
        # by this group.
        fsGroup: 65532
        seccompProfile:
          type: RuntimeDefault
      # It runs where a cluster starts: on control-plane nodes, on nodes the cloud
      # controller has not initialised, and on nodes whose pod network is not up yet,
      # which is what it fixes.
      tolerations:
        - key: node-role.kubernetes.io/control-plane
          operator: Exists
          effect: NoSchedule
        - key: node.cloudprovider.kubernetes.io/uninitialized
          operator: Equal
          value: \"true\"
          effect: NoSchedule
        - key: node.kubernetes.io/network-unavailable
          operator: Exists
          effect: NoSchedule
        - key: node.kubernetes.io/not-ready
          operator: Exists
          effect: NoSchedule
        - key: CriticalAddonsOnly
          operator: Exists
      affinity:
        podAntiAffinity:
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 100
              podAffinityTerm:
                topologyKey: kubernetes.io/hostname
                labelSelector:
                  matchLabels:
                    app.kubernetes.io/name: {NAME}
{init}      containers:
        - name: {NAME}
          image: {image}
          imagePullPolicy: IfNotPresent
          args:
{args}{env}          ports:
            - name: https
              containerPort: {port}
              protocol: TCP
          # The probes' paths are open on the secure port (the kubelet does not check
          # the self-signed certificate); /metrics needs an authorized token.
          livenessProbe:
            httpGet:
              scheme: HTTPS
              path: /healthz
              port: {port}
            periodSeconds: 10
            timeoutSeconds: 3
            failureThreshold: 3
          readinessProbe:
            httpGet:
              scheme: HTTPS
              path: /readyz
              port: {port}
            periodSeconds: 5
            timeoutSeconds: 3
            failureThreshold: 2
          # From the measured footprint (README: `cargo bench -- rss` and `-- scale`,
          # Hetzner provider, the allocator settings above): peak RSS at most 9.8 MiB
          # at 5 000 nodes and 32.4 MiB at 50 000, over a relist too, glibc or musl
          # build. The request covers 5 000 nodes with room; the limit is about twice
          # the peak at 50 000 nodes, so that the kernel never kills it mid-pass.
          resources:
            requests:
              cpu: 10m
              memory: 16Mi
            limits:
              memory: 64Mi
{security}{volumes}",
        security = CONTAINER_SECURITY_CONTEXT,
        init = init_containers(opts),
        replicas = opts.replicas,
        volumes = volumes(opts),
        image = q(&opts.image),
        env = env(&opts.provider),
        port = opts.metrics_port,
    );
}

/// The arguments, spelled as the cloud-controller-manager's, so an operator can
/// compare them with an existing manifest.
pub fn container_args(opts: &ManifestOptions) -> Vec<String> {
    let mut args = vec![
        "run".to_string(),
        format!("--cloud-provider={}", opts.provider),
        format!("--cluster-cidr={}", opts.cluster_cidr),
        format!("--cluster-name={}", opts.cluster_name),
        "--configure-cloud-routes=true".to_string(),
        format!(
            "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation={}",
            opts.watch_based
        ),
        "--leader-elect=true".to_string(),
        format!(
            "--leader-elect-resource-name={}",
            opts.leader_elect_resource_name
        ),
        format!("--leader-elect-resource-namespace={}", opts.namespace),
        format!("--secure-port={}", opts.metrics_port),
        "--bind-address=0.0.0.0".to_string(),
    ];
    if let Some(file) = cloud_config_file(&opts.provider) {
        args.push(format!("--cloud-config={CLOUD_CONFIG_DIR}/{}", file.key));
    }
    args
}

/// Where the provider's Secret of [`cloud_config_file`] is mounted.
pub const CLOUD_CONFIG_DIR: &str = "/etc/kubernetes/route-controller";

/// Where the exec provider's plugin is: in the image, or in the volume the init
/// container of `--plugin-image` fills.
pub const PLUGIN_DIR: &str = "/usr/local/lib/route-controller";

/// Where the Hetzner token file is mounted.
const HCLOUD_TOKEN_DIR: &str = "/var/run/secrets/hcloud";

/// The container's volume mounts and the pod's volumes: the Hetzner token as a file
/// (so that a rotated Secret reaches the running controller, which re-reads
/// `HCLOUD_TOKEN_FILE` when it changes), the provider's settings file, and the exec
/// provider's plugin volume. Secrets are 0440: readable by the fsGroup, not by others.
fn volumes(opts: &ManifestOptions) -> String {
    let mut mounts = String::new();
    let mut volumes = String::new();
    if opts.provider == "hcloud" {
        let _ = write!(
            mounts,
            "            - name: hcloud-token
              mountPath: {HCLOUD_TOKEN_DIR}
              readOnly: true
"
        );
        volumes.push_str(
            "        - name: hcloud-token
          secret:
            secretName: hcloud
            items:
              - key: token
                path: token
            # 0440: readable by the fsGroup, not by others.
            defaultMode: 288
",
        );
    }
    if let Some(file) = cloud_config_file(&opts.provider) {
        let secret = file.secret;
        let _ = write!(
            mounts,
            "            - name: {secret}
              mountPath: {CLOUD_CONFIG_DIR}
              readOnly: true
"
        );
        let _ = write!(
            volumes,
            "        - name: {secret}
          secret:
            secretName: {secret}
            # 0440: readable by the fsGroup, not by others (it may hold credentials).
            defaultMode: 288
"
        );
    }
    if opts.plugin_image.is_some() {
        let _ = write!(
            mounts,
            "            - name: {PLUGIN_VOLUME}
              mountPath: {PLUGIN_DIR}
              readOnly: true
"
        );
        let _ = write!(
            volumes,
            "        # Filled by the init container; the plugin's files only.
        - name: {PLUGIN_VOLUME}
          emptyDir:
            sizeLimit: 64Mi
"
        );
    }
    if mounts.is_empty() {
        return String::new();
    }
    format!("          volumeMounts:\n{mounts}      volumes:\n{volumes}")
}

/// The volume `--plugin-image`'s init container fills with the plugin.
const PLUGIN_VOLUME: &str = "plugin";

/// The init container of `--plugin-image`: copies `/plugin/` of the user's image into
/// the plugin volume, as the controller's user, with the controller's restrictions.
fn init_containers(opts: &ManifestOptions) -> String {
    let Some(image) = &opts.plugin_image else {
        return String::new();
    };
    format!(
        "      initContainers:
        - name: install-plugin
          image: {image}
          imagePullPolicy: IfNotPresent
          command: [\"cp\", \"-R\", \"/plugin/.\", \"{PLUGIN_DIR}/\"]
          volumeMounts:
            - name: {PLUGIN_VOLUME}
              mountPath: {PLUGIN_DIR}
          resources:
            requests:
              cpu: 10m
              memory: 16Mi
            limits:
              memory: 64Mi
{security}",
        image = q(image),
        security = CONTAINER_SECURITY_CONTEXT,
    )
}

/// Every container's restrictions: non-root, no capabilities, a read-only root.
const CONTAINER_SECURITY_CONTEXT: &str = "          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            runAsUser: 65532
            runAsGroup: 65532
            capabilities:
              drop: [\"ALL\"]
            seccompProfile:
              type: RuntimeDefault
";

/// The allocator's settings every Deployment runs with: (variable, value, why). The
/// memory figures of the README assume them; `cargo bench -- rss` and `-- scale` give
/// the controller these too.
///
/// glibc gives each thread that allocates an arena of its own, and memory freed in one
/// stays resident in it; the controller's threads allocate little, so sharing one
/// arena costs no measurable CPU and saves a quarter of the RSS at 50 000 nodes. And
/// glibc raises its mmap threshold to the size of each large block freed, so after the
/// first list the big transient buffers (a list's routes, the first pass's plan) come
/// from the heap, and the holes they leave among the nodes stay resident; a fixed
/// threshold maps them apart and gives them back when they are freed (README,
/// Benchmarks).
pub const ALLOCATOR_ENV: [(&str, &str, &str); 2] = [
    (
        "MALLOC_ARENA_MAX",
        "1",
        "One malloc arena for all threads: a quarter less memory at 50 000 nodes.",
    ),
    (
        "MALLOC_MMAP_THRESHOLD_",
        "131072",
        "Blocks of 128 KiB and more mapped apart and given back when freed.",
    ),
];

/// The `env` block: the allocator's settings, and the provider's credentials from
/// Secrets.
fn env(provider: &str) -> String {
    let mut env = String::from("          env:\n");
    for (name, value, why) in ALLOCATOR_ENV {
        env.push_str(&format!(
            "            # {why}\n            - name: {name}\n              value: \"{value}\"\n"
        ));
    }
    env + &credentials(provider)
}

/// The `env` entries that hand the provider its credentials, from Secrets.
fn credentials(provider: &str) -> String {
    let secret = |var: &str, name: &str, key: &str, optional: bool| {
        format!(
            "            - name: {var}
              valueFrom:
                secretKeyRef:
                  name: {name}
                  key: {key}
{}",
            if optional {
                "                  optional: true\n"
            } else {
                ""
            }
        )
    };
    match provider {
        "hcloud" => [
            format!(
                "            # The token as a file, not a variable: a rotated Secret is picked up.
            - name: HCLOUD_TOKEN_FILE
              value: {HCLOUD_TOKEN_DIR}/token
"
            ),
            secret("HCLOUD_NETWORK", "hcloud", "network", false),
        ]
        .concat(),
        "aws" => [
            "            # IRSA (an IAM role on the ServiceAccount), EKS Pod Identity or the
            # instance role is preferred: no long-lived keys. Keys here come first in the
            # chain; without the Secret they stay unset, and the region comes from the
            # instance metadata.
"
            .to_string(),
            secret("AWS_REGION", "aws-credentials", "region", true),
            secret(
                "AWS_ACCESS_KEY_ID",
                "aws-credentials",
                "access-key-id",
                true,
            ),
            secret(
                "AWS_SECRET_ACCESS_KEY",
                "aws-credentials",
                "secret-access-key",
                true,
            ),
        ]
        .concat(),
        _ => String::new(),
    }
}

/// A YAML double-quoted scalar. JSON's string syntax is a subset of it, so
/// serde_json does the escaping.
fn q(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".to_string())
}

/// A YAML flow sequence of quoted strings.
fn list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| q(s)).collect();
    format!("[{}]", quoted.join(", "))
}

/// RFC 1123 label: what namespace names must be.
fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// RFC 1123 subdomain: what most object names, leases included, must be.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

// --- monitoring (`--monitoring`) ----------------------------------------------------

/// The label of the Service that the ServiceMonitor selects.
const SERVICE_LABEL: &str = "app.kubernetes.io/name";

fn service(out: &mut String, opts: &ManifestOptions) {
    out.push_str("---\napiVersion: v1\nkind: Service\n");
    metadata(out, Some(&opts.namespace));
    let _ = writeln!(
        out,
        "spec:
  # The pods run on the host network: the endpoints are node addresses.
  selector:
    {SERVICE_LABEL}: {NAME}
  ports:
    - name: https
      port: {port}
      targetPort: {port}
      protocol: TCP",
        port = opts.metrics_port
    );
}

fn service_monitor(out: &mut String, opts: &ManifestOptions) {
    out.push_str("---\napiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\n");
    metadata(out, Some(&opts.namespace));
    let _ = writeln!(
        out,
        "spec:
  selector:
    matchLabels:
      {SERVICE_LABEL}: {NAME}
  namespaceSelector:
    matchNames: [{ns}]
  endpoints:
    - port: https
      scheme: https
      path: /metrics
      interval: 15s
      # Prometheus shows its ServiceAccount token, which the controller checks with a
      # TokenReview; bind that ServiceAccount to the ClusterRole {METRICS_READER}.
      bearerTokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
      tlsConfig:
        # The serving certificate is self-signed unless --tls-cert-file is given.
        insecureSkipVerify: true",
        ns = q(&opts.namespace)
    );
}

fn dashboard(out: &mut String, opts: &ManifestOptions) {
    out.push_str("---\napiVersion: v1\nkind: ConfigMap\n");
    let _ = writeln!(
        out,
        "metadata:
  name: {NAME}-dashboard
  namespace: {ns}
  labels:
    {SERVICE_LABEL}: {NAME}
    # Picked up by the Grafana sidecar (kube-prometheus-stack, grafana's Helm chart).
    grafana_dashboard: \"1\"
data:
  route-controller.json: {json}",
        ns = q(&opts.namespace),
        json = q(&dashboard_json().to_string())
    );
}

/// The Grafana dashboard: the panels answer KEP-5237's A/B question (what does
/// watch-based reconciliation cost and gain over polling?). Run one cluster with the
/// gate on and one with it off, and compare them side by side with `$job`/`$instance`.
pub fn dashboard_json() -> serde_json::Value {
    let rate = |expr: &str| format!("sum by ({expr}[5m]))");
    let quantiles = |metric: &str| {
        vec![
            serde_json::json!({ "expr": format!("histogram_quantile(0.5, sum by (le) (rate({metric}_bucket[5m])))"), "legendFormat": "p50" }),
            serde_json::json!({ "expr": format!("histogram_quantile(0.99, sum by (le) (rate({metric}_bucket[5m])))"), "legendFormat": "p99" }),
        ]
    };
    let panel =
        |id: u32, title: &str, description: &str, unit: &str, targets: Vec<serde_json::Value>| {
            serde_json::json!({
                "id": id,
                "type": "timeseries",
                "title": title,
                "description": description,
                "datasource": { "type": "prometheus", "uid": "${datasource}" },
                "fieldConfig": { "defaults": { "unit": unit }, "overrides": [] },
                "gridPos": { "h": 8, "w": 12, "x": ((id - 1) % 2) * 12, "y": ((id - 1) / 2) * 8 },
                "targets": targets,
            })
        };
    let target =
        |expr: String, legend: &str| serde_json::json!({ "expr": expr, "legendFormat": legend });
    serde_json::json!({
        "title": "route-controller",
        "uid": "route-controller",
        "schemaVersion": 39,
        "tags": ["kubernetes", "routes", "KEP-5237"],
        "time": { "from": "now-6h", "to": "now" },
        "templating": { "list": [
            { "name": "datasource", "type": "datasource", "query": "prometheus" },
        ] },
        "panels": [
            panel(1, "Cloud calls per operation and outcome",
                "Every route call (list, create, delete) by outcome: the cost of a mode. Compare a cluster in watch mode with one polling.",
                "reqps",
                vec![target(rate("operation, outcome) (rate(route_controller_cloud_requests_total"), "{{operation}} {{outcome}}")]),
            panel(2, "Passes by trigger",
                "Reconcile passes started, by what caused them (node_add, node_update, resync, poll, retry, ...).",
                "ops",
                vec![target(rate("trigger) (rate(route_controller_passes_total"), "{{trigger}}")]),
            panel(3, "Trigger to pass",
                "From a node change (or timer) to the start of the pass that serves it.",
                "s",
                quantiles("route_controller_trigger_to_pass_seconds")),
            panel(4, "Node to route",
                "From a node showing a pod CIDR to its route existing in the cloud.",
                "s",
                quantiles("route_controller_node_to_route_seconds")),
            panel(5, "Pending and failing routes",
                "Wanted routes not in place yet (pending) and those whose last attempt failed (failing).",
                "short",
                vec![target("sum by (state) (route_controller_routes{state=~\"pending|failing\"})".to_string(), "{{state}}")]),
            panel(6, "Rate-limited calls (429)",
                "Route calls refused for the provider's rate limit, and the HTTP 429s behind them. By design this stays at zero.",
                "reqps",
                vec![
                    target("sum(rate(route_controller_cloud_requests_total{outcome=\"rate_limited\"}[5m]))".to_string(), "route calls rate limited"),
                    target("sum(rate(route_controller_cloud_api_requests_total{code=\"429\"}[5m]))".to_string(), "HTTP 429"),
                ]),
        ],
    })
}
