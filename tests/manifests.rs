//! `route-controller manifests`: the output parsed as YAML, as kubectl would, and
//! checked object by object: kinds and names, RBAC equal to `rbac_rules` and free of
//! wildcards, Deployment arguments, probes, security context and credentials.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, EnvVar, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use route_controller::manifests::{
    CLOUD_CONFIG_DIR, METRICS_READER, ManifestOptions, NAME, PLUGIN_DIR, PROVIDERS, RbacRule,
    cloud_config_file, metrics_reader_rule, rbac_rules, render,
};
use serde_json::Value;

/// The objects of one rendering, typed.
struct Objects {
    kinds: Vec<(String, String, Option<String>)>,
    service_account: ServiceAccount,
    /// The controller's own ClusterRole.
    cluster_role: ClusterRole,
    /// The ClusterRole for scrapers of /metrics.
    metrics_reader: ClusterRole,
    cluster_role_binding: ClusterRoleBinding,
    roles: Vec<Role>,
    role_bindings: Vec<RoleBinding>,
    deployment: Deployment,
}

fn options(provider: &str) -> ManifestOptions {
    ManifestOptions {
        provider: provider.into(),
        cluster_cidr: "10.244.0.0/16,fd00:10:244::/56".into(),
        ..ManifestOptions::default()
    }
}

fn parse(opts: &ManifestOptions) -> Objects {
    let yaml = render(opts);
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&yaml).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let mut kinds = Vec::new();
    let mut by_kind: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for doc in docs {
        let kind = doc["kind"]
            .as_str()
            .expect("every document has a kind")
            .to_string();
        let meta = &doc["metadata"];
        kinds.push((
            kind.clone(),
            meta["name"].as_str().expect("a name").to_string(),
            meta["namespace"].as_str().map(String::from),
        ));
        by_kind.entry(kind).or_default().push(doc);
    }
    let one = |kind: &str| -> Value {
        let docs = by_kind.get(kind).unwrap_or_else(|| panic!("no {kind}"));
        assert_eq!(docs.len(), 1, "one {kind}");
        docs[0].clone()
    };
    let all = |kind: &str| -> Vec<Value> { by_kind.get(kind).cloned().unwrap_or_default() };
    let named = |kind: &str, name: &str| -> Value {
        let docs: Vec<Value> = all(kind)
            .into_iter()
            .filter(|d| d["metadata"]["name"] == name)
            .collect();
        assert_eq!(docs.len(), 1, "one {kind} {name}");
        docs[0].clone()
    };
    Objects {
        service_account: typed(one("ServiceAccount")),
        cluster_role: typed(named("ClusterRole", NAME)),
        metrics_reader: typed(named("ClusterRole", METRICS_READER)),
        cluster_role_binding: typed(one("ClusterRoleBinding")),
        roles: all("Role").into_iter().map(typed).collect(),
        role_bindings: all("RoleBinding").into_iter().map(typed).collect(),
        deployment: typed(one("Deployment")),
        kinds,
    }
}

fn typed<T: serde::de::DeserializeOwned>(v: Value) -> T {
    let kind = v["kind"].clone();
    serde_json::from_value(v).unwrap_or_else(|e| panic!("{kind} does not fit its API type: {e}"))
}

fn container(objects: &Objects) -> &Container {
    let spec = objects.deployment.spec.as_ref().expect("spec");
    let pod = spec.template.spec.as_ref().expect("pod spec");
    assert_eq!(pod.containers.len(), 1);
    &pod.containers[0]
}

fn policy(rules: &[RbacRule]) -> Vec<PolicyRule> {
    rules.iter().map(RbacRule::policy_rule).collect()
}

