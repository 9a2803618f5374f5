package deploy

import (
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// chartWiring is what one render says about annotation-share claims and the node
// agent's claim statuses.
type chartWiring struct {
	shareClaimsFlag, templatesRule, dryRunAware bool
	claimStatusFlag, claimStatusRule, policy    bool
}

func wiringOf(t *testing.T, objs []*unstructured.Unstructured) chartWiring {
	t.Helper()
	var w chartWiring
	rulesOf := func(role string) []rbacv1.PolicyRule {
		for _, o := range objs {
			if o.GetKind() == "ClusterRole" && o.GetName() == role {
				var r rbacv1.ClusterRole
				into(t, o, &r)
				return r.Rules
			}
		}
		return nil
	}
	for _, o := range objs {
		switch {
		case o.GetKind() == "Deployment" && o.GetName() == "gantry-scheduler":
			var d appsv1.Deployment
			into(t, o, &d)
			w.shareClaimsFlag = slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--annotation-share-claims")
		case o.GetKind() == "DaemonSet" && o.GetName() == "gantry-node-agent":
			var ds appsv1.DaemonSet
			into(t, o, &ds)
			w.claimStatusFlag = slices.Contains(ds.Spec.Template.Spec.Containers[0].Args, "--claim-status")
		case o.GetKind() == "MutatingWebhookConfiguration":
			var m admissionregistrationv1.MutatingWebhookConfiguration
			into(t, o, &m)
			se := m.Webhooks[0].SideEffects
			w.dryRunAware = se != nil && *se == admissionregistrationv1.SideEffectClassNoneOnDryRun
		case o.GetKind() == "ValidatingAdmissionPolicy" && o.GetName() == "gantry-node-agent-claim-status":
			w.policy = true
		}
	}
	sched := rulesOf("gantry-scheduler")
	w.templatesRule = allows(sched, permission{verb: "create", group: "resource.k8s.io", resource: "resourceclaimtemplates"}) &&
		allows(sched, permission{verb: "get", group: "resource.k8s.io", resource: "resourceclaimtemplates"}) &&
		allows(sched, permission{verb: "patch", group: "resource.k8s.io", resource: "resourceclaimtemplates"})
	w.claimStatusRule = allows(rulesOf("gantry-node-agent"), permission{verb: "update", group: "resource.k8s.io", resource: "resourceclaims", subresource: "status"})
	return w
}

// A chart user gets annotation shares as DRA claims (KAI's gpu-memory and
// gpu-fraction reach the container) wherever the node agent runs, with the RBAC and
// webhook settings that needs, and sees in each claim's status whether its share is
// enforced: the agent's update on claim statuses comes only with the policy that
// keeps it to its own node's claims.
func TestChartAnnotationShareClaimsAndClaimStatus(t *testing.T) {
	on := chartWiring{true, true, true, true, true, true}
	noShares := chartWiring{claimStatusFlag: true, claimStatusRule: true, policy: true}
	for _, c := range []struct {
		set  []string
		want chartWiring
	}{
		{nil, on},
		{[]string{"webhooks.annotationShareClaims=false"}, noShares},
		// No node agent to prepare the claims: annotations stay (the scheduler books
		// them as before), unless asked for (an agent deployed some other way).
		{[]string{"nodeAgent.enabled=false"}, chartWiring{}},
		{[]string{"nodeAgent.enabled=false", "webhooks.annotationShareClaims=true"}, chartWiring{shareClaimsFlag: true, templatesRule: true, dryRunAware: true}},
		{[]string{"webhooks.enabled=false"}, chartWiring{claimStatusFlag: true, claimStatusRule: true, policy: true}},
		// Without the node-scoped policy no agent may write claim statuses.
		{[]string{"nodeAgent.nodeScopedWrites=false"}, chartWiring{shareClaimsFlag: true, templatesRule: true, dryRunAware: true}},
		{[]string{"nodeAgent.claimStatus=false"}, chartWiring{shareClaimsFlag: true, templatesRule: true, dryRunAware: true}},
	} {
		if got := wiringOf(t, render(t, c.set...)); got != c.want {
			t.Errorf("%v:\n have %+v\n want %+v", c.set, got, c.want)
		}
	}
}

// nodeAgent.mps adds CAP_SYS_ADMIN (for each MPS daemon's own /dev/shm) to the agent
// container, keeping the rest of its securityContext, and lifts
// allowPrivilegeEscalation: false, which Kubernetes refuses beside CAP_SYS_ADMIN;
// without mps it has neither.
func TestChartMPSCapability(t *testing.T) {
	caps := func(set ...string) (added []corev1.Capability, privileged, escalates bool) {
		var ds appsv1.DaemonSet
		into(t, find(t, render(t, set...), "DaemonSet", "gantry-node-agent"), &ds)
		sc := ds.Spec.Template.Spec.Containers[0].SecurityContext
		if sc == nil {
			return nil, false, true
		}
		if sc.Capabilities != nil {
			added = sc.Capabilities.Add
		}
		return added, sc.Privileged != nil && *sc.Privileged, sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation
	}
	if added, _, escalates := caps(); len(added) != 0 || escalates {
		t.Errorf("without mps the agent adds capabilities %v, allowPrivilegeEscalation %v", added, escalates)
	}
	added, privileged, escalates := caps("nodeAgent.mps=true")
	if !slices.Equal(added, []corev1.Capability{"SYS_ADMIN"}) || privileged || !escalates {
		t.Errorf("mps: capabilities %v, privileged %v, allowPrivilegeEscalation %v; want SYS_ADMIN, not privileged, escalation allowed", added, privileged, escalates)
	}
	if added, _, _ := caps("nodeAgent.mps=true", "nodeAgent.securityContext.capabilities.add={NET_RAW,SYS_ADMIN}"); !slices.Equal(added, []corev1.Capability{"NET_RAW", "SYS_ADMIN"}) {
		t.Errorf("mps with the user's capabilities: %v, want NET_RAW and SYS_ADMIN once", added)
	}
}

// nodeAgent.mps is what turns memory shares from bookkeeping into MPS limits: by
// default the agent gets no --mps and no MPS directory, so shares are prepared "not
// enforced" (docs/node-agent.md); with nodeAgent.mps=true it gets --mps, --mps-root
// and the host directory there (nodeAgent.mpsRoot), mounted read-write.
func TestChartMPSFlagAndDirectory(t *testing.T) {
	mps := func(set ...string) (flags []string, hostPath, mountPath string, readOnly bool) {
		var ds appsv1.DaemonSet
		into(t, find(t, render(t, set...), "DaemonSet", "gantry-node-agent"), &ds)
		c := ds.Spec.Template.Spec.Containers[0]
		for _, a := range c.Args {
			if a == "--mps" || strings.HasPrefix(a, "--mps-root") || strings.HasPrefix(a, "--mps=") {
				flags = append(flags, a)
			}
		}
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == "mps" && v.HostPath != nil {
				hostPath = v.HostPath.Path
			}
		}
		for _, m := range c.VolumeMounts {
			if m.Name == "mps" {
				mountPath, readOnly = m.MountPath, m.ReadOnly
			}
		}
		return flags, hostPath, mountPath, readOnly
	}
	if flags, host, mount, _ := mps(); len(flags) != 0 || host != "" || mount != "" {
		t.Errorf("default: MPS flags %v, host directory %q, mount %q; want none (shares not enforced)", flags, host, mount)
	}
	if flags, host, mount, ro := mps("nodeAgent.mps=true"); !slices.Equal(flags, []string{"--mps", "--mps-root=/run/gantry/mps"}) ||
		host != "/run/gantry/mps" || mount != "/run/gantry/mps" || ro {
		t.Errorf("mps: flags %v, host directory %q, mount %q (read-only %v); want --mps --mps-root=/run/gantry/mps, /run/gantry/mps mounted read-write", flags, host, mount, ro)
	}
	if flags, host, mount, _ := mps("nodeAgent.mps=true", "nodeAgent.mpsRoot=/var/run/mps"); !slices.Equal(flags, []string{"--mps", "--mps-root=/var/run/mps"}) ||
		host != "/var/run/mps" || mount != "/var/run/mps" {
		t.Errorf("mps with mpsRoot: flags %v, host directory %q, mount %q; want /var/run/mps throughout", flags, host, mount)
	}
}
