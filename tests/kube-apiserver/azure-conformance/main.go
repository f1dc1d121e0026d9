// Command azure-conformance drives an HTTP server that claims to be Azure Resource
// Manager (in practice the test double of tests/support/arm_double.rs) with
// Microsoft's official Go SDK: armnetwork (RouteTablesClient, RoutesClient,
// InterfacesClient) and armcompute (VirtualMachinesClient), on azcore's ARM pipeline
// with its own retry policy and LRO pollers. Where the double and the SDK disagree,
// the double is wrong.
//
// It reads one JSON command per line on stdin and answers each with one JSON line on
// stdout: what the SDK decoded (in a canonical form the Rust side compares with the
// state it gave the double), the azcore.ResponseError it returned, every request it
// sent with the status it got, and every reply body that the SDK's model types do not
// hold exactly. The generated models' UnmarshalJSON skips unknown fields silently, so
// strictness is checked by decoding each raw body into the SDK type, encoding it
// again and comparing the two: a field of the reply that does not survive the round
// trip is one the SDK does not know, and a value the SDK cannot decode is a type
// error. Enum fields are checked against the SDK's Possible*Values.
//
//	azure-conformance --endpoint http://127.0.0.1:PORT --subscription SUB --token TOKEN
//
// Commands ({"op": ..., "rg": ..., ...}):
//
//	table_get {table}
//	table_put {table, location, routes: [{name, prefix, hop_type, hop_ip}], if_match, no_wait}
//	route_get {table, route}, routes_list {table}
//	route_put {table, route: {name, prefix, hop_type, hop_ip}, if_match, no_wait}
//	route_delete {table, route, no_wait}
//	nic_get {nic}, vm_get {vm}
//
// Options per command: "retries" (default 0: the reply as it came, azcore's
// MaxRetries -1; >0: azcore's retry policy with that many retries and a 1 ms delay,
// which a Retry-After header overrides). Without no_wait a write's LRO is polled to
// its end with PollUntilDone every 20 ms (or as Retry-After says).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/arm"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/cloud"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/runtime"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8"
	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9"
)

// azcore refuses a PollUntilDone frequency under one second unless it runs inside
// `go test` (it looks the flag "test.v" up). Declaring the flag here lets the
// conversation poll every 20 ms; it changes nothing else.
var _ = flag.Bool("test.v", false, "unused; lifts azcore's one-second polling floor")

type routeIn struct {
	Name    string `json:"name"`
	Prefix  string `json:"prefix"`
	HopType string `json:"hop_type"`
	HopIP   string `json:"hop_ip"`
}

type command struct {
	Op       string          `json:"op"`
	RG       string          `json:"rg"`
	Table    string          `json:"table"`
	Location string          `json:"location"`
	Routes   []routeIn       `json:"routes"`
	Route    json.RawMessage `json:"route"`
	IfMatch  string          `json:"if_match"`
	NoWait   bool            `json:"no_wait"`
	NIC      string          `json:"nic"`
	VM       string          `json:"vm"`
	Retries  int32           `json:"retries"`
}

type answer struct {
	// Result is what the SDK decoded; null when it returned an error first.
	Result any `json:"result"`
	// Initial is the command's first reply: status, the LRO and budget headers and
	// the body's provisioning state (for a write: what the poller started from).
	Initial any `json:"initial,omitempty"`
	// Error is the error the SDK returned, if any.
	Error *apiError `json:"error"`
	// Requests the SDK sent for this command: "METHOD /path?query -> status".
	Requests []string `json:"requests"`
	// Strict lists replies the SDK's model types do not hold exactly.
	Strict []string `json:"strict"`
	// Scopes the SDK asked the credential for.
	Scopes []string `json:"scopes"`
	// Millis the command took.
	Millis int64 `json:"millis"`
}

type apiError struct {
	// Status and Code of the azcore.ResponseError; for an LRO that ended Failed,
	// Status is the final poll's (200) and Code the operation's error code.
	Status int    `json:"status"`
	Code   string `json:"code"`
	// Response is true when the error is an *azcore.ResponseError.
	Response bool   `json:"response"`
	Text     string `json:"text"`
}

// token is the credential: the token the Rust side got from the double's token
// endpoint, handed over as it is. It notes the scopes the SDK asks for.
type token struct {
	value  string
	mu     sync.Mutex
	scopes []string
}

