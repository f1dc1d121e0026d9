//! An Alibaba Cloud double: a loopback HTTP/1.1 server (std only, one thread per
//! connection) that answers the RPC-style OpenAPI a route provider for Alibaba Cloud
//! uses, written from the official API definition (the Go SDK
//! `github.com/alibabacloud-go/vpc-20160428/v6` v6.12.8 and its models, whose doc
//! comments are the API reference's text) and checked against that SDK by
//! `tests/alibaba_conformance.rs`:
//!
//! - VPC 2016-04-28: `CreateRouteEntries`, `DeleteRouteEntries` (batches of at most
//!   50, asynchronous, one batch in flight per VPC), `DescribeRouteEntryList`
//!   (filters, `MaxResult`, `NextToken` paging), `DescribeRouteTableList`,
//!   `DescribeVSwitches`, `DescribeVpcs`;
//! - ECS 2014-05-26: `DescribeInstances` (instance → VPC, vSwitch, IPs, ENIs);
//! - STS 2015-04-01: `AssumeRoleWithOIDC` (RRSA);
//! - Quota Center (`quotas` 2020-05-10): `ListProductQuotas` for product `vpc`,
//!   the quota [`ROUTE_ENTRY_QUOTA`] (and one other, so that a client must pick),
//!   reply shaped as the SDK's `ListProductQuotasResponse`
//!   (aliyun/alibaba-cloud-sdk-go v1.63.99, services/quotas), paged by `MaxResults`
//!   and `NextToken`; a parameter its request model does not declare is refused;
//! - the ECS instance metadata service's RAM role credentials
//!   (`/latest/meta-data/ram/security-credentials/…`, with the IMDSv2 token).
//!
//! Every request but STS's and the metadata service's must be signed with the V3
//! signature the current SDKs send (`Authorization: ACS3-HMAC-SHA256
//! Credential=…,SignedHeaders=…,Signature=…`, darabonba-openapi v2's
//! `GetAuthorization`): the double recomputes it from the canonical request with
//! the secret of the access key named, checks `x-acs-content-sha256` against the
//! body, that every `x-acs-*` header is signed, the date's skew and that a nonce is
//! not reused. The V1 signature (HMAC-SHA1 over the parameters) that the older
//! `aliyun/alibaba-cloud-sdk-go` sends, which the peer uses, is checked too. Errors
//! have the API's shape: HTTP status and a JSON body with
//! `RequestId`, `HostId`, `Code`, `Message`, `Recommend`.
//!
//! # Rust API
//!
//! ```ignore
//! let double = AlibabaDouble::start();           // region cn-hangzhou, one VPC,
//!                                                // vSwitch, route table (DEFAULT_*)
//! double.add_instance(Instance::new("i-node1", DEFAULT_VPC, "192.168.0.11"));
//! double.endpoint();                             // "http://127.0.0.1:PORT"
//! double.access_key();                           // (id, secret) it accepts
//! double.entries(DEFAULT_TABLE);                 // custom entries, with status
//! double.settle();                               // every batch in flight done now
//! double.set_settle_after_reads(Some(2));        // …or after 2 list reads (default 1)
//! double.fill_as_peer(DEFAULT_TABLE, &[("10.244.1.0/24", "i-node1")]);
//! double.inject("CreateRouteEntries", Fault::error(400, "Throttling.User", "…"));
//! double.inject("DescribeInstances", Fault::Reply("{}".into())); // 200, that body
//! double.begin_foreign_batch(DEFAULT_TABLE, &[("10.244.9.0/24", "i-vpn")]); // busy
//! double.set_account_quota(7);                   // Quota Center's, every table's
//! double.serve_quota_without_dimensions(1);      // no regionId, 1 item a page
//! let gate = Gate::new();                        // a request held in flight:
//! double.inject("ListProductQuotas", Fault::Held(gate.clone()));
//! gate.wait_reached(); /* … */ gate.open();
//! double.calls();                                // requests by action
//! ```
//!
//! Asynchrony: a batch's entries are `Pending` (created) or `Deleting` until the
//! batch settles: after [`AlibabaDouble::set_settle_after_reads`] reads of
//! `DescribeRouteEntryList` on any table of the VPC (the first read after the batch
//! still sees the entries in flight), or when the test calls
//! [`AlibabaDouble::settle`]. While a batch is in flight the VPC refuses the next
//! `CreateRouteEntries`/`DeleteRouteEntries` with the busy code
//! ([`AlibabaDouble::set_busy_code`], `TaskConflict` by default). Nothing here
//! sleeps but [`Fault::Slow`] (and [`Fault::Held`] waits for its gate).
//!
//! Where the API reference's error tables were not available offline, the codes are
//! the ones the peer (cloud-provider-alibaba-cloud) matches, or, marked "assumed"
//! in a comment, chosen in the API's naming style; /work/helpers/r3/alidouble-notes.md
//! lists which is which.
#![allow(dead_code)]
// Each test binary uses only part of this support module.

#[allow(clippy::duplicate_mod)]
#[path = "double_server.rs"]
mod double_server;
#[path = "http_wire.rs"]
mod http_wire;

use std::collections::{BTreeMap, BTreeSet, HashSet, VecDeque};
use std::io::{BufReader, Write};
use std::net::{IpAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use double_server::DoubleServer;

pub const REGION: &str = "cn-hangzhou";
pub const DEFAULT_VPC: &str = "vpc-bp1double0000000001";
pub const DEFAULT_VPC_CIDR: &str = "192.168.0.0/16";
pub const DEFAULT_VSWITCH: &str = "vsw-bp1double0000000001";
pub const DEFAULT_VSWITCH_CIDR: &str = "192.168.0.0/24";
pub const DEFAULT_TABLE: &str = "vtb-bp1double0000000001";
pub const ACCESS_KEY_ID: &str = "LTAI5tDoubleAccessKey01";
pub const ACCESS_KEY_SECRET: &str = "double-access-key-secret-0123456789";

/// API versions the double serves, by product.
pub const VPC_VERSION: &str = "2016-04-28";
pub const ECS_VERSION: &str = "2014-05-26";
pub const STS_VERSION: &str = "2015-04-01";
pub const QUOTAS_VERSION: &str = "2020-05-10";
/// Quota Center's action code of "custom route entries per route table" (the
/// quota name of the VPC quotas page, `vpc_quota_route_entrys_num`).
pub const ROUTE_ENTRY_QUOTA: &str = "vpc_quota_route_entrys_num";

/// At most this many entries per `CreateRouteEntries`/`DeleteRouteEntries`: the
/// request model's doc "You can specify at most 50 …" for every field of
/// `RouteEntries` (create_route_entries_request_model.go).
pub const MAX_BATCH: usize = 50;
/// "A route table can contain up to 200 custom route entries." (CreateRouteEntries'
/// description in client.go); a quota, so tests may change it per table.
pub const DEFAULT_QUOTA: usize = 200;
/// `DescribeRouteEntryList`'s `MaxResult`: "Valid values: 1 to 100. Default value:
/// 10." (describe_route_entry_list_request_model.go).
pub const DEFAULT_PAGE: usize = 10;
pub const MAX_PAGE: usize = 100;
/// How far `x-acs-date` may be from the double's clock (the API's 15 minutes).
pub const MAX_SKEW: Duration = Duration::from_secs(15 * 60);

type HmacSha256 = Hmac<Sha256>;

/// An entry's state as `DescribeRouteEntryList` reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryStatus {
    /// Created by a batch still in flight.
    Pending,
    Available,
    /// Deleted by a batch still in flight; gone when it settles.
    Deleting,
}

/// Which words the double uses for the in-flight and done states. The response
/// model documents `Pending`, `Available`, `Modifying`, `Deleting`
/// (describe_route_entry_list_response_body_model.go); the operation descriptions of
/// CreateRouteEntries say "Creating" and "Created". A provider must understand both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusWords {
    /// `Pending` / `Available` (the response model).
    Model,
    /// `Creating` / `Created` (CreateRouteEntries' description).
    Description,
}

/// A route entry as the double holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub id: String,
    pub table: String,
    pub destination: String,
    /// `Instance`, `NetworkInterface`, … ; empty for system entries.
    pub next_hop_type: String,
    pub next_hop: String,
    pub name: String,
    pub description: String,
    pub status: EntryStatus,
    /// `Custom` or `System`.
    pub kind: &'static str,
}

impl Entry {
    fn is_custom(&self) -> bool {
        self.kind == "Custom"
    }
}

/// An ECS instance: its VPC, vSwitch, primary private IPv4 and ENI.
#[derive(Clone, Debug)]
pub struct Instance {
    pub id: String,
    pub vpc: String,
    pub vswitch: String,
    pub private_ip: String,
    pub eni: String,
    pub ipv6: Vec<String>,
    pub hostname: String,
}

impl Instance {
    pub fn new(id: &str, vpc: &str, private_ip: &str) -> Instance {
        Instance {
            id: id.into(),
            vpc: vpc.into(),
            vswitch: DEFAULT_VSWITCH.into(),
            private_ip: private_ip.into(),
            eni: format!("eni-{}", id.trim_start_matches("i-")),
            ipv6: Vec::new(),
            hostname: id.into(),
        }
    }
}

/// What an injected fault does to the next request of its action.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer with this status and code, changing nothing.
    Error {
        status: u16,
        code: String,
        message: String,
    },
    /// Make the change, then close the connection without an answer.
    LostReply,
    /// Answer after this long (the server thread waits; nothing else does).
    Slow(Duration),
    /// Answer 200 with this body (JSON or not), changing nothing: a reply the
    /// server garbled, or one of a shape the test chooses.
    Reply(String),
    /// Answer as usual, but only once the test opens the gate: a request held in
    /// flight while the test does something else, with no clock involved.
    Held(Gate),
}

/// Where a request [`Fault::Held`] waits until the test opens it.
#[derive(Clone, Debug, Default)]
pub struct Gate(Arc<(Mutex<(bool, bool)>, Condvar)>);

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Returns once a request waits at the gate (its call is already recorded).
    pub fn wait_reached(&self) {
        let (lock, changed) = &*self.0;
        let guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        // A bound against a hang, not a timing: the request is sent right away.
        let (guard, _) = changed
            .wait_timeout_while(guard, Duration::from_secs(60), |(reached, _)| !*reached)
            .unwrap_or_else(|e| e.into_inner());
        assert!(guard.0, "no request reached the gate in 60 s");
    }

    /// Lets the request waiting at the gate (and any later one) be answered.
    pub fn open(&self) {
        let (lock, changed) = &*self.0;
        lock.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
        changed.notify_all();
    }

    fn pass(&self) {
        let (lock, changed) = &*self.0;
        let mut guard = lock.lock().unwrap_or_else(|e| e.into_inner());
        guard.0 = true;
        changed.notify_all();
        let _open = changed
            .wait_while(guard, |(_, open)| !*open)
            .unwrap_or_else(|e| e.into_inner());
    }
}

/// How a request's answer waits.
enum Pause {
    For(Duration),
    Until(Gate),
}

impl Fault {
    pub fn error(status: u16, code: &str, message: &str) -> Fault {
        Fault::Error {
            status,
            code: code.into(),
            message: message.into(),
        }
    }

    /// `Throttling.User`, as darabonba-openapi's client turns into a ThrottlingError
    /// (the codes it matches: `Throttling`, `Throttling.User`, `Throttling.Api`).
    /// HTTP 400 is assumed (the status the API's common error table gives flow
    /// control).
    pub fn throttling() -> Fault {
        Fault::error(
            400,
            "Throttling.User",
            "Request was denied due to user flow control.",
        )
    }

