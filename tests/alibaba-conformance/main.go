// alibaba-conformance drives the Alibaba Cloud double (tests/support/alibaba_double.rs)
// with the official Go SDKs: github.com/alibabacloud-go/vpc-20160428/v6 and
// ecs-20140526/v7 on darabonba-openapi v2, which sign every request with the V3
// signature (ACS3-HMAC-SHA256). One JSON command per line on stdin, one JSON answer
// per line on stdout, so that the Rust test can change the double between commands.
//
// Each answer carries "body" (the SDK's decoded response body, re-encoded), "error"
// (the SDK's error: its type, HTTP status, code) and "strict": every raw reply body
// of the command decoded again into the SDK's response body model with unknown
// fields refused. The SDK itself ignores fields it does not know, so without this a
// double could answer shapes the real API never sends and still pass.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"

	openapi "github.com/alibabacloud-go/darabonba-openapi/v2/client"
	openapiutil "github.com/alibabacloud-go/darabonba-openapi/v2/models"
	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	"github.com/alibabacloud-go/tea/dara"
	vpc "github.com/alibabacloud-go/vpc-20160428/v6/client"
	oldsdk "github.com/aliyun/alibaba-cloud-sdk-go/sdk"
	oldquotas "github.com/aliyun/alibaba-cloud-sdk-go/services/quotas"
	oldvpc "github.com/aliyun/alibaba-cloud-sdk-go/services/vpc"
	"github.com/aliyun/credentials-go/credentials"
	"github.com/aliyun/credentials-go/credentials/providers"
)

// recorder is the SDK's HTTP client: it keeps each reply's raw body and action.
type recorder struct {
	client  http.Client
	replies []reply
}

type reply struct {
	action string
	status int
	body   []byte
}

func (r *recorder) Call(request *http.Request, transport *http.Transport) (*http.Response, error) {
	r.client.Transport = transport
	resp, err := r.client.Do(request)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	// darabonba sets its headers in lower case, outside http.Header's canonical form.
	action := ""
	for k, v := range request.Header {
		if strings.EqualFold(k, "x-acs-action") && len(v) > 0 {
			action = v[0]
		}
	}
	r.replies = append(r.replies, reply{action, resp.StatusCode, body})
	return resp, nil
}

// models: the response body model of each action, for the strict decoding.
var models = map[string]reflect.Type{
	"CreateRouteEntries":     reflect.TypeOf(vpc.CreateRouteEntriesResponseBody{}),
	"DeleteRouteEntries":     reflect.TypeOf(vpc.DeleteRouteEntriesResponseBody{}),
	"DescribeRouteEntryList": reflect.TypeOf(vpc.DescribeRouteEntryListResponseBody{}),
	"DescribeRouteTableList": reflect.TypeOf(vpc.DescribeRouteTableListResponseBody{}),
	"DescribeVSwitches":      reflect.TypeOf(vpc.DescribeVSwitchesResponseBody{}),
	"DescribeVpcs":           reflect.TypeOf(vpc.DescribeVpcsResponseBody{}),
	"DescribeInstances":      reflect.TypeOf(ecs.DescribeInstancesResponseBody{}),
}

// errorBody: what an error reply holds (darabonba-openapi reads Code, Message,
// RequestId; the API sends HostId and Recommend too).
type errorBody struct {
	RequestId *string `json:"RequestId"`
	HostId    *string `json:"HostId"`
	Code      *string `json:"Code"`
	Message   *string `json:"Message"`
	Recommend *string `json:"Recommend"`
}

func strictProblems(replies []reply) []string {
	problems := []string{}
	for _, r := range replies {
		var target any
		if r.status >= 400 {
			target = &errorBody{}
		} else if t, ok := models[r.action]; ok {
			target = reflect.New(t).Interface()
		} else {
			problems = append(problems, fmt.Sprintf("%s: no model to check the reply against", r.action))
			continue
		}
		d := json.NewDecoder(bytes.NewReader(r.body))
		d.DisallowUnknownFields()
		if err := d.Decode(target); err != nil {
			problems = append(problems, fmt.Sprintf("%s (HTTP %d): %v in %s", r.action, r.status, err, r.body))
			continue
		}
		if r.status >= 400 {
			e := target.(*errorBody)
			if e.Code == nil || e.Message == nil || e.RequestId == nil {
				problems = append(problems, fmt.Sprintf("%s (HTTP %d): error without Code, Message or RequestId: %s", r.action, r.status, r.body))
			}
		}
	}
	return problems
}