#[test]
fn every_provider_renders_its_objects_with_their_names() {
    assert_eq!(
        PROVIDERS,
        [
            "hcloud",
            "aws",
            "azure",
            "gce",
            "openstack",
            "alibaba",
            "exec",
            "fake"
        ],
        "every provider `run` takes"
    );
    for provider in PROVIDERS {
        let objects = parse(&options(provider));
        let ns = Some("kube-system".to_string());
        let names: Vec<(&str, &str, Option<&str>)> = objects
            .kinds
            .iter()
            .map(|(k, n, ns)| (k.as_str(), n.as_str(), ns.as_deref()))
            .collect();
        assert_eq!(
            names,
            [
                ("ServiceAccount", NAME, ns.as_deref()),
                ("ClusterRole", NAME, None),
                ("ClusterRoleBinding", NAME, None),
                ("Role", NAME, Some("default")),
                ("RoleBinding", NAME, Some("default")),
                ("Role", NAME, ns.as_deref()),
                ("RoleBinding", NAME, ns.as_deref()),
                ("ClusterRole", METRICS_READER, None),
                ("Deployment", NAME, ns.as_deref()),
            ],
            "{provider}"
        );
        assert_eq!(objects.service_account.metadata.name.as_deref(), Some(NAME));
    }
}

#[test]
fn another_namespace_gets_its_namespace_and_monitoring_its_three_objects() {
    let objects = parse(&ManifestOptions {
        namespace: "routing".into(),
        monitoring: true,
        ..options("hcloud")
    });
    let kinds: Vec<(&str, &str)> = objects
        .kinds
        .iter()
        .map(|(k, n, _)| (k.as_str(), n.as_str()))
        .collect();
    assert_eq!(
        kinds[0],
        ("Namespace", "routing"),
        "first, so the rest has a home"
    );
    let tail = &kinds[kinds.len() - 4..];
    assert_eq!(
        tail,
        [
            ("Deployment", NAME),
            ("Service", NAME),
            ("ServiceMonitor", NAME),
            ("ConfigMap", "route-controller-dashboard"),
        ]
    );
    let plain = parse(&options("hcloud"));
    assert!(
        plain
            .kinds
            .iter()
            .all(|(k, _, _)| k != "Namespace" && k != "ServiceMonitor")
    );
}

#[test]
fn scrapers_get_a_role_for_metrics_and_the_controller_may_review_their_tokens() {
    let objects = parse(&options("fake"));
    assert_eq!(
        objects.metrics_reader.rules.clone().unwrap_or_default(),
        [metrics_reader_rule()]
    );
    let rules = rbac_rules("kube-system", "route-controller");
    for (group, resource) in [
        ("authentication.k8s.io", "tokenreviews"),
        ("authorization.k8s.io", "subjectaccessreviews"),
    ] {
        let rule = rules
            .iter()
            .find(|r| r.resources == [resource])
            .unwrap_or_else(|| panic!("no rule for {resource}"));
        assert_eq!(
            (
                rule.namespace.as_deref(),
                rule.api_groups.as_slice(),
                rule.verbs.as_slice()
            ),
            (None, &[group.to_string()][..], &["create".to_string()][..])
        );
    }
}

#[test]
fn the_dashboard_answers_the_keps_ab_question() {
    let yaml = render(&ManifestOptions {
        monitoring: true,
        ..options("hcloud")
    });
    let docs: Vec<Value> = serde_saphyr::from_multiple(&yaml).unwrap();
    let map = docs
        .iter()
        .find(|d| d["kind"] == "ConfigMap")
        .expect("the dashboard ConfigMap");
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    let dashboard: Value =
        serde_json::from_str(map["data"]["route-controller.json"].as_str().unwrap()).unwrap();
    let exprs: Vec<String> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap().clone())
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    for needle in [
        "route_controller_cloud_requests_total",
        "route_controller_passes_total",
        "route_controller_trigger_to_pass_seconds_bucket",
        "route_controller_node_to_route_seconds_bucket",
        "route_controller_routes{state=~\"pending|failing\"}",
        "code=\"429\"",
    ] {
        assert!(
            exprs.iter().any(|e| e.contains(needle)),
            "no panel with {needle}: {exprs:?}"
        );
    }
}

