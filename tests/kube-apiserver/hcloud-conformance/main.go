// Command hcloud-conformance drives an HTTP server that claims to be the Hetzner
// Cloud API (in practice the test double of tests/support/hcloud_double.rs) with the
// official Go client, github.com/hetznercloud/hcloud-go, which the Hetzner
// cloud-controller-manager itself uses. Where the double and the client disagree,
// the double is wrong.
//
// It reads one JSON command per line on stdin and answers each with one JSON line on
// stdout: what hcloud-go decoded (in a canonical form the Rust side compares with the
// state it gave the double), the API error it saw, the rate-limit headers it parsed,
// and every reply body that does not decode strictly into hcloud-go's schema types
// (an unknown or mistyped field: the client would silently drop or misread it).
// The Rust side changes the double between commands (faults, rate limits), which is
// why this is a conversation and not one run of fixed checks.
//
//	hcloud-conformance --endpoint http://127.0.0.1:PORT/v1 --token TOKEN
//
// Commands ({"op": ..., ...}):
//
//	network_by_id {id}, network_by_name {name}, network_get {id_or_name}
//	server_by_id {id}, server_by_name {name}, servers_all {}, servers_page {page, per_page}
//	server_by_private_ip {network, ip}            (from the full list, as HCCM does)
//	add_route / delete_route {network, destination, gateway}  (then WaitFor the action)
//	action_by_id {id}
//
// Options per command: "retries" (default 0: the reply as it came; >0 uses hcloud-go's
// own retry policy with a 1 ms backoff).
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
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/hetznercloud/hcloud-go/v2/hcloud/schema"
)

type command struct {
	Op          string `json:"op"`
	ID          int64  `json:"id"`
	Name        string `json:"name"`
	IDOrName    string `json:"id_or_name"`
	Network     int64  `json:"network"`
	IP          string `json:"ip"`
	Destination string `json:"destination"`
	Gateway     string `json:"gateway"`
	Retries     int    `json:"retries"`
	Page        int    `json:"page"`
	PerPage     int    `json:"per_page"`
}

type answer struct {
	// Result is what hcloud-go decoded; null when it returned nothing (not found).
	Result any `json:"result"`
	// Error is the error hcloud-go returned, if any.
	Error *apiError `json:"error"`
	// Ratelimit is hcloud-go's Response.Meta.Ratelimit of the last reply.
	Ratelimit *ratelimit `json:"ratelimit"`
	// Pagination of the last reply, as hcloud-go parsed it.
	Pagination *hcloud.Pagination `json:"pagination"`
	// Requests the client sent for this command: "METHOD /path?query".
	Requests []string `json:"requests"`
	// Strict lists replies that do not decode strictly into hcloud-go's schema.
	Strict []string `json:"strict"`
}

type apiError struct {
	// Code is hcloud.Error's code, or the ActionError's code for a failed action;
	// empty for errors that are not API errors.
	Code       string `json:"code"`
	Message    string `json:"message"`
	Status     int    `json:"status"`
	Action     bool   `json:"action"`
	StatusOnly bool   `json:"status_only"`
	// Fields are the invalid_input details (field names).
	Fields []string `json:"fields"`
	Text   string   `json:"text"`
}

type ratelimit struct {
	Limit     int   `json:"limit"`
	Remaining int   `json:"remaining"`
	Reset     int64 `json:"reset"`
}

func main() {
	endpoint := flag.String("endpoint", "", "the API's base URL, e.g. http://127.0.0.1:1234/v1")
	token := flag.String("token", "", "the bearer token")
	flag.Parse()
	if *endpoint == "" || *token == "" {
		fmt.Fprintln(os.Stderr, "hcloud-conformance: --endpoint and --token are required")
		os.Exit(2)
	}
	recorder := &recorder{}
	httpClient := &http.Client{Transport: recorder, Timeout: 10 * time.Second}
	base := []hcloud.ClientOption{
		hcloud.WithEndpoint(*endpoint),
		hcloud.WithToken(*token),
		hcloud.WithHTTPClient(httpClient),
		hcloud.WithApplication("hcloud-conformance", "test"),
		hcloud.WithPollOpts(hcloud.PollOpts{BackoffFunc: hcloud.ConstantBackoff(20 * time.Millisecond)}),
	}
	clientWith := func(retries int) *hcloud.Client {
		opts := append([]hcloud.ClientOption{}, base...)
		opts = append(opts, hcloud.WithRetryOpts(hcloud.RetryOpts{
			BackoffFunc: hcloud.ConstantBackoff(time.Millisecond),
			MaxRetries:  retries,
		}))
		return hcloud.NewClient(opts...)
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
			fmt.Fprintf(os.Stderr, "hcloud-conformance: bad command %q: %v\n", line, err)
			os.Exit(2)
		}
		recorder.reset()
		a := run(clientWith(cmd.Retries), cmd)
		a.Requests, a.Strict = recorder.take()
		if err := out.Encode(a); err != nil {
			fmt.Fprintf(os.Stderr, "hcloud-conformance: write: %v\n", err)
			os.Exit(1)
		}
	}
}