    pub fn unavailable() -> Fault {
        Fault::error(
            503,
            "ServiceUnavailable",
            "The request has failed due to a temporary failure of the server.",
        )
    }
}

/// One request as the double saw it.
#[derive(Clone, Debug)]
pub struct Recorded {
    /// The action (`x-acs-action` or the `Action` parameter), or the metadata path.
    pub action: String,
    pub version: String,
    pub params: BTreeMap<String, String>,
    /// The status answered; 0 when the connection was closed instead.
    pub status: u16,
    /// The error code answered, empty on success.
    pub code: String,
    pub at: SystemTime,
}

#[derive(Clone, Debug)]
struct Vpc {
    id: String,
    cidr: String,
    ipv6_cidr: String,
}

#[derive(Clone, Debug)]
struct VSwitch {
    id: String,
    vpc: String,
    cidr: String,
    table: String,
}

#[derive(Clone, Debug)]
struct Table {
    id: String,
    vpc: String,
    /// `System` (the VPC's own) or `Custom`.
    kind: &'static str,
    quota: usize,
}

/// A batch still in flight in one VPC.
#[derive(Clone, Debug)]
struct Batch {
    /// Reads of the VPC's entries still to answer before it settles; `None` waits
    /// for [`AlibabaDouble::settle`].
    reads_left: Option<u32>,
    /// When the double accepted it, for [`AlibabaDouble::settle_older_than`].
    accepted: std::time::Instant,
}

struct State {
    vpcs: Vec<Vpc>,
    vswitches: Vec<VSwitch>,
    tables: Vec<Table>,
    /// By creation order (the list order).
    entries: Vec<Entry>,
    instances: BTreeMap<String, Instance>,
    in_flight: BTreeMap<String, Batch>,
    settle_after_reads: Option<u32>,
    /// The custom-entry quota of new tables, and what Quota Center reports.
    account_quota: usize,
    /// Quota Center lists the route entry quota without the `regionId` dimension
    /// (and another region's beside it): see
    /// [`AlibabaDouble::serve_quota_without_dimensions`].
    quota_without_dimensions: bool,
    /// Quota Center's page, at most, whatever `MaxResults` asks.
    quota_page: usize,
    busy_code: String,
    status_words: StatusWords,
    faults: Vec<(String, Fault)>,
    /// Access key id → (secret, security token required).
    keys: BTreeMap<String, (String, Option<String>)>,
    nonces: HashSet<String>,
    next_id: u64,
    log: VecDeque<Recorded>,
    calls: BTreeMap<String, usize>,
    // STS and metadata.
    oidc_provider_arn: String,
    role_arn: String,
    oidc_token: String,
    credential_lifetime: Duration,
    metadata_role: String,
    metadata_tokens: BTreeSet<String>,
    /// Whether metadata reads need a token (the instance's hardened mode).
    metadata_token_required: bool,
    /// The instance the metadata service speaks for.
    metadata_instance: String,
    issued: u64,
}

struct Inner {
    state: Mutex<State>,
}

pub struct AlibabaDouble {
    inner: Arc<Inner>,
    server: DoubleServer,
}

/// How many requests the double remembers.
pub const LOG_LIMIT: usize = 200_000;

