#![allow(dead_code)]
// Each test binary uses only part of this module.

//! moto's EC2 (and IAM) emulator for the AWS tests.
//!
//! - Installs `moto[server]` with exact pins into a virtualenv under
//!   `target/moto-venv/`, once per target directory; a lock file keeps test binaries
//!   that start at the same time from installing twice.
//! - Starts `moto_server -H 127.0.0.1 -p 0` (moto reports the port it bound) under a
//!   small Python watchdog that stops the server when our end of its stdin closes:
//!   when a [`Moto`] is dropped, and also when the test process exits, so that the
//!   process-wide server of [`shared`] never outlives the tests.
//! - [`shared`] serialises the tests that use the shared server and resets it before
//!   each one; [`Moto::start_with_auth`] starts a private server that checks
//!   signatures and IAM policies after its first N actions.
//!
//! A missing `python3` or venv module fails the test with what to install; nothing is
//! skipped silently. Timings (install, start, first request, each test) go to stderr.

// Each support module that needs it includes it: a test may include several.
#[allow(clippy::duplicate_mod)]
#[path = "venv.rs"]
mod venv;

use std::fs::{self, File};
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};
use venv::target_dir;

use route_controller::cloud::aws::credentials::{CredentialSource, Credentials};
use route_controller::cloud::aws::query::{
    Endpoint, Params, QueryClient, QueryClientConfig, QueryError,
};
use route_controller::cloud::aws::xml::Element;

/// What pip installs: moto's server extra, with the versions resolved and tested
/// when this harness was written pinned exactly (`pip freeze` of a fresh venv), so
/// that a new release upstream cannot change the emulator under the tests.
pub const REQUIREMENTS: &str = "\
moto[server]==5.2.5
annotated-types==0.8.0
antlr4-python3-runtime==4.13.2
attrs==26.1.0
aws-xray-sdk==2.15.0
blinker==1.9.0
boto3==1.44.8
botocore==1.44.8
certifi==2026.10.19.post1
cffi==2.1.1
cfn-lint==1.58.0
charset-normalizer==3.5.3
click==8.5.1
cryptography==50.0.2
docker==7.2.0
Flask==3.1.3
flask-cors==6.0.5
graphql-core==3.3.2
idna==3.20
itsdangerous==2.2.0
Jinja2==3.1.6
jmespath==1.1.0
joserfc==1.8.0
jsonpatch==1.48
jsonpath-ng==1.16.0
jsonpointer==3.12
jsonschema==4.26.0
jsonschema-path==0.5.0
jsonschema-specifications==2025.9.1
lazy-object-proxy==1.13.0
MarkupSafe==3.0.4
mpmath==1.3.0
networkx==3.6.1
openapi-schema-validator==0.9.0
openapi-spec-validator==0.9.0
pathable==0.6.0
py-partiql-parser==0.6.3
pycparser==3.12
pydantic==2.14.4
pydantic-settings==2.16.3
pydantic_core==2.50.5
pyparsing==3.3.3
python-dateutil==2.9.0.post0
python-dotenv==1.2.4
PyYAML==6.0.4
referencing==0.37.0
regex==2026.11.19
requests==2.34.2
responses==0.26.3
rfc3339-validator==0.1.4
rpds-py==2026.9.1
s3transfer==0.19.3
six==1.17.0
sympy==1.14.0
typing-inspection==0.4.5
typing_extensions==4.16.0
urllib3==2.8.0
Werkzeug==3.1.9
wrapt==2.5.2
xmltodict==1.0.4
";

/// Stops moto when stdin reaches EOF, i.e. when the test process lets go of it.
const WATCHDOG: &str = r#"
import subprocess, sys
server = subprocess.Popen(sys.argv[1:])
try:
    sys.stdin.buffer.read()
finally:
    server.terminate()
    try:
        server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
"#;

/// Dummy keys for the default (unchecked) mode; any keys work there, but requests
/// must be signed because moto routes by the credential scope.
pub const TEST_KEY_ID: &str = "AKIDMOTOTESTING";
pub const TEST_SECRET: &str = "moto-testing-secret";
pub const REGION: &str = "us-east-1";

/// The virtualenv's directory, installing it first if needed.
pub fn venv() -> PathBuf {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    READY
        .get_or_init(|| {
            venv::install(
                "moto-venv",
                REQUIREMENTS,
                "the AWS tests run moto",
                "moto[server]",
            )
        })
        .clone()
}