func (t *token) GetToken(_ context.Context, opts policy.TokenRequestOptions) (azcore.AccessToken, error) {
	t.mu.Lock()
	t.scopes = append(t.scopes, opts.Scopes...)
	t.mu.Unlock()
	return azcore.AccessToken{Token: t.value, ExpiresOn: time.Now().Add(time.Hour)}, nil
}

type clients struct {
	tables *armnetwork.RouteTablesClient
	routes *armnetwork.RoutesClient
	nics   *armnetwork.InterfacesClient
	vms    *armcompute.VirtualMachinesClient
}

func main() {
	endpoint := flag.String("endpoint", "", "ARM's base URL, e.g. http://127.0.0.1:1234")
	subscription := flag.String("subscription", "", "the subscription ID")
	tokenValue := flag.String("token", "", "the bearer token")
	flag.Parse()
	if *endpoint == "" || *subscription == "" {
		fmt.Fprintln(os.Stderr, "azure-conformance: --endpoint and --subscription are required")
		os.Exit(2)
	}
	recorder := &recorder{client: &http.Client{Timeout: 10 * time.Second}}
	cred := &token{value: *tokenValue}
	clientsWith := func(retries int32) clients {
		maxRetries := int32(-1)
		if retries > 0 {
			maxRetries = retries
		}
		opts := &arm.ClientOptions{ClientOptions: policy.ClientOptions{
			Cloud: cloud.Configuration{
				ActiveDirectoryAuthorityHost: *endpoint + "/",
				Services: map[cloud.ServiceName]cloud.ServiceConfiguration{
					cloud.ResourceManager: {Endpoint: *endpoint, Audience: "https://management.azure.com"},
				},
			},
			InsecureAllowCredentialWithHTTP: true,
			Transport:                       recorder,
			Retry:                           policy.RetryOptions{MaxRetries: maxRetries, RetryDelay: time.Millisecond, MaxRetryDelay: 5 * time.Second},
		}}
		var c clients
		var err error
		if c.tables, err = armnetwork.NewRouteTablesClient(*subscription, cred, opts); err == nil {
			if c.routes, err = armnetwork.NewRoutesClient(*subscription, cred, opts); err == nil {
				if c.nics, err = armnetwork.NewInterfacesClient(*subscription, cred, opts); err == nil {
					c.vms, err = armcompute.NewVirtualMachinesClient(*subscription, cred, opts)
				}
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "azure-conformance: clients: %v\n", err)
			os.Exit(1)
		}
		return c
	}

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<20)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" {
			continue
		}
		var cmd command
		if err := json.Unmarshal([]byte(line), &cmd); err != nil {
			fmt.Fprintf(os.Stderr, "azure-conformance: bad command %q: %v\n", line, err)
			os.Exit(2)
		}
		recorder.reset()
		cred.mu.Lock()
		cred.scopes = nil
		cred.mu.Unlock()
		started := time.Now()
		a := run(clientsWith(cmd.Retries), cmd, recorder)
		a.Millis = time.Since(started).Milliseconds()
		var strict []string
		a.Requests, strict = recorder.take()
		a.Strict = append(strict, a.Strict...)
		cred.mu.Lock()
		a.Scopes = append([]string{}, cred.scopes...)
		cred.mu.Unlock()
		if err := out.Encode(a); err != nil {
			fmt.Fprintf(os.Stderr, "azure-conformance: write: %v\n", err)
			os.Exit(1)
		}
	}
}

func withIfMatch(ctx context.Context, ifMatch string) context.Context {
	if ifMatch == "" {
		return ctx
	}
	// cloud-provider-azure sets If-Match the same way: a header on the request
	// (its etag policy copies the body's etag), since the SDK's options have none.
	return policy.WithHTTPHeader(ctx, http.Header{"If-Match": []string{ifMatch}})
}

var pollEvery = &runtime.PollUntilDoneOptions{Frequency: 20 * time.Millisecond}

