// Command gce-conformance drives an HTTP server that claims to be the Compute Engine
// API (in practice the test double of tests/support/gce_double.rs) with Google's
// official Go client, google.golang.org/api/compute/v1, the client cloud-provider-gcp
// itself uses. Where the double and the client disagree, the double is wrong.
//
// It reads one JSON command per line on stdin and answers each with one JSON line on
// stdout: what the client decoded (in a canonical form the Rust side compares with
// what the double holds), the googleapi.Error it saw, the requests it sent, and every
// reply field the client's types do not have. compute/v1 ignores unknown fields when
// it decodes, so strictness is checked here: each raw reply is walked beside the Go
// type it decodes into (googleapi.Error for error replies), and a field the type
// lacks is reported.
//
//	gce-conformance --endpoint http://127.0.0.1:PORT/compute/v1/ --project P --token T
//
// Commands ({"op": ..., ...}):
//
//	routes_list {filter, max_results}        (every page, with Pages, as the peer lists)
//	routes_page {filter, max_results, page_token}
//	route_get {name}, route_delete {name}
//	route_insert {name, network, dest_range, next_hop_instance, priority, description}
//	operation_get {name}, operation_wait {name}
//	instance_get {zone, name}, project_get {}
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

	compute "google.golang.org/api/compute/v1"
	"google.golang.org/api/googleapi"
	"google.golang.org/api/option"
)

type command struct {
	Op              string `json:"op"`
	Name            string `json:"name"`
	Zone            string `json:"zone"`
	Filter          string `json:"filter"`
	MaxResults      int64  `json:"max_results"`
	PageToken       string `json:"page_token"`
	Network         string `json:"network"`
	DestRange       string `json:"dest_range"`
	NextHopInstance string `json:"next_hop_instance"`
	Priority        int64  `json:"priority"`
	Description     string `json:"description"`
}

type answer struct {
	Result   any       `json:"result"`
	Error    *apiError `json:"error"`
	Requests []string  `json:"requests"`
	Strict   []string  `json:"strict"`
}

type apiError struct {
	Code    int      `json:"code"`
	Message string   `json:"message"`
	Reasons []string `json:"reasons"`
	Text    string   `json:"text"`
}

// exchange is one request and its raw reply.
type exchange struct {
	line   string
	status int
	body   []byte
}

// recorder is the client's transport: it adds the token and keeps every reply's raw
// body, which the strictness check needs.
type recorder struct {
	mu        sync.Mutex
	token     string
	exchanges []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+r.token)
	line := req.Method + " " + req.URL.Path
	if req.URL.RawQuery != "" {
		line += "?" + req.URL.RawQuery
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		r.add(exchange{line: line})
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	r.add(exchange{line: line, status: resp.StatusCode, body: body})
	return resp, nil
}

func (r *recorder) add(e exchange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exchanges = append(r.exchanges, e)
}

func (r *recorder) take() []exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.exchanges
	r.exchanges = nil
	return out
}

// errorReply is what googleapi.CheckResponse decodes an error body into.
type errorReply struct {
	Error *googleapi.Error `json:"error"`
}

