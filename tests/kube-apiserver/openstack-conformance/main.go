// Command openstack-conformance drives an HTTP server that claims to be Keystone v3
// and Neutron v2.0 (in practice the test double of tests/support/neutron_double.rs)
// with gophercloud v2, the client cloud-provider-openstack itself uses. Where the
// double and the client disagree, the double is wrong.
//
// It runs one fixed scenario against a double prepared by the Rust side (a router
// attached to one network, a node port at --node-ip) and prints one JSON report:
// each step's decoded result or error, and every reply field the client's types do
// not have. gophercloud ignores unknown fields when it decodes, so strictness is
// checked here: each raw reply is walked beside the Go type it decodes into.
//
//	openstack-conformance --auth-url URL --region R --app-id ID --app-secret S --router ID --node-ip IP
package main

import (
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
	"unicode"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/extraroutes"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/extensions/layer3/routers"
	"github.com/gophercloud/gophercloud/v2/openstack/networking/v2/ports"
)

type exchange struct {
	line   string
	status int
	body   []byte
}

// recorder keeps every raw reply, which the strictness check needs.
type recorder struct {
	mu        sync.Mutex
	exchanges []exchange
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	line := req.Method + " " + req.URL.Path
	if req.URL.RawQuery != "" {
		line += "?" + req.URL.RawQuery
	}
	if m := req.Header.Get("If-Match"); m != "" {
		line += " If-Match: " + m
	}
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	r.mu.Lock()
	r.exchanges = append(r.exchanges, exchange{line: line, status: resp.StatusCode, body: body})
	r.mu.Unlock()
	return resp, nil
}

func (r *recorder) last() exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.exchanges) == 0 {
		return exchange{}
	}
	return r.exchanges[len(r.exchanges)-1]
}

type step struct {
	Name    string   `json:"name"`
	Result  any      `json:"result,omitempty"`
	Error   string   `json:"error,omitempty"`
	Status  int      `json:"status,omitempty"`
	Request string   `json:"request"`
	Strict  []string `json:"strict,omitempty"`
}

func main() {
	authURL := flag.String("auth-url", "", "Keystone's v3 URL")
	region := flag.String("region", "", "the region")
	appID := flag.String("app-id", "", "application credential ID")
	appSecret := flag.String("app-secret", "", "application credential secret")
	router := flag.String("router", "", "the router's ID")
	nodeIP := flag.String("node-ip", "", "a node port's fixed IP")
	flag.Parse()
	rec := &recorder{}
	ctx := context.Background()
	var steps []step
	fail := func(name string, err error) {
		steps = append(steps, step{Name: name, Error: err.Error()})
		out, _ := json.Marshal(steps)
		fmt.Println(string(out))
		os.Exit(1)
	}
	provider, err := openstack.NewClient(*authURL)
	if err != nil {
		fail("client", err)
	}
	provider.HTTPClient = http.Client{Transport: rec}
	err = openstack.Authenticate(ctx, provider, gophercloud.AuthOptions{
		IdentityEndpoint:            *authURL,
		ApplicationCredentialID:     *appID,
		ApplicationCredentialSecret: *appSecret,
	})
	if err != nil {
		fail("authenticate", err)
	}
	tokenReply := rec.last()
	steps = append(steps, step{Name: "authenticate", Result: provider.TokenID != "",
		Request: tokenReply.line, Status: tokenReply.status,
		Strict: strict(tokenReply.body, reflect.TypeOf(tokenBody{}), "")})
	client, err := openstack.NewNetworkV2(provider, gophercloud.EndpointOpts{Region: *region})
	if err != nil {
		fail("network endpoint", err)
	}
	steps = append(steps, step{Name: "network endpoint", Result: client.Endpoint})

	// record runs one call and notes what it decoded, its error and its raw reply's
	// fields that `into` lacks.
	record := func(name string, into any, call func() (any, error)) {
		result, err := call()
		ex := rec.last()
		s := step{Name: name, Request: ex.line, Status: ex.status, Result: result}
		if err != nil {
			s.Error = err.Error()
			s.Result = nil
			var code gophercloud.ErrUnexpectedResponseCode
			if errors.As(err, &code) {
				s.Status = code.Actual
			}
		} else if into != nil {
			s.Strict = strict(ex.body, reflect.TypeOf(into), "")
		}
		steps = append(steps, s)
	}
	type extensionsReply struct {
		Extensions []extensions.Extension `json:"extensions"`
	}
	record("extensions", extensionsReply{}, func() (any, error) {
		pages, err := extensions.List(client).AllPages(ctx)
		if err != nil {
			return nil, err
		}
		all, err := extensions.ExtractExtensions(pages)
		var aliases []string
		for _, e := range all {
			aliases = append(aliases, e.Alias)
		}
		sort.Strings(aliases)
		return aliases, err
	})
	type routerReply struct {
		Router routers.Router `json:"router"`
	}
	var revision int
	record("router get", routerReply{}, func() (any, error) {
		r, err := routers.Get(ctx, client, *router).Extract()
		if err != nil {
			return nil, err
		}
		revision = r.RevisionNumber
		return map[string]any{"routes": r.Routes, "revision_number": r.RevisionNumber}, nil
	})
	routes := []routers.Route{{DestinationCIDR: "10.244.7.0/24", NextHop: *nodeIP}}
	record("add_extraroutes", routerReply{}, func() (any, error) {
		r, err := extraroutes.Add(ctx, client, *router, extraroutes.Opts{Routes: &routes}).Extract()
		if err != nil {
			return nil, err
		}
		revision = r.RevisionNumber
		return map[string]any{"routes": r.Routes, "revision_number": r.RevisionNumber}, nil
	})
	record("remove_extraroutes", routerReply{}, func() (any, error) {
		r, err := extraroutes.Remove(ctx, client, *router, extraroutes.Opts{Routes: &routes}).Extract()
		if err != nil {
			return nil, err
		}
		revision = r.RevisionNumber
		return map[string]any{"routes": r.Routes, "revision_number": r.RevisionNumber}, nil
	})
	update := func(name string, rev int) {
		record(name, routerReply{}, func() (any, error) {
			r, err := routers.Update(ctx, client, *router, routers.UpdateOpts{Routes: &routes, RevisionNumber: &rev}).Extract()
			if err != nil {
				return nil, err
			}
			return map[string]any{"routes": r.Routes, "revision_number": r.RevisionNumber}, nil
		})
	}
	update("update at a stale revision", revision-1)
	update("update at the revision", revision)
	type portsReply struct {
		Ports []ports.Port `json:"ports"`
	}
	var portID string
	record("ports by fixed ip", portsReply{}, func() (any, error) {
		pages, err := ports.List(client, ports.ListOpts{FixedIPs: []ports.FixedIPOpts{{IPAddress: *nodeIP}}}).AllPages(ctx)
		if err != nil {
			return nil, err
		}
		all, err := ports.ExtractPorts(pages)
		var ids []string
		for _, p := range all {
			ids = append(ids, p.ID+" "+p.DeviceID)
			portID = p.ID
		}
		return ids, err
	})
	record("router interfaces", portsReply{}, func() (any, error) {
		pages, err := ports.List(client, ports.ListOpts{DeviceID: *router}).AllPages(ctx)
		if err != nil {
			return nil, err
		}
		all, err := ports.ExtractPorts(pages)
		var networks []string
		for _, p := range all {
			networks = append(networks, p.NetworkID)
		}
		return networks, err
	})
	type portReply struct {
		Port ports.Port `json:"port"`
	}
	record("port update", portReply{}, func() (any, error) {
		pairs := []ports.AddressPair{{IPAddress: "10.244.7.0/24"}}
		p, err := ports.Update(ctx, client, portID, ports.UpdateOpts{AllowedAddressPairs: &pairs}).Extract()
		if err != nil {
			return nil, err
		}
		var ips []string
		for _, a := range p.AllowedAddressPairs {
			ips = append(ips, a.IPAddress)
		}
		return ips, nil
	})
	record("router of another id", nil, func() (any, error) {
		_, err := routers.Get(ctx, client, "no-such-router").Extract()
		return nil, err
	})
	out, _ := json.Marshal(steps)
	fmt.Println(string(out))
}

