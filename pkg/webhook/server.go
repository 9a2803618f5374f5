package webhook

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/certs"
	"github.com/gantry-dev/gantry/pkg/httpserver"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
)

// Webhook paths, as the webhook configurations name them.
const (
	ValidateQueuePath = "/validate-queue"
	DefaultPodPath    = "/default-pod"
)

// Serve serves the Queue validating webhook and the pod defaulting webhook
// over TLS (tls.crt and tls.key in certDir, reloaded when they change) until ctx ends. It returns once the
// listener is open.
func Serve(ctx context.Context, addr, certDir string, dyn dynamic.Interface, opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	// The certificate is reloaded when its files change (a renewal by pkg/certs, or a
	// Secret mounted by cert-manager), so no restart is needed.
	tlsConfig, err := certs.ServingTLSConfig(ctx, certDir)
	if err != nil {
		return err
	}
	listQueues := func(ctx context.Context) ([]schedulingv1alpha1.Queue, error) {
		list, err := dyn.Resource(gvr.Queue).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		out := make([]schedulingv1alpha1.Queue, len(list.Items))
		for i := range list.Items {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &out[i]); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	mux := http.NewServeMux()
	mux.Handle(ValidateQueuePath, NewQueueValidator(listQueues))
	pods := PodDefaulter{}
	if o.annotationShareClaims {
		pods.Templates = DynamicTemplateEnsurer(dyn)
		pods.Sizes = DynamicGPUSizes(dyn, 30*time.Second)
		go RunTemplateOwners(ctx, dyn, pods.TemplateFor)
	}
	mux.Handle(DefaultPodPath, pods)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("webhook listen %s: %w", addr, err)
	}
	srv := httpserver.New(mux)
	srv.TLSConfig = tlsConfig
	httpserver.Serve(ctx, srv, ln, func(err error) { klog.ErrorS(err, "Webhook server stopped") })
	return nil
}

// Option changes what Serve serves.
type Option func(*options)

type options struct{ annotationShareClaims bool }

// WithAnnotationShareClaims makes the pod webhook turn gantry.dev/gpu-memory and
// gantry.dev/gpu-fraction annotations into DRA claims (PodDefaulter.Templates and
// Sizes), and record the pods using each share template as its owners
// (RunTemplateOwners), so that the garbage collector deletes it when none is left; the
// scheduler then needs get, create and patch on resourceclaimtemplates, list on
// resourceslices and list and watch on pods.
func WithAnnotationShareClaims(on bool) Option {
	return func(o *options) { o.annotationShareClaims = on }
}
