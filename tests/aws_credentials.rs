//! The AWS credential chain against moto's STS and IAM with its signature and policy
//! checks on: web identity (IRSA), a profile's role with `source_profile` or
//! `credential_source`, `credential_process`, container credentials (EKS Pod
//! Identity) and the cloud config's `RoleARN` on top of the chain. Each test shows
//! that moto's STS knows the credentials the chain produced (`GetCallerIdentity`
//! signed with them passes moto's checks and names the assumed role). Stubs stand in
//! where moto cannot show what matters: the token file read again at each refresh,
//! and the container endpoint.

#[path = "support/moto.rs"]
mod moto;
#[path = "support/stub_http.rs"]
mod stub_http;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use route_controller::cloud::aws::credentials::{AwsEnv, ChainSettings, Clock, CredentialSource};
use route_controller::cloud::aws::{AwsConfig, AwsProvider};
use route_controller::cloud::{CloudErrorKind, NodeDirectory, Routes};
use stub_http::{Reply, StubServer};

/// One moto for this binary, its checks on once the identities exist. Tests take
/// turns: a web identity test leaves moto one unchecked action.
struct Server {
    moto: moto::Moto,
    /// An IAM user allowed to assume roles (the "source" identity).
    base: (String, String),
    /// A role with the README's EC2 policy.
    role_arn: String,
}