#[test]
fn the_rbac_in_the_yaml_is_exactly_rbac_rules_and_has_no_wildcards() {
    let opts = ManifestOptions {
        namespace: "routing".into(),
        leader_elect_resource_name: "routes.example.com".into(),
        ..options("hcloud")
    };
    let objects = parse(&opts);
    let rules = rbac_rules("routing", "routes.example.com");

    let cluster: Vec<RbacRule> = rules
        .iter()
        .filter(|r| r.namespace.is_none())
        .cloned()
        .collect();
    assert_eq!(
        objects.cluster_role.rules.clone().unwrap_or_default(),
        policy(&cluster)
    );
    for role in &objects.roles {
        let ns = role
            .metadata
            .namespace
            .clone()
            .expect("a Role is namespaced");
        let here: Vec<RbacRule> = rules
            .iter()
            .filter(|r| r.namespace.as_deref() == Some(ns.as_str()))
            .cloned()
            .collect();
        assert!(
            !here.is_empty(),
            "a Role in {ns} that rbac_rules does not ask for"
        );
        assert_eq!(
            role.rules.clone().unwrap_or_default(),
            policy(&here),
            "Role in {ns}"
        );
    }
    let rendered = objects.cluster_role.rules.iter().flatten().count()
        + objects
            .roles
            .iter()
            .flat_map(|r| r.rules.iter().flatten())
            .count();
    assert_eq!(rendered, rules.len(), "every rule rendered once");

    for rule in objects
        .cluster_role
        .rules
        .iter()
        .flatten()
        .chain(objects.roles.iter().flat_map(|r| r.rules.iter().flatten()))
    {
        let words = rule
            .verbs
            .iter()
            .chain(rule.resources.iter().flatten())
            .chain(rule.api_groups.iter().flatten())
            .chain(rule.resource_names.iter().flatten());
        for w in words {
            assert!(!w.contains('*'), "wildcard in {rule:?}");
        }
        assert!(rule.non_resource_urls.is_none());
    }

    // The rules themselves: least privilege for what the controller does.
    let verbs_of = |resource: &str| -> Vec<(Option<String>, Vec<String>, Vec<String>)> {
        rules
            .iter()
            .filter(|r| r.resources == [resource])
            .map(|r| {
                (
                    r.namespace.clone(),
                    r.verbs.clone(),
                    r.resource_names.clone(),
                )
            })
            .collect()
    };
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert_eq!(
        verbs_of("nodes"),
        [(None, s(&["get", "list", "watch"]), vec![])]
    );
    assert_eq!(verbs_of("nodes/status"), [(None, s(&["patch"]), vec![])]);
    assert_eq!(
        verbs_of("events"),
        [(Some("default".into()), s(&["create", "patch"]), vec![])]
    );
    assert_eq!(
        verbs_of("leases"),
        [
            (Some("routing".into()), s(&["create"]), vec![]),
            (
                Some("routing".into()),
                s(&["get", "update"]),
                s(&["routes.example.com"])
            ),
        ]
    );
}

#[test]
fn the_bindings_give_the_roles_to_the_service_account() {
    let opts = ManifestOptions {
        namespace: "routing".into(),
        ..options("fake")
    };
    let objects = parse(&opts);
    let check = |role_ref_kind: &str,
                 role_ref: &k8s_openapi::api::rbac::v1::RoleRef,
                 subjects: &[k8s_openapi::api::rbac::v1::Subject]| {
        assert_eq!(role_ref.kind, role_ref_kind);
        assert_eq!(role_ref.name, NAME);
        assert_eq!(role_ref.api_group, "rbac.authorization.k8s.io");
        assert_eq!(subjects.len(), 1);
        assert_eq!(subjects[0].kind, "ServiceAccount");
        assert_eq!(subjects[0].name, NAME);
        assert_eq!(subjects[0].namespace.as_deref(), Some("routing"));
    };
    let crb = &objects.cluster_role_binding;
    check(
        "ClusterRole",
        &crb.role_ref,
        crb.subjects.as_deref().unwrap_or_default(),
    );
    let mut binding_namespaces = Vec::new();
    for rb in &objects.role_bindings {
        check(
            "Role",
            &rb.role_ref,
            rb.subjects.as_deref().unwrap_or_default(),
        );
        binding_namespaces.push(rb.metadata.namespace.clone().unwrap_or_default());
    }
    let role_namespaces: Vec<String> = objects
        .roles
        .iter()
        .map(|r| r.metadata.namespace.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        binding_namespaces, role_namespaces,
        "each Role has its binding"
    );
    assert_eq!(role_namespaces, ["default", "routing"]);
}