func run(client *hcloud.Client, cmd command) answer {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var a answer
	var resp *hcloud.Response
	var err error
	switch cmd.Op {
	case "network_by_id":
		var n *hcloud.Network
		n, resp, err = client.Network.GetByID(ctx, cmd.ID)
		a.Result = networkOut(n)
	case "network_by_name":
		var n *hcloud.Network
		n, resp, err = client.Network.GetByName(ctx, cmd.Name)
		a.Result = networkOut(n)
	case "network_get":
		var n *hcloud.Network
		n, resp, err = client.Network.Get(ctx, cmd.IDOrName)
		a.Result = networkOut(n)
	case "server_by_id":
		var s *hcloud.Server
		s, resp, err = client.Server.GetByID(ctx, cmd.ID)
		a.Result = serverOut(s)
	case "server_by_name":
		var s *hcloud.Server
		s, resp, err = client.Server.GetByName(ctx, cmd.Name)
		a.Result = serverOut(s)
	case "servers_all":
		var all []*hcloud.Server
		all, err = client.Server.All(ctx)
		list := []any{}
		for _, s := range all {
			list = append(list, serverOut(s))
		}
		a.Result = list
	case "servers_page":
		var page []*hcloud.Server
		page, resp, err = client.Server.List(ctx, hcloud.ServerListOpts{
			ListOpts: hcloud.ListOpts{Page: cmd.Page, PerPage: cmd.PerPage},
		})
		list := []any{}
		for _, s := range page {
			list = append(list, serverOut(s))
		}
		a.Result = list
	case "server_by_private_ip":
		a.Result, err = serverByPrivateIP(ctx, client, cmd.Network, cmd.IP)
	case "add_route", "delete_route":
		a.Result, resp, err = routeAction(ctx, client, cmd)
	case "action_by_id":
		var act *hcloud.Action
		act, resp, err = client.Action.GetByID(ctx, cmd.ID)
		a.Result = actionOut(act)
	default:
		fmt.Fprintf(os.Stderr, "hcloud-conformance: unknown op %q\n", cmd.Op)
		os.Exit(2)
	}
	if resp != nil {
		a.Ratelimit = &ratelimit{
			Limit:     resp.Meta.Ratelimit.Limit,
			Remaining: resp.Meta.Ratelimit.Remaining,
			Reset:     resp.Meta.Ratelimit.Reset.Unix(),
		}
		a.Pagination = resp.Meta.Pagination
	}
	if err != nil {
		a.Error = errorOut(err, resp)
	}
	return a
}

// serverByPrivateIP finds the server holding ip in network the way HCCM's route code
// does: from the full, paginated server list.
func serverByPrivateIP(ctx context.Context, client *hcloud.Client, network int64, ip string) (any, error) {
	want := net.ParseIP(ip)
	all, err := client.Server.All(ctx)
	if err != nil {
		return nil, err
	}
	for _, s := range all {
		for _, p := range s.PrivateNet {
			if p.Network != nil && p.Network.ID == network && p.IP.Equal(want) {
				return serverOut(s), nil
			}
		}
	}
	return nil, nil
}

// routeAction posts add_route or delete_route and waits for the action as HCCM does
// (WaitFor: GET /actions?id=…&sort=status&sort=id until it is no longer running).
func routeAction(ctx context.Context, client *hcloud.Client, cmd command) (any, *hcloud.Response, error) {
	_, dest, err := net.ParseCIDR(cmd.Destination)
	if err != nil {
		return nil, nil, fmt.Errorf("bad destination in command: %w", err)
	}
	route := hcloud.NetworkRoute{Destination: dest, Gateway: net.ParseIP(cmd.Gateway)}
	network := &hcloud.Network{ID: cmd.Network}
	var action *hcloud.Action
	var resp *hcloud.Response
	if cmd.Op == "add_route" {
		action, resp, err = client.Network.AddRoute(ctx, network, hcloud.NetworkAddRouteOpts{Route: route})
	} else {
		action, resp, err = client.Network.DeleteRoute(ctx, network, hcloud.NetworkDeleteRouteOpts{Route: route})
	}
	if err != nil {
		return nil, resp, err
	}
	created := actionOut(action)
	final := action
	err = client.Action.WaitForFunc(ctx, func(update *hcloud.Action) error {
		final = update
		if update.Status == hcloud.ActionStatusError {
			return update.Error()
		}
		return nil
	}, action)
	return map[string]any{"created": created, "final": actionOut(final)}, resp, err
}

func networkOut(n *hcloud.Network) any {
	if n == nil {
		return nil
	}
	subnets := []any{}
	for _, s := range n.Subnets {
		subnets = append(subnets, map[string]any{
			"type":         string(s.Type),
			"ip_range":     ipNet(s.IPRange),
			"network_zone": string(s.NetworkZone),
			"gateway":      ip(s.Gateway),
		})
	}
	routes := []any{}
	for _, r := range n.Routes {
		routes = append(routes, map[string]any{
			"destination": ipNet(r.Destination),
			"gateway":     ip(r.Gateway),
		})
	}
	servers := []int64{}
	for _, s := range n.Servers {
		servers = append(servers, s.ID)
	}
	return map[string]any{
		"id":       n.ID,
		"name":     n.Name,
		"ip_range": ipNet(n.IPRange),
		"subnets":  subnets,
		"routes":   routes,
		"servers":  servers,
		"created":  n.Created.UTC().Format(time.RFC3339),
	}
}