fn server() -> MutexGuard<'static, Server> {
    static SERVER: OnceLock<Mutex<Server>> = OnceLock::new();
    SERVER
        .get_or_init(|| {
            let moto = moto::Moto::start();
            let base = moto::create_iam_user(
                &moto,
                "base",
                &moto::allow_policy(&["sts:AssumeRole", "sts:GetCallerIdentity"]),
            );
            let role_arn = moto::create_iam_role(
                &moto,
                "route-controller",
                &moto::allow_policy(&[
                    "ec2:DescribeRouteTables",
                    "ec2:DescribeInstances",
                    "ec2:CreateRoute",
                    "ec2:DeleteRoute",
                    "ec2:ModifyInstanceAttribute",
                    "sts:GetCallerIdentity",
                ]),
            );
            moto.check_auth_after(0);
            Mutex::new(Server {
                moto,
                base,
                role_arn,
            })
        })
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("aws-credentials-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// A virtual wall clock at `start`, and the handle that moves it.
fn clock(start: SystemTime) -> (Clock, Arc<AtomicU64>) {
    let secs = Arc::new(AtomicU64::new(
        start
            .duration_since(UNIX_EPOCH)
            .expect("after 1970")
            .as_secs(),
    ));
    let read = secs.clone();
    (
        Arc::new(move || UNIX_EPOCH + Duration::from_secs(read.load(Ordering::SeqCst))),
        secs,
    )
}

fn settings() -> ChainSettings {
    ChainSettings::new(moto::REGION)
}

/// The environment every test starts from: STS at moto, no instance metadata.
fn env_at(moto: &moto::Moto) -> AwsEnv {
    AwsEnv::new()
        .with_var("AWS_ENDPOINT_URL_STS", moto.url())
        .with_var("AWS_EC2_METADATA_DISABLED", "true")
}

fn assumed_role_arn(role_arn: &str, session: &str) -> String {
    // arn:aws:iam::ACCOUNT:role/NAME -> arn:aws:sts::ACCOUNT:assumed-role/NAME/SESSION
    let account = role_arn.split(':').nth(4).expect("account in the role ARN");
    let name = role_arn.rsplit('/').next().expect("role name");
    format!("arn:aws:sts::{account}:assumed-role/{name}/{session}")
}

#[test]
fn web_identity_assumes_the_role_with_moto_sts_and_its_key_passes_moto_checks() {
    let server = server();
    let dir = scratch("web-identity");
    let token_file = dir.join("token");
    std::fs::write(
        &token_file,
        "eyJhbGciOiJSUzI1NiJ9.a-service-account-token.sig\n",
    )
    .expect("write token");
    let env = env_at(&server.moto)
        .with_var("AWS_ROLE_ARN", &server.role_arn)
        .with_var(
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            &token_file.display().to_string(),
        )
        .with_var("AWS_ROLE_SESSION_NAME", "irsa-session");
    let source = CredentialSource::resolve(&env, None, &settings()).expect("resolves");
    assert_eq!(
        source.origin(),
        format!(
            "web identity (role {}, token file {})",
            server.role_arn,
            token_file.display()
        )
    );
    // moto cannot check an unsigned request: AssumeRoleWithWebIdentity is the one
    // action let through; GetCallerIdentity after it is checked.
    server.moto.check_auth_after(1);
    let credentials = source.current(SystemTime::now()).expect("STS answers");
    server.moto.check_auth_after(0);
    assert!(
        credentials.access_key_id().starts_with("ASIA"),
        "{credentials:?}"
    );
    assert!(credentials.session_token().is_some());
    assert_eq!(
        moto::caller_arn(&server.moto, credentials).expect("moto knows the STS key"),
        assumed_role_arn(&server.role_arn, "irsa-session")
    );
}

/// A stub STS that records each web identity token and hands out credentials that
/// expire an hour after the virtual clock's start, then two hours after.
fn stub_sts() -> StubServer {
    let issued = Arc::new(AtomicU64::new(0));
    StubServer::start(move |req| {
        if req.action() != "AssumeRoleWithWebIdentity" {
            return Reply::text(400, "unexpected");
        }
        let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
        Reply::xml(
            200,
            format!(
                "<AssumeRoleWithWebIdentityResponse><AssumeRoleWithWebIdentityResult><Credentials>\
                 <AccessKeyId>ASIASTUB{n}</AccessKeyId><SecretAccessKey>secret-{n}</SecretAccessKey>\
                 <SessionToken>session-{n}</SessionToken>\
                 <Expiration>2030-01-01T0{n}:00:00Z</Expiration></Credentials>\
                 </AssumeRoleWithWebIdentityResult></AssumeRoleWithWebIdentityResponse>"
            ),
        )
    })
}

#[test]
fn the_web_identity_token_file_is_read_again_at_each_refresh_and_sent_unsigned() {
    let sts = stub_sts();
    let dir = scratch("token-rotation");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "token-one").expect("write token");
    let start = UNIX_EPOCH + Duration::from_secs(1_893_456_000); // 2030-01-01T00:00:00Z
    let (clock, secs) = clock(start);
    let env = AwsEnv::new()
        .with_var("AWS_ENDPOINT_URL_STS", &sts.url())
        .with_var("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/routes")
        .with_var(
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            &token_file.display().to_string(),
        )
        .with_var("AWS_EC2_METADATA_DISABLED", "true")
        .with_clock(clock.clone());
    let source = CredentialSource::resolve(&env, None, &settings()).expect("resolves");
    assert_eq!(
        source.current(clock()).expect("first").access_key_id(),
        "ASIASTUB1"
    );
    // The kubelet rotates the projected token.
    std::fs::write(&token_file, "token-two").expect("rotate token");
    // 50 minutes on: the credentials are still good for 10, nothing is asked.
    secs.fetch_add(50 * 60, Ordering::SeqCst);
    assert_eq!(
        source.current(clock()).expect("cached").access_key_id(),
        "ASIASTUB1"
    );
    assert_eq!(sts.requests().len(), 1);
    // 56 minutes on: within five minutes of expiry, refreshed with the new token.
    secs.fetch_add(6 * 60, Ordering::SeqCst);
    assert_eq!(
        source.current(clock()).expect("refreshed").access_key_id(),
        "ASIASTUB2"
    );
    let requests = sts.requests();
    let tokens: Vec<_> = requests
        .iter()
        .map(|r| r.form("WebIdentityToken"))
        .collect();
    assert_eq!(tokens, [Some("token-one".into()), Some("token-two".into())]);
    assert!(
        requests.iter().all(|r| r.header("authorization").is_none()),
        "unsigned"
    );
    assert_eq!(
        requests[0].form("RoleArn").as_deref(),
        Some("arn:aws:iam::123456789012:role/routes")
    );
}

