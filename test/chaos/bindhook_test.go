package chaos

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/test/testenv"
)

// bindingHook is a validating webhook on pods/binding that the harness serves: it
// holds the scheduler's first Binding in an armed namespace until the round has done
// what it wants (SIGKILLed the scheduler), then lets it through or refuses it. It is
// the pause between a claim's allocation write (dra.Allocate, before the Binding) and
// the Binding that a SIGKILL must land in, made certain instead of raced.
type bindingHook struct {
	mu sync.Mutex
	// fired receives the pod of the first held Binding; the round answers on reply
	// (true: let the Binding through).
	fired chan string
	reply chan bool
	armed bool
}

// hookLabel on a namespace sends its Bindings to the hook.
const hookLabel = "chaos.gantry.dev/binding-hook"

var hook = &bindingHook{}

// startBindingHook serves the hook over TLS and registers it (failurePolicy Ignore:
// a hook that is not armed or not answering holds nothing back).
func startBindingHook(ctx context.Context, e *testenv.Env) error {
	dir := filepath.Join(e.Dir, "bindhook")
	caPEM, err := e.ServingCert(dir)
	if err != nil {
		return err
	}
	cert, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: hook, ReadHeaderTimeout: 10 * time.Second, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	none := admissionregistrationv1.SideEffectClassNone
	cfg := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "chaos-binding-hook"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:         "binding-hook.chaos.gantry.dev",
			ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: ptr.To("https://" + ln.Addr().String() + "/"), CABundle: caPEM},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods/binding"}},
			}},
			NamespaceSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{hookLabel: "armed"}},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(20)),
		}},
	}
	_, err = e.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, cfg, metav1.CreateOptions{})
	return err
}

// arm makes the hook hold the next Binding it sees.
func (b *bindingHook) arm() (fired <-chan string, reply chan<- bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fired, b.reply, b.armed = make(chan string, 1), make(chan bool, 1), true
	return b.fired, b.reply
}

func (b *bindingHook) disarm() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.armed = false
}

func (b *bindingHook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var review admissionv1.AdmissionReview
	if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
		http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
		return
	}
	allowed, message := true, ""
	b.mu.Lock()
	armed, fired, reply := b.armed, b.fired, b.reply
	b.armed = false // one Binding per arming
	b.mu.Unlock()
	if armed {
		fired <- review.Request.Namespace + "/" + review.Request.Name
		select {
		case allowed = <-reply:
		case <-time.After(15 * time.Second):
		}
		if !allowed {
			message = "chaos: this Binding is refused, as if the scheduler had died before sending it"
		}
	}
	review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: allowed}
	if !allowed {
		review.Response.Result = &metav1.Status{Message: message}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(&review)
}

// killBetweenClaimAndBinding creates a gang of DRA pods in a namespace whose Bindings
// the hook holds; when the scheduler's first Binding arrives (its claim allocation
// already written), SIGKILLs the scheduler, then lets that Binding through or
// refuses it at random, and restarts the scheduler. The gang must end whole with every
// claim allocated on its pod's node and no allocation left to nobody.
func killBetweenClaimAndBinding(ctx context.Context, h *harness, ns string) (int, error) {
	nsObj, err := env.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	if nsObj.Labels == nil {
		nsObj.Labels = map[string]string{}
	}
	nsObj.Labels[hookLabel] = "armed"
	if _, err := env.Client.CoreV1().Namespaces().Update(ctx, nsObj, metav1.UpdateOptions{}); err != nil {
		return 0, err
	}
	fired, reply := hook.arm()
	defer hook.disarm()
	size := 2 + h.rng.IntN(2)
	var mem int64
	if h.rng.IntN(2) == 0 {
		mem = 8192 // shares of 8 GiB
	}
	if err := createDRAGang(ctx, ns, "dra", size, mem); err != nil {
		return 0, err
	}
	var pod string
	select {
	case pod = <-fired:
	case <-time.After(90 * time.Second):
		return 0, fmt.Errorf("no Binding of the DRA gang reached the hook in 90s")
	}
	through := h.rng.IntN(2) == 0
	c, _ := env.Client.ResourceV1().ResourceClaims(ns).Get(ctx, podName(pod), metav1.GetOptions{})
	h.logf("Binding of %s held (claim allocated: %v); SIGKILL the scheduler, then the Binding is let through: %v",
		pod, c != nil && c.Status.Allocation != nil, through)
	if err := h.stopSchedulers(); err != nil {
		return 0, err
	}
	reply <- through
	time.Sleep(jitter(h.rng, 2*time.Second))
	if err := h.ensureScheduler(ctx); err != nil {
		return 0, err
	}
	return size, nil
}

func podName(key string) string {
	for i := range key {
		if key[i] == '/' {
			return key[i+1:]
		}
	}
	return key
}
