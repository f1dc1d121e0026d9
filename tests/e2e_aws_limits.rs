//! End to end with the AWS provider and a route-table limit (issue 14, item 2):
//! `route-controller run --cloud-provider=aws` against moto's EC2 and a real
//! kube-apiserver, with two zone tables whose limit (`RouteTableRouteLimit` in
//! `--cloud-config`) leaves room for two nodes. A third node waits with
//! `NetworkUnavailable=True` (reason `RouteTableFull`) and gets its routes, in both
//! tables, once a node goes. No cloud call fails and none is sent that cannot fit.

#[path = "support/controller_process.rs"]
mod controller_process;
#[path = "support/e2e_cluster.rs"]
mod e2e_cluster;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/moto.rs"]
mod moto;

use std::time::Duration;

use controller_process::{Spawn, sum};
use e2e_cluster::{Identity, create_node, delete_node, wait_for_network_unavailable};
use kube_apiserver::KubeApiserver;
use moto::Moto;

const PATIENCE: Duration = Duration::from_secs(30);
const CLUSTER_NAME: &str = "e2e-aws-limits";

/// Guards the hold with several tables: without it the third node's CreateRoute goes
/// out (moto accepts it: the table would then hold more than its limit, which real
/// EC2 refuses), so the third node's route shows while the other two are there.
#[test]
fn aws_tables_at_their_limit_hold_the_third_node_until_a_node_goes() {
    let (moto, api) = std::thread::scope(|s| {
        let moto = s.spawn(Moto::start);
        let api = KubeApiserver::start_fresh();
        (moto.join().expect("moto starts"), api)
    });
    let ec2 = moto.ec2();
    let network = moto::network(&ec2);
    let tag = format!("kubernetes.io/cluster/{CLUSTER_NAME}");
    let tables = [
        ec2.create_route_table(&network.vpc, &[(tag.as_str(), "owned")]),
        ec2.create_route_table(&network.vpc, &[(tag.as_str(), "shared")]),
    ];
    let local = ec2.routes(&tables[0]).len();
    let limit = local + 2;
    let instances: Vec<_> = (0..3)
        .map(|_| ec2.run_instance(&network.ami, &network.subnet))
        .collect();
    let identity = Identity::provision(&api, "e2e-aws-limits");
    let config = std::env::temp_dir().join(format!("e2e-aws-limits-{}.conf", std::process::id()));
    std::fs::write(
        &config,
        format!("[Global]\nRouteTableRouteLimit = {limit}\n"),
    )
    .expect("write the cloud config");

    let mut ctl = Spawn::new()
        .arg("--cloud-provider=aws")
        .arg(format!("--cloud-config={}", config.display()))
        .arg(format!("--cluster-name={CLUSTER_NAME}"))
        .arg("--cluster-cidr=10.244.0.0/16")
        .arg("--feature-gates=CloudControllerManagerWatchBasedRoutesReconciliation=true")
        .args(identity.flags())
        .env("AWS_ACCESS_KEY_ID", moto::TEST_KEY_ID)
        .env("AWS_SECRET_ACCESS_KEY", moto::TEST_SECRET)
        .env("AWS_REGION", moto::REGION)
        .env("AWS_ENDPOINT_URL_EC2", moto.url())
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .spawn("aws-limits");
    ctl.wait_ready(PATIENCE);

    let names: Vec<String> = instances
        .iter()
        .map(|i| i.private_dns_name.clone())
        .collect();
    let cidr = |i: usize| format!("10.244.{}.0/24", 20 + i);
    let routed = |i: usize| {
        tables.iter().all(|t| {
            ec2.routes(t).iter().any(|(d, target, _)| {
                *d == cidr(i) && target.as_deref() == Some(instances[i].id.as_str())
            })
        })
    };
    let wait =
        |ctl: &mut controller_process::ControllerProcess, i: usize, status: &str, reason: &str| {
            if let Err(e) = wait_for_network_unavailable(
                &api,
                std::slice::from_ref(&names[i]),
                status,
                reason,
                PATIENCE,
            ) {
                ctl.fail(&e);
            }
        };
    for i in 0..2 {
        create_node(
            &api,
            &names[i],
            &[&cidr(i)],
            "10.0.1.10",
            &instances[i].provider_id(),
        );
        wait(&mut ctl, i, "False", "RouteCreated");
    }
    create_node(
        &api,
        &names[2],
        &[&cidr(2)],
        "10.0.1.10",
        &instances[2].provider_id(),
    );
    wait(&mut ctl, 2, "True", "RouteTableFull");
    assert!(!routed(2) && routed(0) && routed(1));
    for t in &tables {
        assert_eq!(ec2.routes(t).len(), limit, "{:?}", ec2.routes(t));
    }
    let m = ctl.scrape();
    assert_eq!(
        m.value(
            "route_controller_route_table_limit",
            &[("table", tables[1].as_str())]
        ),
        limit as f64
    );
    assert_eq!(
        m.value(
            "route_controller_route_table_routes",
            &[("table", tables[1].as_str())]
        ),
        limit as f64
    );

    delete_node(&api, &names[0]);
    wait(&mut ctl, 2, "False", "RouteCreated");
    assert!(routed(2) && !routed(0));
    let m = ctl.scrape();
    let all = sum(&m, "route_controller_cloud_requests_total", &[]);
    let ok = sum(
        &m,
        "route_controller_cloud_requests_total",
        &[("outcome", "success")],
    );
    assert_eq!(all, ok, "no cloud call failed");
    assert_eq!(
        m.value(
            "route_controller_cloud_requests_total",
            &[
                ("provider", "aws"),
                ("operation", "create"),
                ("outcome", "success")
            ]
        ),
        3.0,
        "one create per node, none refused"
    );
    ctl.terminate();
    let _ = std::fs::remove_file(&config);
}