fn write_profiles(dir: &Path, config: &str, credentials: &str) -> AwsEnv {
    std::fs::write(dir.join("config"), config).expect("write config");
    std::fs::write(dir.join("credentials"), credentials).expect("write credentials");
    AwsEnv::new()
        .with_var("AWS_CONFIG_FILE", &dir.join("config").display().to_string())
        .with_var(
            "AWS_SHARED_CREDENTIALS_FILE",
            &dir.join("credentials").display().to_string(),
        )
}

#[test]
fn a_profile_role_with_source_profile_is_assumed_with_the_source_keys_and_its_session_settings() {
    let server = server();
    let dir = scratch("source-profile");
    let env = write_profiles(
        &dir,
        &format!(
            "[profile routes]\nrole_arn = {}\nsource_profile = base\n\
             role_session_name = from-profile\nexternal_id = ext-1\nduration_seconds = 1800\n",
            server.role_arn
        ),
        &format!(
            "[base]\naws_access_key_id = {}\naws_secret_access_key = {}\n",
            server.base.0, server.base.1
        ),
    );
    let env = env
        .with_var("AWS_PROFILE", "routes")
        .with_var("AWS_ENDPOINT_URL_STS", server.moto.url())
        .with_var("AWS_EC2_METADATA_DISABLED", "true");
    let source = CredentialSource::resolve(&env, None, &settings()).expect("resolves");
    let origin = source.origin();
    assert!(
        origin.starts_with(&format!("role {} (profile \"routes\" in ", server.role_arn))
            && origin.contains("assumed with profile \"base\" in "),
        "{origin}"
    );
    // AssumeRole is signed with base's keys and checked by moto (sts:AssumeRole).
    let now = SystemTime::now();
    let credentials = source.current(now).expect("AssumeRole");
    let expires = credentials.expires().expect("temporary");
    let lasts = expires.duration_since(now).unwrap_or_default().as_secs();
    assert!(
        (1700..=1900).contains(&lasts),
        "duration_seconds 1800 asked, got {lasts} s"
    );
    assert_eq!(
        moto::caller_arn(&server.moto, credentials).expect("moto knows the key"),
        assumed_role_arn(&server.role_arn, "from-profile")
    );
}

#[test]
fn environment_keys_win_over_a_profile_role_and_credential_source_environment_needs_them() {
    let server = server();
    let dir = scratch("credential-source");
    let env = write_profiles(
        &dir,
        &format!(
            "[default]\nrole_arn = {}\ncredential_source = Environment\nrole_session_name = env\n",
            server.role_arn
        ),
        "",
    );
    // As in the Go SDK, keys in the environment win the chain before any profile
    // (AWS_PROFILE included), so credential_source = Environment is reached only
    // when they are absent, and then it has nothing to use.
    let with_keys = env
        .clone()
        .with_var("AWS_ENDPOINT_URL_STS", server.moto.url())
        .with_var("AWS_EC2_METADATA_DISABLED", "true")
        .with_var("AWS_ACCESS_KEY_ID", &server.base.0)
        .with_var("AWS_SECRET_ACCESS_KEY", &server.base.1);
    let source = CredentialSource::resolve(&with_keys, None, &settings()).expect("resolves");
    assert!(
        source.origin().contains("AWS_ACCESS_KEY_ID"),
        "{}",
        source.origin()
    );
    // Without them the profile's credential_source has nothing to use.
    let without = env
        .with_var("AWS_ENDPOINT_URL_STS", server.moto.url())
        .with_var("AWS_EC2_METADATA_DISABLED", "true");
    let err = CredentialSource::resolve(&without, None, &settings()).expect_err("no keys");
    assert!(
        err.message.contains("credential_source Environment")
            && err.message.contains("AWS_ACCESS_KEY_ID"),
        "{}",
        err.message
    );
}