impl AlibabaDouble {
    /// A double in [`REGION`] with [`DEFAULT_VPC`] (192.168.0.0/16), one vSwitch
    /// [`DEFAULT_VSWITCH`] (192.168.0.0/24) bound to the VPC's system route table
    /// [`DEFAULT_TABLE`], which holds the system entries a real one holds (the
    /// vSwitch's CIDR and 100.64.0.0/10, both `System`), and the access key
    /// ([`ACCESS_KEY_ID`], [`ACCESS_KEY_SECRET`]).
    pub fn start() -> AlibabaDouble {
        let mut keys = BTreeMap::new();
        keys.insert(
            ACCESS_KEY_ID.to_string(),
            (ACCESS_KEY_SECRET.to_string(), None),
        );
        let inner = Arc::new(Inner {
            state: Mutex::new(State {
                vpcs: Vec::new(),
                vswitches: Vec::new(),
                tables: Vec::new(),
                entries: Vec::new(),
                instances: BTreeMap::new(),
                in_flight: BTreeMap::new(),
                settle_after_reads: Some(1),
                account_quota: DEFAULT_QUOTA,
                quota_without_dimensions: false,
                quota_page: 100,
                busy_code: "TaskConflict".into(),
                status_words: StatusWords::Model,
                faults: Vec::new(),
                keys,
                nonces: HashSet::new(),
                next_id: 1,
                log: VecDeque::new(),
                calls: BTreeMap::new(),
                oidc_provider_arn: "acs:ram::1234567890123456:oidc-provider/ack-rrsa-double".into(),
                role_arn: "acs:ram::1234567890123456:role/route-controller".into(),
                oidc_token: String::new(),
                credential_lifetime: Duration::from_secs(3600),
                metadata_role: "route-controller-role".into(),
                metadata_tokens: BTreeSet::new(),
                metadata_token_required: false,
                metadata_instance: "i-node1".into(),
                issued: 0,
            }),
        });
        let server = DoubleServer::start("alibaba-double", {
            let inner = inner.clone();
            move |stream, _| serve_connection(stream, &inner)
        });
        let double = AlibabaDouble { inner, server };
        double.add_vpc(DEFAULT_VPC, DEFAULT_VPC_CIDR, DEFAULT_TABLE);
        double.add_vswitch(DEFAULT_VPC, DEFAULT_VSWITCH, DEFAULT_VSWITCH_CIDR, None);
        double
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `http://127.0.0.1:PORT`, for every product and the metadata service.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// `127.0.0.1:PORT`, as the SDKs' `Endpoint` setting takes it.
    pub fn host(&self) -> String {
        self.server.addr().to_string()
    }

    pub fn access_key(&self) -> (&'static str, &'static str) {
        (ACCESS_KEY_ID, ACCESS_KEY_SECRET)
    }

    /// A VPC with its system route table `table` (holding the system entry for
    /// 100.64.0.0/10, as real VPCs' tables do).
    pub fn add_vpc(&self, id: &str, cidr: &str, table: &str) {
        let mut s = self.state();
        s.vpcs.push(Vpc {
            id: id.into(),
            cidr: cidr.into(),
            ipv6_cidr: String::new(),
        });
        let quota = s.account_quota;
        s.tables.push(Table {
            id: table.into(),
            vpc: id.into(),
            kind: "System",
            quota,
        });
        let entry_id = next_id(&mut s, "rte");
        s.entries.push(Entry {
            id: entry_id,
            table: table.into(),
            destination: "100.64.0.0/10".into(),
            next_hop_type: "local".into(),
            next_hop: String::new(),
            name: String::new(),
            description: String::new(),
            status: EntryStatus::Available,
            kind: "System",
        });
    }

    /// Gives a VPC an IPv6 CIDR (IPv6 destinations are refused without one).
    pub fn set_vpc_ipv6(&self, vpc: &str, cidr: &str) {
        let mut s = self.state();
        if let Some(v) = s.vpcs.iter_mut().find(|v| v.id == vpc) {
            v.ipv6_cidr = cidr.into();
        }
    }

    /// A custom route table of `vpc`, bound to no vSwitch until
    /// [`AlibabaDouble::add_vswitch`] names it.
    pub fn add_custom_table(&self, vpc: &str, table: &str) {
        let mut s = self.state();
        let quota = s.account_quota;
        s.tables.push(Table {
            id: table.into(),
            vpc: vpc.into(),
            kind: "Custom",
            quota,
        });
    }

    /// A vSwitch of `vpc`, bound to `table` (the VPC's system table by default); its
    /// CIDR appears as a system entry in that table.
    pub fn add_vswitch(&self, vpc: &str, id: &str, cidr: &str, table: Option<&str>) {
        let mut s = self.state();
        let table = match table {
            Some(t) => t.to_string(),
            None => s
                .tables
                .iter()
                .find(|t| t.vpc == vpc && t.kind == "System")
                .map(|t| t.id.clone())
                .unwrap_or_else(|| panic!("the double has no VPC {vpc}")),
        };
        s.vswitches.push(VSwitch {
            id: id.into(),
            vpc: vpc.into(),
            cidr: cidr.into(),
            table: table.clone(),
        });
        let entry_id = next_id(&mut s, "rte");
        s.entries.push(Entry {
            id: entry_id,
            table,
            destination: cidr.into(),
            next_hop_type: "local".into(),
            next_hop: String::new(),
            name: String::new(),
            description: String::new(),
            status: EntryStatus::Available,
            kind: "System",
        });
    }

    pub fn add_instance(&self, instance: Instance) {
        self.state().instances.insert(instance.id.clone(), instance);
    }

    pub fn remove_instance(&self, id: &str) {
        self.state().instances.remove(id);
    }

    /// The table's custom entries (every state), in list order.
    pub fn entries(&self, table: &str) -> Vec<Entry> {
        self.state()
            .entries
            .iter()
            .filter(|e| e.table == table && e.is_custom())
            .cloned()
            .collect()
    }

    /// Custom entries of `table` as (destination, next hop) of the `Available` ones.
    pub fn available(&self, table: &str) -> Vec<(String, String)> {
        self.entries(table)
            .into_iter()
            .filter(|e| e.status == EntryStatus::Available)
            .map(|e| (e.destination, e.next_hop))
            .collect()
    }

    /// Fills `table` as cloud-provider-alibaba-cloud fills it: its `CreateRoutes`
    /// (pkg/provider/alibaba/vpc/vpc.go) sends only `RouteTableId`, `DstCidrBlock`,
    /// `NextHop` (the instance id) and `NextHopType` `Instance`, so its entries have
    /// no name and no description. They are `Available` at once.
    pub fn fill_as_peer(&self, table: &str, routes: &[(&str, &str)]) -> Vec<String> {
        instance_entries(&mut self.state(), table, routes, EntryStatus::Available)
    }

    /// Adds an entry as another writer would (any name, next hop, description),
    /// `Available` at once. Returns its id.
    pub fn put_entry(
        &self,
        table: &str,
        destination: &str,
        next_hop_type: &str,
        next_hop: &str,
        name: &str,
        description: &str,
    ) -> String {
        let mut s = self.state();
        let id = next_id(&mut s, "rte");
        s.entries.push(Entry {
            id: id.clone(),
            table: table.into(),
            destination: destination.into(),
            next_hop_type: next_hop_type.into(),
            next_hop: next_hop.into(),
            name: name.into(),
            description: description.into(),
            status: EntryStatus::Available,
            kind: "Custom",
        });
        id
    }

    /// Removes an entry at once, as another writer would.
    pub fn remove_entry(&self, id: &str) {
        self.state().entries.retain(|e| e.id != id);
    }

    /// Settles every batch in flight: `Pending` entries become `Available`,
    /// `Deleting` ones go.
    pub fn settle(&self) {
        let mut s = self.state();
        let vpcs: Vec<String> = s.in_flight.keys().cloned().collect();
        for vpc in vpcs {
            settle_vpc(&mut s, &vpc);
        }
    }

    /// Settles the batches accepted at least `age` ago: for a test that runs a real
    /// process against the double and models a batch's duration by calling this as it
    /// polls (the peer never reads an entry's state, so reads cannot drive it).
    pub fn settle_older_than(&self, age: Duration) {
        let mut s = self.state();
        let old: Vec<String> = s
            .in_flight
            .iter()
            .filter(|(_, b)| b.accepted.elapsed() >= age)
            .map(|(vpc, _)| vpc.clone())
            .collect();
        for vpc in old {
            settle_vpc(&mut s, &vpc);
        }
    }

    /// After how many `DescribeRouteEntryList` reads of a VPC's tables a batch
    /// settles by itself (`None`: only through [`AlibabaDouble::settle`]). Applies to
    /// batches started afterwards. Default `Some(1)`: the first read after a batch
    /// sees it in flight, the next one done.
    pub fn set_settle_after_reads(&self, reads: Option<u32>) {
        self.state().settle_after_reads = reads;
    }

    /// Whether a batch is in flight in `vpc`.
    pub fn in_flight(&self, vpc: &str) -> bool {
        self.state().in_flight.contains_key(vpc)
    }

    /// The code a busy VPC answers a batch with (HTTP 400): `TaskConflict` by
    /// default; `IncorrectRouteEntryStatus`, `IncorrectStatus.RouteEntry`, … as a
    /// test wants (the issue and the peer name these; the API reference's table was
    /// not available offline).
    pub fn set_busy_code(&self, code: &str) {
        self.state().busy_code = code.into();
    }

    pub fn set_status_words(&self, words: StatusWords) {
        self.state().status_words = words;
    }

    /// The table's custom-entry quota (200 by default).
    pub fn set_quota(&self, table: &str, quota: usize) {
        let mut s = self.state();
        if let Some(t) = s.tables.iter_mut().find(|t| t.id == table) {
            t.quota = quota;
        }
    }

    /// The account's quota of custom entries per route table: what Quota Center's
    /// `ListProductQuotas` reports for [`ROUTE_ENTRY_QUOTA`], and what every table
    /// (those there and those added later) enforces.
    pub fn set_account_quota(&self, quota: usize) {
        let mut s = self.state();
        s.account_quota = quota;
        for t in s.tables.iter_mut() {
            t.quota = quota;
        }
    }

    /// From now on Quota Center lists the route entry quota with no dimension (the
    /// account's value for every region), after the same quota of another region
    /// (`cn-beijing`, 50), pages of `page` items at most: a request filtered by the
    /// dimension `regionId` of our region finds nothing, the list without
    /// dimensions holds ours on its last page.
    pub fn serve_quota_without_dimensions(&self, page: usize) {
        let mut s = self.state();
        s.quota_without_dimensions = true;
        s.quota_page = page.max(1);
    }

    /// A second writer's batch, accepted now and in flight: its entries of `table`
    /// (destination, instance) are `Pending` and the table's VPC is busy (our next
    /// batch is refused with the busy code) until the batch settles as the double's
    /// own do (after [`AlibabaDouble::set_settle_after_reads`] reads, or
    /// [`AlibabaDouble::settle`]). Returns the entries' ids.
    pub fn begin_foreign_batch(&self, table: &str, routes: &[(&str, &str)]) -> Vec<String> {
        let mut s = self.state();
        let vpc = table_vpc(&s, table).expect("begin_foreign_batch: a table of the double");
        let ids = instance_entries(&mut s, table, routes, EntryStatus::Pending);
        start_batch(&mut s, BTreeSet::from([vpc]));
        ids
    }

    /// The next request of `action` (an action name, or `*` for any) meets `fault`.
    /// Faults of one action apply in the order injected, once each.
    pub fn inject(&self, action: &str, fault: Fault) {
        self.state().faults.push((action.into(), fault));
    }

    /// Requests answered, by action (metadata requests by path, e.g.
    /// `metadata:/latest/api/token`).
    pub fn calls(&self) -> BTreeMap<String, usize> {
        self.state().calls.clone()
    }

    pub fn calls_of(&self, action: &str) -> usize {
        self.state().calls.get(action).copied().unwrap_or(0)
    }

    /// `CreateRouteEntries` + `DeleteRouteEntries` (and the single-entry forms).
    pub fn writes(&self) -> usize {
        let s = self.state();
        [
            "CreateRouteEntries",
            "DeleteRouteEntries",
            "CreateRouteEntry",
            "DeleteRouteEntry",
        ]
        .iter()
        .map(|a| s.calls.get(*a).copied().unwrap_or(0))
        .sum()
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.state().log.iter().cloned().collect()
    }

    pub fn reset_calls(&self) {
        let mut s = self.state();
        s.calls.clear();
        s.log.clear();
    }

    /// An access key that must come with `security_token` (what STS and the
    /// metadata service hand out).
    pub fn add_temporary_key(&self, id: &str, secret: &str, security_token: &str) {
        self.state()
            .keys
            .insert(id.into(), (secret.into(), Some(security_token.to_string())));
    }

    /// What `AssumeRoleWithOIDC` accepts: the OIDC provider's ARN, the role's ARN and
    /// the token (as the file `ALIBABA_CLOUD_OIDC_TOKEN_FILE` names holds it).
    pub fn set_oidc(&self, provider_arn: &str, role_arn: &str, token: &str) {
        let mut s = self.state();
        s.oidc_provider_arn = provider_arn.into();
        s.role_arn = role_arn.into();
        s.oidc_token = token.into();
    }

    /// How long STS and metadata credentials last.
    pub fn set_credential_lifetime(&self, lifetime: Duration) {
        self.state().credential_lifetime = lifetime;
    }

    /// The RAM role the instance metadata service names.
    pub fn set_metadata_role(&self, role: &str) {
        self.state().metadata_role = role.into();
    }

    /// Whether metadata reads must carry a token from `PUT /latest/api/token` (the
    /// hardened mode; off by default, as on an instance that allows both).
    pub fn set_metadata_token_required(&self, required: bool) {
        self.state().metadata_token_required = required;
    }

    /// The instance whose `instance-id`, `vpc-id`, `vswitch-id` and `private-ipv4`
    /// the metadata service reports (`i-node1` by default; add it with
    /// [`AlibabaDouble::add_instance`]).
    pub fn set_metadata_instance(&self, id: &str) {
        self.state().metadata_instance = id.into();
    }

    /// Access key ids the double issued (STS and metadata), oldest first.
    pub fn issued_keys(&self) -> Vec<String> {
        self.state()
            .keys
            .iter()
            .filter(|(_, (_, token))| token.is_some())
            .map(|(id, _)| id.clone())
            .collect()
    }
}

/// Entries of `table` to instances, `(destination, instance)` each, without name or
/// description (as the peer writes them), in `status`; their ids.
fn instance_entries(
    s: &mut State,
    table: &str,
    routes: &[(&str, &str)],
    status: EntryStatus,
) -> Vec<String> {
    let mut ids = Vec::new();
    for (cidr, instance) in routes {
        let id = next_id(s, "rte");
        s.entries.push(Entry {
            id: id.clone(),
            table: table.into(),
            destination: (*cidr).into(),
            next_hop_type: "Instance".into(),
            next_hop: (*instance).into(),
            name: String::new(),
            description: String::new(),
            status,
            kind: "Custom",
        });
        ids.push(id);
    }
    ids
}

fn next_id(s: &mut State, prefix: &str) -> String {
    s.next_id += 1;
    format!("{prefix}-bp1{:017x}", s.next_id)
}

fn settle_vpc(s: &mut State, vpc: &str) {
    s.in_flight.remove(vpc);
    let tables: Vec<String> = s
        .tables
        .iter()
        .filter(|t| t.vpc == vpc)
        .map(|t| t.id.clone())
        .collect();
    s.entries
        .retain(|e| !(tables.contains(&e.table) && e.status == EntryStatus::Deleting));
    for e in s.entries.iter_mut() {
        if tables.contains(&e.table) && e.status == EntryStatus::Pending {
            e.status = EntryStatus::Available;
        }
    }
}

/// What the handler decided.
enum Outcome {
    Json(u16, Value),
    Text(u16, String),
    /// This body, as the API's JSON content type ([`Fault::Reply`]).
    Raw(u16, String),
    /// Close the connection without an answer (after the change was made).
    Close,
}

fn serve_connection(stream: TcpStream, inner: &Inner) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut stream = stream;
    while let Some(wire) = http_wire::read_request(&mut reader) {
        let (outcome, pause) = handle(inner, &wire);
        match pause {
            Some(Pause::For(delay)) => std::thread::sleep(delay),
            Some(Pause::Until(gate)) => gate.pass(),
            None => {}
        }
        let (status, content_type, body) = match outcome {
            Outcome::Close => {
                let _ = stream.shutdown(std::net::Shutdown::Both);
                return;
            }
            Outcome::Json(status, body) => (
                status,
                "application/json;charset=utf-8",
                serde_json::to_vec(&body).unwrap_or_default(),
            ),
            Outcome::Text(status, text) => (status, "text/plain", text.into_bytes()),
            Outcome::Raw(status, text) => {
                (status, "application/json;charset=utf-8", text.into_bytes())
            }
        };
        let head = format!(
            "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nx-acs-request-id: {}\r\n\r\n",
            reason(status),
            body.len(),
            request_id()
        );
        let mut message = head.into_bytes();
        message.extend_from_slice(&body);
        if stream.write_all(&message).is_err() {
            return;
        }
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn request_id() -> String {
    use std::sync::atomic::AtomicU64;
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    format!("0ED8D006-F706-4D23-88ED-{n:012X}")
}

/// The API's error body (the fields darabonba-openapi's `doRequest_opResponse`
/// reads: `Code`, `Message`, `RequestId`; `HostId` and `Recommend` as the API sends
/// them).
fn api_error(status: u16, code: &str, message: &str) -> Outcome {
    Outcome::Json(
        status,
        json!({
            "RequestId": request_id(),
            "HostId": "vpc.cn-hangzhou.aliyuncs.com",
            "Code": code,
            "Message": message,
            "Recommend": format!("https://api.aliyun.com/troubleshoot?q={code}"),
        }),
    )
}

/// A request's parameters: the query string's and, for form posts, the body's.
fn params_of(wire: &http_wire::WireRequest) -> BTreeMap<String, String> {
    let mut params = BTreeMap::new();
    let (_, query) = wire.path_and_query();
    let mut sources = vec![query.to_string()];
    if wire
        .header("content-type")
        .is_some_and(|c| c.starts_with("application/x-www-form-urlencoded"))
    {
        sources.push(String::from_utf8_lossy(&wire.body).into_owned());
    }
    for source in sources {
        for pair in source.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            params.insert(
                http_wire::percent_decode(k, true),
                http_wire::percent_decode(v, true),
            );
        }
    }
    params
}

fn handle(inner: &Inner, wire: &http_wire::WireRequest) -> (Outcome, Option<Pause>) {
    // A client that has the double as its HTTP proxy (as credentials-go reaches the
    // metadata service's fixed 100.100.100.200 in the conformance test) sends the
    // absolute form `http://host/path`.
    let absolute;
    let wire = match wire.target.strip_prefix("http://") {
        Some(rest) => {
            absolute = http_wire::WireRequest {
                method: wire.method.clone(),
                target: rest.find('/').map_or("/".into(), |i| rest[i..].to_string()),
                headers: wire.headers.clone(),
                body: wire.body.clone(),
            };
            &absolute
        }
        None => wire,
    };
    let (path, _) = wire.path_and_query();
    if path.starts_with("/latest/") {
        let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
        let outcome = metadata(&mut s, wire, path);
        let status = match &outcome {
            Outcome::Json(st, _) | Outcome::Text(st, _) | Outcome::Raw(st, _) => *st,
            Outcome::Close => 0,
        };
        record(
            &mut s,
            format!("metadata:{path}"),
            "",
            BTreeMap::new(),
            status,
            "",
        );
        return (outcome, None);
    }
    let params = params_of(wire);
    let action = wire
        .header("x-acs-action")
        .map(str::to_string)
        .or_else(|| params.get("Action").cloned())
        .unwrap_or_default();
    let version = wire
        .header("x-acs-version")
        .map(str::to_string)
        .or_else(|| params.get("Version").cloned())
        .unwrap_or_default();
    let mut s = inner.state.lock().unwrap_or_else(|e| e.into_inner());
    let mut delay = None;
    let mut lost = false;
    let outcome = 'outcome: {
        let product = match product_of(&action, &version) {
            Ok(p) => p,
            Err(e) => break 'outcome e,
        };
        if product != Product::Sts
            && let Err(e) = verify_signature(&mut s, wire, &params)
        {
            break 'outcome e;
        }
        if let Some(i) = s.faults.iter().position(|(a, _)| a == &action || a == "*") {
            match s.faults.remove(i).1 {
                Fault::Error {
                    status,
                    code,
                    message,
                } => break 'outcome api_error(status, &code, &message),
                Fault::LostReply => lost = true,
                Fault::Slow(d) => delay = Some(Pause::For(d)),
                Fault::Held(gate) => delay = Some(Pause::Until(gate)),
                Fault::Reply(body) => break 'outcome Outcome::Raw(200, body),
            }
        }
        match product {
            Product::Vpc => vpc_action(&mut s, &action, &params),
            Product::Ecs => ecs_action(&mut s, &action, &params),
            Product::Sts => sts_action(&mut s, &action, &params),
            Product::Quotas => quotas_action(&mut s, &action, &params),
        }
    };
    let outcome = if lost { Outcome::Close } else { outcome };
    let (status, code) = match &outcome {
        Outcome::Json(st, body) => (
            *st,
            body.get("Code")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
        ),
        Outcome::Text(st, _) | Outcome::Raw(st, _) => (*st, String::new()),
        Outcome::Close => (0, String::new()),
    };
    record(&mut s, action, &version, params, status, &code);
    (outcome, delay)
}