/// A running moto server.
pub struct Moto {
    watchdog: Child,
    stdin: Option<ChildStdin>,
    url: String,
    log: PathBuf,
    agent: ureq::Agent,
}

static STARTED: AtomicU32 = AtomicU32::new(0);

impl Moto {
    /// A server that accepts any signature.
    pub fn start() -> Moto {
        Moto::spawn(None)
    }

    /// A server that serves its first `no_auth_actions` actions without checks, then
    /// verifies every signature and evaluates IAM policies.
    pub fn start_with_auth(no_auth_actions: u32) -> Moto {
        Moto::spawn(Some(no_auth_actions))
    }

    fn spawn(no_auth_actions: Option<u32>) -> Moto {
        let venv = venv();
        let started = Instant::now();
        let logs = target_dir().join("moto-logs");
        fs::create_dir_all(&logs).expect("create target/moto-logs");
        let n = STARTED.fetch_add(1, Ordering::SeqCst);
        let log = logs.join(format!("moto-{}-{n}.log", std::process::id()));
        let log_file = File::create(&log).expect("create the moto log");
        let mut command = Command::new(venv.join("bin/python"));
        command
            .arg("-c")
            .arg(WATCHDOG)
            .arg(venv.join("bin/moto_server"))
            .args(["-H", "127.0.0.1", "-p", "0"])
            .stdin(Stdio::piped())
            .stdout(log_file.try_clone().expect("clone the log handle"))
            .stderr(log_file);
        if let Some(n) = no_auth_actions {
            command.env("INITIAL_NO_AUTH_ACTION_COUNT", n.to_string());
        }
        let mut watchdog = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start moto_server from {}: {e}", venv.display()));
        let stdin = watchdog.stdin.take();
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(30)))
            .build()
            .new_agent();
        let mut moto = Moto {
            watchdog,
            stdin,
            url: String::new(),
            log,
            agent,
        };
        let port = moto.wait_for_port(Duration::from_secs(60));
        moto.url = format!("http://127.0.0.1:{port}");
        moto.wait_until_ready(Duration::from_secs(30));
        eprintln!(
            "[moto] server at {}{} ready in {:.2} s",
            moto.url,
            no_auth_actions.map_or(String::new(), |n| format!(
                " (signature checks after {n} actions)"
            )),
            started.elapsed().as_secs_f64()
        );
        moto
    }

    fn wait_for_port(&mut self, limit: Duration) -> u16 {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            let mut text = String::new();
            if let Ok(mut f) = File::open(&self.log) {
                let _ = f.read_to_string(&mut text);
            }
            let port = text.lines().find_map(|l| {
                let rest = l.split("Running on http://127.0.0.1:").nth(1)?;
                rest.trim().trim_end_matches('/').parse::<u16>().ok()
            });
            if let Some(port) = port {
                return port;
            }
            if let Ok(Some(status)) = self.watchdog.try_wait() {
                panic!("moto_server exited ({status}); its log:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "moto_server did not report its port within {limit:?}; see {}",
            self.log.display()
        );
    }

    fn wait_until_ready(&self, limit: Duration) {
        let deadline = Instant::now() + limit;
        let url = format!("{}/moto-api/", self.url);
        while Instant::now() < deadline {
            if let Ok(r) = self.agent.get(&url).call()
                && r.status().is_success()
            {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "moto did not answer {url} within {limit:?}; see {}",
            self.log.display()
        );
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    /// Forgets every resource (about half a second).
    pub fn reset(&self) {
        let url = format!("{}/moto-api/reset", self.url);
        let response = self
            .agent
            .post(&url)
            .send_empty()
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        assert!(
            response.status().is_success(),
            "POST {url} answered {}",
            response.status()
        );
    }

    /// An EC2 client for test setup, signing with the dummy keys in `REGION`.
    pub fn ec2(&self) -> Ec2 {
        self.ec2_as(TEST_KEY_ID, TEST_SECRET, REGION)
    }

    pub fn ec2_as(&self, key_id: &str, secret: &str, region: &str) -> Ec2 {
        Ec2 {
            client: query_client(&self.url, region, "ec2", "2016-11-15", key_id, secret),
        }
    }

    /// The moto log so far, for failure messages.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        // EOF on the watchdog's stdin stops moto; kill the watchdog only if it hangs.
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.watchdog.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.watchdog.kill();
        let _ = self.watchdog.wait();
    }
}

fn query_client(
    url: &str,
    region: &str,
    service: &'static str,
    version: &'static str,
    key_id: &str,
    secret: &str,
) -> QueryClient {
    QueryClient::new(QueryClientConfig {
        endpoint: Endpoint::parse(url).expect("moto URL"),
        region: region.to_string(),
        service,
        version,
        credentials: Some(CredentialSource::Static {
            credentials: Credentials::new(key_id, secret),
            origin: "the moto test harness".into(),
        }),
        clock: Arc::new(SystemTime::now),
        timeout: Duration::from_secs(30),
        trust: route_controller::Trust::new("AWS_CA_BUNDLE"),
        proxying: route_controller::Proxying::Never,
    })
}

// --- the shared server ------------------------------------------------------------

/// Exclusive use of the process-wide moto server, reset for this test. Prints the
/// test's duration when dropped.
pub struct MotoGuard {
    moto: &'static Moto,
    _exclusive: MutexGuard<'static, ()>,
    started: Instant,
    name: String,
}

impl std::ops::Deref for MotoGuard {
    type Target = Moto;
    fn deref(&self) -> &Moto {
        self.moto
    }
}

impl Drop for MotoGuard {
    fn drop(&mut self) {
        eprintln!(
            "[moto] test {} took {:.2} s",
            self.name,
            self.started.elapsed().as_secs_f64()
        );
    }
}

/// The shared server, started on first use, reset before being handed out. Tests
/// holding it run one at a time: moto's state is global to the server.
pub fn shared() -> MotoGuard {
    static SERVER: OnceLock<Moto> = OnceLock::new();
    static EXCLUSIVE: Mutex<()> = Mutex::new(());
    let exclusive = EXCLUSIVE.lock().unwrap_or_else(|e| e.into_inner());
    let moto = SERVER.get_or_init(|| {
        let moto = Moto::start();
        // EC2's backend loads lazily: pay (and report) that once, not in a test.
        let started = Instant::now();
        moto.ec2().call("DescribeVpcs", Params::new());
        eprintln!(
            "[moto] first EC2 request took {:.2} s",
            started.elapsed().as_secs_f64()
        );
        moto
    });
    let started = Instant::now();
    moto.reset();
    MotoGuard {
        moto,
        _exclusive: exclusive,
        started,
        name: std::thread::current()
            .name()
            .unwrap_or("unnamed")
            .to_string(),
    }
}

// --- EC2 and IAM helpers ------------------------------------------------------------

/// A launched instance.
#[derive(Clone, Debug)]
pub struct TestInstance {
    pub id: String,
    pub private_dns_name: String,
    pub availability_zone: String,
}

impl TestInstance {
    /// The providerID a kubelet on this instance would report.
    pub fn provider_id(&self) -> String {
        format!("aws:///{}/{}", self.availability_zone, self.id)
    }
}

/// Test-side EC2 calls, failing the test with moto's answer on error.
pub struct Ec2 {
    client: QueryClient,
}

impl Ec2 {
    pub fn try_call(&self, action: &str, params: Params) -> Result<Element, QueryError> {
        self.client.call(action, &params)
    }

    pub fn call(&self, action: &str, params: Params) -> Element {
        self.try_call(action, params)
            .unwrap_or_else(|e| panic!("moto {action} failed: {e}"))
    }

    pub fn create_vpc(&self, cidr: &str) -> String {
        let root = self.call("CreateVpc", Params::new().add("CidrBlock", cidr));
        text(&root, &["vpc", "vpcId"])
    }

    pub fn create_subnet(&self, vpc: &str, cidr: &str, zone: &str) -> String {
        let root = self.call(
            "CreateSubnet",
            Params::new()
                .add("VpcId", vpc)
                .add("CidrBlock", cidr)
                .add("AvailabilityZone", zone),
        );
        text(&root, &["subnet", "subnetId"])
    }

    /// A route table in `vpc` created with `tags`.
    pub fn create_route_table(&self, vpc: &str, tags: &[(&str, &str)]) -> String {
        let mut params = Params::new().add("VpcId", vpc);
        if !tags.is_empty() {
            params = params.add("TagSpecification.1.ResourceType", "route-table");
            for (i, (k, v)) in tags.iter().enumerate() {
                params = params
                    .add(format!("TagSpecification.1.Tag.{}.Key", i + 1), *k)
                    .add(format!("TagSpecification.1.Tag.{}.Value", i + 1), *v);
            }
        }
        let root = self.call("CreateRouteTable", params);
        text(&root, &["routeTable", "routeTableId"])
    }

    pub fn tag(&self, resource: &str, key: &str, value: &str) {
        self.call(
            "CreateTags",
            Params::new()
                .add("ResourceId.1", resource)
                .add("Tag.1.Key", key)
                .add("Tag.1.Value", value),
        );
    }

    pub fn delete_route_table(&self, id: &str) {
        self.call("DeleteRouteTable", Params::new().add("RouteTableId", id));
    }

    /// An Amazon-owned AMI to launch from. moto ships a fixed catalogue that survives
    /// a reset, and listing it takes about a second, so the answer is kept per server
    /// and region.
    pub fn any_ami(&self) -> String {
        static KNOWN: Mutex<Vec<(String, String, String)>> = Mutex::new(Vec::new());
        let (url, region) = (&self.client.endpoint().url, self.client.region());
        let mut known = KNOWN.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, ami)) = known.iter().find(|(u, r, _)| u == url && r == region) {
            return ami.clone();
        }
        let root = self.call("DescribeImages", Params::new().add("Owner.1", "amazon"));
        let ami = root
            .items("imagesSet")
            .find_map(|i| i.text_of("imageId"))
            .map(str::to_string)
            .expect("moto lists at least one Amazon AMI");
        known.push((url.clone(), region.to_string(), ami.clone()));
        ami
    }

    pub fn run_instance(&self, ami: &str, subnet: &str) -> TestInstance {
        let root = self.call(
            "RunInstances",
            Params::new()
                .add("ImageId", ami)
                .add("MinCount", "1")
                .add("MaxCount", "1")
                .add("InstanceType", "t3.micro")
                .add("SubnetId", subnet),
        );
        let item = root
            .items("instancesSet")
            .next()
            .expect("RunInstances returns the instance");
        TestInstance {
            id: item.text_of("instanceId").expect("instanceId").to_string(),
            private_dns_name: item
                .text_of("privateDnsName")
                .expect("privateDnsName")
                .to_string(),
            availability_zone: item
                .child("placement")
                .and_then(|p| p.text_of("availabilityZone"))
                .expect("placement")
                .to_string(),
        }
    }

    pub fn terminate(&self, id: &str) {
        self.call("TerminateInstances", Params::new().add("InstanceId.1", id));
    }

    /// The instance's `sourceDestCheck` attribute.
    pub fn source_dest_check(&self, id: &str) -> bool {
        let root = self.call(
            "DescribeInstanceAttribute",
            Params::new()
                .add("InstanceId", id)
                .add("Attribute", "sourceDestCheck"),
        );
        text(&root, &["sourceDestCheck", "value"]) == "true"
    }

    /// The table's routes as `(destination, instance, state)`, in moto's order.
    pub fn routes(&self, table: &str) -> Vec<(String, Option<String>, String)> {
        let root = self.call(
            "DescribeRouteTables",
            Params::new().add("RouteTableId.1", table),
        );
        let table = root
            .items("routeTableSet")
            .next()
            .unwrap_or_else(|| panic!("route table {table} not found"));
        table
            .items("routeSet")
            .filter_map(|r| {
                Some((
                    r.text_of("destinationCidrBlock")?.to_string(),
                    r.text_of("instanceId").map(str::to_string),
                    r.text_of("state").unwrap_or("active").to_string(),
                ))
            })
            .collect()
    }

    pub fn create_route(&self, table: &str, destination: &str, instance: &str) {
        self.call(
            "CreateRoute",
            Params::new()
                .add("RouteTableId", table)
                .add("DestinationCidrBlock", destination)
                .add("InstanceId", instance),
        );
    }
}

