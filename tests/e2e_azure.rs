//! End to end with the Azure provider: `route-controller run --cloud-provider=azure
//! --cloud-config=azure.json` against the ARM double (tests/support/arm_double.rs,
//! checked against armnetwork and armcompute by tests/azure_conformance.rs) and a real
//! kube-apiserver. The double is reached as an Azure Stack cloud (its environment
//! file names the double as Resource Manager and Entra ID), with a client secret.

#[path = "support/arm_double.rs"]
mod arm_double;
#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/tempdir.rs"]
mod tempdir;

use std::time::Duration;

use arm_double::{ArmDouble, Fault, Kind, RouteEntry};
use controller_process::{ControllerProcess, Spawn};
use e2e_cluster::{
    Identity, create_node, delete_node, network_unavailable, poll_until,
    wait_for_network_unavailable,
};
use kube_apiserver::KubeApiserver;

const PATIENCE: Duration = Duration::from_secs(60);
const SUBSCRIPTION: &str = "00000000-0000-0000-0000-0000000000e2";
const TENANT: &str = "tenant-e2e";
const CLIENT: &str = "client-e2e";
const SECRET: &str = "secret-e2e";
const RG: &str = "rg-e2e";
const TABLE: &str = "rt-e2e";

/// The double with the identity, the table (holding one route of someone else) and
/// `vms` VMs, each with a NIC of IP `10.240.0.<10+i>` forwarding unless listed in
/// `not_forwarding`.
fn double(vms: usize, not_forwarding: &[usize]) -> ArmDouble {
    let arm = ArmDouble::start(SUBSCRIPTION);
    arm.add_client_secret(TENANT, CLIENT, SECRET);
    arm.create_route_table(RG, TABLE, "westeurope");
    arm.put_route(
        RG,
        TABLE,
        RouteEntry::appliance("to-firewall", "0.0.0.0/0", "10.240.255.4"),
    );
    for i in 0..vms {
        let nic = format!("vm-{i}-nic");
        arm.create_nic(RG, &nic, &ip(i), !not_forwarding.contains(&i));
        arm.create_vm(RG, &format!("vm-{i}"), &[&nic]);
    }
    // ARM's pace for polls, shortened.
    arm.set_poll_retry_after(Some(1));
    arm
}

fn ip(i: usize) -> String {
    format!("10.240.0.{}", 10 + i)
}

fn provider_id(arm: &ArmDouble, i: usize) -> String {
    format!(
        "azure://{}",
        arm.resource_id(RG, "Microsoft.Compute/virtualMachines", &format!("vm-{i}"))
    )
}

/// `route-controller run` for the double, in watch mode or polling.
fn controller(
    arm: &ArmDouble,
    api: &KubeApiserver,
    dir: &tempdir::TempDir,
    label: &str,
    watch: bool,
) -> ControllerProcess {
    let environment = dir.write(
        "azurestack.json",
        serde_json::json!({
            "name": "AzureStackCloud",
            "resourceManagerEndpoint": arm.endpoint(),
            "activeDirectoryEndpoint": arm.endpoint(),
            "tokenAudience": format!("{}/", arm_double::ARM_AUDIENCE),
        })
        .to_string(),
    );
    // As cloud-provider-azure reads it, with keys of its other controllers.
    let azure_json = dir.write(
        "azure.json",
        serde_json::json!({
            "cloud": "AzureStackCloud",
            "tenantId": TENANT,
            "subscriptionId": SUBSCRIPTION,
            "resourceGroup": RG,
            "location": "westeurope",
            "vnetName": "vnet",
            "subnetName": "nodes",
            "securityGroupName": "nsg",
            "routeTableName": TABLE,
            "aadClientId": CLIENT,
            "aadClientSecret": SECRET,
            "loadBalancerSku": "standard",
            "useInstanceMetadata": true,
        })
        .to_string(),
    );
    let identity = Identity::provision(api, label);
    let mut ctl = Spawn::new()
        .arg("--cloud-provider=azure")
        .arg(format!("--cloud-config={}", azure_json.display()))
        .arg("--cluster-cidr=10.244.0.0/16")
        .arg(format!(
            "--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation={watch}"
        ))
        .args(identity.flags())
        .env(
            "AZURE_ENVIRONMENT_FILEPATH",
            environment.display().to_string(),
        )
        .spawn(label);
    ctl.wait_ready(PATIENCE);
    ctl
}

