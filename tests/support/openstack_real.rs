#![allow(dead_code)]
// Each test binary uses only part of this module.

//! A real Keystone and Neutron on loopback, from PyPI, for the OpenStack tests.
//!
//! - Installs keystone, neutron, keystonemiddleware and gunicorn with exact pins into
//!   `target/openstack-venv/` once per target directory (a lock file keeps test
//!   binaries that start together from installing twice), as `moto.rs` does for moto.
//! - Builds, once per venv, the databases every server starts from: Keystone's
//!   (`db_sync`, its fernet and credential keys, `bootstrap` of the admin), and
//!   Neutron's sqlite schema from its models (Neutron's migrations cannot run on
//!   sqlite; its own unit tests build the schema this way), stamped at `heads`. Each
//!   server gets a copy: a fresh database.
//! - [`RealCloud::start`] serves Keystone and Neutron under gunicorn on free loopback
//!   ports (no RabbitMQ: oslo.messaging's in-process `fake:/` driver; no agents: ML2
//!   without mechanism drivers, so ports stay unbound, which routers, routes and
//!   address pairs do not mind), with the policy defaults current clouds enforce
//!   (`enforce_scope`, `enforce_new_defaults`); it registers Neutron in the catalog
//!   and makes a project, a `member` user and an application credential of that user.
//!   [`Mode::WithoutAtomic`] serves an L3 plugin without `extraroute-atomic` (a
//!   Neutron older than Train).
//! - [`Api`] is that member (or the admin) talking to the real API, to build
//!   networks, subnets, routers and node ports, and to read what the server holds.
//!
//! Each server runs under a small Python watchdog that stops it when our end of its
//! stdin closes, so no server outlives the test process. A missing `python3` or venv
//! module fails the test with what to install; nothing is skipped. Timings (install,
//! templates, start) go to stderr.

// Each support module that needs it includes it: a test may include several.
#[allow(clippy::duplicate_mod)]
#[path = "venv.rs"]
mod venv;

use std::fs::{self, File};
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};
use venv::{locked, run, target_dir};

use serde_json::{Value, json};

pub const REQUIREMENTS: &str = "\
alembic==1.20.1
amqp==5.4.2
aniso8601==10.0.1
attrs==26.1.0
autopage==0.6.0
bcrypt==5.0.0
blinker==1.9.0
cachetools==8.0.3
certifi==2026.10.19.post1
cffi==2.1.1
charset-normalizer==3.5.3
click==8.5.1
cliff==4.17.0
cmd2==4.3.1
cotyledon==2.2.0
cryptography==50.0.2
debtcollector==3.1.0
decorator==5.3.2
defusedxml==0.7.1
dnspython==2.9.2
dogpile.cache==1.5.0
elementpath==4.8.0
eventlet==0.41.3
fasteners==0.20
fixtures==4.3.2
Flask==3.1.3
Flask-RESTful==0.3.10
futurist==3.5.0
greenlet==3.5.6
gunicorn==27.0.1
httplib2==0.32.1
idna==3.21
invoke==3.0.3
iso8601==2.1.0
itsdangerous==2.2.0
Jinja2==3.1.6
jmespath==1.1.0
jsonpatch==1.48
jsonpointer==3.12
jsonschema==4.26.0
jsonschema-specifications==2025.9.1
keystone==30.0.0
keystoneauth1==5.18.1
keystonemiddleware==13.0.1
kombu==5.7.0
lxml==6.2.0
Mako==1.4.3
markdown-it-py==4.3.0
MarkupSafe==3.0.4
mdurl==0.1.2
msgpack==1.2.4
ncclient==0.7.1
netaddr==1.3.0
neutron==29.0.0
neutron-lib==5.0.1
oauthlib==4.0.1
openstacksdk==4.22.0
os-ken==4.2.2
os-resource-classes==1.1.0
os-service-types==1.9.0
os-traits==3.9.0
os_vif==5.3.0
osc-lib==4.7.0
oslo.cache==4.3.0
oslo.concurrency==7.6.1
oslo.config==10.7.0
oslo.context==6.5.0
oslo.db==18.1.1
oslo.i18n==6.9.0
oslo.log==8.3.2
oslo.messaging==18.3.1
oslo.metrics==0.17.0
oslo.middleware==8.2.0
oslo.policy==6.0.1
oslo.privsep==3.12.0
oslo.reports==3.9.0
oslo.rootwrap==7.10.0
oslo.serialization==5.11.0
oslo.service==4.8.0
oslo.upgradecheck==2.8.0
oslo.utils==10.2.0
oslo.versionedobjects==3.12.0
osprofiler==4.4.0
ovs==4.0.0
ovsdbapp==3.0.0
packaging==26.4
paramiko==5.1.0
Paste==3.10.1
PasteDeploy==3.1.0
pbr==7.1.3
pecan==1.8.0
platformdirs==4.14.9
prettytable==3.19.0
prometheus_client==0.26.0
prompt_toolkit==3.0.53
psutil==7.2.2
pycadf==4.1.0
pycparser==3.12
Pygments==2.21.0
PyJWT==2.15.1
PyNaCl==1.6.2
pyOpenSSL==26.4.0
pyparsing==3.3.3
pyperclip==1.11.0
pyroute2==0.9.7
pysaml2==7.5.5
python-dateutil==4.0.0
python-designateclient==7.0.0
python-keystoneclient==6.0.0
python-novaclient==18.13.1
pytz==2026.6
PyYAML==6.0.4
referencing==0.37.0
repoze-lru==0.8
requests==2.34.2
rfc3986==2.0.0
rich==15.0.0
rich-argparse==1.8.0
Routes==2.5.1
rpds-py==2026.9.1
setproctitle==1.3.8
six==1.17.0
sortedcontainers==2.4.0
SQLAlchemy==2.1.9
statsd==4.0.1
stevedore==5.10.0
tenacity==9.2.1
testresources==2.1.2
testscenarios==0.7.0
tooz==9.1.0
typing_extensions==4.16.0
tzdata==2026.6
urllib3==2.8.0
vine==5.1.0
voluptuous==0.16.0
wcwidth==0.9.5
WebOb==1.8.11
Werkzeug==3.1.9
wrapt==2.5.2
xmlschema==2.5.1
yappi==1.7.6
";