fn text(root: &Element, path: &[&str]) -> String {
    let mut e = root;
    for name in path {
        e = e
            .child(name)
            .unwrap_or_else(|| panic!("<{name}> missing in {}", root.name));
    }
    e.text.clone()
}

/// A VPC with a subnet in `us-east-1a`, as most tests need.
pub struct Network {
    pub vpc: String,
    pub subnet: String,
    pub ami: String,
}

pub fn network(ec2: &Ec2) -> Network {
    let vpc = ec2.create_vpc("10.0.0.0/16");
    let subnet = ec2.create_subnet(&vpc, "10.0.1.0/24", "us-east-1a");
    Network {
        vpc,
        subnet,
        ami: ec2.any_ami(),
    }
}

/// Creates an IAM user with an inline policy and an access key, through IAM's Query
/// API signed by our own SigV4 (service `iam`, region us-east-1). In a server started
/// with `INITIAL_NO_AUTH_ACTION_COUNT`, these three actions must fall within the
/// unchecked ones. Returns `(access key ID, secret)`.
pub fn create_iam_user(moto: &Moto, user: &str, policy_json: &str) -> (String, String) {
    let iam = query_client(
        moto.url(),
        "us-east-1",
        "iam",
        "2010-05-08",
        TEST_KEY_ID,
        TEST_SECRET,
    );
    let call = |action: &str, params: Params| {
        iam.call(action, &params)
            .unwrap_or_else(|e| panic!("moto IAM {action} failed: {e}"))
    };
    call("CreateUser", Params::new().add("UserName", user));
    call(
        "PutUserPolicy",
        Params::new()
            .add("UserName", user)
            .add("PolicyName", format!("{user}-policy"))
            .add("PolicyDocument", policy_json),
    );
    let root = call("CreateAccessKey", Params::new().add("UserName", user));
    let key = root
        .find("AccessKey")
        .expect("CreateAccessKey returns AccessKey");
    (
        key.text_of("AccessKeyId").expect("AccessKeyId").to_string(),
        key.text_of("SecretAccessKey")
            .expect("SecretAccessKey")
            .to_string(),
    )
}