fn record(
    s: &mut State,
    action: String,
    version: &str,
    params: BTreeMap<String, String>,
    status: u16,
    code: &str,
) {
    *s.calls.entry(action.clone()).or_insert(0) += 1;
    if s.log.len() >= LOG_LIMIT {
        s.log.pop_front();
    }
    s.log.push_back(Recorded {
        action,
        version: version.into(),
        params,
        status,
        code: code.into(),
        at: SystemTime::now(),
    });
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Product {
    Vpc,
    Ecs,
    Sts,
    Quotas,
}

const VPC_ACTIONS: &[&str] = &[
    "CreateRouteEntries",
    "DeleteRouteEntries",
    "DescribeRouteEntryList",
    "DescribeRouteTableList",
    "DescribeVSwitches",
    "DescribeVpcs",
];
const ECS_ACTIONS: &[&str] = &["DescribeInstances"];
const STS_ACTIONS: &[&str] = &["AssumeRoleWithOIDC"];
const QUOTAS_ACTIONS: &[&str] = &["ListProductQuotas"];

/// The product of an (action, version). The double serves every product on one
/// host; a version of no product is `InvalidVersion` (400), an action its product
/// does not have `InvalidAction.NotFound` (404), as the gateway answers.
fn product_of(action: &str, version: &str) -> Result<Product, Outcome> {
    let (product, actions) = match version {
        VPC_VERSION => (Product::Vpc, VPC_ACTIONS),
        ECS_VERSION => (Product::Ecs, ECS_ACTIONS),
        STS_VERSION => (Product::Sts, STS_ACTIONS),
        QUOTAS_VERSION => (Product::Quotas, QUOTAS_ACTIONS),
        "" => {
            return Err(api_error(
                400,
                "MissingVersion",
                "The input parameter \"Version\" that is mandatory for processing this request is not supplied.",
            ));
        }
        _ => {
            return Err(api_error(
                400,
                "InvalidVersion",
                &format!("Specified parameter Version {version} is not valid."),
            ));
        }
    };
    if action.is_empty() {
        return Err(api_error(
            400,
            "MissingAction",
            "The input parameter \"Action\" that is mandatory for processing this request is not supplied.",
        ));
    }
    if !actions.contains(&action) {
        return Err(api_error(
            404,
            "InvalidAction.NotFound",
            &format!(
                "Specified api {action} is not found, please check your url and method, or the double does not serve it."
            ),
        ));
    }
    Ok(product)
}

// ---- the V3 signature (ACS3-HMAC-SHA256) ----

/// RFC 3986 encoding as darabonba-openapi's `getCanonicalQueryString` produces it
/// (`url.QueryEscape`, then `+`→`%20`, `*`→`%2A`, `%7E`→`~`): everything but
/// `A-Za-z0-9-_.~` escaped, upper-case hex.
fn acs_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks the request's V3 signature, as darabonba-openapi v2's `GetAuthorization`
/// computes it:
///
/// ```text
/// CanonicalRequest = METHOD \n URI \n CanonicalQuery \n CanonicalHeaders \n
///                    SignedHeaders \n HexSHA256(body)
/// StringToSign     = "ACS3-HMAC-SHA256" \n HexSHA256(CanonicalRequest)
/// Signature        = Hex(HMAC-SHA256(AccessKeySecret, StringToSign))
/// ```
///
/// CanonicalQuery: the query parameters sorted by name, `name=encoded value` joined
/// by `&`; CanonicalHeaders: `host`, `content-type` and every `x-acs-*` header,
/// lower-case, trimmed, sorted, `name:value\n` each.
fn verify_signature(
    s: &mut State,
    wire: &http_wire::WireRequest,
    params: &BTreeMap<String, String>,
) -> Result<(), Outcome> {
    let Some(authorization) = wire.header("authorization") else {
        if params.contains_key("Signature") {
            return verify_v1_signature(s, wire, params);
        }
        return Err(api_error(
            400,
            "MissingAuthorization",
            "The request is not signed: no Authorization header (V3) and no Signature parameter (V1).",
        ));
    };
    let Some(rest) = authorization.strip_prefix("ACS3-HMAC-SHA256 ") else {
        return Err(api_error(
            400,
            "IncompleteSignature",
            "The Authorization header does not use ACS3-HMAC-SHA256.",
        ));
    };
    let mut credential = "";
    let mut signed_headers = "";
    let mut signature = "";
    for part in rest.split(',') {
        match part.trim().split_once('=') {
            Some(("Credential", v)) => credential = v,
            Some(("SignedHeaders", v)) => signed_headers = v,
            Some(("Signature", v)) => signature = v,
            _ => {}
        }
    }
    if credential.is_empty() || signed_headers.is_empty() || signature.is_empty() {
        return Err(api_error(
            400,
            "IncompleteSignature",
            "The Authorization header lacks Credential, SignedHeaders or Signature.",
        ));
    }
    let Some((secret, token)) = s.keys.get(credential).cloned() else {
        return Err(api_error(
            404,
            "InvalidAccessKeyId.NotFound",
            "Specified access key is not found.",
        ));
    };
    if let Some(token) = token
        && wire.header("x-acs-security-token") != Some(token.as_str())
    {
        return Err(api_error(
            400,
            "InvalidSecurityToken.MismatchWithAccessKey",
            "The security token does not belong to the access key, or is missing.",
        ));
    }
    let signed: Vec<&str> = signed_headers.split(';').collect();
    for required in [
        "host",
        "x-acs-action",
        "x-acs-version",
        "x-acs-date",
        "x-acs-signature-nonce",
        "x-acs-content-sha256",
    ] {
        if !signed.contains(&required) {
            return Err(api_error(
                400,
                "IncompleteSignature",
                &format!("The header {required} must be signed."),
            ));
        }
    }
    for (name, _) in &wire.headers {
        let name = name.to_ascii_lowercase();
        if name.starts_with("x-acs-") && !signed.contains(&name.as_str()) {
            return Err(api_error(
                400,
                "IncompleteSignature",
                &format!("The header {name} is sent but not signed."),
            ));
        }
    }
    let body_hash = hex(&Sha256::digest(&wire.body));
    if wire.header("x-acs-content-sha256") != Some(body_hash.as_str()) {
        return Err(api_error(
            400,
            "IncompleteSignature",
            "x-acs-content-sha256 is not the SHA-256 of the body.",
        ));
    }
    let (path, query) = wire.path_and_query();
    let mut query_params: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (
                http_wire::percent_decode(k, true),
                http_wire::percent_decode(v, true),
            )
        })
        .collect();
    query_params.sort();
    let canonical_query = query_params
        .iter()
        .map(|(k, v)| format!("{}={}", acs_encode(k), acs_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let mut canonical_headers = String::new();
    for name in &signed {
        let value = wire.header(name).unwrap_or_default().trim();
        canonical_headers.push_str(&format!("{name}:{value}\n"));
    }
    let uri = if path.is_empty() { "/" } else { path };
    let canonical_request = format!(
        "{}\n{uri}\n{canonical_query}\n{canonical_headers}\n{signed_headers}\n{body_hash}",
        wire.method
    );
    let string_to_sign = format!(
        "ACS3-HMAC-SHA256\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret.as_bytes())
        .expect("HMAC-SHA256 accepts keys of any length");
    mac.update(string_to_sign.as_bytes());
    let expected = hex(&mac.finalize().into_bytes());
    if expected != signature {
        return Err(api_error(
            400,
            "SignatureDoesNotMatch",
            &format!(
                "Specified signature does not match our calculation. The double's canonical request was:\n{canonical_request}"
            ),
        ));
    }
    let date = wire.header("x-acs-date").unwrap_or_default();
    let nonce = wire.header("x-acs-signature-nonce").unwrap_or_default();
    check_date_and_nonce(s, date, nonce)
}

/// The V1 RPC signature, which the older `aliyun/alibaba-cloud-sdk-go` (the peer's
/// SDK) sends, as its `signRpcRequest` and `buildRpcStringToSign` compute it
/// (sdk/auth/rpc_signature_composer.go): every query and form parameter but
/// `Signature`, sorted, `encode(name)=encode(value)` joined by `&` (encoding as for
/// V3); StringToSign = `METHOD&%2F&` + encode(that); Signature =
/// Base64(HMAC-SHA1(secret + "&", StringToSign)). `SignatureMethod` must be
/// `HMAC-SHA1`, `SignatureVersion` `1.0`; `Timestamp` and `SignatureNonce` are
/// checked as V3's date and nonce, `SecurityToken` as V3's token header.
fn verify_v1_signature(
    s: &mut State,
    wire: &http_wire::WireRequest,
    params: &BTreeMap<String, String>,
) -> Result<(), Outcome> {
    let get = |name: &str| params.get(name).map(String::as_str).unwrap_or_default();
    if get("SignatureMethod") != "HMAC-SHA1" || get("SignatureVersion") != "1.0" {
        return Err(api_error(
            400,
            "IncompleteSignature",
            "A V1 signature needs SignatureMethod=HMAC-SHA1 and SignatureVersion=1.0.",
        ));
    }
    let key_id = get("AccessKeyId");
    let Some((secret, token)) = s.keys.get(key_id).cloned() else {
        return Err(api_error(
            404,
            "InvalidAccessKeyId.NotFound",
            "Specified access key is not found.",
        ));
    };
    if let Some(token) = token
        && get("SecurityToken") != token
    {
        return Err(api_error(
            400,
            "InvalidSecurityToken.MismatchWithAccessKey",
            "The security token does not belong to the access key, or is missing.",
        ));
    }
    let canonical = params
        .iter()
        .filter(|(k, _)| k.as_str() != "Signature")
        .map(|(k, v)| format!("{}={}", acs_encode(k), acs_encode(v)))
        .collect::<Vec<_>>()
        .join("&");
    let string_to_sign = format!("{}&%2F&{}", wire.method, acs_encode(&canonical));
    let expected = base64::engine::general_purpose::STANDARD.encode(hmac_sha1(
        format!("{secret}&").as_bytes(),
        string_to_sign.as_bytes(),
    ));
    if expected != get("Signature") {
        return Err(api_error(
            400,
            "SignatureDoesNotMatch",
            &format!(
                "Specified signature does not match our calculation. The double's string to sign was: {string_to_sign}"
            ),
        ));
    }
    check_date_and_nonce(s, get("Timestamp"), get("SignatureNonce"))
}

fn check_date_and_nonce(s: &mut State, date: &str, nonce: &str) -> Result<(), Outcome> {
    let Some(at) = parse_acs_date(date) else {
        return Err(api_error(
            400,
            "InvalidTimeStamp.Format",
            &format!(
                "Specified time stamp or date value {date:?} is not well formatted (yyyy-MM-ddTHH:mm:ssZ)."
            ),
        ));
    };
    let skew = SystemTime::now()
        .duration_since(at)
        .unwrap_or_else(|e| e.duration());
    if skew > MAX_SKEW {
        return Err(api_error(
            400,
            "InvalidTimeStamp.Expired",
            &format!("Specified time stamp or date value is expired: {date}."),
        ));
    }
    if nonce.is_empty() || !s.nonces.insert(nonce.to_string()) {
        return Err(api_error(
            400,
            "SignatureNonceUsed",
            "Specified signature nonce was used already, or is missing.",
        ));
    }
    Ok(())
}

/// SHA-1 (FIPS 180-4), for the V1 signature only: the crate's dependencies have
/// SHA-256 but not SHA-1, and a test double is no reason for a new one.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xEFCD_AB89,
        0x98BA_DCFE,
        0x1032_5476,
        0xC3D2_E1F0,
    ];
    let mut message = data.to_vec();
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in message.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A82_7999),
                20..=39 => (b ^ c ^ d, 0x6ED9_EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC),
                _ => (b ^ c ^ d, 0xCA62_C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

/// HMAC (RFC 2104) over [`sha1`].
pub fn hmac_sha1(key: &[u8], data: &[u8]) -> [u8; 20] {
    let mut k = [0u8; 64];
    if key.len() > 64 {
        k[..20].copy_from_slice(&sha1(key));
    } else {
        k[..key.len()].copy_from_slice(key);
    }
    let inner: Vec<u8> = k
        .iter()
        .map(|b| b ^ 0x36)
        .chain(data.iter().copied())
        .collect();
    let outer: Vec<u8> = k
        .iter()
        .map(|b| b ^ 0x5c)
        .chain(sha1(&inner).iter().copied())
        .collect();
    sha1(&outer)
}

/// `2006-01-02T15:04:05Z` (darabonba-openapi's `GetTimestamp`).
fn parse_acs_date(date: &str) -> Option<SystemTime> {
    let b = date.as_bytes();
    if b.len() != 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[19] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| date.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, se) = (num(11..13)?, num(14..16)?, num(17..19)?);
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if mo > 2 { mo - 3 } else { mo + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + se;
    u64::try_from(secs)
        .ok()
        .map(|s| UNIX_EPOCH + Duration::from_secs(s))
}

fn format_utc(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

// ---- CIDRs ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cidr {
    addr: IpAddr,
    len: u8,
}

impl Cidr {
    /// A CIDR as the API reads `DstCidrBlock`: without a mask length, a host
    /// ("the destination CIDR block is considered a host IP address whose mask
    /// length is 32 bits"). `None` for garbage or host bits set.
    fn parse(s: &str) -> Option<Cidr> {
        let (addr, len) = match s.split_once('/') {
            Some((a, l)) => (a.parse::<IpAddr>().ok()?, l.parse::<u8>().ok()?),
            None => {
                let a = s.parse::<IpAddr>().ok()?;
                (a, if a.is_ipv4() { 32 } else { 128 })
            }
        };
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if len > max {
            return None;
        }
        let cidr = Cidr { addr, len };
        (cidr.network() == bits(addr)).then_some(cidr)
    }

    fn network(&self) -> u128 {
        let max = if self.addr.is_ipv4() { 32 } else { 128 };
        let b = bits(self.addr);
        if self.len == 0 {
            0
        } else {
            b & (u128::MAX << (max - u32::from(self.len)))
        }
    }

    fn contains(&self, other: &Cidr) -> bool {
        if self.addr.is_ipv4() != other.addr.is_ipv4() || other.len < self.len {
            return false;
        }
        let max = if self.addr.is_ipv4() { 32 } else { 128 };
        let mask = if self.len == 0 {
            0
        } else {
            u128::MAX << (max - u32::from(self.len))
        };
        bits(other.addr) & mask == self.network()
    }

    fn overlaps(&self, other: &Cidr) -> bool {
        self.contains(other) || other.contains(self)
    }

    fn canonical(&self) -> String {
        format!("{}/{}", self.addr, self.len)
    }
}

fn bits(addr: IpAddr) -> u128 {
    match addr {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

// ---- VPC ----

fn require<'a>(params: &'a BTreeMap<String, String>, name: &str) -> Result<&'a str, Outcome> {
    match params.get(name).map(String::as_str) {
        Some(v) if !v.is_empty() => Ok(v),
        _ => Err(api_error(
            400,
            &format!("Missing{}", name.replace('.', "")),
            &format!(
                "The input parameter \"{name}\" that is mandatory for processing this request is not supplied."
            ),
        )),
    }
}

fn require_region(params: &BTreeMap<String, String>) -> Result<(), Outcome> {
    let region = require(params, "RegionId")?;
    if region != REGION {
        return Err(api_error(
            400,
            "InvalidRegionId.NotFound",
            &format!(
                "The specified RegionId {region} does not exist (the double serves {REGION})."
            ),
        ));
    }
    Ok(())
}

/// `RouteEntries.N.Field` of a repeated parameter, N from 1, in order; stops at the
/// first N with no field (flatRepeatedList numbers them 1..n).
fn repeated(params: &BTreeMap<String, String>, name: &str) -> Vec<BTreeMap<String, String>> {
    let mut items = Vec::new();
    for n in 1.. {
        let prefix = format!("{name}.{n}.");
        let item: BTreeMap<String, String> = params
            .iter()
            .filter_map(|(k, v)| k.strip_prefix(&prefix).map(|f| (f.to_string(), v.clone())))
            .collect();
        if item.is_empty() {
            break;
        }
        items.push(item);
    }
    items
}

fn vpc_action(s: &mut State, action: &str, params: &BTreeMap<String, String>) -> Outcome {
    let result = require_region(params).and_then(|()| match action {
        "CreateRouteEntries" => create_route_entries(s, params),
        "DeleteRouteEntries" => delete_route_entries(s, params),
        "DescribeRouteEntryList" => describe_route_entry_list(s, params),
        "DescribeRouteTableList" => describe_route_table_list(s, params),
        "DescribeVSwitches" => describe_vswitches(s, params),
        "DescribeVpcs" => describe_vpcs(s, params),
        _ => Err(api_error(404, "InvalidAction.NotFound", action)),
    });
    match result {
        Ok(body) => Outcome::Json(200, body),
        Err(e) => e,
    }
}

/// Quota Center's `ListProductQuotas` (the request model: `ProductCode`,
/// `QuotaActionCode`, `Dimensions.N.Key`/`.Value`, `MaxResults`, `NextToken`, and
/// the other filters; no `RegionId`: the service is central), for the two VPC
/// quotas it holds: route entries per table (the account's, see
/// [`AlibabaDouble::set_account_quota`]) and route tables per VPC. Both have the
/// dimension `regionId` (assumed: the VPC quotas are per region, and the Quota
/// Center console filters them so), unless
/// [`AlibabaDouble::serve_quota_without_dimensions`]. A parameter the request model
/// does not declare is refused, as are V1's common ones in a V3 request.
fn quotas_action(s: &mut State, action: &str, params: &BTreeMap<String, String>) -> Outcome {
    if action != "ListProductQuotas" {
        return api_error(404, "InvalidAction.NotFound", action);
    }
    const DECLARED: &[&str] = &[
        "ProductCode",
        "QuotaActionCode",
        "MaxResults",
        "NextToken",
        "KeyWord",
        "GroupCode",
        "QuotaCategory",
        "SortField",
        "SortOrder",
    ];
    // V1's common parameters, in the query or the form of a V1-signed request; the
    // all-in-one SDK adds `RegionId` to every RPC request it signs so.
    const V1_COMMON: &[&str] = &[
        "Action",
        "Version",
        "Format",
        "Timestamp",
        "SignatureMethod",
        "SignatureType",
        "SignatureVersion",
        "SignatureNonce",
        "Signature",
        "AccessKeyId",
        "SecurityToken",
        "RegionId",
    ];
    let v1 = params.contains_key("Signature");
    let declared = |k: &str| {
        DECLARED.contains(&k)
            || (v1 && V1_COMMON.contains(&k))
            || (k.starts_with("Dimensions.") && (k.ends_with(".Key") || k.ends_with(".Value")))
    };
    if let Some(undeclared) = params.keys().find(|k| !declared(k)) {
        return api_error(
            400,
            "InvalidParameter",
            &format!("ListProductQuotas takes no parameter {undeclared}."),
        );
    }
    let Some(product) = params.get("ProductCode").filter(|p| !p.is_empty()) else {
        return api_error(
            400,
            "MissingProductCode",
            "The input parameter \"ProductCode\" that is mandatory for processing this request is not supplied.",
        );
    };
    let quota = |code: &str, name: &str, value: usize, region: Option<&str>| {
        json!({
            "ProductCode": "vpc",
            "QuotaActionCode": code,
            "QuotaName": name,
            "QuotaDescription": name,
            "QuotaArn": format!("acs:quotas:{}:1234567890123456:quota/vpc/{code}", region.unwrap_or("")),
            "QuotaType": "CommonQuota",
            "QuotaCategory": "CommonQuota",
            "QuotaUnit": "",
            "TotalQuota": value as f64,
            "TotalUsage": 0.0,
            "Adjustable": true,
            "Consumable": true,
            "ApplicableType": "continuous",
            "ApplicableRange": [value as f64, 1000.0],
            "SupportedRange": [],
            "UnadjustableDetail": "nonactivated",
            "GlobalQuota": false,
            "EffectiveTime": "",
            "ExpireTime": "",
            "ApplyReasonTips": "",
            "Dimensions": match region {
                Some(r) => json!({ "regionId": r }),
                None => json!({}),
            },
            "Period": {"PeriodValue": 0, "PeriodUnit": ""},
            "UsageMetric": {"MetricNamespace": "", "MetricName": "", "MetricDimensions": {}},
            "QuotaItems": [],
        })
    };
    let mut quotas = Vec::new();
    if product == "vpc" {
        quotas.push(quota(
            "vpc_quota_route_tables_num",
            "Custom route tables per VPC",
            9,
            Some(REGION),
        ));
        let name = "Custom route entries per route table";
        if s.quota_without_dimensions {
            quotas.push(quota(ROUTE_ENTRY_QUOTA, name, 50, Some("cn-beijing")));
            quotas.push(quota(ROUTE_ENTRY_QUOTA, name, s.account_quota, None));
        } else {
            quotas.push(quota(
                ROUTE_ENTRY_QUOTA,
                name,
                s.account_quota,
                Some(REGION),
            ));
        }
    }
    if let Some(code) = params.get("QuotaActionCode").filter(|c| !c.is_empty()) {
        quotas.retain(|q| q["QuotaActionCode"] == code.as_str());
    }
    for d in repeated(params, "Dimensions") {
        let (Some(key), Some(value)) = (d.get("Key"), d.get("Value")) else {
            return api_error(
                400,
                "InvalidParameter.Dimensions",
                "Each dimension needs a Key and a Value.",
            );
        };
        quotas.retain(|q| q["Dimensions"][key.as_str()] == value.as_str());
    }
    let asked = match params.get("MaxResults").map(|m| m.parse::<usize>()) {
        None => 30,
        Some(Ok(n)) if (1..=200).contains(&n) => n,
        Some(_) => {
            return api_error(
                400,
                "InvalidParameter.MaxResults",
                "MaxResults is 1 to 200.",
            );
        }
    };
    let page = asked.min(s.quota_page);
    // The token is the index of the page's first item (opaque to the client).
    let from = match params.get("NextToken").filter(|t| !t.is_empty()) {
        None => 0,
        Some(t) => match t.strip_prefix("nt-").and_then(|n| n.parse::<usize>().ok()) {
            Some(n) if n <= quotas.len() => n,
            _ => {
                return api_error(
                    400,
                    "InvalidParameter.NextToken",
                    "The NextToken is not valid.",
                );
            }
        },
    };
    let total = quotas.len();
    let to = (from + page).min(total);
    let next = if to < total {
        format!("nt-{to}")
    } else {
        String::new()
    };
    Outcome::Json(
        200,
        json!({
            "RequestId": request_id(),
            "TotalCount": total,
            "MaxResults": page,
            "NextToken": next,
            "Quotas": quotas[from..to].to_vec(),
        }),
    )
}

fn table_vpc(s: &State, table: &str) -> Option<String> {
    s.tables
        .iter()
        .find(|t| t.id == table)
        .map(|t| t.vpc.clone())
}

fn table_not_found(table: &str) -> Outcome {
    // Assumed: the API's `<Param>.NotFound` naming.
    api_error(
        404,
        "InvalidRouteTableId.NotFound",
        &format!("The specified route table {table} does not exist."),
    )
}

fn busy(s: &State, vpcs: &BTreeSet<String>) -> Option<Outcome> {
    vpcs.iter().find(|v| s.in_flight.contains_key(*v)).map(|vpc| {
        api_error(
            400,
            &s.busy_code,
            &format!(
                "The VPC {vpc} has a route entry task in progress; CreateRouteEntries does not support concurrent batch operations in one VPC."
            ),
        )
    })
}

fn batch_size(items: usize) -> Result<(), Outcome> {
    if items == 0 {
        return Err(api_error(
            400,
            "MissingRouteEntries",
            "The input parameter \"RouteEntries\" that is mandatory for processing this request is not supplied.",
        ));
    }
    if items > MAX_BATCH {
        // Assumed code: the request model says "at most 50" per field.
        return Err(api_error(
            400,
            "InvalidParameter.RouteEntries",
            &format!("At most {MAX_BATCH} route entries per request; this one has {items}."),
        ));
    }
    Ok(())
}

fn start_batch(s: &mut State, vpcs: BTreeSet<String>) {
    let reads_left = s.settle_after_reads;
    for vpc in vpcs {
        s.in_flight.insert(
            vpc,
            Batch {
                reads_left,
                accepted: std::time::Instant::now(),
            },
        );
    }
}

fn dry_run(params: &BTreeMap<String, String>) -> bool {
    params.get("DryRun").is_some_and(|v| v == "true")
}

/// `CreateRouteEntries`: the rules of its description (client.go) and request model.
fn create_route_entries(
    s: &mut State,
    params: &BTreeMap<String, String>,
) -> Result<Value, Outcome> {
    let items = repeated(params, "RouteEntries");
    batch_size(items.len())?;
    let mut vpcs = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        for field in ["RouteTableId", "DstCidrBlock", "NextHop"] {
            if item.get(field).is_none_or(String::is_empty) {
                return Err(api_error(
                    400,
                    &format!("MissingRouteEntries.{}.{field}", i + 1),
                    &format!(
                        "The input parameter \"RouteEntries.{}.{field}\" that is mandatory for processing this request is not supplied.",
                        i + 1
                    ),
                ));
            }
        }
        let table = &item["RouteTableId"];
        vpcs.insert(table_vpc(s, table).ok_or_else(|| table_not_found(table))?);
    }
    if let Some(e) = busy(s, &vpcs) {
        return Err(e);
    }
    let mut failed = Vec::new();
    let mut accepted: Vec<Entry> = Vec::new();
    for item in &items {
        let table = item["RouteTableId"].clone();
        let vpc = table_vpc(s, &table).unwrap_or_default();
        let dst = &item["DstCidrBlock"];
        let next_hop = item["NextHop"].clone();
        let next_hop_type = item
            .get("NextHopType")
            .cloned()
            .unwrap_or_else(|| "Instance".into());
        let mut fail = |code: &str, message: String| {
            failed.push(json!({
                "DstCidrBlock": dst,
                "NextHop": next_hop,
                "FailedCode": code,
                "FailedMessage": message,
            }));
        };
        for (field, limit) in [("Name", 128), ("Description", 256)] {
            if let Some(v) = item.get(field)
                && (v.chars().count() > limit
                    || v.starts_with("http://")
                    || v.starts_with("https://"))
            {
                // Request model: "1 to 128 (256) characters … cannot start with http://
                // or https://". Assumed code.
                fail(
                    &format!("IllegalParam.{field}"),
                    format!(
                        "The {field} must be 1 to {limit} characters and not start with http:// or https://."
                    ),
                );
            }
        }
        let Some(cidr) = Cidr::parse(dst) else {
            // Assumed code.
            fail(
                "VPC_ROUTE_ENTRY_CIDR_BLOCK_INVALID",
                format!("Specified CIDR block is not valid, entry.cidrBlock={dst}"),
            );
            continue;
        };
        let destination = cidr.canonical();
        if let Some(v) = item.get("IpVersion") {
            let want = if cidr.addr.is_ipv4() { "4" } else { "6" };
            if v != want && v != &format!("IPv{want}") {
                fail(
                    "VPC_ROUTE_ENTRY_CIDR_BLOCK_INVALID",
                    format!("IpVersion {v} does not match entry.cidrBlock={dst}"),
                );
                continue;
            }
        }
        // "The destination CIDR block … cannot be 100.64.0.0/10 or its subnets."
        let shared = Cidr::parse("100.64.0.0/10").expect("a valid CIDR");
        if shared.overlaps(&cidr) {
            // Assumed code.
            fail(
                "VPC_ROUTE_ENTRY_CIDR_BLOCK_RESERVED",
                format!("Specified CIDR block overlaps 100.64.0.0/10, entry.cidrBlock={dst}"),
            );
            continue;
        }
        // "… cannot be the same as or overlap with the CIDR block of a vSwitch in the VPC."
        if let Some(vsw) = s
            .vswitches
            .iter()
            .find(|w| w.vpc == vpc && Cidr::parse(&w.cidr).is_some_and(|c| c.overlaps(&cidr)))
        {
            // Assumed code.
            fail(
                "VPC_ROUTE_ENTRY_CIDR_BLOCK_OVERLAP_VSWITCH",
                format!(
                    "Specified CIDR block overlaps the CIDR block {} of vSwitch {}, entry.cidrBlock={dst}",
                    vsw.cidr, vsw.id
                ),
            );
            continue;
        }
        if cidr.addr.is_ipv6() && s.vpcs.iter().any(|v| v.id == vpc && v.ipv6_cidr.is_empty()) {
            fail(
                "VPC_ROUTE_ENTRY_CIDR_BLOCK_INVALID",
                format!("The VPC {vpc} has no IPv6 CIDR block, entry.cidrBlock={dst}"),
            );
            continue;
        }
        // "The destination CIDR blocks … of route entries in the same route table must
        // be unique." The code is the SDK model's example and the peer's.
        let duplicate = s
            .entries
            .iter()
            .chain(accepted.iter())
            .any(|e| e.table == table && Cidr::parse(&e.destination) == Some(cidr));
        if duplicate {
            fail(
                "VPC_ROUTE_ENTRY_CIDR_BLOCK_DUPLICATE",
                format!("Specified CIDR block is already exists, entry.cidrBlock={destination}"),
            );
            continue;
        }
        // "The next hop … must belong to the same VPC as the route table."
        let hop_ok = match next_hop_type.as_str() {
            "Instance" => s.instances.get(&next_hop).is_some_and(|i| i.vpc == vpc),
            "NetworkInterface" => s
                .instances
                .values()
                .any(|i| i.eni == next_hop && i.vpc == vpc),
            _ => false,
        };
        if !hop_ok {
            // Assumed code.
            fail(
                "VPC_ROUTE_ENTRY_NEXT_HOP_INVALID",
                format!(
                    "The next hop {next_hop} ({next_hop_type}) is not in the VPC {vpc} of the route table, or the double does not serve that next hop type."
                ),
            );
            continue;
        }
        accepted.push(Entry {
            id: String::new(),
            table,
            destination,
            next_hop_type,
            next_hop,
            name: item.get("Name").cloned().unwrap_or_default(),
            description: item.get("Description").cloned().unwrap_or_default(),
            status: EntryStatus::Pending,
            kind: "Custom",
        });
    }
    // The custom-entry quota of each table ("A route table can contain up to 200
    // custom route entries"). Refused whole: assumed (the issue names the codes
    // `QuotaExceeded.*`).
    for table in accepted
        .iter()
        .map(|e| e.table.clone())
        .collect::<BTreeSet<_>>()
    {
        let quota = s
            .tables
            .iter()
            .find(|t| t.id == table)
            .map_or(DEFAULT_QUOTA, |t| t.quota);
        let held = s
            .entries
            .iter()
            .filter(|e| e.table == table && e.is_custom())
            .count();
        let adding = accepted.iter().filter(|e| e.table == table).count();
        if held + adding > quota {
            return Err(api_error(
                400,
                "QuotaExceeded.RouteEntry",
                &format!(
                    "The route table {table} holds {held} custom route entries of its quota of {quota}; {adding} more do not fit."
                ),
            ));
        }
    }
    if dry_run(params) {
        return Err(api_error(
            400,
            "DryRunOperation",
            "Request validation has been passed with DryRun flag set.",
        ));
    }
    let mut ids = Vec::new();
    let mut started = BTreeSet::new();
    for mut e in accepted {
        e.id = next_id(s, "rte");
        ids.push(e.id.clone());
        if let Some(vpc) = table_vpc(s, &e.table) {
            started.insert(vpc);
        }
        s.entries.push(e);
    }
    let success = ids.len();
    start_batch(s, started);
    Ok(json!({
        "RequestId": request_id(),
        "SuccessCount": success,
        "FailedCount": failed.len(),
        "RouteEntryIds": ids,
        "FailedRouteEntries": failed,
    }))
}