/// The admin's password (bootstrap) and the member's.
pub const ADMIN_PASSWORD: &str = "admin-secret-of-the-tests";
pub const MEMBER_PASSWORD: &str = "member-secret-of-the-tests";
pub const MEMBER: &str = "rc-member";
pub const PROJECT: &str = "rc-project";
pub const REGION: &str = "RegionOne";
/// The secret of the member's application credential (what cloud.conf carries).
pub const APP_CREDENTIAL_SECRET: &str = "app-credential-secret-never-logged";

/// Where the WSGI applications are imported: oslo.config parses `sys.argv`, which
/// under gunicorn holds gunicorn's own flags, so they are replaced by the config
/// files named in `RC_CONFIG_FILES` before the import.
const WSGI: &str = r#"
import os, sys
sys.argv = [sys.argv[0]] + [a for f in os.environ.get('RC_CONFIG_FILES', '').split(';') if f
                            for a in ('--config-file', f)]
if os.environ.get('RC_SERVICE') == 'keystone':
    from keystone.wsgi.api import application
else:
    from neutron.wsgi.api import application
"#;

/// Neutron before Train: the stock L3 plugin without `extraroute-atomic` (Neutron has
/// no option to drop one extension).
const L3_WITHOUT_ATOMIC: &str = r#"
from neutron.services.l3_router import l3_router_plugin


class L3RouterPluginWithoutAtomic(l3_router_plugin.L3RouterPlugin):
    _supported_extension_aliases = [
        a for a in l3_router_plugin.L3RouterPlugin._supported_extension_aliases
        if a != 'extraroute-atomic']
"#;

/// Stops the server when stdin reaches EOF, i.e. when the test process lets go of it.
const WATCHDOG: &str = r#"
import subprocess, sys
server = subprocess.Popen(sys.argv[1:])
try:
    sys.stdin.buffer.read()
finally:
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
"#;

/// Builds Neutron's schema from its models into `sys.argv[1]`.
const NEUTRON_SCHEMA: &str = r#"
import sys
import sqlalchemy as sa
from neutron.db.migration.models import head
head.get_metadata().create_all(sa.create_engine('sqlite:///' + sys.argv[1]))
"#;

/// The virtualenv's directory, installing it first if needed.
pub fn venv() -> PathBuf {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    READY
        .get_or_init(|| {
            venv::install(
                "openstack-venv",
                REQUIREMENTS,
                "the OpenStack tests run a real Keystone and Neutron",
                "keystone and neutron",
            )
        })
        .clone()
}

