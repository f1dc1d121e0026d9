// Command kube-apiserver-harness (the Kubernetes 1.31 copy; see
// ../kube-apiserver/main.go for the current one) runs a real etcd (embedded) and a real
// kube-apiserver in one process on loopback, for the route controller's
// end-to-end tests.
//
// It generates a CA, a serving certificate, a service-account signing key and
// two static bearer tokens (admin in system:masters, and an unprivileged
// controller user) in --data-dir, writes a kubeconfig per identity, and prints
// exactly one line to stdout once /readyz answers 200:
//
//	READY {"server":"https://127.0.0.1:PORT", ...}
//
// Everything else goes to stderr or to log files in the data directory. The
// process shuts down cleanly (apiserver stopped, etcd closed) when stdin
// closes or on SIGTERM/SIGINT, and can be started again on the same data
// directory: same CA, keys, tokens, port and stored objects.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/wal"

	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	utilversion "k8s.io/apiserver/pkg/util/version"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
)

const (
	serviceCIDR = "10.96.0.0/16"
	issuer      = "https://kubernetes.default.svc.cluster.local"
)

var serviceIP = net.ParseIP("10.96.0.1")

type readyInfo struct {
	Server               string `json:"server"`
	Port                 int    `json:"port"`
	AdminKubeconfig      string `json:"adminKubeconfig"`
	ControllerKubeconfig string `json:"controllerKubeconfig"`
	CAFile               string `json:"caFile"`
	AdminToken           string `json:"adminToken"`
	ControllerToken      string `json:"controllerToken"`
	ControllerUser       string `json:"controllerUser"`
	DataDir              string `json:"dataDir"`
	EtcdURL              string `json:"etcdURL"`
	Pid                  int    `json:"pid"`
}

func main() {
	// Keep the real stdout for the READY line only; anything else in the
	// process that writes to stdout (fd 1 or os.Stdout) lands on stderr.
	readyOut, err := redirectStdout()
	if err != nil {
		fatalf("redirect stdout: %v", err)
	}

	dataDir := flag.String("data-dir", "", "directory for etcd data, certificates, keys, tokens and logs (required)")
	port := flag.Int("port", -1, "apiserver secure port; 0 picks a free one; default: the port remembered in --data-dir, else a free one")
	kubeconfigDir := flag.String("kubeconfig-dir", "", "where to write admin.kubeconfig and controller.kubeconfig (default: --data-dir)")
	verbosity := flag.Int("v", 0, "kube-apiserver log verbosity")
	logToStderr := flag.Bool("log-to-stderr", false, "send kube-apiserver and etcd logs to stderr instead of files in --data-dir")
	watchStdin := flag.Bool("exit-on-stdin-close", true, "shut down when stdin reaches EOF")
	readyTimeout := flag.Duration("ready-timeout", 2*time.Minute, "give up if not ready after this long")
	removeOnExit := flag.Bool("remove-data-dir-on-exit", false, "delete --data-dir after shutting down (for throwaway instances)")
	flag.Parse()
	if *dataDir == "" {
		fatalf("--data-dir is required")
	}
	if flag.NArg() != 0 {
		fatalf("unexpected arguments: %q", flag.Args())
	}

	dir, err := filepath.Abs(*dataDir)
	if err != nil {
		fatalf("data dir: %v", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		fatalf("data dir: %v", err)
	}
	kcDir := dir
	if *kubeconfigDir != "" {
		if kcDir, err = filepath.Abs(*kubeconfigDir); err != nil {
			fatalf("kubeconfig dir: %v", err)
		}
		if err := os.MkdirAll(kcDir, 0o700); err != nil {
			fatalf("kubeconfig dir: %v", err)
		}
	}

	ctx, stop := shutdownContext(*watchStdin)
	defer stop()

	err = run(ctx, readyOut, dir, kcDir, *port, *verbosity, *logToStderr, *readyTimeout)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube-apiserver harness: %v\n", err)
		if !*logToStderr {
			dumpTail(filepath.Join(dir, "kube-apiserver.log"), 40)
			dumpTail(filepath.Join(dir, "etcd.log"), 20)
		}
	}
	if *removeOnExit {
		if rmErr := os.RemoveAll(dir); rmErr != nil {
			fmt.Fprintf(os.Stderr, "kube-apiserver harness: remove data dir: %v\n", rmErr)
		}
	}
	if err != nil {
		os.Exit(1)
	}
}