func run(c clients, cmd command, rec *recorder) answer {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var a answer
	var err error
	switch cmd.Op {
	case "table_get":
		var resp armnetwork.RouteTablesClientGetResponse
		resp, err = c.tables.Get(ctx, cmd.RG, cmd.Table, nil)
		if err == nil {
			a.Result = tableOut(&resp.RouteTable, &a)
		}
	case "table_put":
		table := armnetwork.RouteTable{
			Location:   strPtr(cmd.Location),
			Properties: &armnetwork.RouteTablePropertiesFormat{Routes: []*armnetwork.Route{}},
		}
		for _, r := range cmd.Routes {
			table.Properties.Routes = append(table.Properties.Routes, routeModel(r))
		}
		var poller *runtime.Poller[armnetwork.RouteTablesClientCreateOrUpdateResponse]
		poller, err = c.tables.BeginCreateOrUpdate(withIfMatch(ctx, cmd.IfMatch), cmd.RG, cmd.Table, table, nil)
		if err == nil {
			a.Initial = rec.first()
			if cmd.NoWait {
				a.Result = map[string]any{"done": poller.Done()}
				break
			}
			var resp armnetwork.RouteTablesClientCreateOrUpdateResponse
			resp, err = poller.PollUntilDone(ctx, pollEvery)
			if err == nil {
				a.Result = tableOut(&resp.RouteTable, &a)
			}
		}
	case "route_get":
		var resp armnetwork.RoutesClientGetResponse
		resp, err = c.routes.Get(ctx, cmd.RG, cmd.Table, routeName(cmd.Route), nil)
		if err == nil {
			a.Result = routeOut(&resp.Route, &a)
		}
	case "routes_list":
		list := []any{}
		pager := c.routes.NewListPager(cmd.RG, cmd.Table, nil)
		for pager.More() {
			var page armnetwork.RoutesClientListResponse
			page, err = pager.NextPage(ctx)
			if err != nil {
				break
			}
			for _, r := range page.Value {
				list = append(list, routeOut(r, &a))
			}
		}
		if err == nil {
			a.Result = list
		}
	case "route_put":
		var r routeIn
		if err = json.Unmarshal(cmd.Route, &r); err != nil {
			fmt.Fprintf(os.Stderr, "azure-conformance: route_put needs a route object: %v\n", err)
			os.Exit(2)
		}
		var poller *runtime.Poller[armnetwork.RoutesClientCreateOrUpdateResponse]
		poller, err = c.routes.BeginCreateOrUpdate(withIfMatch(ctx, cmd.IfMatch), cmd.RG, cmd.Table, r.Name, *routeModel(r), nil)
		if err == nil {
			a.Initial = rec.first()
			if cmd.NoWait {
				a.Result = map[string]any{"done": poller.Done()}
				break
			}
			var resp armnetwork.RoutesClientCreateOrUpdateResponse
			resp, err = poller.PollUntilDone(ctx, pollEvery)
			if err == nil {
				a.Result = routeOut(&resp.Route, &a)
			}
		}
	case "route_delete":
		var poller *runtime.Poller[armnetwork.RoutesClientDeleteResponse]
		poller, err = c.routes.BeginDelete(ctx, cmd.RG, cmd.Table, routeName(cmd.Route), nil)
		if err == nil {
			a.Initial = rec.first()
			if cmd.NoWait {
				a.Result = map[string]any{"done": poller.Done()}
				break
			}
			_, err = poller.PollUntilDone(ctx, pollEvery)
			if err == nil {
				a.Result = map[string]any{"deleted": true}
			}
		}
	case "nic_get":
		var resp armnetwork.InterfacesClientGetResponse
		resp, err = c.nics.Get(ctx, cmd.RG, cmd.NIC, nil)
		if err == nil {
			a.Result = nicOut(&resp.Interface, &a)
		}
	case "vm_get":
		var resp armcompute.VirtualMachinesClientGetResponse
		resp, err = c.vms.Get(ctx, cmd.RG, cmd.VM, nil)
		if err == nil {
			a.Result = vmOut(&resp.VirtualMachine, &a)
		}
	default:
		fmt.Fprintf(os.Stderr, "azure-conformance: unknown op %q\n", cmd.Op)
		os.Exit(2)
	}
	if a.Initial == nil {
		a.Initial = rec.first()
	}
	if err != nil {
		a.Result = nil
		a.Error = errorOut(err)
	}
	return a
}