fn user_and_group() -> (String, String) {
    let id = |flag: &str| {
        let out = Command::new("id")
            .arg(flag)
            .output()
            .unwrap_or_else(|e| panic!("id {flag}: {e}"));
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    (id("-un"), id("-gn"))
}

/// The directory of the databases and keys every server copies.
fn templates() -> PathBuf {
    static READY: OnceLock<PathBuf> = OnceLock::new();
    READY.get_or_init(build_templates).clone()
}

fn keystone_conf(dir: &Path) -> String {
    let d = dir.display();
    format!(
        "[DEFAULT]\nlog_file = {d}/keystone.log\n\
         [database]\nconnection = sqlite:///{d}/keystone.db\n\
         [token]\nprovider = fernet\n\
         [fernet_tokens]\nkey_repository = {d}/fernet\n\
         [fernet_receipts]\nkey_repository = {d}/receipts\n\
         [credential]\nkey_repository = {d}/credential\n\
         [cache]\nenabled = false\n"
    )
}

fn build_templates() -> PathBuf {
    let venv = venv();
    let dir = venv.join("templates");
    let marker = dir.join("built");
    if marker.exists() {
        return dir;
    }
    let _lock = locked(&venv.join("templates.lock"));
    if marker.exists() {
        return dir;
    }
    let started = Instant::now();
    if dir.exists() {
        fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("remove {}: {e}", dir.display()));
    }
    let keystone = dir.join("keystone");
    for sub in ["fernet", "receipts", "credential"] {
        fs::create_dir_all(keystone.join(sub)).expect("create the keystone template");
    }
    let conf = keystone.join("keystone.conf");
    fs::write(&conf, keystone_conf(&keystone)).expect("write keystone.conf");
    let manage = |args: &[&str]| {
        run(
            Command::new(venv.join("bin/keystone-manage"))
                .arg("--config-file")
                .arg(&conf)
                .args(args),
            &format!("keystone-manage {}", args[0]),
        )
    };
    let (user, group) = user_and_group();
    manage(&["db_sync"]);
    for setup in ["fernet_setup", "credential_setup"] {
        manage(&[setup, "--keystone-user", &user, "--keystone-group", &group]);
    }
    // The identity URLs are set to each server's port once it runs.
    let url = "http://127.0.0.1:5000/v3";
    manage(&[
        "bootstrap",
        "--bootstrap-password",
        ADMIN_PASSWORD,
        "--bootstrap-public-url",
        url,
        "--bootstrap-internal-url",
        url,
        "--bootstrap-admin-url",
        url,
        "--bootstrap-region-id",
        REGION,
    ]);
    let neutron = dir.join("neutron");
    fs::create_dir_all(&neutron).expect("create the neutron template");
    let schema = neutron.join("neutron.db");
    run(
        Command::new(venv.join("bin/python"))
            .arg("-c")
            .arg(NEUTRON_SCHEMA)
            .arg(&schema),
        "building Neutron's schema from its models",
    );
    let conf = neutron.join("neutron.conf");
    fs::write(
        &conf,
        format!(
            "[DEFAULT]\ncore_plugin = ml2\n[database]\nconnection = sqlite:///{}\n",
            schema.display()
        ),
    )
    .expect("write the schema's neutron.conf");
    run(
        Command::new(venv.join("bin/neutron-db-manage"))
            .arg("--config-file")
            .arg(&conf)
            .args(["stamp", "heads"]),
        "neutron-db-manage stamp heads",
    );
    fs::write(&marker, "").expect("write the templates marker");
    eprintln!(
        "[openstack] built the Keystone and Neutron databases in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap_or_else(|e| panic!("create {}: {e}", to.display()));
    let entries = fs::read_dir(from).unwrap_or_else(|e| panic!("read {}: {e}", from.display()));
    for entry in entries {
        let entry = entry.expect("a directory entry");
        let path = entry.path();
        let dest = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &dest);
        } else {
            fs::copy(&path, &dest).unwrap_or_else(|e| panic!("copy {}: {e}", path.display()));
        }
    }
}

/// A free loopback port: bound, then released for the server to bind.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// The directories of servers whose test process has exited (`<pid>-<n>`): the shared
/// servers live until their process exits, so no drop removes theirs.
fn remove_of_dead_processes(servers: &Path) {
    let Ok(entries) = fs::read_dir(servers) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let Some(pid) = name.split('-').next() else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}

/// One gunicorn server under its watchdog.
struct Server {
    watchdog: Child,
    stdin: Option<ChildStdin>,
    log: PathBuf,
    name: &'static str,
}

impl Server {
    fn start(name: &'static str, dir: &Path, port: u16, env: &[(&str, String)]) -> Server {
        let venv = venv();
        let log = dir.join(format!("{name}-gunicorn.log"));
        let log_file = File::create(&log).expect("create the gunicorn log");
        let mut command = Command::new(venv.join("bin/python"));
        command
            .arg("-c")
            .arg(WATCHDOG)
            .arg(venv.join("bin/gunicorn"))
            .arg("--chdir")
            .arg(dir)
            .args(["--bind", &format!("127.0.0.1:{port}")])
            .args([
                "--workers",
                "1",
                "--timeout",
                "120",
                "--graceful-timeout",
                "2",
            ])
            .arg("rc_wsgi:application")
            .stdin(Stdio::piped())
            .stdout(log_file.try_clone().expect("clone the log handle"))
            .stderr(log_file);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut watchdog = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start gunicorn from {}: {e}", venv.display()));
        let stdin = watchdog.stdin.take();
        Server {
            watchdog,
            stdin,
            log,
            name,
        }
    }

