package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourcev1 "k8s.io/api/resource/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/pkg/agent"
	"github.com/gantry-dev/gantry/pkg/apis/scheduling/convert"
	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/bootstrap"
	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/kube"
	"github.com/gantry-dev/gantry/pkg/names"
)

func TestHelmLint(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  []string
	}{
		{"defaults", nil},
		{"everything on", []string{"serviceMonitor.enabled=true", "deviceClass.create=false", "nodeAgent.mps=true", "nodeAgent.fakeGPUs=4xH100"}},
		{"scheduler only", []string{"nodeAgent.enabled=false", "dashboards.enabled=false", "defaultQueue.create=false"}},
		{"cert-manager", []string{"webhooks.certMode=cert-manager"}},
		{"after KAI", []string{"scheduler.serveKaiSchedulerPods=true", "priorityClasses.prefix=", "crds.install=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := []string{"lint", "--strict", chartRel}
			for _, s := range tc.set {
				args = append(args, "--set", s)
			}
			if out, err := helm(t, args...); err != nil {
				t.Fatalf("%v", err)
			} else if !strings.Contains(out, "0 chart(s) failed") {
				t.Fatalf("helm lint: %s", out)
			}
		})
	}
}

// TestChartDefaults checks what `helm install` with no values puts in a cluster.
func TestChartDefaults(t *testing.T) {
	objs := render(t)

	var have []string
	for _, o := range objs {
		have = append(have, o.GetKind()+"/"+o.GetName())
	}
	sort.Strings(have)
	want := []string{
		"ClusterRole/gantry-node-agent", "ClusterRole/gantry-scheduler", "ClusterRole/gantry-scheduler-metrics-reader",
		"ClusterRoleBinding/gantry-node-agent", "ClusterRoleBinding/gantry-scheduler",
		"ConfigMap/gantry-dashboard-gpus", "ConfigMap/gantry-dashboard-queues", "ConfigMap/gantry-dashboard-scheduler",
		"ConfigMap/gantry-scheduler",
		"CustomResourceDefinition/gpunodes.gpu.gantry.dev", "CustomResourceDefinition/podgroups.scheduling.gantry.dev",
		"CustomResourceDefinition/queues.scheduling.gantry.dev",
		"DaemonSet/gantry-node-agent", "Deployment/gantry-scheduler", "DeviceClass/gpu.gantry.dev",
		"MutatingWebhookConfiguration/gantry-scheduler-pods",
		"PodDisruptionBudget/gantry-scheduler",
		"PriorityClass/gantry-build", "PriorityClass/gantry-inference", "PriorityClass/gantry-train",
		"Role/gantry-scheduler-leader-election", "Role/gantry-scheduler-webhook-certs",
		"RoleBinding/gantry-scheduler-leader-election", "RoleBinding/gantry-scheduler-webhook-certs",
		"Service/gantry-node-agent-metrics", "Service/gantry-scheduler-metrics", "Service/gantry-scheduler-webhook",
		"ServiceAccount/gantry-node-agent", "ServiceAccount/gantry-scheduler",
		"ValidatingAdmissionPolicy/gantry-node-agent-claim-status", "ValidatingAdmissionPolicy/gantry-node-agent-node-scoped",
		"ValidatingAdmissionPolicyBinding/gantry-node-agent-claim-status", "ValidatingAdmissionPolicyBinding/gantry-node-agent-node-scoped",
		"ValidatingWebhookConfiguration/gantry-scheduler-queues",
	}
	if !slices.Equal(have, want) {
		t.Errorf("rendered objects:\n have %v\n want %v", have, want)
	}

	t.Run("scheduler", func(t *testing.T) {
		var d appsv1.Deployment
		into(t, find(t, objs, "Deployment", "gantry-scheduler"), &d)
		if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
			t.Errorf("replicas = %v, want 2", d.Spec.Replicas)
		}
		pod := d.Spec.Template.Spec
		if pod.SchedulerName != "" {
			t.Errorf("the scheduler's own pods must use the default scheduler, not %q", pod.SchedulerName)
		}
		c := pod.Containers[0]
		for _, arg := range []string{
			"--scheduler-name=gantry-scheduler",
			"--leader-elect=true", "--leader-elect-namespace=" + releaseNamespace, "--leader-elect-name=gantry-scheduler",
			"--metrics-bind-address=:8080", "--metrics-secure=true", "--health-probe-bind-address=:8081", "--config=/etc/gantry/config/config.yaml",
			"--webhook-bind-address=:9443", "--webhook-cert-dir=/etc/gantry/webhook",
		} {
			if !slices.Contains(c.Args, arg) {
				t.Errorf("scheduler args %v lack %s", c.Args, arg)
			}
		}
		if slices.Contains(c.Args, "--scheduler-name=kai-scheduler") {
			t.Error("kai-scheduler is served by default; next to KAI Scheduler two schedulers would bind the same pods")
		}
		if c.LivenessProbe == nil || c.ReadinessProbe == nil {
			t.Error("scheduler has no liveness or readiness probe")
		} else if c.LivenessProbe.HTTPGet == nil || c.LivenessProbe.HTTPGet.Path != "/livez" {
			t.Errorf("scheduler liveness probe %+v: want /livez, which fails when the scheduling loop stalls", c.LivenessProbe)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("scheduler resources %v: want CPU and memory requests and a memory limit", c.Resources)
		}
		sc := c.SecurityContext
		if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
			pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
			t.Errorf("scheduler must run as non-root, read-only, without privilege escalation: %+v %+v", pod.SecurityContext, sc)
		}
		checkFlagsDefined(t, c.Args, "cmd/scheduler/main.go")
	})

	t.Run("node agent", func(t *testing.T) {
		var ds appsv1.DaemonSet
		into(t, find(t, objs, "DaemonSet", "gantry-node-agent"), &ds)
		pod := ds.Spec.Template.Spec
		if pod.NodeSelector["nvidia.com/gpu.present"] != "true" {
			t.Errorf("nodeSelector %v, want nvidia.com/gpu.present=true", pod.NodeSelector)
		}
		if pod.RuntimeClassName == nil || *pod.RuntimeClassName != "nvidia" {
			t.Errorf("runtimeClassName %v, want nvidia", pod.RuntimeClassName)
		}
		c := pod.Containers[0]
		mounts := map[string]string{}
		for _, m := range c.VolumeMounts {
			mounts[m.Name] = m.MountPath
		}
		hostPaths := map[string]bool{}
		for _, v := range pod.Volumes {
			if v.HostPath == nil {
				continue
			}
			hostPaths[v.HostPath.Path] = true
			// The kubelet dials the sockets the plugin registers by their path on the host.
			if mounts[v.Name] != v.HostPath.Path {
				t.Errorf("hostPath %s is mounted at %q; mount it at the same path", v.HostPath.Path, mounts[v.Name])
			}
		}
		for _, p := range []string{"/var/lib/kubelet/plugins", "/var/lib/kubelet/plugins_registry", "/var/run/cdi", "/var/lib/kubelet/pod-resources"} {
			if !hostPaths[p] {
				t.Errorf("no hostPath volume for %s (have %v)", p, hostPaths)
			}
		}
		if !slices.Contains(c.Args, "--install-device-class=false") {
			t.Errorf("the chart installs the DeviceClass, so the agent should not: args %v", c.Args)
		}
		var nodeName bool
		for _, e := range c.Env {
			nodeName = nodeName || (e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName")
		}
		if !nodeName {
			t.Error("the agent gets no NODE_NAME from spec.nodeName")
		}
		if !tolerates(pod.Tolerations, corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}) {
			t.Errorf("tolerations %v do not tolerate the usual GPU node taint nvidia.com/gpu:NoSchedule", pod.Tolerations)
		}
		if !slices.Contains(c.Args, "--metrics-secure=true") {
			t.Errorf("agent args %v: /metrics must be authenticated by default (--metrics-secure=true)", c.Args)
		}
		// Probes ask whether the kubelet accepted the plugin's registration, on their
		// own plain-HTTP port (the metrics port wants a token); not a TCP check.
		for what, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
			want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[what]
			if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want || p.HTTPGet.Port.String() != "probes" || p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
				t.Errorf("agent %s probe %+v: want HTTP GET %s on the probes port", what, p, want)
			}
		}
		if sc := c.SecurityContext; sc == nil || sc.Privileged == nil || *sc.Privileged ||
			sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("agent securityContext %+v: want privileged false, no privilege escalation", sc)
		}
		checkFlagsDefined(t, c.Args, "cmd/node-agent/main.go")
	})

	t.Run("default queue", func(t *testing.T) {
		// The scheduler creates it (pkg/bootstrap): a Queue in the same release as its
		// CRD would fail a fresh `helm install`.
		var d appsv1.Deployment
		into(t, find(t, objs, "Deployment", "gantry-scheduler"), &d)
		var env string
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == bootstrap.EnvDefaultQueue {
				env = e.Value
			}
		}
		t.Setenv(bootstrap.EnvDefaultQueue, env)
		bq, ok, err := bootstrap.QueueFromEnv()
		if err != nil || !ok {
			t.Fatalf("the scheduler gets no usable %s (%q): %v", bootstrap.EnvDefaultQueue, env, err)
		}
		raw, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": bq.Name}, "spec": bq.Spec})
		var q schedulingv1alpha1.Queue
		if err := yaml.UnmarshalStrict(raw, &q); err != nil {
			t.Fatalf("default queue %s: %v", raw, err)
		}
		if q.Name != "default" {
			t.Errorf("default queue named %q", q.Name)
		}
		if err := fairshare.Validate(convert.Queues([]schedulingv1alpha1.Queue{q})); err != nil {
			t.Error(err)
		}
		for _, o := range objs {
			if o.GetKind() == "Queue" {
				t.Errorf("the chart renders Queue %s; a fresh install would fail on it", o.GetName())
			}
		}
	})

	t.Run("device class", func(t *testing.T) {
		var dc resourcev1.DeviceClass
		into(t, find(t, objs, "DeviceClass", names.DriverName), &dc)
		if want := agent.DeviceClass().Spec; !equality.Semantic.DeepEqual(dc.Spec, want) {
			t.Errorf("chart DeviceClass spec %+v, pkg/agent's %+v", dc.Spec, want)
		}
		var manifest resourcev1.DeviceClass
		readStrict(t, "deploy/manifests/deviceclass.yaml", &manifest)
		if !equality.Semantic.DeepEqual(dc.Spec, manifest.Spec) {
			t.Errorf("chart DeviceClass spec %+v, deploy/manifests/deviceclass.yaml %+v", dc.Spec, manifest.Spec)
		}
	})

	t.Run("priority classes", func(t *testing.T) {
		// KAI Scheduler's own names, for clusters KAI has left.
		objs := render(t, "priorityClasses.prefix=")
		data, err := os.ReadFile(repoPath(t, "deploy/manifests/priorityclasses.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		manifests, err := decodeObjects(data)
		if err != nil {
			t.Fatal(err)
		}
		if len(manifests) != 3 {
			t.Fatalf("deploy/manifests/priorityclasses.yaml has %d objects, want 3", len(manifests))
		}
		for _, m := range manifests {
			var want, got schedulingv1.PriorityClass
			into(t, m, &want)
			into(t, find(t, objs, "PriorityClass", m.GetName()), &got)
			if got.Value != want.Value || !equality.Semantic.DeepEqual(got.PreemptionPolicy, want.PreemptionPolicy) ||
				got.GlobalDefault != want.GlobalDefault || got.Description != want.Description ||
				got.Labels[names.LabelPreemptible] != want.Labels[names.LabelPreemptible] ||
				got.Annotations[names.LabelPreemptible] != want.Annotations[names.LabelPreemptible] {
				t.Errorf("PriorityClass %s differs from deploy/manifests/priorityclasses.yaml:\n chart    %d %v %q labels %v annotations %v\n manifest %d %v %q labels %v annotations %v",
					m.GetName(), got.Value, *got.PreemptionPolicy, got.Description, got.Labels, got.Annotations,
					want.Value, *want.PreemptionPolicy, want.Description, want.Labels, want.Annotations)
			}
		}
		for name, want := range map[string]struct {
			value       int32
			preemptible string
		}{"train": {50, "true"}, "build": {100, "false"}, "inference": {125, "false"}} {
			var pc schedulingv1.PriorityClass
			into(t, find(t, objs, "PriorityClass", name), &pc)
			var prefixed schedulingv1.PriorityClass
			into(t, find(t, render(t), "PriorityClass", "gantry-"+name), &prefixed)
			if prefixed.Value != pc.Value || prefixed.Labels[names.LabelPreemptible] != pc.Labels[names.LabelPreemptible] {
				t.Errorf("PriorityClass gantry-%s differs from %s", name, name)
			}
			if pc.Value != want.value || pc.Labels[names.LabelPreemptible] != want.preemptible {
				t.Errorf("PriorityClass %s: value %d preemptible %q, want %d %q", name, pc.Value, pc.Labels[names.LabelPreemptible], want.value, want.preemptible)
			}
		}
	})

	t.Run("dashboards", func(t *testing.T) {
		for _, name := range []string{"gpus", "queues", "scheduler"} {
			cm := find(t, objs, "ConfigMap", "gantry-dashboard-"+name)
			if cm.GetLabels()["grafana_dashboard"] != "1" {
				t.Errorf("ConfigMap %s lacks the Grafana sidecar label grafana_dashboard=1: %v", cm.GetName(), cm.GetLabels())
			}
			data, _, _ := unstructured.NestedStringMap(cm.Object, "data")
			want, err := os.ReadFile(repoPath(t, "deploy/grafana/gantry-"+name+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if got := data["gantry-"+name+".json"]; strings.TrimSpace(got) != strings.TrimSpace(string(want)) {
				t.Errorf("ConfigMap %s does not hold deploy/grafana/gantry-%s.json", cm.GetName(), name)
			}
		}
	})
}

func TestChartRBACIsLeastPrivilege(t *testing.T) {
	for _, createDeviceClass := range []bool{true, false} {
		objs := render(t, fmt.Sprintf("deviceClass.create=%v", createDeviceClass))
		// Rules by ServiceAccount, found through the bindings: "" holds the rules of
		// ClusterRoles, a namespace those of Roles there.
		rules := map[string]map[string][]rbacv1.PolicyRule{}
		roleRules := map[string][]rbacv1.PolicyRule{}
		for _, o := range objs {
			if o.GetKind() != "ClusterRole" && o.GetKind() != "Role" {
				continue
			}
			var r rbacv1.ClusterRole
			into(t, o, &r)
			for _, rule := range r.Rules {
				for _, field := range [][]string{rule.APIGroups, rule.Resources, rule.Verbs} {
					if slices.Contains(field, "*") {
						t.Errorf("%s %s grants a wildcard: %+v", o.GetKind(), o.GetName(), rule)
					}
				}
			}
			roleRules[o.GetKind()+"/"+o.GetName()] = r.Rules
		}
		for _, o := range objs {
			if o.GetKind() != "ClusterRoleBinding" && o.GetKind() != "RoleBinding" {
				continue
			}
			var b rbacv1.RoleBinding
			into(t, o, &b)
			for _, s := range b.Subjects {
				if rules[s.Name] == nil {
					rules[s.Name] = map[string][]rbacv1.PolicyRule{}
				}
				ns := b.Namespace // "" for a ClusterRoleBinding
				rules[s.Name][ns] = append(rules[s.Name][ns], roleRules[b.RoleRef.Kind+"/"+b.RoleRef.Name]...)
			}
		}
		for _, p := range permissions(!createDeviceClass) {
			got := allows(rules[p.serviceAccount][""], p) || (p.namespace != "" && allows(rules[p.serviceAccount][p.namespace], p))
			if got != p.allowed {
				t.Errorf("deviceClass.create=%v: %s: allowed = %v, want %v", createDeviceClass, p, got, p.allowed)
			}
		}
	}
}

func TestChartValues(t *testing.T) {
	t.Run("scheduler config is what the scheduler loads", func(t *testing.T) {
		objs := render(t, "scheduler.config.policy=bestfit", "scheduler.config.minRuntime=5m", "scheduler.config.evictionQPS=5", "scheduler.config.preemption=false")
		var cm corev1.ConfigMap
		into(t, find(t, objs, "ConfigMap", "gantry-scheduler"), &cm)
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg, err := kube.LoadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.Policy != "bestfit" || cfg.MinRuntime.String() != "5m0s" || cfg.EvictionQPS != 5 || cfg.PreemptionEnabled() {
			t.Errorf("loaded %+v from\n%s", cfg, cm.Data["config.yaml"])
		}
	})

	t.Run("default config loads", func(t *testing.T) {
		var cm corev1.ConfigMap
		into(t, find(t, render(t), "ConfigMap", "gantry-scheduler"), &cm)
		path := filepath.Join(t.TempDir(), "config.yaml")
		if err := os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.LoadConfig(path); err != nil {
			t.Error(err)
		}
	})

	t.Run("defaultQueue.create=false: nobody creates it", func(t *testing.T) {
		for _, set := range [][]string{nil, {"defaultQueue.create=false", "defaultQueue.name=team-default"}} {
			create := len(set) == 0
			objs := render(t, set...)
			var cm corev1.ConfigMap
			into(t, find(t, objs, "ConfigMap", "gantry-scheduler"), &cm)
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte(cm.Data["config.yaml"]), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := kube.LoadConfig(path)
			if err != nil {
				t.Fatal(err)
			}
			want := map[bool]string{true: "default", false: "team-default"}[create]
			if cfg.CreatesDefaultQueue() != create || cfg.DefaultQueueName() != want {
				t.Errorf("%v: scheduler config %+v: want createDefaultQueue %v, defaultQueue %s", set, cfg, create, want)
			}
			var d appsv1.Deployment
			into(t, find(t, objs, "Deployment", "gantry-scheduler"), &d)
			hasEnv := slices.ContainsFunc(d.Spec.Template.Spec.Containers[0].Env, func(e corev1.EnvVar) bool { return e.Name == bootstrap.EnvDefaultQueue })
			if hasEnv != create {
				t.Errorf("%v: %s set = %v, want %v", set, bootstrap.EnvDefaultQueue, hasEnv, create)
			}
		}
	})

	t.Run("extraEnv reaches the scheduler", func(t *testing.T) {
		// GOMEMLIMIT overrides the soft memory limit the scheduler derives from its
		// container's memory limit (cmd/scheduler/memlimit.go).
		var d appsv1.Deployment
		into(t, find(t, render(t, "scheduler.extraEnv[0].name=GOMEMLIMIT", "scheduler.extraEnv[0].value=1500MiB"), "Deployment", "gantry-scheduler"), &d)
		env := d.Spec.Template.Spec.Containers[0].Env
		if !slices.Contains(env, corev1.EnvVar{Name: "GOMEMLIMIT", Value: "1500MiB"}) ||
			!slices.ContainsFunc(env, func(e corev1.EnvVar) bool { return e.Name == bootstrap.EnvDefaultQueue }) {
			t.Errorf("scheduler env %v: want GOMEMLIMIT=1500MiB beside the chart's own", env)
		}
	})

	t.Run("scheduler names", func(t *testing.T) {
		var d appsv1.Deployment
		into(t, find(t, render(t, "scheduler.serveKaiSchedulerPods=true"), "Deployment", "gantry-scheduler"), &d)
		args := d.Spec.Template.Spec.Containers[0].Args
		if !slices.Contains(args, "--scheduler-name=kai-scheduler") || !slices.Contains(args, "--scheduler-name=gantry-scheduler") {
			t.Errorf("serveKaiSchedulerPods=true: args %v, want both names", args)
		}
		into(t, find(t, render(t, "scheduler.serveKaiSchedulerPods=true", "scheduler.schedulerNames={gantry-scheduler,kai-scheduler}"), "Deployment", "gantry-scheduler"), &d)
		if n := len(slices.DeleteFunc(slices.Clone(d.Spec.Template.Spec.Containers[0].Args), func(a string) bool { return a != "--scheduler-name=kai-scheduler" })); n != 1 {
			t.Errorf("kai-scheduler passed %d times", n)
		}
	})

	t.Run("CRDs are templates kept on uninstall, and can be left out", func(t *testing.T) {
		n := 0
		for _, o := range render(t) {
			if o.GetKind() == "CustomResourceDefinition" {
				n++
				if o.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
					t.Errorf("CRD %s lacks helm.sh/resource-policy: keep; helm uninstall would delete every Queue", o.GetName())
				}
				names, _, _ := unstructured.NestedStringSlice(o.Object, "spec", "names", "shortNames")
				for _, taken := range []string{"q", "pg", "queue", "podgroup"} {
					if slices.Contains(names, taken) {
						t.Errorf("CRD %s has short name %q, which Volcano or KAI Scheduler use", o.GetName(), taken)
					}
				}
			}
		}
		if n != 3 {
			t.Errorf("%d CRDs rendered, want 3", n)
		}
		if _, err := os.Stat(repoPath(t, chartRel+"/crds")); err == nil {
			t.Error("the chart has a crds/ folder; helm upgrade would never upgrade what is in it")
		}
		for _, o := range render(t, "crds.install=false") {
			if o.GetKind() == "CustomResourceDefinition" {
				t.Errorf("CRD %s rendered with crds.install=false", o.GetName())
			}
		}
	})

	t.Run("image tags default to appVersion", func(t *testing.T) {
		chart, err := os.ReadFile(repoPath(t, chartRel+"/Chart.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		var meta struct {
			AppVersion string `json:"appVersion"`
		}
		if err := yaml.Unmarshal(chart, &meta); err != nil {
			t.Fatal(err)
		}
		objs := render(t)
		var d appsv1.Deployment
		var ds appsv1.DaemonSet
		into(t, find(t, objs, "Deployment", "gantry-scheduler"), &d)
		into(t, find(t, objs, "DaemonSet", "gantry-node-agent"), &ds)
		for image, want := range map[string]string{
			d.Spec.Template.Spec.Containers[0].Image:  "ghcr.io/gantry-dev/gantry-scheduler:" + meta.AppVersion,
			ds.Spec.Template.Spec.Containers[0].Image: "ghcr.io/gantry-dev/gantry-node-agent:" + meta.AppVersion,
		} {
			if image != want {
				t.Errorf("image %s, want %s (what `make images` tags)", image, want)
			}
		}
	})

	t.Run("replicas without leader election are refused", func(t *testing.T) {
		_, err := helm(t, "template", "gantry", chartRel, "--set", "scheduler.leaderElection.enabled=false")
		if err == nil || !strings.Contains(err.Error(), "leaderElection") {
			t.Errorf("want a failure naming leaderElection, got %v", err)
		}
		var d appsv1.Deployment
		into(t, find(t, render(t, "scheduler.leaderElection.enabled=false", "scheduler.replicas=1"), "Deployment", "gantry-scheduler"), &d)
		if !slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--leader-elect=false") {
			t.Errorf("args %v", d.Spec.Template.Spec.Containers[0].Args)
		}
	})

	t.Run("agent installs the DeviceClass when the chart does not", func(t *testing.T) {
		objs := render(t, "deviceClass.create=false")
		for _, o := range objs {
			if o.GetKind() == "DeviceClass" {
				t.Error("DeviceClass rendered with deviceClass.create=false")
			}
		}
		var ds appsv1.DaemonSet
		into(t, find(t, objs, "DaemonSet", "gantry-node-agent"), &ds)
		if !slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--install-device-class=true") {
			t.Errorf("args %v", ds.Spec.Template.Spec.Containers[0].Args)
		}
	})

	t.Run("service monitors", func(t *testing.T) {
		objs := render(t, "serviceMonitor.enabled=true", "serviceMonitor.labels.release=kube-prometheus-stack")
		for _, name := range []string{"gantry-scheduler", "gantry-node-agent"} {
			sm := find(t, objs, "ServiceMonitor", name)
			if sm.GetLabels()["release"] != "kube-prometheus-stack" {
				t.Errorf("ServiceMonitor %s labels %v", name, sm.GetLabels())
			}
			sel, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
			svc := find(t, objs, "Service", name+"-metrics")
			svcLabels := svc.GetLabels()
			for k, v := range sel {
				if svcLabels[k] != v {
					t.Errorf("ServiceMonitor %s selects %v; Service %s has labels %v", name, sel, svc.GetName(), svcLabels)
				}
			}
		}
		for _, name := range []string{"gantry-scheduler", "gantry-node-agent"} {
			eps, _, _ := unstructured.NestedSlice(find(t, objs, "ServiceMonitor", name).Object, "spec", "endpoints")
			if len(eps) != 1 || eps[0].(map[string]any)["scheme"] != "https" || eps[0].(map[string]any)["bearerTokenFile"] == nil {
				t.Errorf("%s ServiceMonitor endpoints %v: want https with Prometheus' token (metrics are authenticated)", name, eps)
			}
		}
		find(t, objs, "ClusterRole", "gantry-scheduler-metrics-reader")
		if objs := render(t); slices.ContainsFunc(objs, func(o *unstructured.Unstructured) bool { return o.GetKind() == "ServiceMonitor" }) {
			t.Error("ServiceMonitors rendered by default; they need the Prometheus Operator's CRDs")
		}
	})

	t.Run("sandbox agent", func(t *testing.T) {
		var ds appsv1.DaemonSet
		into(t, find(t, render(t, "nodeAgent.fakeGPUs=4xH100", "nodeAgent.runtimeClassName=", "nodeAgent.podResources.enabled=false"), "DaemonSet", "gantry-node-agent"), &ds)
		pod := ds.Spec.Template.Spec
		if pod.RuntimeClassName != nil {
			t.Errorf("runtimeClassName %q, want none", *pod.RuntimeClassName)
		}
		args := pod.Containers[0].Args
		if !slices.Contains(args, "--fake-gpus=4xH100") || !slices.Contains(args, "--pod-resources-socket=") {
			t.Errorf("args %v", args)
		}
	})
}

// TestChartCopiesMatchSources keeps the chart's copies of the CRDs and dashboards equal
// to their sources: deploy/crds (generated by `make generate`) and deploy/grafana. Helm
// reads only files inside the chart, so the chart holds copies; run
// `go test ./test/deploy -run TestChartCopiesMatchSources -update` to refresh them.
func TestChartCopiesMatchSources(t *testing.T) {
	for _, c := range []struct{ source, copy, pattern string }{
		{"deploy/crds", chartRel + "/files/crds", "*.yaml"},
		{"deploy/grafana", chartRel + "/dashboards", "*.json"},
	} {
		src, _ := filepath.Glob(filepath.Join(repoPath(t, c.source), c.pattern))
		dst, _ := filepath.Glob(filepath.Join(repoPath(t, c.copy), c.pattern))
		if len(src) == 0 {
			t.Fatalf("no %s in %s", c.pattern, c.source)
		}
		if *update {
			for _, f := range dst {
				if err := os.Remove(f); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range src {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(repoPath(t, c.copy), filepath.Base(f)), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		names := func(files []string) []string {
			var out []string
			for _, f := range files {
				out = append(out, filepath.Base(f))
			}
			return out
		}
		if !slices.Equal(names(src), names(dst)) {
			t.Errorf("%s holds %v but %s holds %v; run: go test ./test/deploy -run TestChartCopiesMatchSources -update",
				c.copy, names(dst), c.source, names(src))
			continue
		}
		for i := range src {
			a, _ := os.ReadFile(src[i])
			b, _ := os.ReadFile(dst[i])
			if !bytes.Equal(a, b) {
				t.Errorf("%s/%s differs from %s/%s; run: go test ./test/deploy -run TestChartCopiesMatchSources -update",
					c.copy, filepath.Base(dst[i]), c.source, filepath.Base(src[i]))
			}
		}
	}
}

// flagDef finds flag definitions such as flag.String("kubeconfig", … or
// fs.StringVar(&o.nodeName, "node-name", … in a main package.
var flagDef = regexp.MustCompile(`\.(?:String|Bool|Int|Int64|Uint|Float64|Duration|Var|Func)(?:Var)?\(\s*(?:&[\w.]+,\s*)?"([a-z0-9-]+)"`)

// klogFlags are registered by klog.InitFlags in both mains.
var klogFlags = []string{"v", "vmodule", "logtostderr", "alsologtostderr", "stderrthreshold", "log_dir", "log_file", "add_dir_header", "skip_headers", "one_output", "skip_log_headers", "log_file_max_size", "log_backtrace_at"}

// checkFlagsDefined fails when the chart passes a flag the binary does not define: the
// binary would refuse to start.
func checkFlagsDefined(t *testing.T, args []string, mainFile string) {
	t.Helper()
	src, err := os.ReadFile(repoPath(t, mainFile))
	if err != nil {
		t.Fatal(err)
	}
	defined := map[string]bool{}
	for _, m := range flagDef.FindAllStringSubmatch(string(src), -1) {
		defined[m[1]] = true
	}
	for _, f := range klogFlags {
		defined[f] = true
	}
	for _, a := range args {
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		if !defined[name] {
			t.Errorf("the chart passes %s, which %s does not define (it defines %v)", a, mainFile, sortedKeys(defined))
		}
	}
}

func tolerates(tols []corev1.Toleration, taint corev1.Taint) bool {
	for _, tol := range tols {
		if tol.ToleratesTaint(klog.Background(), &taint, false) {
			return true
		}
	}
	return false
}

func readStrict(t testing.TB, rel string, into any) {
	t.Helper()
	b, err := os.ReadFile(repoPath(t, rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, into); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