func routeName(raw json.RawMessage) string {
	var name string
	if json.Unmarshal(raw, &name) == nil {
		return name
	}
	var r routeIn
	_ = json.Unmarshal(raw, &r)
	return r.Name
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func routeModel(r routeIn) *armnetwork.Route {
	hop := armnetwork.RouteNextHopType(r.HopType)
	return &armnetwork.Route{
		Name: strPtr(r.Name),
		Properties: &armnetwork.RoutePropertiesFormat{
			AddressPrefix:    strPtr(r.Prefix),
			NextHopType:      &hop,
			NextHopIPAddress: strPtr(r.HopIP),
		},
	}
}

func str(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// enum notes a value the SDK has no constant for.
func enum[T ~string](a *answer, what string, v *T, possible []T) string {
	if v == nil {
		return ""
	}
	for _, p := range possible {
		if p == *v {
			return string(*v)
		}
	}
	a.Strict = append(a.Strict, fmt.Sprintf("%s %q is not one of the SDK's values %v", what, *v, possible))
	return string(*v)
}

func tableOut(t *armnetwork.RouteTable, a *answer) any {
	routes := []any{}
	out := map[string]any{
		"name": str(t.Name), "id": str(t.ID), "etag": str(t.Etag), "type": str(t.Type),
		"location": str(t.Location),
	}
	if p := t.Properties; p != nil {
		out["provisioning_state"] = enum(a, "provisioningState", p.ProvisioningState, armnetwork.PossibleProvisioningStateValues())
		for _, r := range p.Routes {
			routes = append(routes, routeOut(r, a))
		}
	}
	out["routes"] = routes
	return out
}

func routeOut(r *armnetwork.Route, a *answer) any {
	out := map[string]any{"name": str(r.Name), "id": str(r.ID), "etag": str(r.Etag), "type": str(r.Type)}
	if p := r.Properties; p != nil {
		out["prefix"] = str(p.AddressPrefix)
		out["hop_type"] = enum(a, "nextHopType", p.NextHopType, armnetwork.PossibleRouteNextHopTypeValues())
		out["hop_ip"] = str(p.NextHopIPAddress)
		out["provisioning_state"] = enum(a, "provisioningState", p.ProvisioningState, armnetwork.PossibleProvisioningStateValues())
	}
	return out
}

func nicOut(n *armnetwork.Interface, a *answer) any {
	out := map[string]any{"name": str(n.Name), "id": str(n.ID)}
	if p := n.Properties; p != nil {
		out["ip_forwarding"] = p.EnableIPForwarding != nil && *p.EnableIPForwarding
		out["provisioning_state"] = enum(a, "provisioningState", p.ProvisioningState, armnetwork.PossibleProvisioningStateValues())
		ips := []string{}
		for _, c := range p.IPConfigurations {
			if c.Properties != nil {
				ips = append(ips, str(c.Properties.PrivateIPAddress))
			}
		}
		out["private_ips"] = ips
		if p.VirtualMachine != nil {
			out["vm"] = str(p.VirtualMachine.ID)
		}
	}
	return out
}

func vmOut(v *armcompute.VirtualMachine, a *answer) any {
	out := map[string]any{"name": str(v.Name), "id": str(v.ID)}
	nics := []any{}
	if p := v.Properties; p != nil {
		out["provisioning_state"] = str(p.ProvisioningState)
		if p.NetworkProfile != nil {
			for _, n := range p.NetworkProfile.NetworkInterfaces {
				primary := n.Properties != nil && n.Properties.Primary != nil && *n.Properties.Primary
				nics = append(nics, map[string]any{"id": str(n.ID), "primary": primary})
			}
		}
	}
	out["nics"] = nics
	return out
}

func errorOut(err error) *apiError {
	out := &apiError{Text: err.Error()}
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		out.Response = true
		out.Status = re.StatusCode
		out.Code = re.ErrorCode
	}
	return out
}

// recorder is the SDK's transport: it notes every request and checks every reply
// body against the SDK's model types.
type recorder struct {
	client   *http.Client
	mu       sync.Mutex
	requests []string
	strict   []string
	initial  map[string]any
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests, r.strict, r.initial = nil, nil, nil
}

func (r *recorder) take() ([]string, []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	requests, strict := r.requests, r.strict
	if requests == nil {
		requests = []string{}
	}
	if strict == nil {
		strict = []string{}
	}
	return requests, strict
}

// first is the first reply of the command: status, the LRO headers and the
// provisioning state of its body.
func (r *recorder) first() any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.initial
}