#[test]
fn a_controller_in_namespace_default_gets_one_role_for_events_and_leases() {
    let objects = parse(&ManifestOptions {
        namespace: "default".into(),
        ..options("fake")
    });
    assert_eq!(objects.roles.len(), 1);
    let resources: Vec<String> = objects.roles[0]
        .rules
        .iter()
        .flatten()
        .flat_map(|r| r.resources.clone().unwrap_or_default())
        .collect();
    assert_eq!(resources, ["events", "leases", "leases"]);
}

/// `--flag=value` arguments as a map; panics on a repeated flag.
fn flags(args: &[String]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for a in args.iter().skip(1) {
        let (flag, value) = a
            .strip_prefix("--")
            .and_then(|f| f.split_once('='))
            .unwrap_or_else(|| panic!("{a:?} is not --flag=value"));
        assert!(
            out.insert(flag.to_string(), value.to_string()).is_none(),
            "{flag} twice"
        );
    }
    out
}

#[test]
fn the_deployment_args_parse_back_to_every_flag() {
    let opts = ManifestOptions {
        namespace: "routing".into(),
        cluster_name: "prod-eu".into(),
        leader_elect_resource_name: "routes".into(),
        metrics_port: 9100,
        replicas: 3,
        ..options("hcloud")
    };
    let objects = parse(&opts);
    let args = container(&objects).args.clone().expect("args");
    assert_eq!(args[0], "run");
    let expected: BTreeMap<String, String> = [
        ("cloud-provider", "hcloud"),
        ("cluster-cidr", "10.244.0.0/16,fd00:10:244::/56"),
        ("cluster-name", "prod-eu"),
        ("configure-cloud-routes", "true"),
        (
            "feature-gates",
            "CloudControllerManagerWatchBasedRoutesReconciliation=true",
        ),
        ("leader-elect", "true"),
        ("leader-elect-resource-name", "routes"),
        ("leader-elect-resource-namespace", "routing"),
        ("secure-port", "9100"),
        ("bind-address", "0.0.0.0"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    assert_eq!(flags(&args), expected);
    let spec = objects.deployment.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));

    let poll = parse(&ManifestOptions {
        watch_based: false,
        ..options("aws")
    });
    let args = flags(&container(&poll).args.clone().unwrap());
    assert_eq!(
        args["feature-gates"],
        "CloudControllerManagerWatchBasedRoutesReconciliation=false"
    );
    assert_eq!(args["cloud-provider"], "aws");
}

#[test]
fn probes_point_at_the_metrics_port_and_paths() {
    let objects = parse(&ManifestOptions {
        metrics_port: 9100,
        ..options("fake")
    });
    let c = container(&objects);
    let port_of = |probe: &Option<k8s_openapi::api::core::v1::Probe>| {
        let get = probe
            .as_ref()
            .and_then(|p| p.http_get.clone())
            .expect("an httpGet probe");
        assert_eq!(get.scheme.as_deref(), Some("HTTPS"), "the secure port");
        (get.path.unwrap_or_default(), get.port)
    };
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    assert_eq!(
        port_of(&c.liveness_probe),
        ("/healthz".to_string(), IntOrString::Int(9100))
    );
    assert_eq!(
        port_of(&c.readiness_probe),
        ("/readyz".to_string(), IntOrString::Int(9100))
    );
    let ports = c.ports.clone().unwrap_or_default();
    assert_eq!(ports.len(), 1);
    assert_eq!(ports[0].container_port, 9100);
}

