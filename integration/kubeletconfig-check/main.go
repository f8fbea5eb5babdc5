// kubeletconfig-check strictly decodes KubeletConfiguration documents with the kubelet's own
// published types (k8s.io/kubelet/config/v1beta1), so a misspelled or misplaced field fails.
//
// Usage: kubeletconfig-check [-fragment] FILE...
//
// Without -fragment each FILE must be a complete KubeletConfiguration document (apiVersion and kind
// included), as the kubelet requires of files in its --config-dir. With -fragment, FILE is a
// numa-shim configuration: numa-shim's own keys are dropped and the rest is decoded as
// KubeletConfiguration fields. Prints one line per file and exits 1 if any file fails.
package main

import (
	"flag"
	"fmt"
	"os"

	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"sigs.k8s.io/yaml"
)

// numaShimKeys are numa-shim's own settings, which are not KubeletConfiguration fields (the
// keys of src/config.rs KNOWN_KEYS that the kubelet does not have; `containerRuntimeEndpoint` and
// `logging` are kubelet fields too and stay).
var numaShimKeys = []string{
	"listen", "runtime", "socketMode", "socketGroup", "shutdownGracePeriod", "logFormat",
	"logLevel", "stateDir", "topology", "podKnowledge", "podsApiSocket", "kubeconfig", "nodeName",
	"refusalReports", "draClaims", "draNumaAttributes", "draClaimsTimeout",
	"podResourcesSocket", "kubeletPodResourcesSocket", "podResourcesQps", "podResourcesBurst",
	"metricsAddress", "driftPeriod", "kubeletConfig", "kubeletConfigDir", "crioConfig", "devicePluginFront",
}

func check(path string, fragment bool) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if fragment {
		var doc map[string]interface{}
		if err := yaml.Unmarshal(raw, &doc); err != nil {
			return err
		}
		for _, key := range numaShimKeys {
			delete(doc, key)
		}
		if raw, err = yaml.Marshal(doc); err != nil {
			return err
		}
	}
	var config kubeletv1beta1.KubeletConfiguration
	if err := yaml.UnmarshalStrict(raw, &config); err != nil {
		return err
	}
	if !fragment {
		if config.APIVersion != "kubelet.config.k8s.io/v1beta1" || config.Kind != "KubeletConfiguration" {
			return fmt.Errorf("apiVersion/kind %q/%q, want kubelet.config.k8s.io/v1beta1/KubeletConfiguration",
				config.APIVersion, config.Kind)
		}
	}
	return nil
}

func main() {
	fragment := flag.Bool("fragment", false, "files are numa-shim configs; drop numa-shim's own keys first")
	flag.Parse()
	failed := false
	for _, path := range flag.Args() {
		if err := check(path, *fragment); err != nil {
			fmt.Printf("FAIL %s: %v\n", path, err)
			failed = true
		} else {
			fmt.Printf("ok   %s\n", path)
		}
	}
	if failed || flag.NArg() == 0 {
		os.Exit(1)
	}
}
