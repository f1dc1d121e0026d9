//! Where the client finds its cluster and credentials: kubeconfig merge rules,
//! in-cluster configuration, token file rotation and exec credential plugins. The
//! environment is passed explicitly; no test touches the process environment.

#[path = "support/fake_apiserver.rs"]
mod fake_apiserver;
#[path = "support/tempdir.rs"]
mod tempdir;

use std::time::Duration;

use fake_apiserver::FakeApiServer;
use route_controller::kube::config::Auth;
use route_controller::kube::status::rfc3339;
use route_controller::kube::{Client, ClientOptions, Env, KubeConfig, LoadOptions};
use route_controller::model::NodeList;
use tempdir::TempDir;

fn load(options: LoadOptions, env: &Env) -> KubeConfig {
    KubeConfig::load(&options, env).unwrap_or_else(|e| panic!("{e}"))
}

fn bearer_tokens(server: &FakeApiServer) -> Vec<String> {
    server
        .requests()
        .iter()
        .map(|r| r.header("authorization").unwrap_or("").to_string())
        .collect()
}

#[test]
fn kubeconfig_files_merge_with_the_first_to_set_a_value_winning() {
    let dir = TempDir::new("merge");
    let first = dir.write(
        "a/config",
        "current-context: ctx-a\nclusters:\n- name: shared\n  cluster:\n    server: https://first:6443\n    certificate-authority: ca.pem\n\
         users:\n- name: shared-user\n  user:\n    tokenFile: token\n",
    );
    dir.write("a/ca.pem", "unused");
    dir.write("a/token", "from-a");
    let second = dir.write(
        "b/config",
        "current-context: ctx-b\nclusters:\n- name: shared\n  cluster:\n    server: https://second:6443\n\
         - name: only-b\n  cluster:\n    server: https://only-b:6443/\n\
         contexts:\n- name: ctx-a\n  context:\n    cluster: shared\n    user: shared-user\n    namespace: ns-a\n\
         - name: ctx-b\n  context:\n    cluster: only-b\n    user: shared-user\n\
         users:\n- name: shared-user\n  user:\n    token: from-b\n",
    );
    let list = std::env::join_paths([&first, &dir.path().join("missing"), &second]).unwrap();
    let env = Env::empty().with_var("KUBECONFIG", list.to_str().unwrap());
    let c = load(LoadOptions::default(), &env);
    // current-context and the cluster and user named "shared" come from the first file;
    // the context itself only exists in the second. The missing file is skipped.
    assert_eq!(c.server, "https://first:6443");
    assert_eq!(c.namespace, "ns-a");
    match &c.auth {
        Auth::TokenFile(p) => {
            assert_eq!(p, &dir.path().join("a/token"), "relative to its own file")
        }
        other => panic!("expected the first file's tokenFile, got {other:?}"),
    }
    assert_eq!(
        c.tls.ca_origin,
        dir.path().join("a/ca.pem").display().to_string()
    );
    // An explicit context and --master override.
    let c = load(
        LoadOptions {
            context: Some("ctx-b".into()),
            master: Some("https://override:443/".into()),
            ..LoadOptions::default()
        },
        &env,
    );
    assert_eq!(c.server, "https://override:443");
    assert_eq!(c.namespace, "default");
}