fn has_route(arm: &ArmDouble, name: &str, prefix: &str, next_hop: &str) -> bool {
    arm.routes(RG, TABLE).iter().any(|r| {
        r.name == name && r.address_prefix == prefix && r.next_hop_ip.as_deref() == Some(next_hop)
    })
}

/// Waits for the node's `RouteCreated`, checking at every look that the table holds
/// the route whenever the node says so: nothing is reported done that is not there.
fn wait_routed_and_never_early(
    ctl: &mut ControllerProcess,
    api: &KubeApiserver,
    arm: &ArmDouble,
    node: &str,
    route: (&str, &str, &str),
) {
    let done = poll_until(PATIENCE, || {
        let shown = network_unavailable(api, node);
        let routed = shown == Some(("False".into(), "RouteCreated".into()));
        if routed && !has_route(arm, route.0, route.1, route.2) {
            return Some(Err(format!(
                "{node} shows RouteCreated but the table lacks {route:?}: {:?}",
                arm.routes(RG, TABLE)
            )));
        }
        routed.then_some(Ok(()))
    });
    match done {
        Some(Ok(())) => {}
        Some(Err(e)) => ctl.fail(&e),
        None => ctl.fail(&format!(
            "{node} never routed: {:?}, table {:?}",
            network_unavailable(api, node),
            arm.routes(RG, TABLE)
        )),
    }
}

/// Start-up with three nodes: their routes in one write (one PUT and its operation's
/// polls), named as cloud-provider-azure names them. Then another writer changes the
/// table behind the controller's back and a node joins: the controller's PUT carries
/// the old ETag, gets a 412, reads the table again and writes once more, keeping the
/// other writer's route. Then two injected 412s in a row fail a batch as a conflict:
/// it is retried and converges, and at no moment does a node show RouteCreated for a
/// route the table lacks. A node leaving loses its route; the foreign routes stay.
#[test]
fn azure_start_up_is_one_write_and_a_second_writers_412_converges_without_false_success() {
    let arm = double(6, &[]);
    let api = KubeApiserver::start_fresh();
    let dir = tempdir::TempDir::new("e2e-azure-412");
    let names: Vec<String> = (0..3).map(|i| format!("node-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        create_node(
            &api,
            name,
            &[&format!("10.244.{i}.0/24")],
            &ip(i),
            &provider_id(&arm, i),
        );
    }
    let mut ctl = controller(&arm, &api, &dir, "e2e-azure-412", true);
    if let Err(e) = wait_for_network_unavailable(&api, &names, "False", "RouteCreated", PATIENCE) {
        ctl.fail(&e);
    }
    for i in 0..3 {
        let (name, prefix) = (
            format!("node-{i}____10244{i}024"),
            format!("10.244.{i}.0/24"),
        );
        assert!(
            has_route(&arm, &name, &prefix, &ip(i)),
            "{:?}",
            arm.routes(RG, TABLE)
        );
    }
    let puts = arm.count("PUT", Kind::Write);
    assert_eq!(puts, 1, "three routes in one write: {:?}", arm.requests());

    // Another writer changes the table between our read and our write.
    arm.put_route(
        RG,
        TABLE,
        RouteEntry::appliance("other-writer", "192.168.7.0/24", "10.240.255.7"),
    );
    create_node(
        &api,
        "node-3",
        &["10.244.3.0/24"],
        &ip(3),
        &provider_id(&arm, 3),
    );
    wait_routed_and_never_early(
        &mut ctl,
        &api,
        &arm,
        "node-3",
        ("node-3____102443024", "10.244.3.0/24", &ip(3)),
    );
    let counts = arm.counts();
    assert!(counts.precondition_failed >= 1, "{counts:?}");
    assert!(has_route(
        &arm,
        "other-writer",
        "192.168.7.0/24",
        "10.240.255.7"
    ));

    // Twice in a row: the batch fails as a conflict, is retried, converges.
    arm.inject(
        "PUT",
        &format!("/routeTables/{TABLE}"),
        2,
        Fault::PreconditionFailed,
    );
    create_node(
        &api,
        "node-4",
        &["10.244.4.0/24"],
        &ip(4),
        &provider_id(&arm, 4),
    );
    wait_routed_and_never_early(
        &mut ctl,
        &api,
        &arm,
        "node-4",
        ("node-4____102444024", "10.244.4.0/24", &ip(4)),
    );
    assert!(arm.counts().precondition_failed >= counts.precondition_failed + 2);

    delete_node(&api, "node-1");
    let gone = poll_until(PATIENCE, || {
        (!arm
            .routes(RG, TABLE)
            .iter()
            .any(|r| r.address_prefix == "10.244.1.0/24"))
        .then_some(())
    });
    if gone.is_none() {
        ctl.fail(&format!(
            "node-1's route stays: {:?}",
            arm.routes(RG, TABLE)
        ));
    }
    let routes = arm.routes(RG, TABLE);
    assert!(routes.iter().any(|r| r.name == "to-firewall"), "{routes:?}");
    assert!(
        routes.iter().any(|r| r.name == "other-writer"),
        "{routes:?}"
    );
    assert_eq!(routes.len(), 6, "{routes:?}");
    // The metrics tell the same story: the 412s ARM answered, and the batch that met
    // two of them in a row counted as a conflict.
    let m = ctl.scrape();
    let refused = m.value(
        "route_controller_cloud_api_requests_total",
        &[
            ("provider", "azure"),
            ("endpoint", "routeTables"),
            ("code", "412"),
        ],
    );
    assert!(refused >= 3.0, "412s counted: {refused}");
    let conflicts = m.value(
        "route_controller_cloud_requests_total",
        &[
            ("provider", "azure"),
            ("operation", "apply"),
            ("outcome", "conflict"),
        ],
    );
    assert!(
        conflicts >= 1.0,
        "batches failed as a conflict: {conflicts}"
    );
    // Every write carried the ETag of a read.
    assert!(
        arm.requests()
            .iter()
            .filter(|r| r.method == "PUT")
            .all(|r| r.if_match.is_some()),
        "{:?}",
        arm.requests()
    );
    ctl.terminate();
}