func main() {
	endpoint := flag.String("endpoint", "", "the API's base URL, ending in /compute/v1/")
	project := flag.String("project", "", "the project")
	token := flag.String("token", "", "the bearer token")
	flag.Parse()
	if *endpoint == "" || *project == "" || *token == "" {
		fmt.Fprintln(os.Stderr, "gce-conformance: --endpoint, --project and --token are required")
		os.Exit(2)
	}
	rec := &recorder{token: *token}
	ctx := context.Background()
	svc, err := compute.NewService(ctx,
		option.WithEndpoint(*endpoint),
		option.WithHTTPClient(&http.Client{Transport: rec, Timeout: 30 * time.Second}))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gce-conformance: %v\n", err)
		os.Exit(2)
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
			fmt.Fprintf(os.Stderr, "gce-conformance: bad command %q: %v\n", line, err)
			os.Exit(2)
		}
		result, success, err := run(ctx, svc, *project, cmd)
		a := answer{Result: result, Requests: []string{}, Strict: []string{}}
		if err != nil {
			a.Error = toAPIError(err)
		}
		for _, e := range rec.take() {
			a.Requests = append(a.Requests, e.line)
			var typ reflect.Type
			if e.status >= 200 && e.status < 300 {
				typ = reflect.TypeOf(success)
			} else {
				typ = reflect.TypeOf(errorReply{})
			}
			a.Strict = append(a.Strict, strictness(e, typ)...)
		}
		if err := out.Encode(a); err != nil {
			fmt.Fprintf(os.Stderr, "gce-conformance: write: %v\n", err)
			os.Exit(1)
		}
	}
}

func toAPIError(err error) *apiError {
	var gerr *googleapi.Error
	if errors.As(err, &gerr) {
		e := &apiError{Code: gerr.Code, Message: gerr.Message, Reasons: []string{}, Text: err.Error()}
		for _, item := range gerr.Errors {
			e.Reasons = append(e.Reasons, item.Reason)
		}
		return e
	}
	return &apiError{Reasons: []string{}, Text: err.Error()}
}

// run does one command; it returns the canonical result, a value of the type a
// successful reply decodes into (for the strictness check), and the error.
func run(ctx context.Context, svc *compute.Service, project string, cmd command) (any, any, error) {
	switch cmd.Op {
	case "routes_list":
		routes := []any{}
		call := svc.Routes.List(project).Filter(cmd.Filter)
		if cmd.MaxResults > 0 {
			call = call.MaxResults(cmd.MaxResults)
		}
		err := call.Pages(ctx, func(page *compute.RouteList) error {
			for _, r := range page.Items {
				routes = append(routes, route(r))
			}
			return nil
		})
		return routes, compute.RouteList{}, err
	case "routes_page":
		call := svc.Routes.List(project).Filter(cmd.Filter).PageToken(cmd.PageToken)
		if cmd.MaxResults > 0 {
			call = call.MaxResults(cmd.MaxResults)
		}
		page, err := call.Do()
		if err != nil {
			return nil, compute.RouteList{}, err
		}
		routes := []any{}
		for _, r := range page.Items {
			routes = append(routes, route(r))
		}
		return map[string]any{"items": routes, "next_page_token": page.NextPageToken}, compute.RouteList{}, nil
	case "route_get":
		r, err := svc.Routes.Get(project, cmd.Name).Do()
		if err != nil {
			return nil, compute.Route{}, err
		}
		return route(r), compute.Route{}, nil
	case "route_insert":
		op, err := svc.Routes.Insert(project, &compute.Route{
			Name:            cmd.Name,
			Network:         cmd.Network,
			DestRange:       cmd.DestRange,
			NextHopInstance: cmd.NextHopInstance,
			Priority:        cmd.Priority,
			Description:     cmd.Description,
		}).Do()
		return operation(op), compute.Operation{}, err
	case "route_delete":
		op, err := svc.Routes.Delete(project, cmd.Name).Do()
		return operation(op), compute.Operation{}, err
	case "operation_get":
		op, err := svc.GlobalOperations.Get(project, cmd.Name).Do()
		return operation(op), compute.Operation{}, err
	case "operation_wait":
		op, err := svc.GlobalOperations.Wait(project, cmd.Name).Do()
		return operation(op), compute.Operation{}, err
	case "instance_get":
		i, err := svc.Instances.Get(project, cmd.Zone, cmd.Name).Do()
		if err != nil {
			return nil, compute.Instance{}, err
		}
		return map[string]any{"name": i.Name, "self_link": i.SelfLink, "can_ip_forward": i.CanIpForward, "id": i.Id}, compute.Instance{}, nil
	case "zones_list":
		zones := []any{}
		call := svc.Zones.List(project)
		if cmd.Filter != "" {
			call = call.Filter(cmd.Filter)
		}
		err := call.Pages(ctx, func(page *compute.ZoneList) error {
			for _, z := range page.Items {
				zones = append(zones, map[string]any{
					"name": z.Name, "region": z.Region, "status": z.Status, "self_link": z.SelfLink,
				})
			}
			return nil
		})
		return zones, compute.ZoneList{}, err
	case "project_get":
		p, err := svc.Projects.Get(project).Do()
		if err != nil {
			return nil, compute.Project{}, err
		}
		quotas := map[string]any{}
		for _, q := range p.Quotas {
			quotas[q.Metric] = map[string]any{"limit": q.Limit, "usage": q.Usage}
		}
		return map[string]any{"name": p.Name, "quotas": quotas}, compute.Project{}, nil
	}
	return nil, nil, fmt.Errorf("unknown op %q", cmd.Op)
}