    /// Waits until `url` answers at all (any status).
    fn wait_until_serving(&mut self, agent: &ureq::Agent, url: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if agent.get(url).call().is_ok() {
                return;
            }
            if let Ok(Some(status)) = self.watchdog.try_wait() {
                panic!(
                    "{} exited ({status}); its log:\n{}",
                    self.name,
                    self.log_text()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!(
            "{} did not answer {url} within {limit:?}; its log:\n{}",
            self.name,
            self.log_text()
        );
    }

    fn log_text(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            let _ = f.read_to_string(&mut text);
        }
        text
    }
}

impl Server {
    /// Closes the watchdog's stdin (it terminates the server) and waits for it.
    fn stop(&mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(15);
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

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Which L3 plugin Neutron serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The stock plugin, with `extraroute-atomic`.
    Atomic,
    /// A subclass without `extraroute-atomic`: routes only by a whole-list update.
    WithoutAtomic,
}

/// What a Neutron is started with, each a `[DEFAULT]` setting operators change.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Options {
    pub mode: Mode,
    /// `pagination_max_limit`: lists stop at this many and link the next page.
    pub pagination_max_limit: Option<u32>,
    /// `max_routes` (Neutron's default 30).
    pub max_routes: Option<u32>,
    /// `max_allowed_address_pair` (Neutron's default 10).
    pub max_allowed_address_pair: Option<u32>,
}

impl Options {
    pub fn new(mode: Mode) -> Options {
        Options {
            mode,
            pagination_max_limit: None,
            max_routes: None,
            max_allowed_address_pair: None,
        }
    }
}

static STARTED: AtomicU32 = AtomicU32::new(0);

/// A Keystone and a Neutron, with a project, its member and the member's
/// application credential.
pub struct RealCloud {
    pub options: Options,
    pub keystone_url: String,
    pub neutron_url: String,
    pub project_id: String,
    pub member_id: String,
    pub app_credential_id: String,
    /// Neutron's port, its `neutron.conf` and the servers' directory, to start it
    /// again on the same database ([`RealCloud::restart_neutron`]).
    neutron_port: u16,
    neutron_conf: PathBuf,
    network_service_id: String,
    member_role_id: String,
    // Dropped first: the servers stop before their directory goes.
    neutron: Mutex<Server>,
    keystone: Server,
    agent: ureq::Agent,
    member: Api,
    admin: Api,
    dir: PathBuf,
}

impl RealCloud {
    /// A Keystone and Neutron shared by the tests of this process that ask for the
    /// same options; each test builds its own network and router in it.
    pub fn shared(options: Options) -> &'static RealCloud {
        static CLOUDS: OnceLock<Mutex<Vec<&'static RealCloud>>> = OnceLock::new();
        let clouds = CLOUDS.get_or_init(|| Mutex::new(Vec::new()));
        // Held while one starts: two tests asking for the same cloud get one.
        let mut clouds = clouds.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = clouds.iter().find(|c| c.options == options) {
            return c;
        }
        let cloud: &'static RealCloud = Box::leak(Box::new(RealCloud::start(options)));
        clouds.push(cloud);
        cloud
    }