#[test]
fn an_explicit_kubeconfig_must_exist_and_home_config_is_the_fallback() {
    let dir = TempDir::new("explicit");
    let err = KubeConfig::load(
        &LoadOptions {
            kubeconfig: Some(dir.path().join("nope")),
            ..LoadOptions::default()
        },
        &Env::empty(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("nope"), "{err}");

    dir.write(
        "home/.kube/config",
        "current-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\nclusters:\n- name: k\n  cluster: {server: 'https://home:6443'}\nusers:\n- name: u\n  user: {token: t}\n",
    );
    let env = Env::empty().with_home(dir.path().join("home"));
    assert_eq!(
        load(LoadOptions::default(), &env).server,
        "https://home:6443"
    );

    let err =
        KubeConfig::load(&LoadOptions::default(), &Env::empty().with_home(dir.path())).unwrap_err();
    assert!(err.to_string().contains("--kubeconfig"), "{err}");
}

#[test]
fn in_cluster_config_brackets_an_ipv6_service_host_and_reads_the_service_account() {
    let dir = TempDir::new("incluster");
    dir.write("sa/token", "sa-token\n");
    dir.write("sa/ca.crt", "CA");
    dir.write("sa/namespace", "kube-system");
    let env = Env::empty()
        .with_var("KUBERNETES_SERVICE_HOST", "fd00:10:96::1")
        .with_var("KUBERNETES_SERVICE_PORT", "443")
        .with_service_account_dir(dir.path().join("sa"))
        .with_home(dir.path());
    let c = load(LoadOptions::default(), &env);
    assert_eq!(c.server, "https://[fd00:10:96::1]:443");
    assert_eq!(c.namespace, "kube-system");
    assert_eq!(c.proxy_url, None);
    assert!(matches!(&c.auth, Auth::TokenFile(p) if p.ends_with("sa/token")));
    assert_eq!(c.tls.ca_pem.as_deref(), Some(&b"CA"[..]));

    let env4 = env.clone().with_var("KUBERNETES_SERVICE_HOST", "10.96.0.1");
    assert_eq!(
        load(LoadOptions::default(), &env4).server,
        "https://10.96.0.1:443"
    );

    // A missing token is a startup error naming the file.
    std::fs::remove_file(dir.path().join("sa/token")).unwrap();
    let err = KubeConfig::load(&LoadOptions::default(), &env).unwrap_err();
    assert!(err.to_string().contains("sa/token"), "{err}");
}

/// A kubeconfig pointing at `server` with the given user section.
fn kubeconfig(dir: &TempDir, server: &FakeApiServer, user: &str) -> KubeConfig {
    let path = dir.write(
        "kubeconfig",
        format!(
            "current-context: c\ncontexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n\
             clusters:\n- name: k\n  cluster:\n    server: {}\nusers:\n- name: u\n  user:\n{user}",
            server.url()
        ),
    );
    load(
        LoadOptions {
            kubeconfig: Some(path),
            ..LoadOptions::default()
        },
        &Env::empty(),
    )
}

#[test]
fn a_rotated_token_file_is_picked_up_after_the_refresh_period() {
    let dir = TempDir::new("rotate");
    let server = FakeApiServer::start();
    dir.write("token", "old-token\n");
    let config = kubeconfig(&dir, &server, "    tokenFile: token\n");
    let options = ClientOptions {
        token_refresh: Duration::from_millis(50),
        ..ClientOptions::default()
    };
    let client = Client::new(&config, options).unwrap();
    client.get_json::<NodeList>("/api/v1/nodes").unwrap();
    dir.write("token", "new-token\n");
    std::thread::sleep(Duration::from_millis(80));
    client.get_json::<NodeList>("/api/v1/nodes").unwrap();
    assert_eq!(
        bearer_tokens(&server),
        ["Bearer old-token", "Bearer new-token"]
    );
}

#[test]
fn a_refused_token_makes_the_client_re_read_the_file_and_retry_once() {
    let dir = TempDir::new("rotate-401");
    let server = FakeApiServer::start();
    dir.write("token", "old-token");
    let config = kubeconfig(&dir, &server, "    tokenFile: token\n");
    // The default refresh period (1 min) would keep the old token; the 401 does not.
    let client = Client::new(&config, ClientOptions::default()).unwrap();
    client.get_json::<NodeList>("/api/v1/nodes").unwrap();
    dir.write("token", "new-token");
    server.accept_tokens(&["new-token"]);
    client.get_json::<NodeList>("/api/v1/nodes").unwrap();
    assert_eq!(
        bearer_tokens(&server),
        ["Bearer old-token", "Bearer old-token", "Bearer new-token"]
    );
    // A token that stays refused is an Unauthorized error, not a loop.
    server.accept_tokens(&["other"]);
    let err = client.get_json::<NodeList>("/api/v1/nodes").unwrap_err();
    assert!(
        err.to_string().contains("credentials were refused"),
        "{err}"
    );
    assert_eq!(bearer_tokens(&server).len(), 5);
}

/// A shell-script plugin that prints a new token on every run and counts its runs.
fn plugin(dir: &TempDir, api_version: &str, expiry: &str) -> std::path::PathBuf {
    let script = format!(
        "#!/bin/sh\nn=$(cat \"$(dirname \"$0\")/runs\" 2>/dev/null || echo 0)\nn=$((n+1))\n\
         echo $n > \"$(dirname \"$0\")/runs\"\n\
         echo \"$KUBERNETES_EXEC_INFO\" > \"$(dirname \"$0\")/exec-info\"\n\
         printf '{{\"apiVersion\":\"{api_version}\",\"kind\":\"ExecCredential\",\"status\":{{\"token\":\"tok-%s-%s\"{expiry}}}}}' \"$n\" \"$PLUGIN_SUFFIX\"\n"
    );
    let path = dir.write("bin/plugin.sh", script);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn exec_user(api_version: &str) -> String {
    format!(
        "    exec:\n      apiVersion: {api_version}\n      command: ./bin/plugin.sh\n      args: []\n      env:\n      - name: PLUGIN_SUFFIX\n        value: x\n      provideClusterInfo: true\n      interactiveMode: Never\n"
    )
}

#[test]
fn exec_plugin_tokens_are_cached_without_expiry_and_rerun_after_a_refusal() {
    for api_version in [
        "client.authentication.k8s.io/v1",
        "client.authentication.k8s.io/v1beta1",
    ] {
        let dir = TempDir::new("exec");
        let server = FakeApiServer::start();
        plugin(&dir, api_version, "");
        let config = kubeconfig(&dir, &server, &exec_user(api_version));
        let client = Client::new(&config, ClientOptions::default()).unwrap();
        client.get_json::<NodeList>("/api/v1/nodes").unwrap();
        client.get_json::<NodeList>("/api/v1/nodes").unwrap();
        assert_eq!(
            bearer_tokens(&server),
            ["Bearer tok-1-x", "Bearer tok-1-x"],
            "{api_version}"
        );
        server.accept_tokens(&["tok-2-x"]);
        client.get_json::<NodeList>("/api/v1/nodes").unwrap();
        assert_eq!(
            bearer_tokens(&server)[2..],
            ["Bearer tok-1-x", "Bearer tok-2-x"]
        );
        let info: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("bin/exec-info")).unwrap(),
        )
        .unwrap();
        assert_eq!(info["apiVersion"], api_version);
        assert_eq!(info["kind"], "ExecCredential");
        assert_eq!(info["spec"]["interactive"], false);
        assert_eq!(info["spec"]["cluster"]["server"], server.url());
    }
}