func serverOut(s *hcloud.Server) any {
	if s == nil {
		return nil
	}
	private := []any{}
	for _, p := range s.PrivateNet {
		var network int64
		if p.Network != nil {
			network = p.Network.ID
		}
		private = append(private, map[string]any{"network": network, "ip": ip(p.IP)})
	}
	return map[string]any{
		"id":          s.ID,
		"name":        s.Name,
		"status":      string(s.Status),
		"private_net": private,
	}
}

func actionOut(a *hcloud.Action) any {
	if a == nil {
		return nil
	}
	resources := []any{}
	for _, r := range a.Resources {
		resources = append(resources, map[string]any{"id": r.ID, "type": string(r.Type)})
	}
	return map[string]any{
		"id":            a.ID,
		"command":       a.Command,
		"status":        string(a.Status),
		"progress":      a.Progress,
		"finished":      !a.Finished.IsZero(),
		"error_code":    a.ErrorCode,
		"error_message": a.ErrorMessage,
		"resources":     resources,
	}
}

func errorOut(err error, resp *hcloud.Response) *apiError {
	out := &apiError{Text: hcloud.StabilizeError(err).Error()}
	if resp != nil && resp.Response != nil {
		out.Status = resp.StatusCode
	}
	var api hcloud.Error
	var action hcloud.ActionError
	switch {
	case errors.As(err, &api):
		out.Code = string(api.Code)
		out.Message = api.Message
		if details, ok := api.Details.(hcloud.ErrorDetailsInvalidInput); ok {
			for _, f := range details.Fields {
				out.Fields = append(out.Fields, f.Name)
			}
		}
	case errors.As(err, &action):
		out.Code = action.Code
		out.Message = action.Message
		out.Action = true
	case errors.Is(err, hcloud.ErrStatusCode):
		out.StatusOnly = true
	}
	return out
}

func ipNet(n *net.IPNet) string {
	if n == nil {
		return ""
	}
	return n.String()
}

func ip(a net.IP) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// recorder is the client's transport: it notes every request and checks every reply
// body against hcloud-go's schema types, strictly.
type recorder struct {
	mu       sync.Mutex
	requests []string
	strict   []string
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests, r.strict = nil, nil
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

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	what := req.Method + " " + req.URL.RequestURI()
	r.mu.Lock()
	r.requests = append(r.requests, what)
	r.mu.Unlock()
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if problem := checkStrict(req, resp, body); problem != "" {
		r.mu.Lock()
		r.strict = append(r.strict, what+": "+problem)
		r.mu.Unlock()
	}
	return resp, nil
}

// The reply schemas, as hcloud-go declares them, plus the list envelope's "meta".
type (
	networkList struct {
		schema.NetworkListResponse
		Meta schema.Meta `json:"meta"`
	}
	serverList struct {
		schema.ServerListResponse
		Meta schema.Meta `json:"meta"`
	}
	actionList struct {
		schema.ActionListResponse
		Meta schema.Meta `json:"meta"`
	}
)

// checkStrict decodes a reply into the schema type hcloud-go uses for it, refusing
// unknown fields and wrong types. It says what is wrong, or "" when all is well.
func checkStrict(req *http.Request, resp *http.Response, body []byte) string {
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if len(body) == 0 {
			return ""
		}
		return fmt.Sprintf("a body without Content-Type application/json (%q)", resp.Header.Get("Content-Type"))
	}
	if len(body) == 0 {
		return ""
	}
	var target any
	path := strings.TrimPrefix(req.URL.Path, "/v1")
	segments := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case resp.StatusCode >= 400:
		target = &schema.ErrorResponse{}
	case req.Method == "GET" && path == "/networks":
		target = &networkList{}
	case req.Method == "GET" && len(segments) == 2 && segments[0] == "networks":
		target = &schema.NetworkGetResponse{}
	case req.Method == "GET" && path == "/servers":
		target = &serverList{}
	case req.Method == "GET" && len(segments) == 2 && segments[0] == "servers":
		target = &schema.ServerGetResponse{}
	case req.Method == "GET" && path == "/actions":
		target = &actionList{}
	case req.Method == "GET" && len(segments) == 2 && segments[0] == "actions":
		target = &schema.ActionGetResponse{}
	case req.Method == "POST" && strings.HasSuffix(path, "/actions/add_route"):
		target = &schema.NetworkActionAddRouteResponse{}
	case req.Method == "POST" && strings.HasSuffix(path, "/actions/delete_route"):
		target = &schema.NetworkActionDeleteRouteResponse{}
	default:
		return "no schema known for this endpoint"
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(target); err != nil {
		return fmt.Sprintf("does not decode strictly into %T: %v", target, err)
	}
	return ""
}