/// `DeleteRouteEntries`: "You can delete only routes that are in the Available
/// state"; an entry is named by `RouteEntryId`, or by `RouteTableId`,
/// `DstCidrBlock` and `NextHop`.
fn delete_route_entries(
    s: &mut State,
    params: &BTreeMap<String, String>,
) -> Result<Value, Outcome> {
    let items = repeated(params, "RouteEntries");
    batch_size(items.len())?;
    let mut vpcs = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let table = item.get("RouteTableId").cloned().or_else(|| {
            item.get("RouteEntryId")
                .and_then(|id| s.entries.iter().find(|e| &e.id == id))
                .map(|e| e.table.clone())
        });
        match table {
            Some(table) => {
                vpcs.insert(table_vpc(s, &table).ok_or_else(|| table_not_found(&table))?);
            }
            None if item.get("RouteEntryId").is_some() => {}
            None => {
                return Err(api_error(
                    400,
                    &format!("MissingRouteEntries.{}.RouteTableId", i + 1),
                    "Name an entry by RouteEntryId, or by RouteTableId, DstCidrBlock and NextHop.",
                ));
            }
        }
    }
    if let Some(e) = busy(s, &vpcs) {
        return Err(e);
    }
    let mut failed = Vec::new();
    let mut doomed = Vec::new();
    for item in &items {
        let dst = item.get("DstCidrBlock").cloned().unwrap_or_default();
        let next_hop = item.get("NextHop").cloned().unwrap_or_default();
        let id = item.get("RouteEntryId").cloned().unwrap_or_default();
        let found = s.entries.iter().position(|e| {
            if !id.is_empty() {
                return e.id == id;
            }
            Some(&e.table) == item.get("RouteTableId")
                && Cidr::parse(&e.destination).is_some()
                && Cidr::parse(&e.destination) == Cidr::parse(&dst)
                && (next_hop.is_empty() || e.next_hop == next_hop)
        });
        let mut fail = |code: &str, message: String| {
            failed.push(json!({
                "DstCidrBlock": dst,
                "NextHop": next_hop,
                "RouteEntryId": id,
                "FailedCode": code,
                "FailedMessage": message,
            }));
        };
        match found {
            // The peer's code for a gone entry (manager.go counts it done).
            None => fail(
                "VPC_ROUTER_ENTRY_NOT_EXIST",
                format!("Specified route entry is not exist, entry.cidrBlock={dst}"),
            ),
            Some(i) if !s.entries[i].is_custom() => fail(
                // Assumed code.
                "VPC_ROUTE_ENTRY_SYSTEM_FORBIDDEN",
                "A system route entry cannot be deleted.".into(),
            ),
            Some(i) if s.entries[i].status != EntryStatus::Available || doomed.contains(&i) => {
                fail(
                    // The peer's code for an entry in another state.
                    "VPC_ROUTE_ENTRY_STATUS_ERROR",
                    format!("The route entry {} is not Available.", s.entries[i].id),
                )
            }
            Some(i) => doomed.push(i),
        }
    }
    if dry_run(params) {
        return Err(api_error(
            400,
            "DryRunOperation",
            "Request validation has been passed with DryRun flag set.",
        ));
    }
    let mut started = BTreeSet::new();
    for &i in &doomed {
        s.entries[i].status = EntryStatus::Deleting;
        if let Some(vpc) = table_vpc(s, &s.entries[i].table) {
            started.insert(vpc);
        }
    }
    start_batch(s, started);
    Ok(json!({
        "RequestId": request_id(),
        "SuccessCount": doomed.len(),
        "FailedCount": failed.len(),
        "FailedRouteEntries": failed,
    }))
}

