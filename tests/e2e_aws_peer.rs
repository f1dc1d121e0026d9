//! Keeps the AWS peer of `cargo bench -- peers` building and working: upstream's route
//! controller with cloud-provider-aws's real `Routes`
//! (`tests/kube-apiserver/aws-route-controller`) against moto behind the counting
//! proxy and a real kube-apiserver, briefly, in poll mode with the period shortened.
//! It guards the wiring the benchmark depends on (the cloud config pointing EC2 at the
//! proxy, the node names and providerIDs cloud-provider-aws resolves, the proxy's
//! count by `Action`): if any of them breaks, the peer creates no route or the proxy
//! counts nothing, and this fails.

#[path = "support/aws_peer.rs"]
mod aws_peer;
#[path = "support/kube_apiserver.rs"]
mod kube_apiserver;
#[path = "support/moto.rs"]
mod moto;

use std::time::Duration;

use aws_peer::{Cluster, Ec2Proxy, Peer, Script, Timing, run_peer};
use kube_apiserver::{KubeApiserver, scratch_dir};
use moto::Moto;

#[test]
fn upstream_with_cloud_provider_aws_routes_nodes_in_moto_through_the_counting_proxy() {
    let (moto, api) = std::thread::scope(|s| {
        let moto = s.spawn(Moto::start);
        let api = KubeApiserver::start_fresh();
        (moto.join().expect("moto starts"), api)
    });
    let mut cluster = Cluster::create(&moto, 3);
    let proxy = Ec2Proxy::start(moto.url());
    let script = Script {
        nodes: 2,
        replaced: 1,
        spacing: Duration::from_secs(1),
        replace_after: Duration::from_millis(500),
        settle: Duration::from_secs(3),
        idle: Duration::ZERO,
    };
    let run = run_peer(
        Peer::Upstream { watch: false },
        &api,
        &mut cluster,
        &proxy,
        script,
        Timing::compressed(10),
        &scratch_dir("aws-peer"),
    );
    eprintln!(
        "upstream+aws: start-up {:.2} s, {}; replacement {}; node→route {:?}; {:.2} CPU s, {:.1} MiB",
        run.startup.as_secs_f64(),
        aws_peer::by_action(&run.startup_requests),
        aws_peer::by_action(&run.rolling_requests),
        run.node_to_route,
        run.cpu_seconds,
        run.peak_rss_mib
    );
    assert_eq!(
        run.startup_requests.get("CreateRoute"),
        Some(&2),
        "{run:#?}"
    );
    // cloud-provider-aws turns off source/destination checks before each route.
    assert!(
        run.startup_requests.get("ModifyInstanceAttribute") >= Some(&2),
        "{run:#?}"
    );
    assert!(
        run.startup_requests.get("DescribeRouteTables") >= Some(&1),
        "{run:#?}"
    );
    assert_eq!(run.missing, 0, "{run:#?}");
    assert_eq!(run.node_to_route.len(), 1, "{run:#?}");
    // The replaced node's route is deleted and the new one's created.
    let routes = cluster.routes();
    let destinations: Vec<&str> = routes.iter().map(|(d, _)| d.as_str()).collect();
    assert_eq!(destinations.len(), 2, "{routes:?}");
    assert!(
        destinations.contains(&"10.244.1.0/24") && destinations.contains(&"10.244.2.0/24"),
        "{routes:?}"
    );
    assert!(run.cpu_seconds > 0.0 && run.peak_rss_mib > 1.0, "{run:#?}");
}
