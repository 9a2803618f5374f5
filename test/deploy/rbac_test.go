package deploy

import (
	"fmt"
	"slices"

	rbacv1 "k8s.io/api/rbac/v1"
)

// permission is one thing a component's ServiceAccount may or may not do. The same
// table is checked against the rendered roles (TestChartRBACIsLeastPrivilege) and
// against a real API server's authorizer (TestChartInstall).
type permission struct {
	serviceAccount string
	verb           string
	group          string
	resource       string
	subresource    string
	namespace      string // "" for cluster-wide
	name           string // "" for any object
	allowed        bool
}

func (p permission) String() string {
	r := p.resource
	if p.subresource != "" {
		r += "/" + p.subresource
	}
	if p.group != "" {
		r += "." + p.group
	}
	where := "cluster-wide"
	if p.namespace != "" {
		where = "in " + p.namespace
	}
	if p.name != "" {
		r += " " + p.name
	}
	return fmt.Sprintf("%s %s %s %s", p.serviceAccount, p.verb, r, where)
}

const (
	schedulerSA = "gantry-scheduler"
	agentSA     = "gantry-node-agent"
)

// permissions is what each component needs (pkg/kube, pkg/agent and the DRA kubelet
// plugin helper they use), and a few things it must not be able to do.
// agentInstallsDeviceClass is true when the chart leaves the DeviceClass to the agent.
func permissions(agentInstallsDeviceClass bool) []permission {
	var ps []permission
	grant := func(sa string, verbs []string, group, resource, sub string) {
		for _, v := range verbs {
			ps = append(ps, permission{serviceAccount: sa, verb: v, group: group, resource: resource, subresource: sub, allowed: true})
		}
	}
	deny := func(sa, verb, group, resource, sub, ns string) {
		ps = append(ps, permission{serviceAccount: sa, verb: verb, group: group, resource: resource, subresource: sub, namespace: ns})
	}
	read := []string{"get", "list", "watch"}

	s := schedulerSA
	grant(s, read, "", "pods", "")
	grant(s, []string{"delete"}, "", "pods", "")
	grant(s, []string{"patch"}, "", "pods", "status")
	grant(s, []string{"create"}, "", "pods", "binding")
	grant(s, []string{"create"}, "", "pods", "eviction")
	grant(s, read, "", "nodes", "")
	grant(s, []string{"create", "patch"}, "", "events", "")
	grant(s, []string{"create", "patch"}, "events.k8s.io", "events", "")
	grant(s, []string{"list", "watch"}, "scheduling.k8s.io", "priorityclasses", "")
	for _, r := range []string{"persistentvolumeclaims", "persistentvolumes", "namespaces"} {
		grant(s, read, "", r, "")
	}
	for _, r := range []string{"storageclasses", "csinodes"} {
		grant(s, read, "storage.k8s.io", r, "")
	}
	grant(s, []string{"patch"}, "", "persistentvolumeclaims", "")
	grant(s, []string{"update"}, "", "persistentvolumes", "")
	for _, r := range []string{"resourceslices", "resourceclaims", "deviceclasses"} {
		grant(s, read, "resource.k8s.io", r, "")
	}
	grant(s, []string{"update", "patch"}, "resource.k8s.io", "resourceclaims", "status")
	grant(s, []string{"update", "patch"}, "resource.k8s.io", "resourceclaims", "") // the delete-protection finalizer
	// The pod webhook's annotation-share templates (webhooks.annotationShareClaims,
	// on with the node agent): made and given owners, deleted only by the garbage
	// collector.
	grant(s, []string{"get", "create", "patch"}, "resource.k8s.io", "resourceclaimtemplates", "")
	deny(s, "delete", "resource.k8s.io", "resourceclaimtemplates", "", "default")
	for _, r := range []string{"queues", "podgroups"} {
		grant(s, read, "scheduling.gantry.dev", r, "")
		grant(s, []string{"patch", "update"}, "scheduling.gantry.dev", r, "status")
	}
	grant(s, read, "gpu.gantry.dev", "gpunodes", "")
	for _, r := range []string{"rayclusters", "rayjobs", "rayservices"} {
		grant(s, read, "ray.io", r, "")
	}
	for _, v := range []string{"get", "create", "update"} {
		ps = append(ps, permission{serviceAccount: s, verb: v, group: "coordination.k8s.io", resource: "leases", namespace: releaseNamespace, allowed: true})
	}
	// /metrics authenticates and authorizes its callers through the API server
	// (scheduler.metricsSecure, the default).
	grant(s, []string{"create"}, "authentication.k8s.io", "tokenreviews", "")
	grant(s, []string{"create"}, "authorization.k8s.io", "subjectaccessreviews", "")
	// pkg/bootstrap creates the default Queue; pkg/certs keeps the webhook Secret and
	// the caBundle of the chart's own webhook configurations, and no others.
	grant(s, []string{"create"}, "scheduling.gantry.dev", "queues", "")
	ps = append(ps, permission{serviceAccount: s, verb: "create", resource: "secrets", namespace: releaseNamespace, allowed: true})
	for _, v := range []string{"get", "update"} {
		ps = append(ps,
			permission{serviceAccount: s, verb: v, resource: "secrets", namespace: releaseNamespace, name: "gantry-scheduler-webhook-tls", allowed: true},
			permission{serviceAccount: s, verb: v, resource: "secrets", namespace: releaseNamespace, name: "someone-elses"},
			permission{serviceAccount: s, verb: v, group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "gantry-scheduler-queues", allowed: true},
			permission{serviceAccount: s, verb: v, group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "gantry-scheduler-pods", allowed: true},
			permission{serviceAccount: s, verb: v, group: "admissionregistration.k8s.io", resource: "validatingwebhookconfigurations", name: "someone-elses"},
			permission{serviceAccount: s, verb: v, group: "admissionregistration.k8s.io", resource: "mutatingwebhookconfigurations", name: "someone-elses"})
	}
	deny(s, "list", "", "secrets", "", releaseNamespace)
	deny(s, "update", "coordination.k8s.io", "leases", "", "kube-system")
	deny(s, "get", "", "secrets", "", "default")
	deny(s, "create", "", "pods", "", "default")
	deny(s, "patch", "", "pods", "", "default")
	deny(s, "update", "", "nodes", "", "")
	deny(s, "update", "scheduling.gantry.dev", "queues", "", "")
	deny(s, "update", "resource.k8s.io", "resourceslices", "", "")
	deny(s, "delete", "", "persistentvolumeclaims", "", "default")
	deny(s, "delete", "", "persistentvolumes", "", "")
	deny(s, "update", "storage.k8s.io", "storageclasses", "", "")
	deny(s, "update", "ray.io", "rayclusters", "", "default")

	a := agentSA
	grant(a, []string{"list", "watch", "create", "update", "delete"}, "resource.k8s.io", "resourceslices", "")
	grant(a, []string{"get"}, "resource.k8s.io", "resourceclaims", "")
	grant(a, []string{"get"}, "", "nodes", "")
	grant(a, []string{"get", "create", "update", "patch"}, "gpu.gantry.dev", "gpunodes", "")
	grant(a, []string{"get", "update", "patch"}, "gpu.gantry.dev", "gpunodes", "status")
	// /metrics authenticates and authorizes its callers (nodeAgent.metricsSecure).
	grant(a, []string{"create"}, "authentication.k8s.io", "tokenreviews", "")
	grant(a, []string{"create"}, "authorization.k8s.io", "subjectaccessreviews", "")
	if agentInstallsDeviceClass {
		grant(a, []string{"get", "create"}, "resource.k8s.io", "deviceclasses", "")
	} else {
		deny(a, "create", "resource.k8s.io", "deviceclasses", "", "")
	}
	deny(a, "list", "", "pods", "", "")
	deny(a, "get", "", "secrets", "", "default")
	deny(a, "list", "", "nodes", "", "")
	deny(a, "update", "", "nodes", "", "")
	// Whether a share is enforced, in the claim's status (nodeAgent.claimStatus): any
	// claim as far as RBAC goes; the chart's ValidatingAdmissionPolicy keeps each
	// agent to claims allocated on its node (pkg/agent/integration).
	grant(a, []string{"update"}, "resource.k8s.io", "resourceclaims", "status")
	deny(a, "update", "resource.k8s.io", "resourceclaims", "", "default")
	deny(a, "patch", "resource.k8s.io", "resourceclaims", "status", "default")
	deny(a, "delete", "gpu.gantry.dev", "gpunodes", "", "")
	deny(a, "update", "coordination.k8s.io", "leases", "", releaseNamespace)
	return ps
}

// allows evaluates RBAC rules without wildcards, which the chart does not use. A rule
// with resourceNames allows only a request for one of those names.
func allows(rules []rbacv1.PolicyRule, p permission) bool {
	resource := p.resource
	if p.subresource != "" {
		resource += "/" + p.subresource
	}
	for _, r := range rules {
		if len(r.ResourceNames) > 0 && !slices.Contains(r.ResourceNames, p.name) {
			continue
		}
		if slices.Contains(r.APIGroups, p.group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, p.verb) {
			return true
		}
	}
	return false
}
