package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantry-dev/gantry/pkg/sandbox"
)

// kubeFlags are kubectl's connection flags: --kubeconfig, and clientcmd's overrides
// (--context, --cluster, --user, -n/--namespace, --server, --token, …), bound the way
// kubectl binds them.
//
// Not k8s.io/cli-runtime's genericclioptions.ConfigFlags: that package pulls in
// kustomize, which imports Go's plugin package, and a binary that imports it is linked
// with immediate binding (-z now). go-nvml (linked through the sandbox's node agent)
// leaves NVML's symbols unresolved until the driver is loaded, so such a gantry binary
// dies at start with "undefined symbol: nvml…". clientcmd's loading rules and override
// flags are what ConfigFlags wraps, without that import.
type kubeFlags struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
}

func (k *kubeFlags) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&k.kubeconfig, clientcmd.RecommendedConfigPathFlag, "",
		"path to the kubeconfig file (default $KUBECONFIG, else ~/.kube/config)")
	clientcmd.BindOverrideFlags(&k.overrides, fs, clientcmd.RecommendedConfigOverrideFlags(""))
}

// loader is the kubeconfig as kubectl loads it with the same flags.
func (k *kubeFlags) loader() clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &k.overrides)
}

// restConfig returns the client config and namespace that kubectl would use with the
// same flags: --kubeconfig, else $KUBECONFIG, else ~/.kube/config; --context; -n, else
// the context's namespace, else "default". When none of those names a kubeconfig that
// exists, the running sandbox's is used (`gantry sandbox up`).
func restConfig(k *kubeFlags) (*rest.Config, string, error) {
	if !k.given() {
		st, err := sandbox.LoadState()
		if err != nil || st.Kubeconfig == "" {
			return nil, "", fmt.Errorf("no kubeconfig: pass --kubeconfig, set $KUBECONFIG, create %s, or start a sandbox with `gantry sandbox up`",
				clientcmd.RecommendedHomeFile)
		}
		k.kubeconfig = st.Kubeconfig
	}
	loader := k.loader()
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", err
	}
	cfg, err := loader.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, "", errors.New("the kubeconfig names no cluster: pass --kubeconfig or --context")
		}
		return nil, "", err
	}
	return cfg, ns, nil
}

// given reports whether --kubeconfig, $KUBECONFIG or ~/.kube/config names a
// kubeconfig.
func (k *kubeFlags) given() bool {
	if k.kubeconfig != "" || os.Getenv(clientcmd.RecommendedConfigPathEnvVar) != "" {
		return true
	}
	_, err := os.Stat(clientcmd.RecommendedHomeFile)
	return err == nil
}

// podNames completes pod names in the namespace the flags name.
func podNames(ctx context.Context, k *kubeFlags) []string {
	cfg, ns, err := restConfig(k)
	if err != nil {
		return nil
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	names := make([]string, len(pods.Items))
	for i, p := range pods.Items {
		names[i] = p.Name
	}
	return names
}