func (r *recorder) Do(req *http.Request) (*http.Response, error) {
	what := req.Method + " " + req.URL.RequestURI()
	resp, err := r.client.Do(req)
	if err != nil {
		r.mu.Lock()
		r.requests = append(r.requests, what+" -> error")
		r.mu.Unlock()
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	problem := checkStrict(req, resp, body)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests = append(r.requests, fmt.Sprintf("%s -> %d", what, resp.StatusCode))
	if problem != "" {
		r.strict = append(r.strict, what+": "+problem)
	}
	if r.initial == nil {
		var state struct {
			Properties struct {
				ProvisioningState string `json:"provisioningState"`
			} `json:"properties"`
		}
		_ = json.Unmarshal(body, &state)
		r.initial = map[string]any{
			"status":                 resp.StatusCode,
			"azure_async_operation":  resp.Header.Get("Azure-AsyncOperation"),
			"location":               resp.Header.Get("Location"),
			"provisioning_state":     state.Properties.ProvisioningState,
			"remaining_writes":       resp.Header.Get("x-ms-ratelimit-remaining-subscription-writes"),
			"remaining_reads":        resp.Header.Get("x-ms-ratelimit-remaining-subscription-reads"),
			"retry_after":            resp.Header.Get("Retry-After"),
			"etag_header":            resp.Header.Get("ETag"),
			"content_type_is_json":   strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json"),
			"www_authenticate_given": resp.Header.Get("WWW-Authenticate") != "",
		}
	}
	return resp, nil
}

// armError is ARM's error envelope around the SDK's own error type.
type armError struct {
	Error *armnetwork.Error `json:"error"`
}

// checkStrict says what is wrong with a reply body for the SDK, or "".
func checkStrict(req *http.Request, resp *http.Response, body []byte) string {
	if len(body) == 0 {
		return ""
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		return fmt.Sprintf("a body without Content-Type application/json (%q)", resp.Header.Get("Content-Type"))
	}
	path := strings.ToLower(req.URL.Path)
	var target any
	switch {
	case resp.StatusCode >= 400:
		target = &armError{}
	case strings.Contains(path, "/operations/") || strings.Contains(path, "/operationresults/"):
		target = &armnetwork.AzureAsyncOperationResult{}
	case strings.HasSuffix(path, "/routes"):
		target = &armnetwork.RouteListResult{}
	case strings.Contains(path, "/routes/"):
		target = &armnetwork.Route{}
	case strings.Contains(path, "/routetables/"):
		target = &armnetwork.RouteTable{}
	case strings.Contains(path, "/networkinterfaces/"):
		target = &armnetwork.Interface{}
	case strings.Contains(path, "/virtualmachines/"):
		target = &armcompute.VirtualMachine{}
	default:
		return "no SDK model known for this endpoint"
	}
	return roundTrip(body, target)
}

// roundTrip decodes body into target (an SDK model), encodes it again and reports
// what of body did not survive: unknown fields, undecodable values, changed values.
func roundTrip(body []byte, target any) string {
	var raw any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return fmt.Sprintf("not JSON: %v", err)
	}
	if err := json.Unmarshal(body, target); err != nil {
		return fmt.Sprintf("does not decode into %T: %v", target, err)
	}
	again, err := json.Marshal(target)
	if err != nil {
		return fmt.Sprintf("%T does not encode again: %v", target, err)
	}
	var back any
	dec = json.NewDecoder(bytes.NewReader(again))
	dec.UseNumber()
	if err := dec.Decode(&back); err != nil {
		return fmt.Sprintf("%T encodes to bad JSON: %v", target, err)
	}
	var problems []string
	diff("", raw, back, &problems)
	if len(problems) == 0 {
		return ""
	}
	sort.Strings(problems)
	return fmt.Sprintf("%T does not hold: %s", target, strings.Join(problems, "; "))
}

func diff(at string, raw, back any, problems *[]string) {
	switch r := raw.(type) {
	case nil:
		return
	case map[string]any:
		b, ok := back.(map[string]any)
		if !ok {
			*problems = append(*problems, fmt.Sprintf("%s: an object became %v", orTop(at), back))
			return
		}
		for k, v := range r {
			if v == nil {
				continue
			}
			bv, ok := b[k]
			if !ok {
				*problems = append(*problems, fmt.Sprintf("%s/%s: not a field of the SDK's model", at, k))
				continue
			}
			diff(at+"/"+k, v, bv, problems)
		}
	case []any:
		b, ok := back.([]any)
		if !ok || len(b) != len(r) {
			*problems = append(*problems, fmt.Sprintf("%s: an array of %d became %v", orTop(at), len(r), back))
			return
		}
		for i := range r {
			diff(fmt.Sprintf("%s/%d", at, i), r[i], b[i], problems)
		}
	default:
		if !reflect.DeepEqual(raw, back) {
			*problems = append(*problems, fmt.Sprintf("%s: %v became %v", orTop(at), raw, back))
		}
	}
}

func orTop(at string) string {
	if at == "" {
		return "/"
	}
	return at
}
