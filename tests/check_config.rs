//! `route-controller check-config` and the order in which `run` reads its settings, as
//! an operator meets them with no cluster: every provider's CCM config read as the CCM
//! reads it, what run would refuse exits 2 naming the key, no secret printed, and a bad
//! cloud config reported before the missing kubeconfig.

#[path = "support/tempdir.rs"]
mod tempdir;

use std::process::{Command, Output};

use tempdir::TempDir;

/// Runs the binary with a clean cloud environment (no kubeconfig, no credentials of the
/// machine's), and `env`.
fn route_controller(args: &[&str], env: &[(&str, &str)], home: &TempDir) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_route-controller"));
    command.args(args).env_clear();
    command
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home.path())
        // No instance metadata service is here; the AWS chain must not wait for one.
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for (k, v) in env {
        command.env(k, v);
    }
    command.output().expect("run route-controller")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `check-config` for `provider` with `file` as its cloud config.
fn check(provider: &str, file: &str, env: &[(&str, &str)]) -> Output {
    let dir = TempDir::new("check-config");
    let path = dir.write("cloud.conf", file);
    route_controller(
        &[
            "check-config",
            &format!("--cloud-provider={provider}"),
            &format!("--cloud-config={}", path.display()),
            "--cluster-cidr=10.244.0.0/16",
        ],
        env,
        &dir,
    )
}

