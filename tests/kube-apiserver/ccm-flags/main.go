// Command ccm-flags prints the flag set of upstream's real
// cloud-controller-manager command (k8s.io/cloud-provider/app at the version
// pinned in ../go.mod) and the feature gates it knows, as one JSON document on
// stdout, without running anything:
//
//	{"flags":[{"name":"cluster-cidr","shorthand":"","type":"string","default":"","usage":"..."},...],
//	 "gates":[{"name":"AllAlpha","default":false,"preRelease":"ALPHA","lockToDefault":false},...]}
//
// The command is built as a provider's main builds it (the Hetzner CCM's among
// them): default options, the default controllers and their aliases, no
// additional flag sets. Cobra adds --help only when the command executes, so
// it is added here by hand. route-controller's tests feed every flag through
// their own parser (tests/ccm_flags.rs).
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"

	"github.com/spf13/pflag"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/cloud-provider/app"
	"k8s.io/cloud-provider/names"
	"k8s.io/cloud-provider/options"
	cliflag "k8s.io/component-base/cli/flag"
)

type flagInfo struct {
	Name      string `json:"name"`
	Shorthand string `json:"shorthand"`
	Type      string `json:"type"`
	Default   string `json:"default"`
	Usage     string `json:"usage"`
}

type gateInfo struct {
	Name          string `json:"name"`
	Default       bool   `json:"default"`
	PreRelease    string `json:"preRelease"`
	LockToDefault bool   `json:"lockToDefault"`
}

func main() {
	opts, err := options.NewCloudControllerManagerOptions()
	if err != nil {
		fmt.Fprintf(os.Stderr, "ccm-flags: default options: %v\n", err)
		os.Exit(1)
	}
	stop := make(chan struct{})
	cmd := app.NewCloudControllerManagerCommand(opts, nil, app.DefaultInitFuncConstructors,
		names.CCMControllerAliases(), cliflag.NamedFlagSets{}, stop)
	cmd.InitDefaultHelpFlag()

	var out struct {
		Flags []flagInfo `json:"flags"`
		Gates []gateInfo `json:"gates"`
	}
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		out.Flags = append(out.Flags, flagInfo{f.Name, f.Shorthand, f.Value.Type(), f.DefValue, f.Usage})
	})
	for name, spec := range utilfeature.DefaultMutableFeatureGate.GetAll() {
		out.Gates = append(out.Gates, gateInfo{string(name), spec.Default, string(spec.PreRelease), spec.LockToDefault})
	}
	sort.Slice(out.Gates, func(i, j int) bool { return out.Gates[i].Name < out.Gates[j].Name })
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		fmt.Fprintf(os.Stderr, "ccm-flags: %v\n", err)
		os.Exit(1)
	}
}