#[test]
fn exec_plugin_tokens_are_renewed_when_they_expire() {
    let dir = TempDir::new("exec-expiry");
    let server = FakeApiServer::start();
    // Expires in 5 s: inside the 10 s renewal margin, so every request re-runs it.
    let soon = std::time::SystemTime::now() + Duration::from_secs(5);
    let expiry = format!(",\"expirationTimestamp\":\"{}\"", rfc3339(soon));
    plugin(&dir, "client.authentication.k8s.io/v1", &expiry);
    let config = kubeconfig(&dir, &server, &exec_user("client.authentication.k8s.io/v1"));
    let client = Client::new(&config, ClientOptions::default()).unwrap();
    client.get_json::<NodeList>("/api/v1/nodes").unwrap();
    client.get_json::<NodeList>("/api/v1/nodes").unwrap();
    assert_eq!(bearer_tokens(&server), ["Bearer tok-2-x", "Bearer tok-3-x"]);

    // A far expiry is cached.
    let dir = TempDir::new("exec-expiry-far");
    let server = FakeApiServer::start();
    plugin(
        &dir,
        "client.authentication.k8s.io/v1",
        ",\"expirationTimestamp\":\"2099-01-01T00:00:00Z\"",
    );
    let config = kubeconfig(&dir, &server, &exec_user("client.authentication.k8s.io/v1"));
    let client = Client::new(&config, ClientOptions::default()).unwrap();
    client.get_json::<NodeList>("/api/v1/nodes").unwrap();
    client.get_json::<NodeList>("/api/v1/nodes").unwrap();
    assert_eq!(bearer_tokens(&server), ["Bearer tok-1-x", "Bearer tok-1-x"]);
}

#[test]
fn a_failing_exec_plugin_is_a_startup_error_with_its_install_hint() {
    let dir = TempDir::new("exec-missing");
    let server = FakeApiServer::start();
    let user = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: no-such-plugin-xyz\n      installHint: install no-such-plugin-xyz from the vendor\n";
    let config = kubeconfig(&dir, &server, user);
    let err = Client::new(&config, ClientOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no-such-plugin-xyz") && err.contains("from the vendor"),
        "{err}"
    );
}