/// An IAM policy document allowing `actions` on every resource.
pub fn allow_policy(actions: &[&str]) -> String {
    let actions: Vec<String> = actions.iter().map(|a| format!("\"{a}\"")).collect();
    format!(
        "{{\"Version\":\"2012-10-17\",\"Statement\":[{{\"Effect\":\"Allow\",\"Action\":[{}],\"Resource\":\"*\"}}]}}",
        actions.join(",")
    )
}

// --- STS and IAM roles, for the credential chain --------------------------------------

impl Moto {
    /// Turns moto's signature and IAM policy checks on after the next `n` actions
    /// (`0`: at once). STS `AssumeRoleWithWebIdentity` is unsigned, and moto cannot
    /// check an unsigned request: leave one unchecked action for each.
    pub fn check_auth_after(&self, n: u32) {
        let url = format!("{}/moto-api/reset-auth", self.url);
        let response = self
            .agent
            .post(&url)
            .header("Content-Type", "text/plain")
            .send(n.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        assert!(
            response.status().is_success(),
            "POST {url} answered {}",
            response.status()
        );
    }
}

/// Creates IAM role `role` (any principal may assume it: moto does not check trust
/// policies) with an inline policy; returns its ARN.
pub fn create_iam_role(moto: &Moto, role: &str, policy_json: &str) -> String {
    let iam = query_client(
        moto.url(),
        "us-east-1",
        "iam",
        "2010-05-08",
        TEST_KEY_ID,
        TEST_SECRET,
    );
    let call = |action: &str, params: Params| {
        iam.call(action, &params)
            .unwrap_or_else(|e| panic!("moto IAM {action} failed: {e}"))
    };
    let trust = "{\"Version\":\"2012-10-17\",\"Statement\":[{\"Effect\":\"Allow\",\
                 \"Principal\":{\"AWS\":\"*\"},\"Action\":[\"sts:AssumeRole\",\
                 \"sts:AssumeRoleWithWebIdentity\"]}]}";
    let root = call(
        "CreateRole",
        Params::new()
            .add("RoleName", role)
            .add("AssumeRolePolicyDocument", trust),
    );
    call(
        "PutRolePolicy",
        Params::new()
            .add("RoleName", role)
            .add("PolicyName", format!("{role}-policy"))
            .add("PolicyDocument", policy_json),
    );
    root.find("Arn")
        .expect("CreateRole returns the Arn")
        .text
        .clone()
}

/// Who moto's STS says `credentials` belong to (`GetCallerIdentity`'s `Arn`): an
/// error when moto does not know them or their signature fails its checks.
pub fn caller_arn(moto: &Moto, credentials: Credentials) -> Result<String, QueryError> {
    let sts = QueryClient::new(QueryClientConfig {
        endpoint: Endpoint::parse(moto.url()).expect("moto URL"),
        region: REGION.to_string(),
        service: "sts",
        version: "2011-06-15",
        credentials: Some(CredentialSource::Static {
            credentials,
            origin: "the credentials under test".into(),
        }),
        clock: Arc::new(SystemTime::now),
        timeout: Duration::from_secs(30),
        trust: route_controller::Trust::new("AWS_CA_BUNDLE"),
        proxying: route_controller::Proxying::Never,
    });
    let root = sts.call("GetCallerIdentity", &Params::new())?;
    Ok(root.find("Arn").map(|a| a.text.clone()).unwrap_or_default())
}