type command struct {
	Op         string            `json:"op"`
	Region     string            `json:"region"`
	Entries    []entry           `json:"entries"`
	DryRun     bool              `json:"dryRun"`
	Table      string            `json:"table"`
	MaxResult  int32             `json:"maxResult"`
	NextToken  string            `json:"nextToken"`
	Filters    map[string]string `json:"filters"`
	Vpc        string            `json:"vpc"`
	Ids        []string          `json:"ids"`
	PageSize   int32             `json:"pageSize"`
	PageNumber int32             `json:"pageNumber"`
	// Credentials other than the process's (a wrong secret, a temporary key).
	// "ecsRamRole": the credentials of credentials-go's ECS RAM role provider, which
	// reaches the metadata service at its fixed 100.100.100.200 through the double
	// as its HTTP proxy (the only way to point it elsewhere).
	Credentials     string `json:"credentials"`
	AccessKeyId     string `json:"accessKeyId"`
	AccessKeySecret string `json:"accessKeySecret"`
	SecurityToken   string `json:"securityToken"`
	// ListProductQuotas (Quota Center, through the all-in-one SDK: the standalone
	// quotas-20200510 module is not served by the Go proxy).
	ProductCode     string            `json:"productCode"`
	QuotaActionCode string            `json:"quotaActionCode"`
	Dimensions      map[string]string `json:"dimensions"`
}

type entry struct {
	Table       string `json:"table"`
	Dst         string `json:"dst"`
	NextHop     string `json:"nextHop"`
	NextHopType string `json:"nextHopType"`
	Name        string `json:"name"`
	Description string `json:"description"`
	IpVersion   int32  `json:"ipVersion"`
	Id          string `json:"id"`
}

type answer struct {
	Body   any      `json:"body"`
	Pages  int      `json:"pages,omitempty"`
	Error  *sdkErr  `json:"error"`
	Strict []string `json:"strict"`
}