/// A table filled as cloud-provider-azure fills it (its route names, VirtualAppliance
/// next hops, someone else's route) is adopted with zero writes. A fourth node's NIC
/// has IP forwarding off: it gets `NetworkUnavailable=True/IPForwardingDisabled` and
/// no route; once forwarding is on, the next poll routes it.
#[test]
fn azure_adopts_cloud_provider_azures_table_with_zero_writes_and_refuses_a_nic_without_forwarding()
{
    let arm = double(4, &[3]);
    for i in 0..3 {
        arm.put_route(
            RG,
            TABLE,
            RouteEntry::appliance(
                &format!("node-{i}____10244{i}024"),
                &format!("10.244.{i}.0/24"),
                &ip(i),
            ),
        );
    }
    let api = KubeApiserver::start_fresh();
    let dir = tempdir::TempDir::new("e2e-azure-adopt");
    let names: Vec<String> = (0..4).map(|i| format!("node-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        create_node(
            &api,
            name,
            &[&format!("10.244.{i}.0/24")],
            &ip(i),
            &provider_id(&arm, i),
        );
    }
    let mut ctl = controller(&arm, &api, &dir, "e2e-azure-adopt", false);
    if let Err(e) =
        wait_for_network_unavailable(&api, &names[..3], "False", "RouteCreated", PATIENCE)
    {
        ctl.fail(&e);
    }
    if let Err(e) =
        wait_for_network_unavailable(&api, &names[3..], "True", "IPForwardingDisabled", PATIENCE)
    {
        ctl.fail(&e);
    }
    assert_eq!(
        arm.count("PUT", Kind::Write),
        0,
        "adopted with zero writes: {:?}",
        arm.requests()
    );
    assert!(
        ctl.log().contains("--ip-forwarding true"),
        "the fix is named: {}",
        ctl.log_tail()
    );

    arm.set_ip_forwarding(RG, "vm-3-nic", true);
    wait_routed_and_never_early(
        &mut ctl,
        &api,
        &arm,
        "node-3",
        ("node-3____102443024", "10.244.3.0/24", &ip(3)),
    );
    assert_eq!(
        arm.routes(RG, TABLE).len(),
        5,
        "{:?}",
        arm.routes(RG, TABLE)
    );
    ctl.terminate();
}

