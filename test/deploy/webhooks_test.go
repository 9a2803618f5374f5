package deploy

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/google/cel-go/cel"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/gantry-dev/gantry/pkg/certs"
	"github.com/gantry-dev/gantry/pkg/webhook"
)

func TestChartWebhooks(t *testing.T) {
	objs := render(t)
	var (
		svc     corev1.Service
		queues  admissionregistrationv1.ValidatingWebhookConfiguration
		pods    admissionregistrationv1.MutatingWebhookConfiguration
		deploy  appsv1.Deployment
		svcName = "gantry-scheduler-webhook"
	)
	into(t, find(t, objs, "Service", svcName), &svc)
	into(t, find(t, objs, "ValidatingWebhookConfiguration", "gantry-scheduler-queues"), &queues)
	into(t, find(t, objs, "MutatingWebhookConfiguration", "gantry-scheduler-pods"), &pods)
	into(t, find(t, objs, "Deployment", "gantry-scheduler"), &deploy)

	t.Run("every render is the same (no lookup, no genCA)", func(t *testing.T) {
		a, err := helm(t, "template", "gantry", chartRel, "--namespace", releaseNamespace)
		if err != nil {
			t.Fatal(err)
		}
		b, err := helm(t, "template", "gantry", chartRel, "--namespace", releaseNamespace)
		if err != nil {
			t.Fatal(err)
		}
		if a != b {
			t.Error("two renders differ: a GitOps sync would replace the certificate every time")
		}
		for _, o := range objs {
			if o.GetKind() == "Secret" {
				t.Errorf("the chart renders Secret %s; the scheduler keeps its own (pkg/certs)", o.GetName())
			}
		}
		for _, cc := range []admissionregistrationv1.WebhookClientConfig{queues.Webhooks[0].ClientConfig, pods.Webhooks[0].ClientConfig} {
			if len(cc.CABundle) > 0 {
				t.Errorf("webhook %s has a caBundle in the chart; a sync would overwrite the one the scheduler wrote", *cc.Service.Path)
			}
			if cc.Service == nil || cc.Service.Name != svcName || cc.Service.Namespace != releaseNamespace {
				t.Errorf("webhook client config %+v does not name Service %s/%s", cc, releaseNamespace, svcName)
			}
		}
	})

	t.Run("the scheduler is told what pkg/certs keeps", func(t *testing.T) {
		c := deploy.Spec.Template.Spec.Containers[0]
		env := map[string]string{}
		for _, e := range c.Env {
			env[e.Name] = e.Value
			if e.ValueFrom != nil && e.ValueFrom.FieldRef != nil {
				env[e.Name] = "fieldRef:" + e.ValueFrom.FieldRef.FieldPath
			}
		}
		for k, want := range map[string]string{
			certs.EnvMode:               certs.ModeSelf,
			certs.EnvNamespace:          "fieldRef:metadata.namespace",
			certs.EnvSecret:             "gantry-scheduler-webhook-tls",
			certs.EnvService:            svcName,
			certs.EnvValidatingWebhooks: queues.Name,
			certs.EnvMutatingWebhooks:   pods.Name,
		} {
			if env[k] != want {
				t.Errorf("scheduler env %s=%q, want %q", k, env[k], want)
			}
		}
		// The scheduler writes the certificate into the cert dir: a writable emptyDir,
		// since the root filesystem is read-only.
		var dir string
		for _, m := range c.VolumeMounts {
			if m.MountPath == "/etc/gantry/webhook" {
				dir = m.Name
				if m.ReadOnly {
					t.Error("the cert dir is mounted read-only; pkg/certs writes it")
				}
			}
		}
		for _, v := range deploy.Spec.Template.Spec.Volumes {
			if v.Name == dir && v.EmptyDir == nil {
				t.Errorf("cert dir volume %s is not an emptyDir: %+v", dir, v.VolumeSource)
			}
		}
	})

	t.Run("cert-manager mode", func(t *testing.T) {
		objs := render(t, "webhooks.certMode=cert-manager")
		cert := find(t, objs, "Certificate", "gantry-scheduler-webhook-tls")
		secretName, _, _ := unstructured.NestedString(cert.Object, "spec", "secretName")
		dns, _, _ := unstructured.NestedStringSlice(cert.Object, "spec", "dnsNames")
		if secretName != "gantry-scheduler-webhook-tls" || !slices.Contains(dns, svcName+"."+releaseNamespace+".svc") {
			t.Errorf("Certificate secretName %q dnsNames %v", secretName, dns)
		}
		for _, o := range objs {
			if k := o.GetKind(); k == "ValidatingWebhookConfiguration" || k == "MutatingWebhookConfiguration" {
				if got := o.GetAnnotations()["cert-manager.io/inject-ca-from"]; got != releaseNamespace+"/"+cert.GetName() {
					t.Errorf("%s %s: inject-ca-from %q", k, o.GetName(), got)
				}
			}
			if o.GetKind() == "Role" && o.GetName() == "gantry-scheduler-webhook-certs" {
				t.Error("with cert-manager the scheduler still may write Secrets")
			}
		}
		var d appsv1.Deployment
		into(t, find(t, objs, "Deployment", "gantry-scheduler"), &d)
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == certs.EnvMode && e.Value != certs.ModeExternal {
				t.Errorf("%s=%q with cert-manager", e.Name, e.Value)
			}
		}
		mounted := false
		for _, v := range d.Spec.Template.Spec.Volumes {
			mounted = mounted || (v.Secret != nil && v.Secret.SecretName == secretName)
		}
		if !mounted {
			t.Error("the scheduler does not mount cert-manager's Secret")
		}
		if _, err := helm(t, "template", "gantry", chartRel, "--set", "webhooks.certMode=lookup"); err == nil || !strings.Contains(err.Error(), "certMode") {
			t.Errorf("an unknown certMode: %v, want a failure naming certMode", err)
		}
	})

	t.Run("no label lets a Queue around the webhook", func(t *testing.T) {
		w := queues.Webhooks[0]
		if w.ObjectSelector != nil && (len(w.ObjectSelector.MatchLabels) > 0 || len(w.ObjectSelector.MatchExpressions) > 0) {
			t.Errorf("Queue webhook objectSelector %+v: any user could label a Queue past it", w.ObjectSelector)
		}
		if w.NamespaceSelector != nil && (len(w.NamespaceSelector.MatchLabels) > 0 || len(w.NamespaceSelector.MatchExpressions) > 0) {
			t.Errorf("Queue webhook namespaceSelector %+v", w.NamespaceSelector)
		}
		if len(w.MatchConditions) > 0 {
			t.Errorf("Queue webhook matchConditions %+v", w.MatchConditions)
		}
	})

	t.Run("paths and policies", func(t *testing.T) {
		q, p := queues.Webhooks[0], pods.Webhooks[0]
		if *q.ClientConfig.Service.Path != webhook.ValidateQueuePath || *p.ClientConfig.Service.Path != webhook.DefaultPodPath {
			t.Errorf("paths %s and %s, the scheduler serves %s and %s", *q.ClientConfig.Service.Path, *p.ClientConfig.Service.Path, webhook.ValidateQueuePath, webhook.DefaultPodPath)
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

	t.Run("pod webhook is called only for pods it would change or check", func(t *testing.T) {
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
			ann  map[string]string
		}{
			{"a gantry.dev/gpu-fraction to check", corev1.ResourceRequirements{}, false, true, map[string]string{"gantry.dev/gpu-fraction": "NaN"}},
			{"a gantry.dev/gpu-memory to check", corev1.ResourceRequirements{Limits: corev1.ResourceList{gpu: one}}, false, true, map[string]string{"gantry.dev/gpu-memory": "2000"}},
			{"a gantry.dev/gpus booking to check", corev1.ResourceRequirements{}, false, true, map[string]string{"gantry.dev/gpus": "0,x"}},
			{"other annotations only", corev1.ResourceRequirements{}, false, false, map[string]string{"gantry.dev/gpu-model": "A100"}},
			{"GPU requested, not limited (the KAI walkthrough's worker)", corev1.ResourceRequirements{Requests: corev1.ResourceList{gpu: one, corev1.ResourceCPU: one}}, false, true, nil},
			{"GPU requested and limited", corev1.ResourceRequirements{Requests: corev1.ResourceList{gpu: one}, Limits: corev1.ResourceList{gpu: one}}, false, false, nil},
			{"GPU only limited", corev1.ResourceRequirements{Limits: corev1.ResourceList{gpu: one}}, false, false, nil},
			{"CPU and memory only", corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: one, corev1.ResourceMemory: one}}, false, false, nil},
			{"no resources", corev1.ResourceRequirements{}, false, false, nil},
			{"init container requests a GPU", corev1.ResourceRequirements{Requests: corev1.ResourceList{gpu: one}}, true, true, nil},
		} {
			pod := corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "main", Resources: tc.res}}}}
			pod.Annotations = tc.ann
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
			case "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "Role", "Certificate":
				if o.GetKind() == "Role" && o.GetName() != "gantry-scheduler-webhook-certs" {
					continue
				}
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