#[test]
fn the_pod_runs_unprivileged_with_small_resources() {
    let objects = parse(&options("hcloud"));
    let pod = objects
        .deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let pod_sc = pod
        .security_context
        .as_ref()
        .expect("a pod security context");
    assert_eq!(pod_sc.run_as_non_root, Some(true));
    assert_eq!(pod_sc.run_as_user, Some(65532));
    assert_eq!(
        pod_sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );
    assert_eq!(pod.service_account_name.as_deref(), Some(NAME));
    assert_eq!(pod.automount_service_account_token, Some(true));
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-cluster-critical")
    );
    let tolerated: Vec<String> = pod
        .tolerations
        .iter()
        .flatten()
        .filter_map(|t| t.key.clone())
        .collect();
    for key in [
        "node-role.kubernetes.io/control-plane",
        "node.cloudprovider.kubernetes.io/uninitialized",
    ] {
        assert!(tolerated.iter().any(|k| k == key), "no toleration of {key}");
    }

    let c = container(&objects);
    let sc = c
        .security_context
        .as_ref()
        .expect("a container security context");
    assert_eq!(sc.run_as_non_root, Some(true));
    assert_eq!(sc.run_as_user, Some(65532));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    assert_eq!(sc.privileged, None);
    let caps = sc.capabilities.as_ref().expect("capabilities");
    assert_eq!(caps.drop.as_deref(), Some(&["ALL".to_string()][..]));
    assert_eq!(caps.add, None);
    assert_eq!(
        sc.seccomp_profile.as_ref().map(|s| s.type_.as_str()),
        Some("RuntimeDefault")
    );

    let resources = c.resources.as_ref().expect("resources");
    let get =
        |m: &Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
         k: &str| { m.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone()) };
    assert_eq!(get(&resources.requests, "cpu").as_deref(), Some("10m"));
    assert_eq!(get(&resources.requests, "memory").as_deref(), Some("16Mi"));
    // About twice the measured 32.4 MiB at 50 000 nodes over a relist (README, `cargo bench -- scale`).
    assert_eq!(get(&resources.limits, "memory").as_deref(), Some("64Mi"));
}

/// The credential entries of `c`'s env: all of it but the allocator settings, which
/// are no credentials (`every_deployment_sets_the_allocator_as_measured`).
fn secret_env(c: &Container) -> Vec<(String, String, String, bool)> {
    secret_env_of(c.env.iter().flatten().filter(|e| !is_allocator_setting(e)))
}

fn is_allocator_setting(e: &EnvVar) -> bool {
    e.name.starts_with("MALLOC_")
}

fn secret_env_of<'a>(env: impl Iterator<Item = &'a EnvVar>) -> Vec<(String, String, String, bool)> {
    env.map(|e: &EnvVar| {
        assert_eq!(e.value, None, "{}: credentials only from Secrets", e.name);
        let r = e
            .value_from
            .as_ref()
            .and_then(|v| v.secret_key_ref.clone())
            .unwrap_or_else(|| panic!("{} is not from a Secret", e.name));
        (e.name.clone(), r.name, r.key, r.optional.unwrap_or(false))
    })
    .collect()
}

#[test]
fn credentials_come_from_secrets_for_each_provider() {
    let t = |name: &str, secret: &str, key: &str, optional: bool| {
        (
            name.to_string(),
            secret.to_string(),
            key.to_string(),
            optional,
        )
    };
    // The Hetzner token is a file from the Secret, so that a rotation reaches the
    // running controller; the network name is no secret worth a file.
    let hcloud = parse(&options("hcloud"));
    let c = container(&hcloud);
    let token_file = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "HCLOUD_TOKEN_FILE")
        .and_then(|e| e.value.clone())
        .expect("HCLOUD_TOKEN_FILE");
    assert!(c.env.iter().flatten().all(|e| e.name != "HCLOUD_TOKEN"));
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| token_file.starts_with(&m.mount_path))
        .expect("the token's mount");
    let pod = hcloud
        .deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap();
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .expect("the token's volume");
    let secret = volume.secret.as_ref().expect("a Secret volume");
    assert_eq!(secret.secret_name.as_deref(), Some("hcloud"));
    assert_eq!(secret.default_mode, Some(0o440));
    assert_eq!(
        pod.security_context.as_ref().and_then(|s| s.fs_group),
        Some(65532),
        "readable by the controller's group"
    );
    let env: Vec<_> = secret_env_of(c.env.iter().flatten().filter(|e| e.value_from.is_some()));
    assert_eq!(env, [t("HCLOUD_NETWORK", "hcloud", "network", false)]);
    assert_eq!(
        secret_env(container(&parse(&options("aws")))),
        [
            t("AWS_REGION", "aws-credentials", "region", true),
            t(
                "AWS_ACCESS_KEY_ID",
                "aws-credentials",
                "access-key-id",
                true
            ),
            t(
                "AWS_SECRET_ACCESS_KEY",
                "aws-credentials",
                "secret-access-key",
                true
            ),
        ]
    );
    assert!(
        render(&options("aws")).contains("IRSA"),
        "the AWS manifest says IRSA is preferred"
    );
    assert_eq!(secret_env(container(&parse(&options("fake")))), []);
}