func run(ctx context.Context, readyOut *os.File, dir, kcDir string, port, verbosity int, logToStderr bool, readyTimeout time.Duration) error {
	start := time.Now()
	mat, err := ensureMaterial(dir)
	if err != nil {
		return fmt.Errorf("generate certificates and tokens: %w", err)
	}

	apiLog, etcdLogOutput := io.Writer(os.Stderr), "stderr"
	if !logToStderr {
		f, err := os.OpenFile(filepath.Join(dir, "kube-apiserver.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Fprintf(f, "---- harness start %s pid %d\n", time.Now().Format(time.RFC3339), os.Getpid())
		apiLog, etcdLogOutput = f, filepath.Join(dir, "etcd.log")
	}

	// Secure port: listen first and hand the listener to the apiserver, so
	// no other process can take the port in between.
	ln, err := listen(dir, port)
	if err != nil {
		return err
	}
	boundPort := ln.Addr().(*net.TCPAddr).Port
	if err := writeFileAtomic(filepath.Join(dir, "port"), []byte(strconv.Itoa(boundPort)+"\n"), 0o644); err != nil {
		return err
	}

	etcd, etcdURL, err := startEtcd(ctx, dir, etcdLogOutput)
	if err != nil {
		ln.Close()
		return fmt.Errorf("etcd: %w", err)
	}
	defer func() {
		etcd.Close()
		<-etcd.Server.StopNotify()
	}()

	apiDone := make(chan error, 1)
	apiCtx, apiCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer apiCancel()
	if err := startAPIServer(apiCtx, apiDone, ln, mat, etcdURL, verbosity, apiLog); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	// From here on the apiserver owns the listener and must be stopped
	// before etcd is closed (deferred above, so it runs after this).
	stopAPI := func() error {
		apiCancel()
		select {
		case err := <-apiDone:
			return err
		case <-time.After(60 * time.Second):
			return errors.New("kube-apiserver did not stop within 60s")
		}
	}

	server := fmt.Sprintf("https://127.0.0.1:%d", boundPort)
	if err := waitReady(ctx, server, mat, apiDone, readyTimeout); err != nil {
		if ctx.Err() != nil {
			return stopAPI()
		}
		_ = stopAPI()
		return err
	}

	info := readyInfo{
		Server:               server,
		Port:                 boundPort,
		AdminKubeconfig:      filepath.Join(kcDir, "admin.kubeconfig"),
		ControllerKubeconfig: filepath.Join(kcDir, "controller.kubeconfig"),
		CAFile:               mat.caCertFile,
		AdminToken:           mat.adminToken,
		ControllerToken:      mat.controllerTok,
		ControllerUser:       controllerUser,
		DataDir:              dir,
		EtcdURL:              etcdURL,
		Pid:                  os.Getpid(),
	}
	if err := writeKubeconfig(info.AdminKubeconfig, server, mat.caCertPEM, adminUser, mat.adminToken); err != nil {
		return err
	}
	if err := writeKubeconfig(info.ControllerKubeconfig, server, mat.caCertPEM, controllerUser, mat.controllerTok); err != nil {
		return err
	}
	line, err := json.Marshal(info)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "kube-apiserver harness: ready at %s after %.1fs\n", server, time.Since(start).Seconds())
	if _, err := fmt.Fprintf(readyOut, "READY %s\n", line); err != nil {
		return fmt.Errorf("write READY line: %w", err)
	}

	select {
	case <-ctx.Done():
		fmt.Fprintln(os.Stderr, "kube-apiserver harness: shutting down")
		return stopAPI()
	case err := <-apiDone:
		if err == nil {
			err = errors.New("stopped unexpectedly")
		}
		return fmt.Errorf("kube-apiserver: %w", err)
	}
}

// listen binds the apiserver's port on 127.0.0.1: the explicit --port, else
// the port remembered in dir, else a free one. A remembered or explicit port
// may still be held for a moment by a previous instance, so retry briefly.
func listen(dir string, port int) (net.Listener, error) {
	if port < 0 {
		port = 0
		if b, err := os.ReadFile(filepath.Join(dir, "port")); err == nil {
			if p, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && p > 0 {
				port = p
			}
		}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	deadline := time.Now().Add(15 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil || port == 0 || time.Now().After(deadline) {
			if err != nil {
				return nil, fmt.Errorf("listen on %s: %w", addr, err)
			}
			return ln, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// startEtcd starts a single-member etcd with its data in dir/etcd, on free
// loopback ports.
func startEtcd(ctx context.Context, dir, logOutput string) (*embed.Etcd, string, error) {
	clientPort, err := freePort()
	if err != nil {
		return nil, "", err
	}
	peerPort, err := freePort()
	if err != nil {
		return nil, "", err
	}
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}

	cfg := embed.NewConfig()
	cfg.Name = "harness"
	cfg.Dir = filepath.Join(dir, "etcd")
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{logOutput}
	// Writes still reach the OS on every commit, so a killed process loses
	// nothing; only a machine crash could. That is fine for a test cluster
	// and saves an fsync per write.
	cfg.UnsafeNoFsync = true
	// Keep the database small for long test runs.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "5m"

	// etcd preallocates each WAL segment (and the next one) at 64 MB; a test
	// cluster writes far less, so keep the disk footprint small.
	wal.SegmentSizeBytes = 8 * 1000 * 1000

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, clientURL.String(), nil
	case err := <-e.Err():
		e.Close()
		return nil, "", err
	case <-time.After(60 * time.Second):
		e.Close()
		return nil, "", errors.New("not ready after 60s")
	case <-ctx.Done():
		e.Close()
		return nil, "", ctx.Err()
	}
}

// startAPIServer configures kube-apiserver the way its command line would and
// runs it in a goroutine; its result is sent to done.
func startAPIServer(ctx context.Context, done chan<- error, ln net.Listener, m *material, etcdURL string, verbosity int, logOut io.Writer) error {
	// 1.31 registers the feature gate in a process-wide registry (later
	// releases hold it in the options).
	_, featureGate := utilversion.DefaultComponentGlobalsRegistry.ComponentGlobalsOrRegister(
		utilversion.DefaultKubeComponent, utilversion.DefaultBuildEffectiveVersion(), utilfeature.DefaultMutableFeatureGate)
	s := options.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--tls-cert-file=" + m.serverCertFile,
		"--tls-private-key-file=" + m.serverKeyFile,
		"--client-ca-file=" + m.caCertFile,
		"--token-auth-file=" + m.tokenFile,
		"--authorization-mode=Node,RBAC",
		"--anonymous-auth=false",
		"--service-account-issuer=" + issuer,
		"--service-account-key-file=" + m.saPubFile,
		"--service-account-signing-key-file=" + m.saKeyFile,
		"--api-audiences=" + issuer,
		"--service-cluster-ip-range=" + serviceCIDR,
		// The lease reconciler would publish 127.0.0.1 as the endpoint of the
		// "kubernetes" Service, which endpoint validation rejects.
		"--endpoint-reconciler-type=none",
		// No kube-controller-manager runs, so no "default" ServiceAccount is
		// ever created in new namespaces: ServiceAccount admission would
		// reject every Pod.
		"--disable-admission-plugins=ServiceAccount",
		"--profiling=false",
		// A stop must end open watches within seconds, as clients of a
		// restarting apiserver see it behind a load balancer. By default the
		// HTTP server's shutdown waits for them up to --request-timeout (60 s),
		// listening no more, so a watcher neither gets an event nor notices
		// the outage for a minute. In this mode the server drains the short
		// requests (answering new ones 429 with Retry-After), then closes
		// every connection within 2 s.
		"--shutdown-send-retry-after=true",
		"--v=" + strconv.Itoa(verbosity),
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	s.SecureServing.Listener = ln
	s.SecureServing.BindPort = port

	if err := utilversion.DefaultComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	rest.SetDefaultWarningHandler(rest.NoWarnings{})
	if err := logsapi.ValidateAndApplyWithOptions(s.Logs, &logsapi.LoggingOptions{ErrorStream: logOut, InfoStream: logOut}, featureGate); err != nil {
		return err
	}

	completed, err := s.Complete()
	if err != nil {
		return err
	}
	if errs := completed.Validate(); len(errs) != 0 {
		return utilerrors.NewAggregate(errs)
	}
	featureGate.AddMetrics()

	config, err := app.NewConfig(completed)
	if err != nil {
		return err
	}
	cc, err := config.Complete()
	if err != nil {
		return err
	}
	server, err := app.CreateServerChain(cc)
	if err != nil {
		return err
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return err
	}
	go func() { done <- prepared.Run(ctx) }()
	return nil
}

// waitReady polls /readyz with the admin token until it answers 200, then
// waits for the "default" namespace, which the apiserver creates itself.
func waitReady(ctx context.Context, server string, m *material, apiDone <-chan error, timeout time.Duration) error {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(m.caCertPEM) {
		return errors.New("cannot parse generated CA")
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Proxy: nil},
	}
	defer client.CloseIdleConnections()
	get := func(path string) (int, string) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, server+path, nil)
		req.Header.Set("Authorization", "Bearer "+m.adminToken)
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, string(body)
	}
	deadline := time.After(timeout)
	ticker := time.NewTicker(100 * time.Millisecond)
	defer ticker.Stop()
	var last string
	for _, path := range []string{"/readyz", "/api/v1/namespaces/default"} {
		for {
			code, body := get(path)
			if code == http.StatusOK {
				break
			}
			last = fmt.Sprintf("GET %s: %d %s", path, code, body)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case err := <-apiDone:
				return fmt.Errorf("kube-apiserver stopped before it was ready: %v", err)
			case <-deadline:
				return fmt.Errorf("not ready after %s; last answer: %s", timeout, last)
			case <-ticker.C:
			}
		}
	}
	return nil
}