/// The route of node `i` as the controller names it (cloud-provider-azure's dual-stack
/// name: the node, `____`, the CIDR without its dots and slash).
fn route_of(i: usize) -> (String, String) {
    (
        format!("node-{i}____10244{i}024"),
        format!("10.244.{i}.0/24"),
    )
}

/// A scale-out of 100 nodes within a minute (one every 0.3 s), then a rolling upgrade
/// of five (a new node joins, its route is made, the old one leaves and its route
/// goes). The double refuses a write while another runs (409) and a stale ETag
/// (412), so "none of either" shows that the controller wrote the table one write at
/// a time and, as its only writer, never against an old read; the joins share their
/// writes (fewer PUTs than nodes).
#[test]
fn azure_a_hundred_nodes_in_a_minute_and_a_rolling_upgrade_write_the_table_one_write_at_a_time() {
    const NODES: usize = 100;
    let arm = double(NODES + 5, &[]);
    let api = KubeApiserver::start_fresh();
    let dir = tempdir::TempDir::new("e2e-azure-scale");
    let mut ctl = controller(&arm, &api, &dir, "e2e-azure-scale", true);
    let names: Vec<String> = (0..NODES).map(|i| format!("node-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        create_node(&api, name, &[&route_of(i).1], &ip(i), &provider_id(&arm, i));
        std::thread::sleep(Duration::from_millis(300));
    }
    if let Err(e) = wait_for_network_unavailable(&api, &names, "False", "RouteCreated", PATIENCE) {
        ctl.fail(&e);
    }
    for i in 0..NODES {
        let (name, prefix) = route_of(i);
        assert!(
            has_route(&arm, &name, &prefix, &ip(i)),
            "node-{i}: {:?}",
            arm.routes(RG, TABLE)
        );
    }
    let counts = arm.counts();
    let puts = arm.count("PUT", Kind::Write);
    eprintln!("{NODES} nodes in 30 s: {puts} PUTs, {counts:?}");
    assert_eq!(counts.busy, 0, "a write while another ran: {counts:?}");
    assert_eq!(
        counts.precondition_failed, 0,
        "a write on an old read: {counts:?}"
    );
    assert!(puts < NODES / 2, "{puts} PUTs for {NODES} nodes");

    for k in 0..5 {
        let new = NODES + k;
        create_node(
            &api,
            &format!("node-{new}"),
            &[&route_of(new).1],
            &ip(new),
            &provider_id(&arm, new),
        );
        let (name, prefix) = route_of(new);
        wait_routed_and_never_early(
            &mut ctl,
            &api,
            &arm,
            &format!("node-{new}"),
            (&name, &prefix, &ip(new)),
        );
        delete_node(&api, &format!("node-{k}"));
        let old = route_of(k).1;
        let gone = poll_until(PATIENCE, || {
            (!arm
                .routes(RG, TABLE)
                .iter()
                .any(|r| r.address_prefix == old))
            .then_some(())
        });
        if gone.is_none() {
            ctl.fail(&format!(
                "node-{k}'s route stays: {:?}",
                arm.routes(RG, TABLE)
            ));
        }
    }
    let counts = arm.counts();
    assert_eq!(counts.busy, 0, "{counts:?}");
    assert_eq!(counts.precondition_failed, 0, "{counts:?}");
    let routes = arm.routes(RG, TABLE);
    assert_eq!(
        routes.len(),
        NODES + 1,
        "ours and the firewall's: {routes:?}"
    );
    assert!(routes.iter().any(|r| r.name == "to-firewall"));
}