/// The pod's spec of a rendering.
fn pod_spec(objects: &Objects) -> &k8s_openapi::api::core::v1::PodSpec {
    let spec = objects.deployment.spec.as_ref().expect("spec");
    spec.template.spec.as_ref().expect("pod spec")
}

/// Every provider with a settings file (azure.json, gce.conf, cloud.conf, the exec
/// plugin's) mounts it from its Secret, read-only and not world-readable, where
/// --cloud-config points; the header says how to create the Secret from the CCM's
/// file. With the mount's path changed in one place only, `run` would not find it.
#[test]
fn each_settings_file_is_mounted_from_its_secret_where_cloud_config_points() {
    let with_file: Vec<&str> = PROVIDERS
        .into_iter()
        .filter(|p| cloud_config_file(p).is_some())
        .collect();
    assert_eq!(with_file, ["azure", "gce", "openstack", "alibaba", "exec"]);
    for provider in PROVIDERS {
        let objects = parse(&options(provider));
        let c = container(&objects);
        let args = flags(&c.args.clone().unwrap());
        let Some(file) = cloud_config_file(provider) else {
            assert!(!args.contains_key("cloud-config"), "{provider}: {args:?}");
            continue;
        };
        let path = &args["cloud-config"];
        let mount = c
            .volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == file.secret)
            .unwrap_or_else(|| panic!("{provider}: no mount of {}", file.secret));
        assert_eq!(path, &format!("{}/{}", mount.mount_path, file.key));
        assert_eq!(mount.mount_path, CLOUD_CONFIG_DIR);
        assert_eq!(mount.read_only, Some(true), "{provider}");
        let volume = pod_spec(&objects)
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == mount.name)
            .expect("the mount's volume");
        let secret = volume.secret.as_ref().expect("a Secret volume");
        assert_eq!(secret.secret_name.as_deref(), Some(file.secret));
        assert_eq!(secret.default_mode, Some(0o440), "{provider}");
        assert_eq!(secret.optional, None, "{provider}: run needs the file");
        let text = render(&options(provider));
        let create = format!(
            "kubectl -n kube-system create secret generic {} --from-file={}={}",
            file.secret, file.key, file.source
        );
        assert!(text.contains(&create), "{provider}: {text}");
    }
    let sources: Vec<&str> = ["azure", "gce", "openstack"]
        .into_iter()
        .filter_map(cloud_config_file)
        .map(|f| f.source)
        .collect();
    assert_eq!(
        sources,
        [
            "/etc/kubernetes/azure.json",
            "/etc/gce.conf",
            "/etc/kubernetes/cloud.conf"
        ],
        "the CCMs' own files"
    );
    assert!(render(&options("azure")).contains("Network Contributor"));
    assert!(render(&options("gce")).contains("GOOGLE_APPLICATION_CREDENTIALS"));
}

