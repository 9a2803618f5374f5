package deploy

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"slices"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gantry-dev/gantry/pkg/kube"
)

func TestChartWebhooks(t *testing.T) {
	objs := render(t)
	var (
		secret   corev1.Secret
		svc      corev1.Service
		queues   admissionregistrationv1.ValidatingWebhookConfiguration
		pods     admissionregistrationv1.MutatingWebhookConfiguration
		deploy   appsv1.Deployment
		svcName  = "gantry-scheduler-webhook"
		dnsName  = svcName + "." + releaseNamespace + ".svc"
		webhooks []admissionregistrationv1.WebhookClientConfig
	)
	into(t, find(t, objs, "Secret", "gantry-scheduler-webhook-tls"), &secret)
	into(t, find(t, objs, "Service", svcName), &svc)
	into(t, find(t, objs, "ValidatingWebhookConfiguration", "gantry-scheduler-queues"), &queues)
	into(t, find(t, objs, "MutatingWebhookConfiguration", "gantry-scheduler-pods"), &pods)
	into(t, find(t, objs, "Deployment", "gantry-scheduler"), &deploy)

	t.Run("the API server trusts the serving certificate", func(t *testing.T) {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(secret.Data["ca.crt"]) {
			t.Fatal("ca.crt holds no certificate")
		}
		block, _ := pem.Decode(secret.Data["tls.crt"])
		if block == nil {
			t.Fatal("tls.crt holds no certificate")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: dnsName, Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			t.Errorf("the certificate does not serve %s: %v", dnsName, err)
		}
		webhooks = append(webhooks, queues.Webhooks[0].ClientConfig, pods.Webhooks[0].ClientConfig)
		for _, cc := range webhooks {
			if string(cc.CABundle) != string(secret.Data["ca.crt"]) {
				t.Errorf("webhook %s: caBundle is not the Secret's ca.crt", *cc.Service.Path)
			}
			if cc.Service == nil || cc.Service.Name != svcName || cc.Service.Namespace != releaseNamespace {
				t.Errorf("webhook client config %+v does not name Service %s/%s", cc, releaseNamespace, svcName)
			}
		}
	})

	t.Run("paths and policies", func(t *testing.T) {
		q, p := queues.Webhooks[0], pods.Webhooks[0]
		if *q.ClientConfig.Service.Path != kube.ValidateQueuePath || *p.ClientConfig.Service.Path != kube.DefaultPodPath {
			t.Errorf("paths %s and %s, the scheduler serves %s and %s", *q.ClientConfig.Service.Path, *p.ClientConfig.Service.Path, kube.ValidateQueuePath, kube.DefaultPodPath)
		}
		if *q.FailurePolicy != admissionregistrationv1.Fail {
			t.Errorf("Queue webhook failurePolicy %s, want Fail: a tree that could not be checked is not let in", *q.FailurePolicy)
		}
		if *p.FailurePolicy != admissionregistrationv1.Ignore {
			t.Errorf("pod webhook failurePolicy %s, want Ignore: an outage must not block pods", *p.FailurePolicy)
		}
		if len(q.Rules) != 1 || !slices.Equal(q.Rules[0].Resources, []string{"queues"}) {
			t.Errorf("Queue webhook rules %+v: want queues only", q.Rules)
		}
		if len(p.Rules) != 1 || !slices.Equal(p.Rules[0].Resources, []string{"pods"}) || !slices.Equal(p.Rules[0].Operations, []admissionregistrationv1.OperationType{admissionregistrationv1.Create}) {
			t.Errorf("pod webhook rules %+v: want pods on CREATE only", p.Rules)
		}
		if !slices.Contains(p.NamespaceSelector.MatchExpressions[0].Values, releaseNamespace) {
			t.Errorf("the pod webhook must skip the release namespace, or the scheduler's own pods would wait on it: %+v", p.NamespaceSelector)
		}
	})

	t.Run("the Service reaches the scheduler's webhook port", func(t *testing.T) {
		c := deploy.Spec.Template.Spec.Containers[0]
		var port int32
		for _, cp := range c.Ports {
			if cp.Name == svc.Spec.Ports[0].TargetPort.StrVal {
				port = cp.ContainerPort
			}
		}
		if port == 0 {
			t.Fatalf("Service targets port %q, which the scheduler container does not name", svc.Spec.Ports[0].TargetPort.StrVal)
		}
		if !slices.Contains(c.Args, "--webhook-bind-address=:9443") || port != 9443 {
			t.Errorf("webhook port %d, args %v", port, c.Args)
		}
	})

	t.Run("the chart's default queue is created without the webhook", func(t *testing.T) {
		sel := queues.Webhooks[0].ObjectSelector
		label := sel.MatchExpressions[0].Key
		if got := find(t, objs, "Queue", "default").GetLabels()[label]; !slices.Contains(sel.MatchExpressions[0].Values, got) {
			t.Errorf("the default Queue (label %s=%q) would go through the Queue webhook, which is not served yet at install", label, got)
		}
	})

	t.Run("pod webhook is called only for pods it would change", func(t *testing.T) {
		cond := pods.Webhooks[0].MatchConditions[0].Expression
		env, err := cel.NewEnv(cel.Variable("object", cel.DynType))
		if err != nil {
			t.Fatal(err)
		}
		ast, iss := env.Compile(cond)
		if iss.Err() != nil {
			t.Fatalf("matchCondition does not compile: %v\n%s", iss.Err(), cond)
		}
		prg, err := env.Program(ast)
		if err != nil {
			t.Fatal(err)
		}
		gpu := corev1.ResourceName("nvidia.com/gpu")
		one := resource.MustParse("1")
		for _, tc := range []struct {
			name string
			res  corev1.ResourceRequirements
			init bool
			want bool
		}{
			{"GPU requested, not limited (the KAI walkthrough's worker)", corev1.ResourceRequirements{Requests: corev1.ResourceList{gpu: one, corev1.ResourceCPU: one}}, false, true},
			{"GPU requested and limited", corev1.ResourceRequirements{Requests: corev1.ResourceList{gpu: one}, Limits: corev1.ResourceList{gpu: one}}, false, false},
			{"GPU only limited", corev1.ResourceRequirements{Limits: corev1.ResourceList{gpu: one}}, false, false},
			{"CPU and memory only", corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: one, corev1.ResourceMemory: one}}, false, false},
			{"no resources", corev1.ResourceRequirements{}, false, false},
			{"init container requests a GPU", corev1.ResourceRequirements{Requests: corev1.ResourceList{gpu: one}}, true, true},
		} {
			pod := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: tc.res}}}}
			if tc.init {
				pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{}
				pod.Spec.InitContainers = []corev1.Container{{Name: "init", Resources: tc.res}}
			}
			b, _ := json.Marshal(pod)
			var obj map[string]any
			_ = json.Unmarshal(b, &obj)
			out, _, err := prg.Eval(map[string]any{"object": obj})
			if err != nil {
				t.Errorf("%s: %v", tc.name, err)
				continue
			}
			if out.Value() != tc.want {
				t.Errorf("%s: matchCondition = %v, want %v", tc.name, out.Value(), tc.want)
			}
		}
	})

	t.Run("disabled", func(t *testing.T) {
		for _, o := range render(t, "webhooks.enabled=false") {
			switch o.GetKind() {
			case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "Secret":
				t.Errorf("%s %s rendered with webhooks.enabled=false", o.GetKind(), o.GetName())
			case "Deployment":
				var d appsv1.Deployment
				into(t, o, &d)
				if slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Args, func(a string) bool { return len(a) > 10 && a[:10] == "--webhook-" }) {
					t.Errorf("scheduler still serves webhooks: %v", d.Spec.Template.Spec.Containers[0].Args)
				}
			}
		}
	})
}