    /// A fresh Keystone and Neutron (fresh databases) of their own.
    pub fn start(options: Options) -> RealCloud {
        let templates = templates();
        let started = Instant::now();
        let n = STARTED.fetch_add(1, Ordering::SeqCst);
        let servers = target_dir().join("openstack-servers");
        remove_of_dead_processes(&servers);
        let dir = servers.join(format!("{}-{n}", std::process::id()));
        if dir.exists() {
            let _ = fs::remove_dir_all(&dir);
        }
        fs::create_dir_all(&dir).expect("create the servers' directory");
        fs::write(dir.join("rc_wsgi.py"), WSGI).expect("write rc_wsgi.py");
        fs::write(dir.join("rc_l3.py"), L3_WITHOUT_ATOMIC).expect("write rc_l3.py");
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(60)))
            .build()
            .into();

        // Keystone, from the template.
        let ks_dir = dir.join("keystone");
        copy_dir(&templates.join("keystone"), &ks_dir);
        let ks_conf = ks_dir.join("keystone.conf");
        fs::write(&ks_conf, keystone_conf(&ks_dir)).expect("write keystone.conf");
        let ks_port = free_port();
        let keystone_url = format!("http://127.0.0.1:{ks_port}");
        let mut keystone = Server::start(
            "keystone",
            &dir,
            ks_port,
            &[
                ("RC_SERVICE", "keystone".into()),
                ("OS_KEYSTONE_CONFIG_FILES", ks_conf.display().to_string()),
            ],
        );
        keystone.wait_until_serving(
            &agent,
            &format!("{keystone_url}/v3"),
            Duration::from_secs(120),
        );
        let ks_ready = started.elapsed();

        let auth = format!("{keystone_url}/v3");
        let admin = Api::password(&agent, &auth, "admin", ADMIN_PASSWORD, "admin", None);
        // The bootstrap's identity endpoints name the template's port.
        for e in admin.get(&auth, "/endpoints")["endpoints"]
            .as_array()
            .cloned()
            .unwrap_or_default()
        {
            let id = e["id"].as_str().unwrap_or_default();
            admin.send(
                "PATCH",
                &auth,
                &format!("/endpoints/{id}"),
                &json!({"endpoint": {"url": auth}}),
            );
        }
        let ne_port = free_port();
        let neutron_url = format!("http://127.0.0.1:{ne_port}");
        let service = admin.send(
            "POST",
            &auth,
            "/services",
            &json!({"service": {"type": "network", "name": "neutron"}}),
        );
        let service_id = service["service"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        for interface in ["public", "internal", "admin"] {
            admin.send(
                "POST",
                &auth,
                "/endpoints",
                &json!({"endpoint": {"service_id": service_id, "interface": interface,
                        "url": neutron_url, "region_id": REGION}}),
            );
        }
        let project = admin.send(
            "POST",
            &auth,
            "/projects",
            &json!({"project": {"name": PROJECT, "domain_id": "default"}}),
        );
        let project_id = project["project"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let user = admin.send(
            "POST",
            &auth,
            "/users",
            &json!({"user": {"name": MEMBER, "domain_id": "default", "password": MEMBER_PASSWORD,
                    "default_project_id": project_id}}),
        );
        let member_id = user["user"]["id"].as_str().unwrap_or_default().to_string();
        let roles = admin.get(&auth, "/roles?name=member");
        let role_id = roles["roles"][0]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        admin.send(
            "PUT",
            &auth,
            &format!("/projects/{project_id}/users/{member_id}/roles/{role_id}"),
            &Value::Null,
        );

        // Neutron, from the schema.
        let ne_dir = dir.join("neutron");
        fs::create_dir_all(ne_dir.join("state")).expect("create neutron's state_path");
        fs::create_dir_all(ne_dir.join("lock")).expect("create neutron's lock_path");
        fs::copy(
            templates.join("neutron/neutron.db"),
            ne_dir.join("neutron.db"),
        )
        .expect("copy neutron's schema");
        let ne_conf = ne_dir.join("neutron.conf");
        fs::write(
            &ne_conf,
            neutron_conf(&ne_dir, &venv(), &keystone_url, &options),
        )
        .expect("write neutron.conf");
        let mut neutron = Server::start(
            "neutron",
            &dir,
            ne_port,
            &[
                ("RC_SERVICE", "neutron".into()),
                ("RC_CONFIG_FILES", ne_conf.display().to_string()),
            ],
        );
        neutron.wait_until_serving(&agent, &format!("{neutron_url}/"), Duration::from_secs(120));

        let member = Api::password(
            &agent,
            &auth,
            MEMBER,
            MEMBER_PASSWORD,
            PROJECT,
            Some(neutron_url.clone()),
        );
        let credential = member.send(
            "POST",
            &auth,
            &format!("/users/{member_id}/application_credentials"),
            &json!({"application_credential": {"name": "route-controller",
                    "secret": APP_CREDENTIAL_SECRET}}),
        );
        let app_credential_id = credential["application_credential"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let admin = Api {
            neutron: neutron_url.clone(),
            ..admin
        };
        eprintln!(
            "[openstack] keystone at {keystone_url} serving in {:.1} s; neutron ({:?}) at \
             {neutron_url} ready in {:.1} s",
            ks_ready.as_secs_f64(),
            options,
            started.elapsed().as_secs_f64()
        );
        RealCloud {
            options,
            keystone_url,
            neutron_url,
            project_id,
            member_id,
            app_credential_id,
            neutron_port: ne_port,
            neutron_conf: ne_conf,
            network_service_id: service_id,
            member_role_id: role_id,
            neutron: Mutex::new(neutron),
            keystone,
            agent,
            member,
            admin,
            dir,
        }
    }

    /// The project's member: what the controller's application credential may do.
    pub fn member(&self) -> &Api {
        &self.member
    }

    /// The cloud's admin (project `admin`).
    pub fn admin(&self) -> &Api {
        &self.admin
    }

    /// `[Global]` of a cloud.conf with the member's application credential.
    pub fn cloud_conf_global(&self) -> String {
        format!(
            "[Global]\nauth-url = {}/v3\nregion = {REGION}\napplication-credential-id = {}\n\
             application-credential-secret = {APP_CREDENTIAL_SECRET}\n",
            self.keystone_url, self.app_credential_id
        )
    }

    /// The servers' logs, for failure messages.
    pub fn logs(&self) -> String {
        let neutron = fs::read_to_string(self.dir.join("neutron/neutron.log")).unwrap_or_default();
        let tail: String = neutron
            .lines()
            .rev()
            .take(60)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        format!(
            "--- neutron.log (last 60 lines) ---\n{tail}\n--- gunicorn ---\n{}",
            self.neutron
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .log_text()
        )
    }

    /// Stops Neutron (SIGTERM to gunicorn, as a service restart does), waits `down`,
    /// and starts it again on the same database, port and configuration; returns once
    /// it answers. Requests meanwhile find the port closed.
    pub fn restart_neutron(&self, down: Duration) {
        let mut neutron = self.neutron.lock().unwrap_or_else(|e| e.into_inner());
        neutron.stop();
        std::thread::sleep(down);
        *neutron = Server::start(
            "neutron",
            &self.dir,
            self.neutron_port,
            &[
                ("RC_SERVICE", "neutron".into()),
                ("RC_CONFIG_FILES", self.neutron_conf.display().to_string()),
            ],
        );
        neutron.wait_until_serving(
            &self.agent,
            &format!("{}/", self.neutron_url),
            Duration::from_secs(120),
        );
    }

    /// A user `name` of the project with the `member` role and [`MEMBER_PASSWORD`]:
    /// one identity per process, so that a server-side log can tell processes apart.
    pub fn add_member_user(&self, name: &str) {
        let auth = format!("{}/v3", self.keystone_url);
        let user = self.admin.send(
            "POST",
            &auth,
            "/users",
            &json!({"user": {"name": name, "domain_id": "default", "password": MEMBER_PASSWORD,
                    "default_project_id": self.project_id}}),
        );
        let user_id = id(&user["user"]);
        self.admin.send(
            "PUT",
            &auth,
            &format!(
                "/projects/{}/users/{user_id}/roles/{}",
                self.project_id, self.member_role_id
            ),
            &Value::Null,
        );
    }

    /// Region `region` in the catalog, its Neutron at `url` on every interface: a
    /// client configured with that region reaches Neutron through `url` (a fault
    /// proxy of its own).
    pub fn add_neutron_region(&self, region: &str, url: &str) {
        let auth = format!("{}/v3", self.keystone_url);
        self.admin.send(
            "POST",
            &auth,
            "/regions",
            &json!({"region": {"id": region}}),
        );
        for interface in ["public", "internal", "admin"] {
            self.admin.send(
                "POST",
                &auth,
                "/endpoints",
                &json!({"endpoint": {"service_id": self.network_service_id,
                        "interface": interface, "url": url, "region_id": region}}),
            );
        }
    }

    /// The name of the user a Keystone token was issued to (`None` if Keystone does
    /// not know the token).
    pub fn token_user(&self, token: &str) -> Option<String> {
        let url = format!("{}/v3/auth/tokens", self.keystone_url);
        let mut response = self
            .agent
            .get(&url)
            .header("X-Auth-Token", &self.admin.token)
            .header("X-Subject-Token", token)
            .call()
            .ok()?;
        let body: Value = serde_json::from_str(&response.body_mut().read_to_string().ok()?).ok()?;
        body["token"]["user"]["name"].as_str().map(str::to_string)
    }
}

fn neutron_conf(dir: &Path, venv: &Path, keystone_url: &str, options: &Options) -> String {
    let d = dir.display();
    let mut extra = String::new();
    if let Some(n) = options.pagination_max_limit {
        extra.push_str(&format!("pagination_max_limit = {n}\n"));
    }
    if let Some(n) = options.max_routes {
        extra.push_str(&format!("max_routes = {n}\n"));
    }
    if let Some(n) = options.max_allowed_address_pair {
        extra.push_str(&format!("max_allowed_address_pair = {n}\n"));
    }
    let l3 = match options.mode {
        Mode::Atomic => "router",
        Mode::WithoutAtomic => "rc_l3.L3RouterPluginWithoutAtomic",
    };
    format!(
        "[DEFAULT]\ncore_plugin = ml2\nservice_plugins = {l3}\nauth_strategy = keystone\n\
         transport_url = fake:/\nrpc_workers = 0\napi_workers = 1\n\
         notify_nova_on_port_status_changes = false\nnotify_nova_on_port_data_changes = false\n\
         api_paste_config = {}\nstate_path = {d}/state\nbind_host = 127.0.0.1\n\
         log_file = {d}/neutron.log\n{extra}\
         [database]\nconnection = sqlite:///{d}/neutron.db\n\
         [oslo_concurrency]\nlock_path = {d}/lock\n\
         [ml2]\ntype_drivers = vxlan,flat,vlan\ntenant_network_types = vxlan\n\
         mechanism_drivers =\nextension_drivers = port_security\n\
         [ml2_type_vxlan]\nvni_ranges = 1:1000\n\
         [keystone_authtoken]\nwww_authenticate_uri = {keystone_url}\nauth_url = {keystone_url}\n\
         auth_type = password\nusername = admin\npassword = {ADMIN_PASSWORD}\n\
         project_name = admin\nuser_domain_name = Default\nproject_domain_name = Default\n\
         memcached_servers =\n\
         [oslo_policy]\nenforce_scope = true\nenforce_new_defaults = true\n\
         [quotas]\nquota_network = -1\nquota_subnet = -1\nquota_port = -1\nquota_router = -1\n",
        venv.join("etc/neutron/api-paste.ini").display()
    )
}

/// A user's project-scoped token and the two APIs.
#[derive(Clone)]
pub struct Api {
    agent: ureq::Agent,
    token: String,
    neutron: String,
}

/// A reply's status and JSON body (`Null` when it has none).
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

impl Api {
    fn password(
        agent: &ureq::Agent,
        auth: &str,
        user: &str,
        password: &str,
        project: &str,
        neutron: Option<String>,
    ) -> Api {
        let body = json!({"auth": {
            "identity": {"methods": ["password"], "password": {"user": {
                "name": user, "domain": {"id": "default"}, "password": password}}},
            "scope": {"project": {"name": project, "domain": {"id": "default"}}}
        }});
        let mut response = agent
            .post(&format!("{auth}/auth/tokens"))
            .content_type("application/json")
            .send(body.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("POST {auth}/auth/tokens: {e}"));
        let status = response.status().as_u16();
        let token = response
            .headers()
            .get("X-Subject-Token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let text = response.body_mut().read_to_string().unwrap_or_default();
        let Some(token) = token.filter(|_| status == 201) else {
            panic!("Keystone refused a token for {user}: HTTP {status}: {text}");
        };
        Api {
            agent: agent.clone(),
            token,
            neutron: neutron.unwrap_or_default(),
        }
    }

    /// A request to `base` + `path`, with its status and body.
    pub fn request(
        &self,
        method: &str,
        base: &str,
        path: &str,
        body: Option<&Value>,
        if_match: Option<u64>,
    ) -> Reply {
        self.try_request(method, base, path, body, if_match)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Api::request`], with a transport error (the server down) as an `Err`.
    pub fn try_request(
        &self,
        method: &str,
        base: &str,
        path: &str,
        body: Option<&Value>,
        if_match: Option<u64>,
    ) -> Result<Reply, String> {
        let url = format!("{base}{path}");
        let sent = match (method, body) {
            ("GET", _) => self
                .agent
                .get(&url)
                .header("X-Auth-Token", &self.token)
                .call(),
            ("DELETE", _) => self
                .agent
                .delete(&url)
                .header("X-Auth-Token", &self.token)
                .call(),
            (m, body) => {
                let text = body.map(Value::to_string).unwrap_or_default();
                let mut request = match m {
                    "POST" => self.agent.post(&url),
                    "PATCH" => self.agent.patch(&url),
                    _ => self.agent.put(&url),
                }
                .header("X-Auth-Token", &self.token);
                if let Some(n) = if_match {
                    request = request.header("If-Match", format!("revision_number={n}"));
                }
                if text.is_empty() {
                    request.send_empty()
                } else {
                    request
                        .content_type("application/json")
                        .send(text.as_bytes())
                }
            }
        };
        let mut response = sent.map_err(|e| format!("{method} {url}: {e}"))?;
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(if text.is_empty() {
            Value::Null
        } else {
            Value::String(text)
        });
        Ok(Reply { status, body })
    }

    /// Where this client reaches Neutron.
    pub fn neutron_url(&self) -> &str {
        &self.neutron
    }

    /// A request that must succeed; its body.
    pub fn send(&self, method: &str, base: &str, path: &str, body: &Value) -> Value {
        let body = (!body.is_null()).then_some(body);
        let reply = self.request(method, base, path, body, None);
        assert!(
            (200..300).contains(&reply.status),
            "{method} {base}{path}: HTTP {}: {}",
            reply.status,
            reply.body
        );
        reply.body
    }

    pub fn get(&self, base: &str, path: &str) -> Value {
        self.send("GET", base, path, &Value::Null)
    }

    /// A Neutron request that must succeed.
    pub fn neutron(&self, method: &str, path: &str, body: &Value) -> Value {
        self.send(method, &self.neutron, path, body)
    }

    pub fn create_network(&self, name: &str) -> String {
        let r = self.neutron(
            "POST",
            "/v2.0/networks",
            &json!({"network": {"name": name}}),
        );
        id(&r["network"])
    }

    /// A subnet without DHCP (no agent serves it), its gateway the first address.
    pub fn create_subnet(&self, network: &str, cidr: &str) -> String {
        let r = self.neutron(
            "POST",
            "/v2.0/subnets",
            &json!({"subnet": {"network_id": network, "cidr": cidr, "ip_version": 4,
                    "enable_dhcp": false}}),
        );
        id(&r["subnet"])
    }

    pub fn create_router(&self, name: &str) -> String {
        let r = self.neutron("POST", "/v2.0/routers", &json!({"router": {"name": name}}));
        id(&r["router"])
    }

    pub fn add_router_interface(&self, router: &str, subnet: &str) {
        self.neutron(
            "PUT",
            &format!("/v2.0/routers/{router}/add_router_interface"),
            &json!({"subnet_id": subnet}),
        );
    }

    /// A port as Nova makes an instance's: `device_owner` `compute:nova`.
    pub fn create_instance_port(&self, network: &str, instance: &str, ip: &str) -> String {
        let r = self.neutron(
            "POST",
            "/v2.0/ports",
            &json!({"port": {"network_id": network, "device_id": instance,
                    "device_owner": "compute:nova", "fixed_ips": [{"ip_address": ip}]}}),
        );
        id(&r["port"])
    }

    pub fn delete_port(&self, port: &str) {
        self.neutron("DELETE", &format!("/v2.0/ports/{port}"), &Value::Null);
    }

    pub fn router(&self, router: &str) -> Value {
        self.neutron("GET", &format!("/v2.0/routers/{router}"), &Value::Null)["router"].clone()
    }

    /// The router's routes, as (destination, nexthop), sorted.
    pub fn routes(&self, router: &str) -> Vec<(String, String)> {
        let mut routes: Vec<(String, String)> = self.router(router)["routes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|r| (str_of(&r["destination"]), str_of(&r["nexthop"])))
            .collect();
        routes.sort();
        routes
    }

    pub fn revision(&self, value: &Value) -> u64 {
        value["revision_number"].as_u64().unwrap_or_default()
    }

    /// The whole route list, as a pre-Train client writes it.
    pub fn set_routes(&self, router: &str, routes: &[(&str, &str)]) {
        let routes: Vec<Value> = routes
            .iter()
            .map(|(d, n)| json!({"destination": d, "nexthop": n}))
            .collect();
        self.neutron(
            "PUT",
            &format!("/v2.0/routers/{router}"),
            &json!({"router": {"routes": routes}}),
        );
    }

    pub fn port(&self, port: &str) -> Value {
        self.neutron("GET", &format!("/v2.0/ports/{port}"), &Value::Null)["port"].clone()
    }

    /// The port's allowed address pairs' addresses, sorted.
    pub fn pairs(&self, port: &str) -> Vec<String> {
        pairs_of(&self.port(port))
    }

    /// Sets the port's pairs, guarded by `if_match` when given; the reply.
    pub fn put_pairs(&self, port: &str, pairs: &[String], if_match: Option<u64>) -> Reply {
        self.put_pairs_try(port, pairs, if_match)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Api::put_pairs`], with a transport error as an `Err`.
    pub fn put_pairs_try(
        &self,
        port: &str,
        pairs: &[String],
        if_match: Option<u64>,
    ) -> Result<Reply, String> {
        let pairs: Vec<Value> = pairs.iter().map(|p| json!({"ip_address": p})).collect();
        self.try_request(
            "PUT",
            &self.neutron,
            &format!("/v2.0/ports/{port}"),
            Some(&json!({"port": {"allowed_address_pairs": pairs}})),
            if_match,
        )
    }
}

pub fn pairs_of(port: &Value) -> Vec<String> {
    let mut pairs: Vec<String> = port["allowed_address_pairs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|p| str_of(&p["ip_address"]))
        .collect();
    pairs.sort();
    pairs
}

fn str_of(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_string()
}

fn id(v: &Value) -> String {
    let id = str_of(&v["id"]);
    assert!(!id.is_empty(), "no id in {v}");
    id
}