fn status_word(words: StatusWords, status: EntryStatus) -> &'static str {
    match (words, status) {
        (StatusWords::Model, EntryStatus::Pending) => "Pending",
        (StatusWords::Model, EntryStatus::Available) => "Available",
        (StatusWords::Description, EntryStatus::Pending) => "Creating",
        (StatusWords::Description, EntryStatus::Available) => "Created",
        (_, EntryStatus::Deleting) => "Deleting",
    }
}

fn page_size(
    params: &BTreeMap<String, String>,
    name: &str,
    default: usize,
    max: usize,
) -> Result<usize, Outcome> {
    match params.get(name) {
        None => Ok(default),
        Some(v) => match v.parse::<usize>() {
            // Larger values are served as `max` per page: the peer asks for 500 and
            // works in production, so the API does not refuse them (assumed).
            Ok(n) if n >= 1 => Ok(n.min(max)),
            _ => Err(api_error(
                400,
                &format!("InvalidParameter.{name}"),
                &format!("The parameter {name} {v:?} is not valid (1 to {max})."),
            )),
        },
    }
}

/// `DescribeRouteEntryList`: `RegionId` and `RouteTableId` required; filters
/// `RouteEntryId`, `RouteEntryName`, `DestinationCidrBlock`, `IpVersion`,
/// `RouteEntryType`, `NextHopId`, `NextHopType`; pages of `MaxResult` (1–100,
/// default 10) linked by `NextToken`.
fn describe_route_entry_list(
    s: &mut State,
    params: &BTreeMap<String, String>,
) -> Result<Value, Outcome> {
    let table = require(params, "RouteTableId")?.to_string();
    let vpc = table_vpc(s, &table).ok_or_else(|| table_not_found(&table))?;
    let max = page_size(params, "MaxResult", DEFAULT_PAGE, MAX_PAGE)?;
    let start = match params.get("NextToken").filter(|t| !t.is_empty()) {
        None => 0,
        Some(token) => parse_token(token, &table).ok_or_else(|| {
            api_error(
                400,
                "InvalidNextToken",
                &format!("The specified NextToken {token:?} is not valid for this route table."),
            )
        })?,
    };
    let filter = |e: &Entry| -> bool {
        let eq =
            |name: &str, value: &str| params.get(name).is_none_or(|v| v.is_empty() || v == value);
        let ip_version = if e.destination.contains(':') {
            "IPv6"
        } else {
            "IPv4"
        };
        e.table == table
            && eq("RouteEntryId", &e.id)
            && eq("RouteEntryName", &e.name)
            && eq("RouteEntryType", e.kind)
            && eq("NextHopId", &e.next_hop)
            && eq("NextHopType", &e.next_hop_type)
            && eq("IpVersion", ip_version)
            && params
                .get("DestinationCidrBlock")
                .is_none_or(|d| Cidr::parse(d) == Cidr::parse(&e.destination))
    };
    let matching: Vec<&Entry> = s.entries.iter().filter(|e| filter(e)).collect();
    let page: Vec<Value> = matching
        .iter()
        .skip(start)
        .take(max)
        .map(|e| entry_json(e, s.status_words))
        .collect();
    let next = start + page.len();
    let mut body = json!({
        "RequestId": request_id(),
        "RouteEntrys": {"RouteEntry": page},
    });
    if next < matching.len() {
        body["NextToken"] = json!(make_token(next, &table));
    }
    // A read of the VPC's entries: a batch in flight settles after enough of them.
    if let Some(batch) = s.in_flight.get_mut(&vpc)
        && let Some(left) = batch.reads_left.as_mut()
    {
        *left = left.saturating_sub(1);
        if *left == 0 {
            settle_vpc(s, &vpc);
        }
    }
    Ok(body)
}