/// The exec provider's plugin: by default in the controller's image (the header shows
/// the Dockerfile of an image built FROM it); with --plugin-image, copied by an init
/// container that runs as restricted as the controller into an emptyDir that the
/// controller mounts read-only where Command= points.
#[test]
fn the_exec_plugin_comes_from_the_image_or_from_a_plugin_image() {
    let in_image = options("exec");
    let objects = parse(&in_image);
    assert_eq!(pod_spec(&objects).init_containers, None);
    let text = render(&in_image);
    assert!(
        text.contains(&format!("#       FROM {}\n", in_image.image)),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "COPY --chmod=0555 my-router {PLUGIN_DIR}/my-router"
        )),
        "{text}"
    );
    assert!(
        container(&objects)
            .volume_mounts
            .iter()
            .flatten()
            .all(|m| m.mount_path != PLUGIN_DIR),
        "the image's plugin is not hidden by a volume"
    );

    let objects = parse(&ManifestOptions {
        plugin_image: Some("ghcr.io/acme/router-plugin:1.2".into()),
        ..options("exec")
    });
    let pod = pod_spec(&objects);
    let init = pod.init_containers.as_deref().expect("an init container");
    assert_eq!(init.len(), 1);
    let init = &init[0];
    assert_eq!(
        init.image.as_deref(),
        Some("ghcr.io/acme/router-plugin:1.2")
    );
    let command = init.command.clone().unwrap_or_default();
    assert_eq!(
        command,
        ["cp", "-R", "/plugin/.", &format!("{PLUGIN_DIR}/")]
    );
    let mount_of = |c: &Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .find(|m| m.mount_path == PLUGIN_DIR)
            .cloned()
            .unwrap_or_else(|| panic!("{}: no mount at {PLUGIN_DIR}", c.name))
    };
    let (filled, used) = (mount_of(init), mount_of(container(&objects)));
    assert_eq!(filled.name, used.name);
    assert_ne!(filled.read_only, Some(true), "the init container writes it");
    assert_eq!(used.read_only, Some(true), "the controller only runs it");
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == used.name)
        .expect("the plugin's volume");
    assert!(
        volume.empty_dir.is_some(),
        "an emptyDir, not the host's disk"
    );
    assert_eq!(
        init.security_context,
        container(&objects).security_context,
        "the init container is as restricted as the controller"
    );
    assert!(init.resources.as_ref().is_some_and(|r| r.limits.is_some()));
}

/// Guards the allocator settings the memory figures depend on (README, Benchmarks:
/// one malloc arena saves a quarter of the RSS at 50 000 nodes, a fixed mmap threshold
/// 9 MiB more): every provider's Deployment sets `MALLOC_ARENA_MAX=1` and
/// `MALLOC_MMAP_THRESHOLD_=131072`, and nothing else of the allocator's.
#[test]
fn every_deployment_sets_the_allocator_as_measured() {
    for provider in PROVIDERS {
        let objects = parse(&options(provider));
        let set: Vec<(&str, Option<&str>)> = container(&objects)
            .env
            .iter()
            .flatten()
            .filter(|e| is_allocator_setting(e))
            .map(|e| (e.name.as_str(), e.value.as_deref()))
            .collect();
        assert_eq!(
            set,
            [
                ("MALLOC_ARENA_MAX", Some("1")),
                ("MALLOC_MMAP_THRESHOLD_", Some("131072"))
            ],
            "{provider}"
        );
    }
}

#[test]
fn operator_values_are_quoted_so_they_cannot_change_the_yaml() {
    let sneaky = "prod\n          privileged: true\n# \"'";
    let objects = parse(&ManifestOptions {
        cluster_name: sneaky.into(),
        image: "registry.example.com/rc:1.0 # not a comment".into(),
        ..options("fake")
    });
    let c = container(&objects);
    assert_eq!(flags(&c.args.clone().unwrap())["cluster-name"], sneaky);
    assert_eq!(
        c.image.as_deref(),
        Some("registry.example.com/rc:1.0 # not a comment")
    );
    assert_eq!(c.security_context.as_ref().unwrap().privileged, None);
}