func route(r *compute.Route) map[string]any {
	warnings := []string{}
	for _, w := range r.Warnings {
		warnings = append(warnings, w.Code)
	}
	return map[string]any{
		"name": r.Name, "network": r.Network, "dest_range": r.DestRange,
		"next_hop_instance": r.NextHopInstance, "priority": r.Priority,
		"description": r.Description, "id": r.Id, "warnings": warnings,
	}
}

func operation(op *compute.Operation) any {
	if op == nil {
		return nil
	}
	codes := []string{}
	if op.Error != nil {
		for _, e := range op.Error.Errors {
			codes = append(codes, e.Code)
		}
	}
	return map[string]any{
		"name": op.Name, "status": op.Status, "operation_type": op.OperationType,
		"target_link": op.TargetLink, "error_codes": codes, "http_error_status_code": op.HttpErrorStatusCode,
	}
}

// strictness lists the fields of a raw reply that typ does not have.
func strictness(e exchange, typ reflect.Type) []string {
	if typ == nil || len(e.body) == 0 {
		return nil
	}
	var raw any
	if err := json.Unmarshal(e.body, &raw); err != nil {
		return []string{fmt.Sprintf("%s: the reply is not JSON: %v", e.line, err)}
	}
	var out []string
	unknown("", raw, typ, &out)
	for i := range out {
		out[i] = fmt.Sprintf("%s (HTTP %d): %s is not a field of %s", e.line, e.status, out[i], typ)
	}
	sort.Strings(out)
	return out
}

func unknown(path string, raw any, t reflect.Type, out *[]string) {
	for t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	if t.Kind() == reflect.Interface {
		return
	}
	switch v := raw.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Map:
			for k, x := range v {
				unknown(path+"."+k, x, t.Elem(), out)
			}
		case reflect.Struct:
			fields := jsonFields(t)
			for k, x := range v {
				ft, ok := lookup(fields, k)
				if !ok {
					*out = append(*out, path+"."+k)
					continue
				}
				unknown(path+"."+k, x, ft, out)
			}
		default:
			*out = append(*out, path+" (an object, the client has "+t.String()+")")
		}
	case []any:
		if t.Kind() != reflect.Slice {
			*out = append(*out, path+" (a list, the client has "+t.String()+")")
			return
		}
		for i, x := range v {
			unknown(fmt.Sprintf("%s[%d]", path, i), x, t.Elem(), out)
		}
	}
}

// lookup finds a reply's key among a type's fields as encoding/json does: the exact
// name first, then one that differs only in case (googleapi.Error's untagged Errors
// field decodes "errors").
func lookup(fields map[string]reflect.Type, key string) (reflect.Type, bool) {
	if t, ok := fields[key]; ok {
		return t, true
	}
	for name, t := range fields {
		if strings.EqualFold(name, key) {
			return t, true
		}
	}
	return nil, false
}

func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name := strings.Split(tag, ",")[0]
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				fields[k] = v
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}
