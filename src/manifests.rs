//! `route-controller manifests`: the Kubernetes objects that run the controller,
//! printed as ready-to-apply YAML (ServiceAccount, RBAC, Deployment).
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

/// The providers `manifests` knows the credentials of.
pub const PROVIDERS: [&str; 3] = ["hcloud", "aws", "fake"];

/// What to render. Field docs give the defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestOptions {
    /// `--cloud-provider`: `hcloud`, `aws` or `fake` (default `hcloud`).
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
    /// Port of `/metrics`, `/healthz` and `/readyz` (default 8080).
    pub metrics_port: u16,
    /// Replicas of the Deployment; one leads, the others stand by (default 2).
    pub replicas: u32,
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
            metrics_port: 8080,
            replicas: 2,
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
        if self.image.trim().is_empty() || self.image.chars().any(char::is_whitespace) {
            return Err(format!(
                "--image: {:?} is not an image reference; give e.g. registry.example.com/route-controller:{}",
                self.image,
                env!("CARGO_PKG_VERSION")
            ));
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
///   the object exists), hence a rule of its own.
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
    ]
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
    let mut out = String::with_capacity(8192);
    header(&mut out, opts);
    service_account(&mut out, opts);
    let rules = rbac_rules(&opts.namespace, &opts.leader_elect_resource_name);
    cluster_role(&mut out, opts, &rules);
    for ns in role_namespaces(&rules) {
        role(&mut out, opts, ns, &rules);
    }
    deployment(&mut out, opts);
    out
}

fn header(out: &mut String, opts: &ManifestOptions) {
    let _ = writeln!(
        out,
        "# route-controller {} for provider {}, namespace {}.",
        env!("CARGO_PKG_VERSION"),
        opts.provider,
        opts.namespace
    );
    out.push_str(
        "# Generated by `route-controller manifests`; apply with `kubectl apply -f FILE`.\n",
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
            "# Credentials come preferably from IRSA or the instance role; static keys from\n\
             # the optional Secret \"aws-credentials\" are the fallback.\n",
        ),
        _ => {}
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
  # With the host network two replicas cannot share a node (one metrics port), so a
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
      containers:
        - name: {NAME}
          image: {image}
          imagePullPolicy: IfNotPresent
          args:
{args}{env}          ports:
            - name: metrics
              containerPort: {port}
              protocol: TCP
          livenessProbe:
            httpGet:
              path: /healthz
              port: {port}
            periodSeconds: 10
            timeoutSeconds: 3
            failureThreshold: 3
          readinessProbe:
            httpGet:
              path: /readyz
              port: {port}
            periodSeconds: 5
            timeoutSeconds: 3
            failureThreshold: 2
          # A small controller: a few threads and one copy of the node list.
          resources:
            requests:
              cpu: 10m
              memory: 32Mi
            limits:
              memory: 64Mi
          securityContext:
            allowPrivilegeEscalation: false
            readOnlyRootFilesystem: true
            runAsNonRoot: true
            runAsUser: 65532
            runAsGroup: 65532
            capabilities:
              drop: [\"ALL\"]
            seccompProfile:
              type: RuntimeDefault
",
        replicas = opts.replicas,
        image = q(&opts.image),
        env = credentials(&opts.provider),
        port = opts.metrics_port,
    );
}

/// The arguments, spelled as the cloud-controller-manager's, so an operator can
/// compare them with an existing manifest.
pub fn container_args(opts: &ManifestOptions) -> Vec<String> {
    vec![
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
        format!("--metrics-bind-address=0.0.0.0:{}", opts.metrics_port),
    ]
}

/// The `env` block that hands the provider its credentials, from Secrets.
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
            "          env:\n".to_string(),
            secret("HCLOUD_TOKEN", "hcloud", "token", false),
            secret("HCLOUD_NETWORK", "hcloud", "network", false),
        ]
        .concat(),
        "aws" => [
            "          # IRSA (an IAM role on the ServiceAccount) or the instance role is
          # preferred: no long-lived keys. Without the Secret these stay unset, and the
          # region comes from the instance metadata.
          env:
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