#[test]
fn invalid_options_are_refused_naming_the_flag() {
    assert_eq!(options("hcloud").validate(), Ok(()));
    for (change, flag) in [
        (
            Box::new(|o: &mut ManifestOptions| o.provider = "vultr".into())
                as Box<dyn Fn(&mut ManifestOptions)>,
            "--cloud-provider",
        ),
        (
            Box::new(|o| o.plugin_image = Some("ghcr.io/acme/plugin:1".into())),
            "--plugin-image",
        ),
        (
            Box::new(|o| o.cluster_cidr = String::new()),
            "--cluster-cidr",
        ),
        (
            Box::new(|o| o.cluster_cidr = "10.0.0.0/33".into()),
            "--cluster-cidr",
        ),
        (
            Box::new(|o| o.namespace = "Kube_System".into()),
            "--namespace",
        ),
        (
            Box::new(|o| o.leader_elect_resource_name = "".into()),
            "--leader-elect-resource-name",
        ),
        (Box::new(|o| o.image = "a b".into()), "--image"),
        (Box::new(|o| o.cluster_name = " ".into()), "--cluster-name"),
        (Box::new(|o| o.metrics_port = 0), "--metrics-port"),
        (Box::new(|o| o.replicas = 0), "--replicas"),
    ] {
        let mut o = options("hcloud");
        change(&mut o);
        let err = o.validate().expect_err(flag);
        assert!(err.starts_with(flag), "{flag}: {err}");
    }
    assert!(
        ManifestOptions::default().validate().is_err(),
        "the cluster CIDR has no default"
    );
}

/// A placeholder copied from the README or an example ends in `ImagePullBackOff`, so it
/// is refused; every real form of reference passes, the default (what the README's
/// build tags) included.
#[test]
fn placeholder_images_are_refused_and_real_references_pass() {
    for image in [
        "REGISTRY/route-controller:0.1.0",
        "<registry>/route-controller:0.1.0",
        "YOUR_REGISTRY:5000/route-controller",
        "example.com/route-controller:0.1.0",
        "registry.example.com/route-controller:0.1.0",
        "registry.example.org:5000/team/route-controller@sha256:0123",
    ] {
        let err = ManifestOptions {
            image: image.into(),
            ..options("hcloud")
        }
        .validate()
        .expect_err(image);
        assert!(err.starts_with("--image:"), "{err}");
        assert!(err.contains("placeholder") && err.contains("push"), "{err}");
    }
    for image in [
        ManifestOptions::default().image.as_str(),
        "ghcr.io/acme/route-controller:0.1.0",
        "localhost:5000/route-controller:0.1.0-RC1",
        "registry.k8s.io/team/route-controller@sha256:0123abcd",
        "examples.io/route-controller",
    ] {
        let opts = ManifestOptions {
            image: image.into(),
            ..options("hcloud")
        };
        assert_eq!(opts.validate(), Ok(()), "{image}");
    }
    let err = ManifestOptions {
        plugin_image: Some("REGISTRY/router-plugin:1".into()),
        ..options("exec")
    }
    .validate()
    .expect_err("a placeholder plugin image");
    assert!(err.starts_with("--plugin-image:"), "{err}");
}

/// Without --image, the first lines say that the image must be built and pushed; with
/// one, they do not.
#[test]
fn the_default_image_comes_with_a_note_to_build_and_push_it() {
    let default = render(&options("hcloud"));
    let top: String = default.lines().take(6).collect::<Vec<_>>().join("\n");
    assert!(
        top.contains(&format!(
            "{} exists only once you build it and push it",
            ManifestOptions::default().image
        )) && top.contains("Dockerfile"),
        "{top}"
    );
    let given = render(&ManifestOptions {
        image: "ghcr.io/acme/route-controller:0.1.0".into(),
        ..options("hcloud")
    });
    assert!(!given.contains("exists only once you build it"), "{given}");
}

/// Guards the Alibaba Cloud RAM policy in the manifests' header: every action the
/// provider calls (tests/alibaba.rs checks the calls against the lists) is named,
/// the optional ones too.
#[test]
fn the_alibaba_header_names_every_ram_action_the_provider_calls() {
    let header = route_controller::manifests::render(&options("alibaba"));
    let header: String = header
        .lines()
        .filter(|l| l.starts_with('#'))
        .map(|l| l.trim_start_matches('#'))
        .collect::<Vec<_>>()
        .join(" ");
    let alibaba = route_controller::cloud::alibaba::RAM_ACTIONS.iter();
    for action in alibaba.chain(route_controller::cloud::alibaba::OPTIONAL_RAM_ACTIONS) {
        assert!(header.contains(action), "{action} missing from: {header}");
    }
}