#[test]
fn role_arn_of_the_cloud_config_is_assumed_on_top_of_the_chain() {
    let server = server();
    let env = env_at(&server.moto)
        .with_var("AWS_ACCESS_KEY_ID", &server.base.0)
        .with_var("AWS_SECRET_ACCESS_KEY", &server.base.1);
    let chain = settings().with_role_arn(Some(&server.role_arn));
    let source = CredentialSource::resolve(&env, None, &chain).expect("resolves");
    assert_eq!(
        source.origin(),
        format!(
            "role {} (RoleARN) assumed with the environment variables \
             AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
            server.role_arn
        )
    );
    let credentials = source.current(SystemTime::now()).expect("AssumeRole");
    let arn = moto::caller_arn(&server.moto, credentials).expect("moto knows the key");
    assert!(
        arn.starts_with(&assumed_role_arn(&server.role_arn, "route-controller-")),
        "{arn}"
    );
    // Without RoleARN the chain's own identity signs.
    let source = CredentialSource::resolve(&env, None, &settings()).expect("resolves");
    let arn = moto::caller_arn(
        &server.moto,
        source.current(SystemTime::now()).expect("static"),
    )
    .expect("the user's key");
    assert!(arn.ends_with(":user/base"), "{arn}");
}

#[test]
fn a_role_assumed_with_a_wrong_secret_is_invalid_and_the_message_keeps_the_secret_out() {
    let server = server();
    // moto checks AssumeRole's signature: a wrong secret is refused, a setting to fix.
    let env = env_at(&server.moto)
        .with_var("AWS_ACCESS_KEY_ID", &server.base.0)
        .with_var("AWS_SECRET_ACCESS_KEY", "not-the-secret");
    let chain = settings().with_role_arn(Some(&server.role_arn));
    let source = CredentialSource::resolve(&env, None, &chain).expect("resolves");
    let err = source
        .current(SystemTime::now())
        .expect_err("bad signature");
    assert_eq!(err.kind, CloudErrorKind::Invalid, "{}", err.message);
    assert!(err.message.contains("STS AssumeRole of"), "{}", err.message);
    assert!(!err.message.contains("not-the-secret"), "{}", err.message);
}

#[test]
fn credential_process_output_signs_requests_and_a_bad_version_is_refused() {
    let server = server();
    let dir = scratch("process");
    let script = dir.join("creds.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nprintf '{{\"Version\": 1, \"AccessKeyId\": \"%s\", \"SecretAccessKey\": \"%s\"}}' '{}' '{}'\n",
            server.base.0, server.base.1
        ),
    )
    .expect("write script");
    let env = write_profiles(
        &dir,
        &format!(
            "[profile tool]\ncredential_process = sh {}\n",
            script.display()
        ),
        "",
    )
    .with_var("AWS_PROFILE", "tool")
    .with_var("AWS_EC2_METADATA_DISABLED", "true");
    let source = CredentialSource::resolve(&env, None, &settings()).expect("resolves");
    assert!(
        source
            .origin()
            .starts_with("the credential_process of profile \"tool\"")
    );
    let arn = moto::caller_arn(
        &server.moto,
        source.current(SystemTime::now()).expect("runs"),
    )
    .expect("the process's keys");
    assert!(arn.ends_with(":user/base"), "{arn}");

    std::fs::write(
        &script,
        "#!/bin/sh\necho '{\"Version\": 2, \"AccessKeyId\": \"A\", \"SecretAccessKey\": \"s\"}'\n",
    )
    .expect("rewrite script");
    let source = CredentialSource::resolve(&env, None, &settings()).expect("resolves");
    let err = source.current(SystemTime::now()).expect_err("version 2");
    assert!(err.message.contains("Version 2"), "{}", err.message);
}