fn entry_json(e: &Entry, words: StatusWords) -> Value {
    let ip_version = if e.destination.contains(':') {
        "IPv6"
    } else {
        "IPv4"
    };
    let next_hops = if e.next_hop.is_empty() {
        json!({"NextHop": []})
    } else {
        json!({"NextHop": [{
            "NextHopId": e.next_hop,
            "NextHopType": e.next_hop_type,
            "Enabled": 1,
            "Weight": 0,
            "NextHopRegionId": REGION,
            "NextHopRelatedInfo": {},
        }]})
    };
    json!({
        "RouteEntryId": e.id,
        "RouteTableId": e.table,
        "RouteEntryName": e.name,
        "Description": e.description,
        "DestinationCidrBlock": e.destination,
        "IpVersion": ip_version,
        "Type": e.kind,
        "Origin": if e.is_custom() { "CustomCreate" } else { "SystemCreate" },
        "Status": status_word(words, e.status),
        "NextHops": next_hops,
        "GmtModified": format_utc(SystemTime::now()),
    })
}

/// Opaque to the client; bound to the table so that a token of another list fails.
fn make_token(offset: usize, table: &str) -> String {
    let tag = hex(&Sha256::digest(table.as_bytes()));
    format!("{offset:08x}{}", &tag[..16])
}

fn parse_token(token: &str, table: &str) -> Option<usize> {
    let tag = hex(&Sha256::digest(table.as_bytes()));
    let (offset, rest) = (token.get(..8)?, token.get(8..)?);
    (rest == &tag[..16]).then(|| usize::from_str_radix(offset, 16).ok())?
}

fn paged<T: Clone>(
    items: &[T],
    params: &BTreeMap<String, String>,
) -> Result<(Vec<T>, usize, usize), Outcome> {
    let size = page_size(params, "PageSize", 10, 50)?;
    let number = match params.get("PageNumber") {
        None => 1,
        Some(v) => v.parse::<usize>().ok().filter(|n| *n >= 1).ok_or_else(|| {
            api_error(
                400,
                "InvalidParameter.PageNumber",
                &format!("PageNumber {v:?} is not valid."),
            )
        })?,
    };
    let page = items
        .iter()
        .skip((number - 1) * size)
        .take(size)
        .cloned()
        .collect();
    Ok((page, number, size))
}

/// `DescribeRouteTableList` (filters `VpcId`, `RouteTableId`, `RouteTableType`;
/// pages by `PageNumber`/`PageSize`).
fn describe_route_table_list(
    s: &mut State,
    params: &BTreeMap<String, String>,
) -> Result<Value, Outcome> {
    let eq = |name: &str, value: &str| params.get(name).is_none_or(|v| v.is_empty() || v == value);
    let tables: Vec<Table> = s
        .tables
        .iter()
        .filter(|t| {
            eq("VpcId", &t.vpc) && eq("RouteTableId", &t.id) && eq("RouteTableType", t.kind)
        })
        .cloned()
        .collect();
    let (page, number, size) = paged(&tables, params)?;
    let list: Vec<Value> = page
        .iter()
        .map(|t| {
            let vswitches: Vec<&str> = s
                .vswitches
                .iter()
                .filter(|w| w.table == t.id)
                .map(|w| w.id.as_str())
                .collect();
            json!({
                "RouteTableId": t.id,
                "RouteTableName": "",
                "RouteTableType": t.kind,
                "VpcId": t.vpc,
                "RouterId": format!("vrt-{}", t.vpc.trim_start_matches("vpc-")),
                "RouterType": "VRouter",
                "Status": "Available",
                "AssociateType": "VSwitch",
                "Description": "",
                "CreationTime": "2026-01-01T00:00:00Z",
                "ResourceGroupId": "rg-double",
                "OwnerId": 1234567890123456_i64,
                "VSwitchIds": {"VSwitchId": vswitches},
                "GatewayIds": {"GatewayIds": []},
                "Tags": {"Tag": []},
            })
        })
        .collect();
    Ok(json!({
        "RequestId": request_id(),
        "PageNumber": number,
        "PageSize": size,
        "TotalCount": tables.len(),
        "RouterTableList": {"RouterTableListType": list},
    }))
}

