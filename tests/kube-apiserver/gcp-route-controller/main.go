// Command gcp-route-controller runs upstream's real route controller
// (k8s.io/cloud-provider/controllers/route, the version pinned in ../go.mod) with
// cloud-provider-gcp's real Routes (k8s.io/cloud-provider-gcp/providers/gce
// v0.28.2, the "gce" provider the GCP cloud-controller-manager registers), against
// a kube-apiserver and a Compute API endpoint (the GCE double of
// tests/support/gce_double.rs, in the benchmarks and tests/e2e_gce_peer.rs). It is
// the peer that route-controller's GCE provider is measured against in Compute
// API requests.
//
// cloud-provider-gcp v0.28.2 builds with the pinned graph (k8s.io/* v0.37.2,
// google.golang.org/api v0.270.0, its k8s-cloud-provider v1.25.0), so it lives in
// this module and shares its route controller; only its provider is v0.28.2.
//
// The wiring is the cloud-controller-manager's, as in ../aws-route-controller:
// the provider is built from --cloud-config (gce.conf) by
// cloudprovider.InitCloudProvider, Initialize gets a client builder, SetInformers
// gets the shared informer factory, then route.New and go Run(ctx,
// --route-reconciliation-period, metrics), with the factory's resync drawn from
// [--min-resync-period, 2 x --min-resync-period). --watch turns on the feature
// gate CloudControllerManagerWatchBasedRoutesReconciliation.
//
// The endpoints come from gce.conf, e.g.
//
//	[global]
//	project-id = peers-project
//	local-zone = europe-west1-b
//	network-name = k8s
//	subnetwork-name = nodes
//	multizone = true
//	api-endpoint = http://127.0.0.1:PORT/compute/v1/
//	token-url = http://127.0.0.1:PORT/alt-token
//	token-body = {"audience": "compute"}
//
// (project-id and local-zone together make the provider skip the metadata
// server's project and zone, network-name its network; multizone makes it list
// the region's zones with zones.list once at start and search them in order with
// instances.get for every route it creates). The token-url is POSTed with the
// metadata server's token (golang.org/x/oauth2/google.ComputeTokenSource), so
// GCE_METADATA_HOST must point at a metadata server too.
//
// Stdout carries one line, printed when the node informer has synced:
//
//	READY {"pid":1234}
//
// It stops on SIGTERM/SIGINT or when stdin closes, and exits 0. Logs go to stderr.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider-gcp/providers/gce"
	"k8s.io/cloud-provider/controllers/route"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
	"k8s.io/controller-manager/pkg/clientbuilder"
	"k8s.io/controller-manager/pkg/features"
	// Registers the controller-manager's gates (the watch-based routes gate
	// among them) into utilfeature.DefaultMutableFeatureGate, as the CCM's
	// options package does.
	_ "k8s.io/controller-manager/pkg/features/register"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the API server (required)")
	cloudConfig := flag.String("cloud-config", "", "cloud-provider-gcp's gce.conf (required)")
	clusterCIDR := flag.String("cluster-cidr", "", "one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma (required)")
	clusterName := flag.String("cluster-name", "kubernetes", "passed to every cloud call")
	watch := flag.Bool("watch", false, "turn on the feature gate "+string(features.CloudControllerManagerWatchBasedRoutesReconciliation))
	period := flag.Duration("route-reconciliation-period", 10*time.Second, "poll period (gate off)")
	minResync := flag.Duration("min-resync-period", 12*time.Hour, "the informers resync every [min, 2 x min), drawn once")
	watchStdin := flag.Bool("exit-on-stdin-close", true, "shut down when stdin reaches EOF")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *clusterCIDR == "" || *cloudConfig == "" {
		fatalf("--kubeconfig, --cloud-config and --cluster-cidr are required")
	}
	if flag.NArg() != 0 {
		fatalf("unexpected arguments: %q", flag.Args())
	}

	gate := fmt.Sprintf("%s=%t", features.CloudControllerManagerWatchBasedRoutesReconciliation, *watch)
	if err := utilfeature.DefaultMutableFeatureGate.Set(gate); err != nil {
		fatalf("--feature-gates=%s: %v", gate, err)
	}
	cidrs, err := clusterCIDRs(*clusterCIDR)
	if err != nil {
		fatalf("--cluster-cidr=%s: %v", *clusterCIDR, err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fatalf("--kubeconfig=%s: %v", *kubeconfig, err)
	}
	// The CCM's --kube-api-qps, --kube-api-burst and --kube-api-content-type defaults.
	config.QPS, config.Burst = 20, 30
	config.ContentType = "application/vnd.kubernetes.protobuf"
	config.UserAgent = "cloud-controller-manager/route-controller"
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fatalf("client for %s: %v", config.Host, err)
	}

	ctx, stop := shutdownContext(*watchStdin)
	defer stop()

	cloud, err := cloudprovider.InitCloudProvider(gce.ProviderName, *cloudConfig)
	if err != nil || cloud == nil {
		fatalf("--cloud-config=%s: the gce provider did not start: %v", *cloudConfig, err)
	}
	cloud.Initialize(clientbuilder.SimpleControllerClientBuilder{ClientConfig: config}, ctx.Done())
	routes, ok := cloud.Routes()
	if !ok {
		fatalf("the gce provider has no Routes")
	}

	// The CCM's ResyncPeriod: MinResyncPeriod x [1, 2).
	resync := time.Duration(float64(*minResync) * (rand.Float64() + 1))
	factory := informers.NewSharedInformerFactory(client, resync)
	if user, ok := cloud.(cloudprovider.InformerUser); ok {
		user.SetInformers(factory)
	}
	nodes := factory.Core().V1().Nodes()
	rc, err := route.New(routes, client, nodes, *clusterName, cidrs)
	if err != nil {
		fatalf("route.New: %v", err)
	}
	metrics := controllersmetrics.NewControllerManagerMetrics("cloud-controller-manager")
	go rc.Run(ctx, *period, metrics)
	factory.Start(ctx.Done())

	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced) {
		fatalf("stopped before the node informer synced")
	}
	klog.Infof("upstream route controller with cloud-provider-gcp running: watch=%t, period %v, informer resync %v", *watch, *period, resync)
	fmt.Printf("READY {\"pid\":%d}\n", os.Getpid())

	<-ctx.Done()
	factory.Shutdown()
}

// clusterCIDRs parses --cluster-cidr as the CCM's processCIDRs does.
func clusterCIDRs(value string) ([]*net.IPNet, error) {
	cidrs, err := netutils.ParseCIDRs(strings.Split(strings.TrimSpace(value), ","))
	if err != nil {
		return nil, err
	}
	if len(cidrs) > 2 {
		return nil, fmt.Errorf("at most 2 CIDRs, got %d", len(cidrs))
	}
	if dual, _ := netutils.IsDualStackCIDRs(cidrs); len(cidrs) == 2 && !dual {
		return nil, fmt.Errorf("two CIDRs must be one IPv4 and one IPv6")
	}
	return cidrs, nil
}

// shutdownContext is cancelled on SIGTERM/SIGINT or, with watchStdin, when stdin
// closes (the parent went away).
func shutdownContext(watchStdin bool) (context.Context, context.CancelFunc) {
	// The parent may exit first, taking the read ends of stdout and stderr
	// with it; without this a log line would kill us with SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "gcp-route-controller: second signal, exiting now")
		os.Exit(1)
	}()
	if watchStdin {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			cancel()
		}()
	}
	return ctx, cancel
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "gcp-route-controller: "+format+"\n", args...)
	os.Exit(2)
}