#[test]
fn container_credentials_use_the_rotated_token_file_and_sign_for_the_assumed_role() {
    let server = server();
    // What EKS Pod Identity's agent hands out: the role's STS credentials, here
    // from moto's AssumeRole signed with base's keys.
    let issued = {
        let env = env_at(&server.moto)
            .with_var("AWS_ACCESS_KEY_ID", &server.base.0)
            .with_var("AWS_SECRET_ACCESS_KEY", &server.base.1);
        let chain = settings().with_role_arn(Some(&server.role_arn));
        CredentialSource::resolve(&env, None, &chain)
            .expect("resolves")
            .current(SystemTime::now())
            .expect("AssumeRole")
    };
    let document = format!(
        "{{\"AccessKeyId\":\"{}\",\"SecretAccessKey\":\"{}\",\"Token\":\"{}\",\
         \"AccountId\":\"123456789012\",\"Expiration\":\"2030-01-01T01:00:00Z\"}}",
        issued.access_key_id(),
        issued.secret_access_key(),
        issued.session_token().unwrap_or_default()
    );
    let agent = StubServer::start(move |req| match req.header("authorization") {
        Some(_) => Reply::Respond {
            status: 200,
            headers: vec![("Content-Type".into(), "application/json".into())],
            body: document.clone(),
        },
        None => Reply::text(401, "{\"code\":\"AccessDenied\",\"message\":\"no token\"}"),
    });
    let dir = scratch("container");
    let token_file = dir.join("eks-pod-identity-token");
    std::fs::write(&token_file, "pod-token-1\n").expect("write token");
    let start = UNIX_EPOCH + Duration::from_secs(1_893_456_000);
    let (clock, secs) = clock(start);
    let env = AwsEnv::new()
        .with_var(
            "AWS_CONTAINER_CREDENTIALS_FULL_URI",
            &format!("{}/v1/credentials", agent.url()),
        )
        .with_var(
            "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
            &token_file.display().to_string(),
        )
        .with_var("AWS_EC2_METADATA_DISABLED", "true")
        .with_clock(clock.clone());
    let source = CredentialSource::resolve(&env, None, &settings()).expect("resolves");
    assert_eq!(
        source.origin(),
        format!(
            // The path is left out: ECS's relative URI is a credential of its own.
            "container credentials ({}/…, token file {})",
            agent.url(),
            token_file.display()
        )
    );
    let credentials = source.current(clock()).expect("fetched");
    let arn = moto::caller_arn(&server.moto, credentials).expect("moto knows the key");
    assert!(
        arn.starts_with(&assumed_role_arn(&server.role_arn, "route-controller-")),
        "{arn}"
    );
    std::fs::write(&token_file, "pod-token-2\n").expect("rotate");
    secs.fetch_add(56 * 60, Ordering::SeqCst);
    source.current(clock()).expect("refreshed");
    let tokens: Vec<_> = agent
        .requests()
        .iter()
        .map(|r| r.header("authorization").map(str::to_string))
        .collect();
    assert_eq!(
        tokens,
        [Some("pod-token-1".into()), Some("pod-token-2".into())]
    );
}

