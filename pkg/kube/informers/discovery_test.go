package informers

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gantry-dev/gantry/pkg/names/gvr"
)

// An API server that fails discovery twice (slow, restarting) is asked again: the
// scheduler still watches ResourceClaims. Before, one failed answer at start meant no
// DRA informers until a restart.
func TestDiscoveryAsksAgainAfterAnError(t *testing.T) {
	client := fake.NewSimpleClientset()
	client.Resources = []*metav1.APIResourceList{{
		GroupVersion: gvr.Resource.String(),
		APIResources: []metav1.APIResource{{Name: "resourceclaims"}, {Name: "resourceclaims/status"}},
	}}
	failures := 2
	client.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures > 0 {
			failures--
			return true, nil, errors.New("the server was unable to return a response in the time allotted")
		}
		return false, nil, nil
	})
	served := servedResources(client, gvr.Resource)
	if !served[gvr.Resource.WithResource("resourceclaims")] {
		t.Fatalf("served %v after two failed answers: want resourceclaims", served)
	}
	if served[gvr.Resource.WithResource("resourceclaims/status")] {
		t.Errorf("a subresource is listed as served: %v", served)
	}
}