func writeKubeconfig(path, server string, caPEM []byte, user, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["harness"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "harness", AuthInfo: user}
	cfg.CurrentContext = user
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}

// shutdownContext is cancelled on SIGTERM/SIGINT or, if watchStdin, when
// stdin reaches EOF. A second signal exits at once.
func shutdownContext(watchStdin bool) (context.Context, context.CancelFunc) {
	// The parent usually exits first (that is what closes stdin), taking the
	// read ends of our stdout and stderr with it. Without this, Go would kill
	// the process with SIGPIPE at its next log line, before a clean shutdown.
	signal.Ignore(syscall.SIGPIPE)

	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-sigs
		cancel()
		<-sigs
		fmt.Fprintln(os.Stderr, "kube-apiserver harness: second signal, exiting now")
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

// redirectStdout returns a file for the original stdout and points fd 1 and
// os.Stdout at stderr.
func redirectStdout() (*os.File, error) {
	fd, err := syscall.Dup(1)
	if err != nil {
		return nil, err
	}
	syscall.CloseOnExec(fd)
	if err := syscall.Dup3(2, 1, 0); err != nil {
		return nil, err
	}
	os.Stdout = os.Stderr
	return os.NewFile(uintptr(fd), "ready-stdout"), nil
}

func dumpTail(path string, lines int) {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return
	}
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	fmt.Fprintf(os.Stderr, "---- last lines of %s:\n%s\n", path, strings.Join(all, "\n"))
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kube-apiserver harness: "+format+"\n", args...)
	os.Exit(2)
}
