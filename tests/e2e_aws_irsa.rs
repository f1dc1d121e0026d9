//! IRSA end to end: `route-controller run --cloud-provider=aws` with no keys at all,
//! only `AWS_ROLE_ARN` and `AWS_WEB_IDENTITY_TOKEN_FILE` as EKS's webhook sets them,
//! the token a ServiceAccount token from the real kube-apiserver's TokenRequest API
//! (audience `sts.amazonaws.com`, as the projected volume asks for it). The
//! controller trades it at moto's STS for the role's credentials and routes a node
//! in moto's EC2 with them.
//!
//! What it proves: moto's signature and IAM policy checks are on for every request
//! after the one unsigned `AssumeRoleWithWebIdentity`, and the process has no other
//! key moto would accept (its environment holds none, the metadata service is off),
//! so each EC2 and Service Quotas request it made was signed with the STS-issued key
//! and allowed by the role's own policy, which moto evaluates for an assumed-role
//! key. The start-up log names the web identity as the source, and no log line, at
//! debug level, shows the token or the session token STS issued.

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/moto.rs"]
mod moto;

use std::time::Duration;

use controller_process::Spawn;
use e2e_cluster::{Identity, create_node, poll_until, wait_for_network_unavailable};
use kube_apiserver::KubeApiserver;
use moto::Moto;
use serde_json::{Value, json};

const PATIENCE: Duration = Duration::from_secs(30);
const CLUSTER_NAME: &str = "e2e-irsa";
const NAMESPACE: &str = "kube-system";
const SERVICE_ACCOUNT: &str = "route-controller";

/// The README's IAM policy, with its optional quota read.
const POLICY: &[&str] = &[
    "ec2:DescribeRouteTables",
    "ec2:DescribeInstances",
    "ec2:CreateRoute",
    "ec2:ReplaceRoute",
    "ec2:DeleteRoute",
    "ec2:ModifyInstanceAttribute",
    "servicequotas:GetServiceQuota",
];

/// A TokenRequest for the ServiceAccount with IRSA's audience.
fn irsa_token(api: &KubeApiserver) -> String {
    // Creates the namespace and the ServiceAccount.
    api.service_account_token(NAMESPACE, SERVICE_ACCOUNT);
    let answer = api.post_json(
        &format!("/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{SERVICE_ACCOUNT}/token"),
        &json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": { "audiences": ["sts.amazonaws.com"], "expirationSeconds": 86400 },
        }),
    );
    answer["status"]["token"]
        .as_str()
        .unwrap_or_else(|| panic!("TokenRequest answer has no status.token: {answer}"))
        .to_string()
}

/// A JWT's claims (its middle part, base64url without padding).
fn claims(jwt: &str) -> Value {
    let payload = jwt.split('.').nth(1).expect("a JWT has three parts");
    let mut bits = 0u32;
    let mut count = 0;
    let mut bytes = Vec::new();
    for c in payload.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            other => panic!("not base64url: {other}"),
        };
        bits = (bits << 6) | u32::from(v);
        count += 6;
        if count >= 8 {
            count -= 8;
            bytes.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    serde_json::from_slice(&bytes).expect("the claims are JSON")
}

#[test]
fn irsa_web_identity_token_from_the_apiserver_routes_a_node_with_the_assumed_roles_key() {
    let (moto, api) = std::thread::scope(|s| {
        let moto = s.spawn(Moto::start);
        let api = KubeApiserver::start_fresh();
        (moto.join().expect("moto starts"), api)
    });
    // Set-up while moto checks nothing; afterwards the test signs as `admin`.
    let admin = moto::create_iam_user(&moto, "admin", &moto::allow_policy(&["ec2:*"]));
    let role_arn =
        moto::create_iam_role(&moto, "route-controller-irsa", &moto::allow_policy(POLICY));
    let setup = moto.ec2();
    let network = moto::network(&setup);
    let tag = format!("kubernetes.io/cluster/{CLUSTER_NAME}");
    let table = setup.create_route_table(&network.vpc, &[(tag.as_str(), "owned")]);
    let instance = setup.run_instance(&network.ami, &network.subnet);
    let ec2 = moto.ec2_as(&admin.0, &admin.1, moto::REGION);

    let token = irsa_token(&api);
    let claims = claims(&token);
    assert_eq!(claims["aud"], json!(["sts.amazonaws.com"]), "{claims}");
    assert_eq!(
        claims["sub"],
        json!(format!(
            "system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}"
        )),
        "{claims}"
    );
    let dir = kube_apiserver::scratch_dir("e2e-aws-irsa");
    let token_file = dir.join("eks.amazonaws.com-serviceaccount-token");
    std::fs::write(&token_file, &token).expect("write the token file");
    let identity = Identity::provision(&api, "e2e-aws-irsa");

    // From here moto checks every request but the controller's AssumeRoleWithWebIdentity.
    moto.check_auth_after(1);
    let mut ctl = Spawn::new()
        .arg("--cloud-provider=aws")
        .arg(format!("--cluster-name={CLUSTER_NAME}"))
        .arg("--cluster-cidr=10.244.0.0/16")
        .arg("--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true")
        .args(identity.flags())
        .env("AWS_ROLE_ARN", &role_arn)
        .env(
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            token_file.display().to_string(),
        )
        .env("AWS_REGION", moto::REGION)
        .env("AWS_ENDPOINT_URL", moto.url())
        .env("AWS_EC2_METADATA_DISABLED", "true")
        // Debug, so that the check below covers every line the credentials touch.
        .env("RUST_LOG", "debug")
        .spawn("aws-irsa");
    ctl.wait_ready(PATIENCE);
    let started = format!(
        "credentials: web identity (role {role_arn}, token file {})",
        token_file.display()
    );
    if !ctl.log().contains(&started) {
        ctl.fail(&format!("the start-up log does not say {started:?}"));
    }

    let name = instance.private_dns_name.clone();
    let cidr = "10.244.9.0/24";
    create_node(&api, &name, &[cidr], "10.0.1.10", &instance.provider_id());
    let routed = poll_until(PATIENCE, || {
        ec2.routes(&table)
            .iter()
            .any(|(d, target, state)| {
                d == cidr && target.as_deref() == Some(instance.id.as_str()) && state == "active"
            })
            .then_some(())
    });
    if routed.is_none() {
        ctl.fail(&format!(
            "no route {cidr} to {}: {:?}",
            instance.id,
            ec2.routes(&table)
        ));
    }
    if let Err(e) = wait_for_network_unavailable(
        &api,
        std::slice::from_ref(&name),
        "False",
        "RouteCreated",
        PATIENCE,
    ) {
        ctl.fail(&e);
    }
    let m = ctl.scrape();
    // The quota read, signed with the STS key, was allowed by the role's policy:
    // moto's "Routes per route table" (50), not the fallback of 500.
    assert_eq!(
        m.value(
            "route_controller_route_table_limit",
            &[("table", table.as_str())]
        ),
        50.0
    );
    assert_eq!(
        m.value(
            "route_controller_cloud_requests_total",
            &[
                ("provider", "aws"),
                ("operation", "create"),
                ("outcome", "success")
            ],
        ),
        1.0
    );
    // Never logged: the service account token, nor the session token STS issued
    // (moto's all start alike).
    let log = ctl.log();
    for (what, secret) in [
        ("the web identity token", token.as_str()),
        ("an STS session token", "FQoGZXIvYXdzEBYaD"),
    ] {
        if log.contains(secret) {
            ctl.fail(&format!("the log shows {what}"));
        }
    }
    ctl.terminate();
}
