package main

import (
	"context"
	"errors"
	"fmt"
	"os"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantry-dev/gantry/pkg/sandbox"
)

// restConfig returns the client config and namespace that kubectl would use with the
// same flags: --kubeconfig, else $KUBECONFIG, else ~/.kube/config; --context; -n, else
// the context's namespace, else "default". When none of those names a kubeconfig that
// exists, the running sandbox's is used (`gantry sandbox up`).
func restConfig(kube *genericclioptions.ConfigFlags) (*rest.Config, string, error) {
	if !kubeconfigGiven(kube) {
		if st, err := sandbox.LoadState(); err == nil && st.Kubeconfig != "" {
			path := st.Kubeconfig
			kube.KubeConfig = &path
		} else {
			return nil, "", fmt.Errorf("no kubeconfig: pass --kubeconfig, set $KUBECONFIG, create %s, or start a sandbox with `gantry sandbox up`",
				clientcmd.RecommendedHomeFile)
		}
	}
	loader := kube.ToRawKubeConfigLoader()
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

// kubeconfigGiven reports whether --kubeconfig, $KUBECONFIG or ~/.kube/config names
// a kubeconfig.
func kubeconfigGiven(kube *genericclioptions.ConfigFlags) bool {
	if kube.KubeConfig != nil && *kube.KubeConfig != "" {
		return true
	}
	if os.Getenv(clientcmd.RecommendedConfigPathEnvVar) != "" {
		return true
	}
	_, err := os.Stat(clientcmd.RecommendedHomeFile)
	return err == nil
}

// podNames completes pod names in the namespace the flags name.
func podNames(ctx context.Context, kube *genericclioptions.ConfigFlags) []string {
	cfg, ns, err := restConfig(kube)
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