fn describe_vswitches(s: &mut State, params: &BTreeMap<String, String>) -> Result<Value, Outcome> {
    let eq = |name: &str, value: &str| params.get(name).is_none_or(|v| v.is_empty() || v == value);
    let vswitches: Vec<VSwitch> = s
        .vswitches
        .iter()
        .filter(|w| eq("VpcId", &w.vpc) && eq("VSwitchId", &w.id) && eq("RouteTableId", &w.table))
        .cloned()
        .collect();
    let (page, number, size) = paged(&vswitches, params)?;
    let list: Vec<Value> = page
        .iter()
        .map(|w| {
            json!({
                "VSwitchId": w.id,
                "VpcId": w.vpc,
                "CidrBlock": w.cidr,
                "Status": "Available",
                "ZoneId": format!("{REGION}-h"),
                "RouteTable": {"RouteTableId": w.table, "RouteTableType": s.tables.iter().find(|t| t.id == w.table).map_or("System", |t| t.kind)},
            })
        })
        .collect();
    Ok(json!({
        "RequestId": request_id(),
        "PageNumber": number,
        "PageSize": size,
        "TotalCount": vswitches.len(),
        "VSwitches": {"VSwitch": list},
    }))
}

fn describe_vpcs(s: &mut State, params: &BTreeMap<String, String>) -> Result<Value, Outcome> {
    let eq = |name: &str, value: &str| params.get(name).is_none_or(|v| v.is_empty() || v == value);
    let vpcs: Vec<Vpc> = s
        .vpcs
        .iter()
        .filter(|v| eq("VpcId", &v.id))
        .cloned()
        .collect();
    let (page, number, size) = paged(&vpcs, params)?;
    let list: Vec<Value> = page
        .iter()
        .map(|v| {
            let vswitches: Vec<&str> = s
                .vswitches
                .iter()
                .filter(|w| w.vpc == v.id)
                .map(|w| w.id.as_str())
                .collect();
            json!({
                "VpcId": v.id,
                "CidrBlock": v.cidr,
                "Ipv6CidrBlock": v.ipv6_cidr,
                "Status": "Available",
                "RegionId": REGION,
                "VRouterId": format!("vrt-{}", v.id.trim_start_matches("vpc-")),
                "VSwitchIds": {"VSwitchId": vswitches},
            })
        })
        .collect();
    Ok(json!({
        "RequestId": request_id(),
        "PageNumber": number,
        "PageSize": size,
        "TotalCount": vpcs.len(),
        "Vpcs": {"Vpc": list},
    }))
}

// ---- ECS ----

fn ecs_action(s: &mut State, action: &str, params: &BTreeMap<String, String>) -> Outcome {
    let result = require_region(params).and_then(|()| match action {
        "DescribeInstances" => describe_instances(s, params),
        _ => Err(api_error(404, "InvalidAction.NotFound", action)),
    });
    match result {
        Ok(body) => Outcome::Json(200, body),
        Err(e) => e,
    }
}

/// ECS `DescribeInstances`: `InstanceIds` is a JSON array in a string (up to 100),
/// `VpcId` filters; pages by `PageNumber`/`PageSize` (up to 100).
fn describe_instances(s: &mut State, params: &BTreeMap<String, String>) -> Result<Value, Outcome> {
    let ids: Option<Vec<String>> = match params.get("InstanceIds") {
        None => None,
        Some(raw) => Some(serde_json::from_str(raw).map_err(|_| {
            api_error(
                400,
                "InvalidInstanceIds.Malformed",
                &format!(
                    "The specified parameter InstanceIds {raw:?} is not a JSON array of strings."
                ),
            )
        })?),
    };
    if ids.as_ref().is_some_and(|ids| ids.len() > 100) {
        return Err(api_error(
            400,
            "InvalidInstanceIds.ValueNotSupported",
            "At most 100 InstanceIds.",
        ));
    }
    let eq = |name: &str, value: &str| params.get(name).is_none_or(|v| v.is_empty() || v == value);
    let instances: Vec<Instance> = s
        .instances
        .values()
        .filter(|i| ids.as_ref().is_none_or(|ids| ids.contains(&i.id)))
        .filter(|i| eq("VpcId", &i.vpc) && eq("VSwitchId", &i.vswitch))
        .cloned()
        .collect();
    let size = page_size(params, "PageSize", 10, 100)?;
    let number = params
        .get("PageNumber")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(1)
        .max(1);
    let list: Vec<Value> = instances
        .iter()
        .skip((number - 1) * size)
        .take(size)
        .map(|i| {
            json!({
                "InstanceId": i.id,
                "InstanceName": i.hostname,
                "HostName": i.hostname,
                "RegionId": REGION,
                "ZoneId": format!("{REGION}-h"),
                "Status": "Running",
                "InstanceNetworkType": "vpc",
                "VpcAttributes": {
                    "VpcId": i.vpc,
                    "VSwitchId": i.vswitch,
                    "PrivateIpAddress": {"IpAddress": [i.private_ip]},
                    "NatIpAddress": "",
                },
                "NetworkInterfaces": {"NetworkInterface": [{
                    "NetworkInterfaceId": i.eni,
                    "PrimaryIpAddress": i.private_ip,
                    "Type": "Primary",
                    "MacAddress": "00:16:3e:00:00:01",
                    "PrivateIpSets": {"PrivateIpSet": [{"PrivateIpAddress": i.private_ip, "Primary": true}]},
                    "Ipv6Sets": {"Ipv6Set": i.ipv6.iter().map(|a| json!({"Ipv6Address": a})).collect::<Vec<_>>()},
                }]},
            })
        })
        .collect();
    Ok(json!({
        "RequestId": request_id(),
        "PageNumber": number,
        "PageSize": size,
        "TotalCount": instances.len(),
        "Instances": {"Instance": list},
    }))
}

// ---- STS and the metadata service ----

fn issue_credentials(s: &mut State, prefix: &str) -> (String, String, String, String) {
    s.issued += 1;
    let id = format!("STS.{prefix}{:08}", s.issued);
    let secret = format!("double-sts-secret-{}", s.issued);
    let token = format!("CAIS-double-security-token-{}", s.issued);
    let expiration = format_utc(SystemTime::now() + s.credential_lifetime);
    s.keys
        .insert(id.clone(), (secret.clone(), Some(token.clone())));
    (id, secret, token, expiration)
}

/// STS `AssumeRoleWithOIDC` (2015-04-01): anonymous (no signature), parameters
/// `RoleArn`, `OIDCProviderArn`, `OIDCToken`, `RoleSessionName`, `DurationSeconds`.
fn sts_action(s: &mut State, action: &str, params: &BTreeMap<String, String>) -> Outcome {
    if action != "AssumeRoleWithOIDC" {
        return api_error(404, "InvalidAction.NotFound", action);
    }
    for name in ["RoleArn", "OIDCProviderArn", "OIDCToken"] {
        if let Err(e) = require(params, name) {
            return e;
        }
    }
    if params["OIDCProviderArn"] != s.oidc_provider_arn {
        return api_error(
            404,
            "EntityNotExist.OIDCProvider",
            "The OIDC provider does not exist.",
        );
    }
    if params["RoleArn"] != s.role_arn {
        return api_error(404, "EntityNotExist.Role", "The role does not exist.");
    }
    if s.oidc_token.is_empty() || params["OIDCToken"] != s.oidc_token {
        return api_error(
            400,
            "AuthenticationFail.OIDCToken.Invalid",
            "The OIDC token is not valid.",
        );
    }
    let (id, secret, token, expiration) = issue_credentials(s, "OIDC");
    Outcome::Json(
        200,
        json!({
            "RequestId": request_id(),
            "Credentials": {
                "AccessKeyId": id,
                "AccessKeySecret": secret,
                "SecurityToken": token,
                "Expiration": expiration,
            },
            "AssumedRoleUser": {
                "Arn": format!("{}/{}", s.role_arn, params.get("RoleSessionName").cloned().unwrap_or_default()),
                "AssumedRoleId": "33333333333333333:route-controller",
            },
            "OIDCTokenInfo": {"Issuer": "https://oidc-ack.cn-hangzhou.aliyuncs.com/double", "Subject": "system:serviceaccount:kube-system:route-controller", "ClientIds": "sts.aliyuncs.com"},
        }),
    )
}

/// The ECS metadata service: `PUT /latest/api/token` (header
/// `X-aliyun-ecs-metadata-token-ttl-seconds`) gives a token that the
/// `/latest/meta-data/…` reads must carry in `X-aliyun-ecs-metadata-token` (the
/// hardened mode); `ram/security-credentials/` names the role, `…/{role}` gives its
/// temporary key.
fn metadata(s: &mut State, wire: &http_wire::WireRequest, path: &str) -> Outcome {
    if path == "/latest/api/token" {
        if wire.method != "PUT" {
            return Outcome::Text(405, "Method Not Allowed".into());
        }
        let ttl = wire
            .header("x-aliyun-ecs-metadata-token-ttl-seconds")
            .and_then(|v| v.parse::<u64>().ok());
        if !ttl.is_some_and(|t| (1..=21_600).contains(&t)) {
            return Outcome::Text(
                400,
                "X-aliyun-ecs-metadata-token-ttl-seconds must be 1 to 21600".into(),
            );
        }
        s.issued += 1;
        let token = format!("double-metadata-token-{}", s.issued);
        s.metadata_tokens.insert(token.clone());
        return Outcome::Text(200, token);
    }
    if wire.method != "GET" {
        return Outcome::Text(405, "Method Not Allowed".into());
    }
    match wire.header("x-aliyun-ecs-metadata-token") {
        Some(t) if !s.metadata_tokens.contains(t) => {
            return Outcome::Text(401, "Unauthorized: the metadata token is not valid".into());
        }
        None if s.metadata_token_required => {
            return Outcome::Text(401, "Unauthorized: a metadata token is required".into());
        }
        _ => {}
    }
    let instance = s.instances.get(&s.metadata_instance).cloned();
    let simple = match (path, &instance) {
        ("/latest/meta-data/region-id", _) => Some(REGION.to_string()),
        ("/latest/meta-data/instance-id", Some(i)) => Some(i.id.clone()),
        ("/latest/meta-data/vpc-id", Some(i)) => Some(i.vpc.clone()),
        ("/latest/meta-data/vswitch-id", Some(i)) => Some(i.vswitch.clone()),
        ("/latest/meta-data/private-ipv4", Some(i)) => Some(i.private_ip.clone()),
        _ => None,
    };
    if let Some(value) = simple {
        return Outcome::Text(200, value);
    }
    let base = "/latest/meta-data/ram/security-credentials/";
    match path.strip_prefix(base) {
        Some("") => Outcome::Text(200, s.metadata_role.clone()),
        Some(role) if role == s.metadata_role => {
            let (id, secret, token, expiration) = issue_credentials(s, "ECS");
            Outcome::Json(
                200,
                json!({
                    "AccessKeyId": id,
                    "AccessKeySecret": secret,
                    "SecurityToken": token,
                    "Expiration": expiration,
                    "LastUpdated": format_utc(SystemTime::now()),
                    "Code": "Success",
                }),
            )
        }
        _ => Outcome::Text(404, "Not Found".into()),
    }
}
