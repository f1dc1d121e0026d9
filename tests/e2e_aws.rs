//! End to end with the AWS provider: `route-controller run --cloud-provider=aws`
//! against moto's EC2 and a real kube-apiserver. The route tables (two zones' tables,
//! one per tag style) are found by their cluster tags; a node's route targets the
//! instance named by its providerID, in every table.

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
use e2e_cluster::{Identity, create_node, delete_node, poll_until, wait_for_network_unavailable};
use kube_apiserver::KubeApiserver;
use moto::Moto;

const PATIENCE: Duration = Duration::from_secs(30);
const CLUSTER_NAME: &str = "e2e-aws";

#[test]
fn aws_node_gets_a_route_to_its_instance_in_both_tagged_tables_and_loses_it_when_deleted() {
    let (moto, api) = std::thread::scope(|s| {
        let moto = s.spawn(Moto::start);
        let api = KubeApiserver::start_fresh();
        (moto.join().expect("moto starts"), api)
    });
    let ec2 = moto.ec2();
    let network = moto::network(&ec2);
    let tag = format!("kubernetes.io/cluster/{CLUSTER_NAME}");
    let zone_a = ec2.create_route_table(&network.vpc, &[(tag.as_str(), "owned")]);
    let zone_b = ec2.create_route_table(&network.vpc, &[("KubernetesCluster", CLUSTER_NAME)]);
    let tables = [zone_a, zone_b];
    // A table of another cluster in the same VPC: never touched.
    let other = ec2.create_route_table(&network.vpc, &[("kubernetes.io/cluster/other", "owned")]);
    let instance = ec2.run_instance(&network.ami, &network.subnet);
    let identity = Identity::provision(&api, "e2e-aws");

    let mut ctl = Spawn::new()
        .arg("--cloud-provider=aws")
        .arg(format!("--cluster-name={CLUSTER_NAME}"))
        .arg("--cluster-cidr=10.244.0.0/16")
        .arg("--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true")
        .args(identity.flags())
        .env("AWS_ACCESS_KEY_ID", moto::TEST_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", moto::TEST_SECRET)
        .env("AWS_REGION", moto::REGION)
        .env("AWS_ENDPOINT_URL_EC2", moto.url())
        // The route-table limit is read from moto's Service Quotas.
        .env("AWS_ENDPOINT_URL_SERVICE_QUOTAS", moto.url())
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .spawn("aws");
    ctl.wait_ready(PATIENCE);

    let name = instance.private_dns_name.clone();
    let cidr = "10.244.7.0/24";
    create_node(&api, &name, &[cidr], "10.0.1.10", &instance.provider_id());
    let routed_in = |table: &str| {
        ec2.routes(table).iter().any(|(d, target, state)| {
            d == cidr && target.as_deref() == Some(instance.id.as_str()) && state == "active"
        })
    };
    let routed = poll_until(PATIENCE, || {
        tables.iter().all(|t| routed_in(t)).then_some(())
    });
    if routed.is_none() {
        let seen: Vec<_> = tables.iter().map(|t| (t, ec2.routes(t))).collect();
        ctl.fail(&format!(
            "no route {cidr} to {} in every table: {seen:?}",
            instance.id
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
    assert!(
        !ec2.source_dest_check(&instance.id),
        "the instance may forward pod traffic"
    );

    delete_node(&api, &name);
    let holds = |table: &str| ec2.routes(table).iter().any(|(d, _, _)| d == cidr);
    let gone = poll_until(PATIENCE, || {
        (!tables.iter().any(|t| holds(t))).then_some(())
    });
    if gone.is_none() {
        let seen: Vec<_> = tables.iter().map(|t| (t, ec2.routes(t))).collect();
        ctl.fail(&format!(
            "the deleted node's route is still there: {seen:?}"
        ));
    }
    // The VPC's local route is left alone, and so is the other cluster's table.
    for table in &tables {
        let remaining = ec2.routes(table);
        assert!(
            remaining.iter().any(|(d, _, _)| d == "10.0.0.0/16"),
            "{remaining:?}"
        );
    }
    assert_eq!(ec2.routes(&other).len(), 1, "{:?}", ec2.routes(&other));

    let m = ctl.scrape();
    let calls = |op: &str| {
        m.value(
            "route_controller_cloud_requests_total",
            &[
                ("provider", "aws"),
                ("operation", op),
                ("outcome", "success"),
            ],
        )
    };
    // One create and one delete from the controller's side, each covering both tables.
    assert_eq!(calls("create"), 1.0);
    assert_eq!(calls("delete"), 1.0);
    // With no RouteTableRouteLimit, the account's "Routes per route table": moto holds
    // it at 50 (AWS's default before June 2025), not the fallback of 500.
    assert_eq!(
        m.value(
            "route_controller_route_table_limit",
            &[("table", tables[0].as_str())]
        ),
        50.0
    );
    ctl.terminate();
}