#[test]
fn the_provider_signs_ec2_with_the_web_identity_key_under_the_roles_policy() {
    let server = server();
    let dir = scratch("provider-web-identity");
    let token_file = dir.join("token");
    std::fs::write(&token_file, "a-token").expect("write token");
    let env = env_at(&server.moto)
        .with_var("AWS_ROLE_ARN", &server.role_arn)
        .with_var(
            "AWS_WEB_IDENTITY_TOKEN_FILE",
            &token_file.display().to_string(),
        )
        .with_var("AWS_ENDPOINT_URL_EC2", server.moto.url());
    server.moto.check_auth_after(1);
    let provider = AwsProvider::new(
        AwsConfig {
            region: Some(moto::REGION.into()),
            route_table_limit: Some(50),
            route_table_ids: vec!["rtb-0000000000000000a".into()],
            ..AwsConfig::default()
        },
        &env,
    );
    server.moto.check_auth_after(0);
    let provider = provider.expect("credentials fetched at start");
    // DescribeRouteTables, signed with the STS key, passes moto's signature check and
    // the role's policy: moto answers with the tables (none), not AuthFailure or
    // UnauthorizedOperation.
    let err = provider
        .list_routes("cluster", &NodeDirectory::default())
        .expect_err("the configured table does not exist");
    assert!(
        err.message
            .contains("none of the configured route tables (rtb-0000000000000000a) exists"),
        "{}",
        err.message
    );
}

/// A node-local credentials endpoint that serves the `base` user's keys: as the
/// container endpoint (`/creds`, with an Authorization header) or as IMDSv2.
fn local_endpoint(server: &Server) -> StubServer {
    let document = format!(
        "{{\"Code\":\"Success\",\"Type\":\"AWS-HMAC\",\"AccessKeyId\":\"{}\",\
         \"SecretAccessKey\":\"{}\",\"Token\":\"\",\"Expiration\":\"2999-01-01T00:00:00Z\"}}",
        server.base.0, server.base.1
    );
    StubServer::start(move |req| match (req.method.as_str(), req.path.as_str()) {
        ("PUT", "/latest/api/token") => Reply::text(200, "imds-token"),
        ("GET", "/latest/meta-data/iam/security-credentials/") => Reply::text(200, "node-role"),
        ("GET", "/latest/meta-data/iam/security-credentials/node-role") | ("GET", "/creds") => {
            Reply::text(200, document.clone())
        }
        _ => Reply::text(404, "not found"),
    })
}

#[test]
fn credential_source_ecs_container_and_ec2_instance_metadata_sign_the_assume_role() {
    let server = server();
    let local = local_endpoint(&server);
    let dir = scratch("credential-source-local");
    let config = |source: &str| {
        format!(
            "[profile routes]\nrole_arn = {}\ncredential_source = {source}\nrole_session_name = {source}\n",
            server.role_arn
        )
    };
    for source in ["EcsContainer", "Ec2InstanceMetadata"] {
        let env = write_profiles(&dir, &config(source), "")
            .with_var("AWS_PROFILE", "routes")
            .with_var("AWS_ENDPOINT_URL_STS", server.moto.url())
            .with_var(
                "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                &format!("{}/creds", local.url()),
            )
            .with_var("AWS_CONTAINER_AUTHORIZATION_TOKEN", "pod-token");
        let imds = route_controller::cloud::aws::credentials::Imds::new(&local.url(), env.clock());
        let source_of = CredentialSource::resolve(&env, Some(imds), &settings()).expect("resolves");
        let origin = source_of.origin();
        let expected_inner = match source {
            "EcsContainer" => "assumed with container credentials (",
            _ => "assumed with the instance role (IMDS at ",
        };
        assert!(origin.contains(expected_inner), "{source}: {origin}");
        // moto checks AssumeRole's signature with base's secret: the local endpoint's
        // keys signed it.
        let credentials = source_of.current(SystemTime::now()).expect("AssumeRole");
        assert_eq!(
            moto::caller_arn(&server.moto, credentials).expect("moto knows the key"),
            assumed_role_arn(&server.role_arn, source)
        );
    }
    let asked: Vec<_> = local.requests().iter().map(|r| r.path.clone()).collect();
    assert!(asked.contains(&"/creds".to_string()), "{asked:?}");
    assert!(
        asked.contains(&"/latest/meta-data/iam/security-credentials/node-role".to_string()),
        "{asked:?}"
    );
}