// tokenBody is the part of Keystone's token reply gophercloud reads (tokens.Token,
// its catalog, user and project), spelled out because gophercloud decodes it in
// pieces.
type tokenBody struct {
	Token struct {
		ExpiresAt string   `json:"expires_at"`
		IssuedAt  string   `json:"issued_at"`
		Methods   []string `json:"methods"`
		AuditIDs  []string `json:"audit_ids"`
		User      idName   `json:"user"`
		Project   idName   `json:"project"`
		Roles     []idName `json:"roles"`
		Catalog   []struct {
			Type      string `json:"type"`
			ID        string `json:"id"`
			Name      string `json:"name"`
			Endpoints []struct {
				ID        string `json:"id"`
				Interface string `json:"interface"`
				Region    string `json:"region"`
				RegionID  string `json:"region_id"`
				URL       string `json:"url"`
			} `json:"endpoints"`
		} `json:"catalog"`
	} `json:"token"`
}

type idName struct {
	ID     string `json:"id"`
	Name   string `json:"name"`
	Domain *struct {
		ID   string `json:"id"`
		Name string `json:"name"`
	} `json:"domain,omitempty"`
}

// strict lists the fields of the raw JSON that type t does not have.
func strict(body []byte, t reflect.Type, path string) []string {
	var raw any
	if err := json.Unmarshal(body, &raw); err != nil {
		return []string{path + ": not JSON: " + err.Error()}
	}
	return walk(raw, t, path)
}

func walk(raw any, t reflect.Type, path string) []string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var out []string
	switch v := raw.(type) {
	case map[string]any:
		if t.Kind() == reflect.Map || t.Kind() == reflect.Interface {
			return nil
		}
		if t.Kind() != reflect.Struct {
			return []string{path + ": an object where the client has " + t.String()}
		}
		fields := fieldsOf(t)
		for k, x := range v {
			ft, ok := fields[k]
			if !ok {
				out = append(out, path+"."+k)
				continue
			}
			out = append(out, walk(x, ft, path+"."+k)...)
		}
	case []any:
		if t.Kind() != reflect.Slice {
			return []string{path + ": a list where the client has " + t.String()}
		}
		for i, x := range v {
			out = append(out, walk(x, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
	}
	sort.Strings(out)
	return out
}

// fieldsOf maps a struct's JSON names to their types, embedded structs included; a
// field tagged "-" (decoded by the type's own UnmarshalJSON, as CreatedAt) by its
// snake_case name.
func fieldsOf(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		if f.Anonymous && tag == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range fieldsOf(ft) {
					out[k] = v
				}
				continue
			}
		}
		switch tag {
		case "-":
			out[snake(f.Name)] = f.Type
		case "":
			out[f.Name] = f.Type
		default:
			out[tag] = f.Type
		}
	}
	return out
}

func snake(name string) string {
	var b strings.Builder
	for i, r := range name {
		if unicode.IsUpper(r) {
			if i > 0 {
				b.WriteByte('_')
			}
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