type sdkErr struct {
	Kind    string `json:"kind"`
	Status  int    `json:"status"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func describe(err error) *sdkErr {
	if err == nil {
		return nil
	}
	var throttling *openapi.ThrottlingError
	var client *openapi.ClientError
	var server *openapi.ServerError
	var sdk *dara.SDKError
	switch {
	case errors.As(err, &throttling):
		return &sdkErr{"throttling", dara.IntValue(throttling.StatusCode), dara.StringValue(throttling.Code), dara.StringValue(throttling.Message)}
	case errors.As(err, &client):
		return &sdkErr{"client", dara.IntValue(client.StatusCode), dara.StringValue(client.Code), dara.StringValue(client.Message)}
	case errors.As(err, &server):
		return &sdkErr{"server", dara.IntValue(server.StatusCode), dara.StringValue(server.Code), dara.StringValue(server.Message)}
	case errors.As(err, &sdk):
		return &sdkErr{"sdk", dara.IntValue(sdk.StatusCode), dara.StringValue(sdk.Code), dara.StringValue(sdk.Message)}
	}
	return &sdkErr{"other", 0, "", err.Error()}
}

func main() {
	endpoint := flag.String("endpoint", "", "host:port of the double")
	region := flag.String("region", "cn-hangzhou", "region")
	keyID := flag.String("access-key-id", "", "access key id")
	keySecret := flag.String("access-key-secret", "", "access key secret")
	flag.Parse()

	rec := &recorder{}
	newConfig := func(c command) *openapiutil.Config {
		config := &openapiutil.Config{
			AccessKeyId:     dara.String(*keyID),
			AccessKeySecret: dara.String(*keySecret),
			RegionId:        dara.String(*region),
			Endpoint:        dara.String(*endpoint),
			Protocol:        dara.String("HTTP"),
			HttpClient:      rec,
		}
		if c.AccessKeyId != "" {
			config.AccessKeyId = dara.String(c.AccessKeyId)
			config.AccessKeySecret = dara.String(c.AccessKeySecret)
		}
		if c.SecurityToken != "" {
			config.SecurityToken = dara.String(c.SecurityToken)
		}
		if c.Credentials == "ecsRamRole" {
			provider, err := providers.NewECSRAMRoleCredentialsProviderBuilder().
				WithDisableIMDSv1(true).
				WithHttpOptions(&providers.HttpOptions{Proxy: "http://" + *endpoint}).
				Build()
			if err != nil {
				fmt.Fprintf(os.Stderr, "alibaba-conformance: ecs ram role provider: %v\n", err)
				os.Exit(2)
			}
			config.AccessKeyId = nil
			config.AccessKeySecret = nil
			config.Credential = credentials.FromCredentialsProvider("ecs_ram_role", provider)
		}
		return config
	}

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := json.NewEncoder(os.Stdout)
	for in.Scan() {
		var c command
		if err := json.Unmarshal(in.Bytes(), &c); err != nil {
			fmt.Fprintf(os.Stderr, "alibaba-conformance: bad command %q: %v\n", in.Text(), err)
			os.Exit(2)
		}
		if c.Region == "" {
			c.Region = *region
		}
		rec.replies = nil
		a := answer{}
		vpcClient, err := vpc.NewClient(newConfig(c))
		if err != nil {
			fmt.Fprintf(os.Stderr, "alibaba-conformance: vpc client: %v\n", err)
			os.Exit(2)
		}
		ecsClient, err := ecs.NewClient(newConfig(c))
		if err != nil {
			fmt.Fprintf(os.Stderr, "alibaba-conformance: ecs client: %v\n", err)
			os.Exit(2)
		}
		// Keep the SDK's typed errors (ThrottlingError, ClientError, ServerError),
		// which it otherwise flattens into one SDKError: which class the SDK puts a
		// reply in is part of what the test checks.
		vpcClient.Client.DisableSDKError = dara.Bool(true)
		ecsClient.Client.DisableSDKError = dara.Bool(true)
		switch c.Op {
		case "create":
			req := &vpc.CreateRouteEntriesRequest{RegionId: dara.String(c.Region)}
			if c.DryRun {
				req.DryRun = dara.Bool(true)
			}
			for _, e := range c.Entries {
				re := &vpc.CreateRouteEntriesRequestRouteEntries{
					RouteTableId: dara.String(e.Table),
					DstCidrBlock: dara.String(e.Dst),
					NextHop:      dara.String(e.NextHop),
				}
				if e.NextHopType != "" {
					re.NextHopType = dara.String(e.NextHopType)
				}
				if e.Name != "" {
					re.Name = dara.String(e.Name)
				}
				if e.Description != "" {
					re.Description = dara.String(e.Description)
				}
				if e.IpVersion != 0 {
					re.IpVersion = dara.Int32(e.IpVersion)
				}
				req.RouteEntries = append(req.RouteEntries, re)
			}
			resp, err := vpcClient.CreateRouteEntries(req)
			a.Error = describe(err)
			if err == nil {
				a.Body = resp.Body
			}
		case "delete":
			req := &vpc.DeleteRouteEntriesRequest{RegionId: dara.String(c.Region)}
			for _, e := range c.Entries {
				re := &vpc.DeleteRouteEntriesRequestRouteEntries{}
				if e.Id != "" {
					re.RouteEntryId = dara.String(e.Id)
				}
				if e.Table != "" {
					re.RouteTableId = dara.String(e.Table)
				}
				if e.Dst != "" {
					re.DstCidrBlock = dara.String(e.Dst)
				}
				if e.NextHop != "" {
					re.NextHop = dara.String(e.NextHop)
				}
				req.RouteEntries = append(req.RouteEntries, re)
			}
			resp, err := vpcClient.DeleteRouteEntries(req)
			a.Error = describe(err)
			if err == nil {
				a.Body = resp.Body
			}
		case "list", "listAll":
			// "list": one page; "listAll": every page, following NextToken as the
			// peer's listRouteBatch does.
			all := []*vpc.DescribeRouteEntryListResponseBodyRouteEntrysRouteEntry{}
			token := c.NextToken
			for {
				req := &vpc.DescribeRouteEntryListRequest{
					RegionId:     dara.String(c.Region),
					RouteTableId: dara.String(c.Table),
				}
				if c.MaxResult != 0 {
					req.MaxResult = dara.Int32(c.MaxResult)
				}
				if token != "" {
					req.NextToken = dara.String(token)
				}
				for k, v := range c.Filters {
					switch k {
					case "RouteEntryType":
						req.RouteEntryType = dara.String(v)
					case "NextHopType":
						req.NextHopType = dara.String(v)
					case "NextHopId":
						req.NextHopId = dara.String(v)
					case "DestinationCidrBlock":
						req.DestinationCidrBlock = dara.String(v)
					case "IpVersion":
						req.IpVersion = dara.String(v)
					case "RouteEntryId":
						req.RouteEntryId = dara.String(v)
					case "RouteEntryName":
						req.RouteEntryName = dara.String(v)
					default:
						fmt.Fprintf(os.Stderr, "alibaba-conformance: unknown filter %s\n", k)
						os.Exit(2)
					}
				}
				resp, err := vpcClient.DescribeRouteEntryList(req)
				a.Pages++
				if err != nil {
					a.Error = describe(err)
					break
				}
				if c.Op == "list" {
					a.Body = resp.Body
					break
				}
				if resp.Body.RouteEntrys != nil {
					all = append(all, resp.Body.RouteEntrys.RouteEntry...)
				}
				token = dara.StringValue(resp.Body.NextToken)
				if token == "" {
					a.Body = map[string]any{"RouteEntry": all}
					break
				}
				if a.Pages > 1000 {
					a.Error = &sdkErr{"loop", 0, "", "more than 1000 pages: NextToken never ends"}
					break
				}
			}
		case "tables":
			req := &vpc.DescribeRouteTableListRequest{RegionId: dara.String(c.Region)}
			if c.Vpc != "" {
				req.VpcId = dara.String(c.Vpc)
			}
			if c.Table != "" {
				req.RouteTableId = dara.String(c.Table)
			}
			resp, err := vpcClient.DescribeRouteTableList(req)
			a.Error = describe(err)
			if err == nil {
				a.Body = resp.Body
			}
		case "vswitches":
			req := &vpc.DescribeVSwitchesRequest{RegionId: dara.String(c.Region)}
			if c.Vpc != "" {
				req.VpcId = dara.String(c.Vpc)
			}
			resp, err := vpcClient.DescribeVSwitches(req)
			a.Error = describe(err)
			if err == nil {
				a.Body = resp.Body
			}
		case "vpcs":
			req := &vpc.DescribeVpcsRequest{RegionId: dara.String(c.Region)}
			if c.Vpc != "" {
				req.VpcId = dara.String(c.Vpc)
			}
			resp, err := vpcClient.DescribeVpcs(req)
			a.Error = describe(err)
			if err == nil {
				a.Body = resp.Body
			}
		case "instances":
			req := &ecs.DescribeInstancesRequest{RegionId: dara.String(c.Region)}
			if len(c.Ids) > 0 {
				ids, _ := json.Marshal(c.Ids)
				req.InstanceIds = dara.String(string(ids))
			}
			if c.Vpc != "" {
				req.VpcId = dara.String(c.Vpc)
			}
			if c.PageSize != 0 {
				req.PageSize = dara.Int32(c.PageSize)
			}
			if c.PageNumber != 0 {
				req.PageNumber = dara.Int32(c.PageNumber)
			}
			resp, err := ecsClient.DescribeInstances(req)
			a.Error = describe(err)
			if err == nil {
				a.Body = resp.Body
			}
		case "listProductQuotas":
			a.Body, a.Error, a.Strict = listProductQuotas(c, *endpoint, *region, *keyID, *keySecret)
			if err := out.Encode(a); err != nil {
				fmt.Fprintf(os.Stderr, "alibaba-conformance: %v\n", err)
				os.Exit(2)
			}
			continue
		case "peerList", "peerCreate", "peerDelete":
			// The peer's SDK (aliyun/alibaba-cloud-sdk-go, V1 signature, its own
			// lenient decoding), called as the peer's vpc.go calls it.
			a.Body, a.Error = peer(c, *endpoint, *region, *keyID, *keySecret)
		default:
			fmt.Fprintf(os.Stderr, "alibaba-conformance: unknown op %q\n", c.Op)
			os.Exit(2)
		}
		a.Strict = strictProblems(rec.replies)
		if err := out.Encode(a); err != nil {
			fmt.Fprintf(os.Stderr, "alibaba-conformance: %v\n", err)
			os.Exit(2)
		}
	}
}

// peer runs one call of the peer's SDK. Its replies are checked by its own decoding
// only (its response structs are the peer's view of the API).
func peer(c command, endpoint, region, keyID, keySecret string) (any, *sdkErr) {
	config := oldsdk.NewConfig()
	config.Scheme = "HTTP"
	config.AutoRetry = false
	client, err := oldvpc.NewClientWithOptions(region, config, nil)
	if err != nil {
		return nil, &sdkErr{"other", 0, "", err.Error()}
	}
	if err := client.InitWithAccessKey(region, keyID, keySecret); err != nil {
		return nil, &sdkErr{"other", 0, "", err.Error()}
	}
	client.GetConfig().Scheme = "HTTP"
	client.GetConfig().AutoRetry = false
	client.Domain = endpoint
	describe := func(err error) *sdkErr {
		if se, ok := err.(interface {
			HttpStatus() int
			ErrorCode() string
			Message() string
		}); ok {
			return &sdkErr{"server", se.HttpStatus(), se.ErrorCode(), se.Message()}
		}
		return &sdkErr{"other", 0, "", err.Error()}
	}
	switch c.Op {
	case "peerList":
		req := oldvpc.CreateDescribeRouteEntryListRequest()
		req.RouteTableId = c.Table
		req.RouteEntryType = "Custom"
		req.NextHopType = "Instance"
		req.MaxResult = "500"
		req.NextToken = c.NextToken
		resp, err := client.DescribeRouteEntryList(req)
		if err != nil {
			return nil, describe(err)
		}
		return resp, nil
	case "peerCreate":
		entries := []oldvpc.CreateRouteEntriesRouteEntries{}
		for _, e := range c.Entries {
			entries = append(entries, oldvpc.CreateRouteEntriesRouteEntries{
				RouteTableId: e.Table, DstCidrBlock: e.Dst, NextHop: e.NextHop, NextHopType: "Instance",
			})
		}
		req := oldvpc.CreateCreateRouteEntriesRequest()
		req.RouteEntries = &entries
		resp, err := client.CreateRouteEntries(req)
		if err != nil {
			return nil, describe(err)
		}
		return resp, nil
	default:
		entries := []oldvpc.DeleteRouteEntriesRouteEntries{}
		for _, e := range c.Entries {
			entries = append(entries, oldvpc.DeleteRouteEntriesRouteEntries{
				RouteTableId: e.Table, DstCidrBlock: e.Dst, NextHop: e.NextHop,
			})
		}
		req := oldvpc.CreateDeleteRouteEntriesRequest()
		req.RouteEntries = &entries
		resp, err := client.DeleteRouteEntries(req)
		if err != nil {
			return nil, describe(err)
		}
		return resp, nil
	}
}

// listProductQuotas calls Quota Center's ListProductQuotas with the all-in-one SDK's
// quotas client (V1 signature, parameters in the form body) and decodes the raw reply
// strictly into its ListProductQuotasResponse: an unknown field or a wrong type is a
// problem of the double's.
func listProductQuotas(c command, endpoint, region, keyID, keySecret string) (any, *sdkErr, []string) {
	config := oldsdk.NewConfig()
	config.Scheme = "HTTP"
	config.AutoRetry = false
	client, err := oldquotas.NewClientWithOptions(region, config, nil)
	if err != nil {
		return nil, &sdkErr{"other", 0, "", err.Error()}, []string{}
	}
	if err := client.InitWithAccessKey(region, keyID, keySecret); err != nil {
		return nil, &sdkErr{"other", 0, "", err.Error()}, []string{}
	}
	client.GetConfig().Scheme = "HTTP"
	client.GetConfig().AutoRetry = false
	client.Domain = endpoint
	req := oldquotas.CreateListProductQuotasRequest()
	req.Scheme = "HTTP"
	req.ProductCode = c.ProductCode
	req.QuotaActionCode = c.QuotaActionCode
	if len(c.Dimensions) > 0 {
		dims := []oldquotas.ListProductQuotasDimensions{}
		for k, v := range c.Dimensions {
			dims = append(dims, oldquotas.ListProductQuotasDimensions{Key: k, Value: v})
		}
		req.Dimensions = &dims
	}
	resp, err := client.ListProductQuotas(req)
	if err != nil {
		if se, ok := err.(interface {
			HttpStatus() int
			ErrorCode() string
			Message() string
		}); ok {
			return nil, &sdkErr{"server", se.HttpStatus(), se.ErrorCode(), se.Message()}, []string{}
		}
		return nil, &sdkErr{"other", 0, "", err.Error()}, []string{}
	}
	problems := []string{}
	d := json.NewDecoder(bytes.NewReader(resp.GetHttpContentBytes()))
	d.DisallowUnknownFields()
	var strict oldquotas.ListProductQuotasResponse
	if err := d.Decode(&strict); err != nil {
		problems = append(problems, fmt.Sprintf("ListProductQuotas: %v in %s", err, resp.GetHttpContentBytes()))
	}
	return resp, nil, problems
}