/// The configs each CCM takes, read as it reads them: what check-config prints of them.
#[test]
fn each_ccms_own_config_is_understood_and_shown_without_secrets() {
    let aws = check(
        "aws",
        "[Global]\nRegion = eu-west-1\nKubernetesClusterID = prod\nVPC = vpc-1\nZonee = x\n",
        &[
            ("AWS_ACCESS_KEY_ID", "AKIAEXAMPLE"),
            ("AWS_SECRET_ACCESS_KEY", "aws-secret-never-shown"),
        ],
    );
    let out = text(&aws.stdout);
    assert_eq!(aws.status.code(), Some(0), "{out}{}", text(&aws.stderr));
    for expected in [
        "region                   eu-west-1",
        "kubernetes.io/cluster/prod",
        "VPC does not concern routes",
        "unknown name \"zonee\" in [Global]; ignored (did you mean Zone?)",
        "environment variables",
        "Nothing was asked of the cluster or the cloud",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert!(!out.contains("aws-secret-never-shown"), "{out}");

    let azure = check(
        "azure",
        r#"{"cloud": "AzurePublicCloud", "tenantId": "t", "SubscriptionID": "sub-1",
            "resourceGroup": "RG", "routeTableName": "rt", "useManagedIdentityExtension": true,
            "userAssignedIdentityId": "uami-1", "aadClientSecret": "azure-secret-never-shown",
            "aadClientId": "app"}"#,
        &[],
    );
    let out = text(&azure.stdout);
    assert_eq!(azure.status.code(), Some(0), "{out}{}", text(&azure.stderr));
    assert!(
        out.contains(
            "/subscriptions/sub-1/resourceGroups/rg/providers/Microsoft.Network/routeTables/rt"
        ),
        "{out}"
    );
    assert!(
        out.contains("user-assigned managed identity uami-1"),
        "{out}"
    );
    assert!(!out.contains("azure-secret-never-shown"), "{out}");

    let hcloud = check(
        "hcloud",
        "HCLOUD_TOKEN=hcloud-token-never-shown\nHCLOUD_NETWORK=k8s\nHCLOUD_LOAD_BALANCERS_ENABLED=false\n",
        &[],
    );
    let out = text(&hcloud.stdout);
    assert_eq!(
        hcloud.status.code(),
        Some(0),
        "{out}{}",
        text(&hcloud.stderr)
    );
    assert!(out.contains("network                  k8s"), "{out}");
    assert!(
        out.contains("HCLOUD_LOAD_BALANCERS_ENABLED does not concern routes"),
        "{out}"
    );
    assert!(!out.contains("hcloud-token-never-shown"), "{out}");

    let gce = check(
        "gce",
        "[Global]\nproject-id = my-project\nnetwork-name = my-network\nregional = true\n",
        &[],
    );
    let out = text(&gce.stdout);
    assert_eq!(gce.status.code(), Some(0), "{out}{}", text(&gce.stderr));
    assert!(out.contains("my-network in project my-project"), "{out}");

    // The peer's file as its docs write it (JSON, the AccessKey pair base64-encoded),
    // with YAML's keys in any case, several tables, a key of its service controller and
    // a typo.
    let alibaba = check(
        "alibaba",
        "Global:\n  Region: cn-hangzhou\n  vpcid: vpc-1\n  routeTableIDs: vtb-a,vtb-b\n  \
         accessKeyID: TFRBSWV4YW1wbGU=\n  accessKeySecret: YWxpYmFiYS1zZWNyZXQtbmV2ZXItc2hvd24=\n  \
         serviceBackendType: eni\n  vpcID2: x\n",
        &[],
    );
    let out = text(&alibaba.stdout);
    assert_eq!(
        alibaba.status.code(),
        Some(0),
        "{out}{}",
        text(&alibaba.stderr)
    );
    for expected in [
        "vtb-a, vtb-b",
        "cn-hangzhou",
        "the AccessKey LTAIexample from the cloud config",
        "serviceBackendType does not concern routes",
        "unknown key Global.vpcID2 for --cloud-provider=alibaba; ignored (did you mean vpcid?)",
        "custom entries a table: the account's quota vpc_quota_route_entrys_num, read from \
         Quota Center (200 without quotas:ListProductQuotas)",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert!(!out.contains("alibaba-secret-never-shown"), "{out}");
    let rrsa = check(
        "alibaba",
        "{\"Global\": {\"region\": \"cn-beijing\", \"vpcid\": \"vpc-2\"}}",
        &[
            ("ALIBABA_CLOUD_ROLE_ARN", "acs:ram::1:role/routes"),
            (
                "ALIBABA_CLOUD_OIDC_PROVIDER_ARN",
                "acs:ram::1:oidc-provider/ack",
            ),
            (
                "ALIBABA_CLOUD_OIDC_TOKEN_FILE",
                "/var/run/secrets/tokens/oidc-token",
            ),
        ],
    );
    let out = text(&rrsa.stdout);
    assert_eq!(rrsa.status.code(), Some(0), "{out}{}", text(&rrsa.stderr));
    assert!(out.contains("RRSA: role acs:ram::1:role/routes"), "{out}");
    assert!(out.contains("the VPC's one route table"), "{out}");
}

/// What run would refuse at start: exit 2, one line naming the key and the fix.
#[test]
fn what_run_would_refuse_exits_2_naming_the_key() {
    let cases = [
        (
            "aws",
            "[Global]\nKubernetesClusterTag = a\nKubernetesClusterID = b\n",
            "disagree",
        ),
        (
            "aws",
            "[ServiceOverride \"1\"]\nService = ec2\nRegion = eu-west-1\nSigningRegion = eu-west-1\n",
            "URL is missing",
        ),
        (
            "aws",
            "[Global]\nZone = nowhere\n",
            "not an availability zone",
        ),
        (
            "azure",
            r#"{"tenantId": "t", "resourceGroup": "rg", "routeTableName": "rt", "useManagedIdentityExtension": true}"#,
            "subscriptionId",
        ),
        ("azure", "[1, 2]", "not an object"),
        ("hcloud", "HCLOUD_NETWORK=k8s\n", "HCLOUD_TOKEN"),
        ("gce", "[Global]\napi-endpoint = ftp://x/\n", "api-endpoint"),
        (
            "openstack",
            "[Global]\nauth-url = https://k/v3\n",
            "cloud.conf",
        ),
        (
            "alibaba",
            "Global:\n  accessKeyID: '%%'\n  accessKeySecret: eA==\n",
            "base64",
        ),
        ("alibaba", "Global:\n  pollInterval: soon\n", "pollInterval"),
        ("exec", "Arg=x\n", "Command="),
        ("exec", "Command=/nonexistent/plugin\n", "is not there"),
    ];
    for (provider, file, expected) in cases {
        let out = check(provider, file, &[]);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{provider} {file}: {stderr}");
        assert!(
            stderr.starts_with("error: ") && stderr.contains(expected),
            "{provider} {file}: expected {expected:?} in {stderr}"
        );
    }
}

/// run reads the cloud config before it looks for the cluster: with neither a good
/// config nor a kubeconfig, the error is the config's.
#[test]
fn run_reports_a_bad_cloud_config_before_a_missing_kubeconfig() {
    let dir = TempDir::new("run-order");
    let path = dir.write("azure.json", r#"{"tenantId": "t"}"#);
    let out = route_controller(
        &[
            "run",
            "--cloud-provider=azure",
            &format!("--cloud-config={}", path.display()),
            "--cluster-cidr=10.244.0.0/16",
        ],
        &[],
        &dir,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("subscriptionId"), "{stderr}");
    assert!(!stderr.contains("kubeconfig"), "{stderr}");
    // plan checks the cloud config too, even when the routes come from a file.
    let out = route_controller(
        &[
            "plan",
            "--cloud-provider=azure",
            &format!("--cloud-config={}", path.display()),
            "--cluster-cidr=10.244.0.0/16",
            "--nodes",
            concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/plan/nodes.json"),
            "--routes",
            concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/plan/routes.json"),
        ],
        &[],
        &dir,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("subscriptionId"), "{stderr}");
}

/// A config warning is logged once per start, not once per attempt to reach the cloud:
/// run waits for an unreachable Hetzner API, retrying, with the file's warning once.
#[test]
fn a_config_warning_is_logged_once_while_run_waits_for_the_cloud() {
    let dir = TempDir::new("run-once");
    let path = dir.write(
        "hcloud.env",
        "HCLOUD_TOKEN=t\nHCLOUD_NETWORK=k8s\nHCLOUD_ENDPOINT=http://127.0.0.1:9/v1\nHCLOUD_NETWROK=typo\n",
    );
    let kubeconfig = dir.write(
        "kubeconfig",
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:9\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: x\n",
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_route-controller"))
        .args([
            "run",
            "--cloud-provider=hcloud",
            &format!("--cloud-config={}", path.display()),
            &format!("--kubeconfig={}", kubeconfig.display()),
            "--cluster-cidr=10.244.0.0/16",
            "--leader-elect=false",
            "--secure-port=0",
        ])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start run");
    // The start retries after 1 s and 2 s: wait for the third attempt's line, then stop.
    let stderr = child.stderr.take().expect("stderr");
    let reader = std::io::BufRead::lines(std::io::BufReader::new(stderr));
    let mut lines = Vec::new();
    for line in reader.map_while(Result::ok) {
        let retries = line.contains("trying again");
        lines.push(line);
        if retries && lines.iter().filter(|l| l.contains("trying again")).count() == 3 {
            break;
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let log = lines.join("\n");
    assert_eq!(
        lines.iter().filter(|l| l.contains("trying again")).count(),
        3,
        "{log}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("HCLOUD_NETWROK"))
            .count(),
        1,
        "{log}"
    );
}
