// Command upstream-route-controller runs upstream's real route controller
// (k8s.io/cloud-provider/controllers/route, the version pinned in ../go.mod)
// against a kube-apiserver, with an in-memory cloud that counts its calls, so
// that benchmarks and tests can set it beside route-controller and compare.
//
// The controller is wired as the cloud-controller-manager's
// startRouteController wires it: route.New with the node informer of a shared
// informer factory whose resync period is drawn from
// [--min-resync-period, 2 x --min-resync-period), then go Run(ctx,
// --route-reconciliation-period, metrics). Run creates the event broadcaster
// itself. --watch turns on the feature gate
// CloudControllerManagerWatchBasedRoutesReconciliation (KEP-5237) in the
// global gate that route.New reads, as the CCM's --feature-gates does.
//
// The cloud keeps routes by destination CIDR, as a real route table does. It
// differs from upstream's fake.Cloud on purpose: a create of an existing
// destination succeeds if the target is the same and fails otherwise, a delete
// must match destination and target, and errors are not sticky. Every call
// sleeps --cloud-latency (concurrent calls sleep concurrently) and then takes
// effect.
//
// Stdout carries one line, printed when the node informer has synced:
//
//	READY {"pid":1234}
//
// On SIGTERM/SIGINT, or when stdin closes, the controller is stopped and the
// report is written to --report as JSON, then the process exits 0:
//
//	{"list":N,"create":N,"delete":N,
//	 "routes":{"NODE CIDR":"RFC3339Nano UTC time the route was created",...},
//	 "calls":[{"op":"list|create|delete","at":"RFC3339Nano UTC start"},...],
//	 "current":["NODE CIDR",...]}
//
// "routes" keeps every route ever created (also those deleted later; a route
// created twice keeps its last time); "current" is what the cloud holds at the
// end. Logs go to stderr.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	cloudprovider "k8s.io/cloud-provider"
	"k8s.io/cloud-provider/controllers/route"
	controllersmetrics "k8s.io/component-base/metrics/prometheus/controllers"
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
	clusterCIDR := flag.String("cluster-cidr", "", "one CIDR, or an IPv4 and an IPv6 CIDR separated by a comma (required)")
	clusterName := flag.String("cluster-name", "kubernetes", "passed to every cloud call")
	watch := flag.Bool("watch", false, "turn on the feature gate "+string(features.CloudControllerManagerWatchBasedRoutesReconciliation))
	period := flag.Duration("route-reconciliation-period", 10*time.Second, "poll period (gate off)")
	minResync := flag.Duration("min-resync-period", 12*time.Hour, "the informers resync every [min, 2 x min), drawn once")
	latency := flag.Duration("cloud-latency", 100*time.Millisecond, "how long each cloud call takes")
	report := flag.String("report", "", "where to write the JSON report on shutdown (default: no report)")
	announce := flag.Int("announce-routes", 0, "print ROUTES {\"count\":N} to stdout once the cloud holds N routes (0: never)")
	watchStdin := flag.Bool("exit-on-stdin-close", true, "shut down when stdin reaches EOF")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *clusterCIDR == "" {
		fatalf("--kubeconfig and --cluster-cidr are required")
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

	cloud := newFakeRoutes(*latency)
	cloud.announce = *announce
	// The CCM's ResyncPeriod: MinResyncPeriod x [1, 2).
	resync := time.Duration(float64(*minResync) * (rand.Float64() + 1))
	factory := informers.NewSharedInformerFactory(client, resync)
	nodes := factory.Core().V1().Nodes()
	rc, err := route.New(cloud, client, nodes, *clusterName, cidrs)
	if err != nil {
		fatalf("route.New: %v", err)
	}
	metrics := controllersmetrics.NewControllerManagerMetrics("cloud-controller-manager")
	go rc.Run(ctx, *period, metrics)
	factory.Start(ctx.Done())

	if !cache.WaitForCacheSync(ctx.Done(), nodes.Informer().HasSynced) {
		fatalf("stopped before the node informer synced")
	}
	klog.Infof("upstream route controller running: watch=%t, period %v, informer resync %v, cloud latency %v", *watch, *period, resync, *latency)
	fmt.Printf("READY {\"pid\":%d}\n", os.Getpid())

	<-ctx.Done()
	factory.Shutdown()
	if *report != "" {
		if err := cloud.writeReport(*report); err != nil {
			fatalf("--report=%s: %v", *report, err)
		}
	}
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

// ---- the cloud ----

type call struct {
	Op string    `json:"op"`
	At time.Time `json:"at"`
}

type fakeRoutes struct {
	latency  time.Duration
	announce int // print a line when the cloud first holds this many routes

	mu      sync.Mutex
	routes  map[string]storedRoute // by destination CIDR
	counts  map[string]int
	created map[string]time.Time // "NODE CIDR" -> when
	calls   []call
}

type storedRoute struct {
	clusterName string
	route       cloudprovider.Route
}

var _ cloudprovider.Routes = (*fakeRoutes)(nil)

func newFakeRoutes(latency time.Duration) *fakeRoutes {
	return &fakeRoutes{
		latency: latency,
		routes:  map[string]storedRoute{},
		counts:  map[string]int{},
		created: map[string]time.Time{},
	}
}

// begin counts a call and waits out its latency, as a remote API would;
// a cancelled context ends the wait, as it would end an HTTP request.
func (f *fakeRoutes) begin(ctx context.Context, op string) error {
	f.mu.Lock()
	f.counts[op]++
	f.calls = append(f.calls, call{Op: op, At: time.Now().UTC()})
	f.mu.Unlock()
	timer := time.NewTimer(f.latency)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fakeRoutes) ListRoutes(ctx context.Context, clusterName string) ([]*cloudprovider.Route, error) {
	if err := f.begin(ctx, "list"); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var routes []*cloudprovider.Route
	for _, stored := range f.routes {
		if stored.clusterName == clusterName {
			r := stored.route
			routes = append(routes, &r)
		}
	}
	return routes, nil
}

func (f *fakeRoutes) CreateRoute(ctx context.Context, clusterName string, nameHint string, route *cloudprovider.Route) error {
	if err := f.begin(ctx, "create"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if existing, ok := f.routes[route.DestinationCIDR]; ok {
		if existing.route.TargetNode == route.TargetNode && existing.clusterName == clusterName {
			return nil
		}
		return fmt.Errorf("a route for %s already exists (to %q)", route.DestinationCIDR, existing.route.TargetNode)
	}
	stored := *route
	stored.Name = fmt.Sprintf("%s-%s-%s", clusterName, nameHint, route.DestinationCIDR)
	stored.Blackhole = false
	stored.EnableNodeAddresses = false
	f.routes[route.DestinationCIDR] = storedRoute{clusterName: clusterName, route: stored}
	f.created[routeKey(route.TargetNode, route.DestinationCIDR)] = time.Now().UTC()
	if f.announce > 0 && len(f.routes) == f.announce {
		fmt.Printf("ROUTES {\"count\":%d}\n", f.announce)
	}
	return nil
}

func (f *fakeRoutes) DeleteRoute(ctx context.Context, clusterName string, route *cloudprovider.Route) error {
	if err := f.begin(ctx, "delete"); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	existing, ok := f.routes[route.DestinationCIDR]
	if !ok || existing.clusterName != clusterName || existing.route.TargetNode != route.TargetNode {
		return fmt.Errorf("no route for %s to %q", route.DestinationCIDR, route.TargetNode)
	}
	delete(f.routes, route.DestinationCIDR)
	return nil
}

func routeKey(node types.NodeName, cidr string) string {
	return string(node) + " " + cidr
}

type reportJSON struct {
	List    int                  `json:"list"`
	Create  int                  `json:"create"`
	Delete  int                  `json:"delete"`
	Routes  map[string]time.Time `json:"routes"`
	Calls   []call               `json:"calls"`
	Current []string             `json:"current"`
}

// writeReport writes the report described in the package documentation.
func (f *fakeRoutes) writeReport(path string) error {
	f.mu.Lock()
	r := reportJSON{
		List:    f.counts["list"],
		Create:  f.counts["create"],
		Delete:  f.counts["delete"],
		Routes:  f.created,
		Calls:   f.calls,
		Current: []string{},
	}
	for _, stored := range f.routes {
		r.Current = append(r.Current, routeKey(stored.route.TargetNode, stored.route.DestinationCIDR))
	}
	f.mu.Unlock()
	sort.Strings(r.Current)
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ---- process ----

// shutdownContext is cancelled on SIGTERM/SIGINT or, if watchStdin, when
// stdin reaches EOF. A second signal exits at once.
func shutdownContext(watchStdin bool) (context.Context, context.CancelFunc) {
	// The parent may exit first, taking the read ends of stdout and stderr
	// with it; without this a log line would kill us with SIGPIPE before the
	// report is written.
	signal.Ignore(syscall.SIGPIPE)
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "upstream-route-controller: second signal, exiting now")
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
	fmt.Fprintf(os.Stderr, "upstream-route-controller: "+format+"\n", args...)
	os.Exit(2)
}
