//! Our own chaos run, the short one (issue 11): the `route-controller` binary as two
//! replicas with leader election against a real kube-apiserver, each behind fault
//! proxies of its own to the API server and to the cloud, while the API server is
//! restarted and SIGKILLed, replicas are SIGKILLed and SIGTERMed, nodes come and go
//! and the cloud fails; once with the Hetzner double, once with moto, and once in
//! each of Neutron's modes against a real Keystone and Neutron (with Neutron
//! restarted and another writer of routes and VIPs racing the replicas,
//! `tests/support/chaos_openstack.rs`). The run and its checks are in
//! `tests/support/chaos.rs`; `cargo bench -- chaos` runs longer ones over several
//! seeds.
//!
//! `CHAOS_SEED` and `CHAOS_SECONDS` (default 2 and 20; 40 against the real Neutron)
//! change the run;
//! `--nocapture` shows the figures.

// The support modules each carry their own copy of `http_wire.rs`.
#![allow(clippy::duplicate_mod)]

#[path = "support/chaos.rs"]
mod chaos;
#[path = "support/chaos_openstack.rs"]
mod chaos_openstack;
#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/e2e_hcloud.rs"]
mod e2e_hcloud;
#[path = "support/fault_proxy.rs"]
mod fault_proxy;
#[path = "support/hcloud_double.rs"]
mod hcloud_double;
#[path = "support/http_fault.rs"]
mod http_fault;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/moto.rs"]
mod moto;
#[path = "support/openstack_real.rs"]
mod openstack_real;

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use chaos::{Figures, Settings, parse_micro_time};

/// One run at a time: each is two replicas, an API server and a cloud on a machine
/// of two cores, and the lease's timing must hold.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn settings() -> Settings {
    Settings::from_env(2, 20)
}

/// Longer against the real Neutron: the other writer's races with the replicas' port
/// writes need the time to happen (at 40 s, a provider that writes pairs from its
/// cached copy loses a VIP with seed 2; at 20 s it did not).
fn openstack_settings() -> Settings {
    Settings::from_env(2, 40)
}

fn report(figures: &Figures) {
    eprintln!("{figures}");
    assert!(
        figures.converged.is_some(),
        "the routes did not converge within {:?}",
        chaos::CONVERGENCE
    );
    assert!(
        figures.violations.is_empty(),
        "{} violations",
        figures.violations.len()
    );
}

/// Guards the invariants of `tests/support/chaos.rs` with the Hetzner double (the
/// failures that double injects, a token per process). Seen failing: with the
/// cluster CIDR widened over the foreign route, the controller deletes it (the
/// foreign-route checks).
#[test]
fn a_chaos_run_with_the_hetzner_double_keeps_the_invariants_and_converges() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    report(&chaos::hetzner(settings()));
}

/// The same with moto's EC2: operations of several requests (the instance's
/// source/destination check, then a create per route table), partial failures
/// across the two tables, throttling and replies lost after the change. Seen failing
/// on the code of this commit, in some runs: a write after the lease was lost (the
/// missing fencing of issue 11) and a create answered `RouteAlreadyExists` after a
/// partial failure (tests/README.md, Reliability).
#[test]
fn a_chaos_run_with_moto_keeps_the_invariants_and_converges() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    report(&chaos::aws(settings()));
}

/// The same against a real Keystone and Neutron with `extraroute-atomic`: writes
/// checked by the token's user, the router and every node port compared whole.
/// Seen failing: with the port's pairs written from the copy cached at the list
/// (the provider before issue 41), the other writer's VIPs are lost.
#[test]
fn a_chaos_run_with_a_real_neutron_keeps_the_invariants_and_converges() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    report(&chaos_openstack::openstack(
        openstack_settings(),
        openstack_real::Mode::Atomic,
    ));
}

/// The same with a Neutron without `extraroute-atomic` (the whole route list, under
/// `If-Match`), where the other writer's routes race ours in one list.
#[test]
fn a_chaos_run_with_a_real_neutron_without_atomic_routes_keeps_the_invariants_and_converges() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    report(&chaos_openstack::openstack(
        openstack_settings(),
        openstack_real::Mode::WithoutAtomic,
    ));
}

#[test]
fn micro_times_parse_as_the_api_server_writes_them() {
    let t = parse_micro_time("2026-12-01T10:00:00.123456Z").expect("parses");
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .expect("after 1970");
    assert_eq!(secs, Duration::new(1_796_119_200, 123_456_000));
    assert_eq!(
        parse_micro_time("1970-01-01T00:00:00Z"),
        Some(SystemTime::UNIX_EPOCH)
    );
}
